//! Objects a fresh cluster starts with: system namespaces and --nodes Node objects.

use crate::gc;
use crate::status::ApiError;
use crate::store::{ObjKey, Store};
use serde_json::{json, Value};

/// Namespaces kube-apiserver creates at start.
pub const SYSTEM_NAMESPACES: &[&str] =
    &["default", "kube-system", "kube-public", "kube-node-lease"];

fn namespace(name: &str, now: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": name,
            "uid": uuid::Uuid::new_v4().to_string(),
            "creationTimestamp": now,
            "labels": {"kubernetes.io/metadata.name": name},
        },
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    })
}

/// A realistic Node for a kind-like cluster.
pub fn node(cluster: &str, i: u32, now: &str) -> Value {
    let name = format!("node-{i}");
    let zone = ["a", "b", "c"][((i - 1) % 3) as usize];
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": uuid::Uuid::new_v4().to_string(),
            "creationTimestamp": now,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "beta.kubernetes.io/os": "linux",
                "beta.kubernetes.io/arch": "amd64",
                "node.kubernetes.io/instance-type": "dev.standard-2",
                "topology.kubernetes.io/region": "dev-region-1",
                "topology.kubernetes.io/zone": format!("dev-region-1{zone}"),
            },
        },
        "spec": {
            "providerID": format!("kind://docker/{cluster}/{name}"),
            "podCIDR": format!("10.244.{i}.0/24"),
            "podCIDRs": [format!("10.244.{i}.0/24")],
        },
        "status": {
            "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110", "ephemeral-storage": "100Gi"},
            "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110", "ephemeral-storage": "100Gi"},
            "conditions": [
                {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory", "message": "kubelet has sufficient memory available", "lastHeartbeatTime": now, "lastTransitionTime": now},
                {"type": "DiskPressure", "status": "False", "reason": "KubeletHasNoDiskPressure", "message": "kubelet has no disk pressure", "lastHeartbeatTime": now, "lastTransitionTime": now},
                {"type": "PIDPressure", "status": "False", "reason": "KubeletHasSufficientPID", "message": "kubelet has sufficient PID available", "lastHeartbeatTime": now, "lastTransitionTime": now},
                {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status", "lastHeartbeatTime": now, "lastTransitionTime": now},
            ],
            "addresses": [
                {"type": "InternalIP", "address": format!("172.18.0.{}", i + 1)},
                {"type": "Hostname", "address": name},
            ],
            "nodeInfo": {
                "machineID": format!("{:032x}", u128::from(i)),
                "systemUUID": uuid::Uuid::new_v4().to_string(),
                "bootID": uuid::Uuid::new_v4().to_string(),
                "kernelVersion": "6.8.0",
                "osImage": "Debian GNU/Linux 12 (bookworm)",
                "containerRuntimeVersion": "containerd://2.1.1",
                "kubeletVersion": "v1.33.1",
                "kubeProxyVersion": "v1.33.1",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        },
    })
}

/// Creates whatever of the system namespaces and nodes is missing (existing ones,
/// e.g. loaded from --data-dir, are kept: the kube-system UID stays stable).
pub fn seed(store: &Store, cluster: &str, nodes: u32) -> Result<(), ApiError> {
    store.write(false, |tx| {
        let now = tx.now.clone();
        for ns in SYSTEM_NAMESPACES {
            let key = ObjKey::new("", "namespaces", "", ns);
            if tx.get(&key).is_none() {
                tx.put(&key, namespace(ns, &now));
            }
            gc::seed_namespace(tx, ns);
        }
        for i in 1..=nodes {
            let key = ObjKey::new("", "nodes", "", &format!("node-{i}"));
            if tx.get(&key).is_none() {
                tx.put(&key, node(cluster, i, &now));
            }
        }
        Ok(())
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_look_like_kind() {
        let n = node("c1", 2, "2026-01-01T00:00:00Z");
        assert_eq!(n["spec"]["providerID"], "kind://docker/c1/node-2");
        assert_eq!(
            n["metadata"]["labels"]["topology.kubernetes.io/zone"],
            "dev-region-1b"
        );
        assert_eq!(n["status"]["nodeInfo"]["kubeletVersion"], "v1.33.1");
    }

    #[test]
    fn seeding_is_idempotent() {
        let s = Store::open(None, 100).unwrap();
        seed(&s, "c1", 2).unwrap();
        let uid = s
            .read(|i| {
                i.objects
                    .get(&ObjKey::new("", "namespaces", "", "kube-system"))
                    .cloned()
            })
            .unwrap();
        let rv = s.current_rv();
        seed(&s, "c1", 2).unwrap();
        assert_eq!(s.current_rv(), rv);
        let again = s
            .read(|i| {
                i.objects
                    .get(&ObjKey::new("", "namespaces", "", "kube-system"))
                    .cloned()
            })
            .unwrap();
        assert_eq!(uid["metadata"]["uid"], again["metadata"]["uid"]);
    }
}
