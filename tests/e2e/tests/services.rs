//! Multi-cluster Services end to end (KEP-1645, the upstream MCS API CRDs as
//! published): real nats-server, devclusters and agents; Services and
//! ServiceExports made with kubectl, EndpointSlices written by the test as
//! the EndpointSlice controller would (the devcluster runs no controllers).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::BTreeMap;

use common::*;
use fleetbus_testsupport::{wait_for, NatsServer};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams};
use kube::{Api, ResourceExt};
use serde_json::{json, Value};

const NS: &str = "shop";

/// `kubectl apply` of `obj` on `m`.
fn apply(m: &Member, obj: &Value) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("obj.json");
    std::fs::write(&path, serde_json::to_vec(obj).unwrap()).unwrap();
    let out = m
        .cluster
        .kubectl("1.33", &["apply", "-f", path.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}: {}",
        m.name,
        String::from_utf8_lossy(&out.stderr)
    );
}

fn kubectl_ok(m: &Member, args: &[&str]) -> String {
    let out = m.cluster.kubectl("1.33", args);
    assert!(
        out.status.success(),
        "{}: kubectl {args:?}: {}",
        m.name,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn service(port: i32) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "cart", "namespace": NS},
        "spec": {"selector": {"app": "cart"}, "ports": [{"name": "http", "port": port, "targetPort": 8080}]},
    })
}

/// The EndpointSlice the EndpointSlice controller would write for `cart`.
fn slice(addresses: &[&str]) -> Value {
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "cart-x1", "namespace": NS, "labels": {
            "kubernetes.io/service-name": "cart",
            "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io",
        }},
        "addressType": "IPv4",
        "endpoints": addresses.iter().map(|a| json!({"addresses": [a], "conditions": {"ready": true}})).collect::<Vec<_>>(),
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
    })
}

fn export() -> Value {
    json!({
        "apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceExport",
        "metadata": {"name": "cart", "namespace": NS},
    })
}

fn mcs(m: &Member, kind: &str) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "multicluster.x-k8s.io",
        "v1beta1",
        kind,
    ));
    Api::namespaced_with(m.client.clone(), NS, &ar)
}

/// The imported endpoints on `m`: address → (source cluster, ready).
async fn imported(m: &Member) -> Result<BTreeMap<String, (String, bool)>, String> {
    let slices: Api<EndpointSlice> = Api::namespaced(m.client.clone(), NS);
    let list = slices
        .list(&ListParams::default().labels("multicluster.kubernetes.io/service-name=cart"))
        .await
        .map_err(|e| e.to_string())?;
    let mut out = BTreeMap::new();
    for s in list.items {
        let labels = s.metadata.labels.clone().unwrap_or_default();
        if labels
            .get("endpointslice.kubernetes.io/managed-by")
            .map(String::as_str)
            != Some("mcs.fleetbus.io")
        {
            return Err(format!("a slice not managed by fleetbus: {labels:?}"));
        }
        let source = labels
            .get("multicluster.kubernetes.io/source-cluster")
            .cloned()
            .unwrap_or_default();
        for e in s.endpoints {
            let ready = e.conditions.and_then(|c| c.ready).unwrap_or(true);
            for a in e.addresses {
                out.insert(a, (source.clone(), ready));
            }
        }
    }
    Ok(out)
}

async fn wait_imported(m: &Member, what: &str, want: &[(&str, &str, bool)]) {
    let want: BTreeMap<String, (String, bool)> = want
        .iter()
        .map(|(a, c, r)| ((*a).to_owned(), ((*c).to_owned(), *r)))
        .collect();
    wait_for(&format!("{}: {what}", m.name), CONVERGE, || async {
        let got = imported(m).await?;
        if got == want {
            Ok(())
        } else {
            Err(format!("{got:?}"))
        }
    })
    .await;
}

/// Condition `type_` of the ServiceExport on `m`: (status, message).
async fn export_condition(m: &Member, type_: &str) -> Result<(String, String), String> {
    let e = mcs(m, "ServiceExport")
        .get("cart")
        .await
        .map_err(|e| e.to_string())?;
    e.data
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|cs| cs.iter().find(|c| c["type"] == type_))
        .map(|c| {
            (
                c["status"].as_str().unwrap_or_default().to_owned(),
                c["message"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .ok_or_else(|| format!("no {type_} condition yet"))
}

async fn wait_export_condition(m: &Member, type_: &str, want: &str) -> String {
    wait_for(
        &format!("{}: ServiceExport {type_}={want}", m.name),
        CONVERGE,
        || async {
            let (status, message) = export_condition(m, type_).await?;
            if status == want {
                Ok(message)
            } else {
                Err(format!("{status}: {message}"))
            }
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exported_services_are_imported_everywhere_follow_their_endpoints_and_are_withdrawn() {
    let nats = NatsServer::start().unwrap();
    let a = Member::start(&nats, "a", "a", &[]).await;
    let mut b = Member::start(&nats, "b", "b", &[]).await;
    let c = Member::start(&nats, "c", "c", &[]).await;
    wait_mesh(&[&a, &b, &c], &["a", "b", "c"]).await;
    // Until a platform team installs the MCS API the agent says so.
    let missing = "fleetbus_standard_crd_missing{crd=\"serviceexports.multicluster.x-k8s.io\"}";
    wait_for("c to report the missing MCS CRDs", CONVERGE, || async {
        match c.metric(missing)? {
            1.0 => Ok(()),
            v => Err(format!("{v}")),
        }
    })
    .await;
    assert_logged(&c, "multi-cluster Services are inactive");
    for m in [&a, &b, &c] {
        install_upstream_crds(
            m,
            &[
                "multicluster.x-k8s.io_serviceexports.yaml",
                "multicluster.x-k8s.io_serviceimports.yaml",
            ],
        );
        m.create_namespace(NS).await.unwrap();
    }
    // a and b export `cart`; c only consumes it.
    for (m, addresses) in [(&a, &["10.1.0.1", "10.1.0.2"][..]), (&b, &["10.2.0.1"][..])] {
        apply(m, &service(80));
        apply(m, &slice(addresses));
        apply(m, &export());
    }
    wait_imported(
        &c,
        "both exporters' endpoints",
        &[
            ("10.1.0.1", "a", true),
            ("10.1.0.2", "a", true),
            ("10.2.0.1", "b", true),
        ],
    )
    .await;
    // What a DNS implementation reads (the CoreDNS multicluster plugin): a
    // ClusterSetIP ServiceImport with its IP, the clusters it comes from,
    // and the EndpointSlices named after the service.
    let import = wait_for("c's ServiceImport with its IP", CONVERGE, || async {
        let i = mcs(&c, "ServiceImport")
            .get("cart")
            .await
            .map_err(|e| e.to_string())?;
        let clusters: Vec<&str> = i
            .data
            .pointer("/status/clusters")
            .and_then(Value::as_array)
            .map(|cs| cs.iter().filter_map(|c| c["cluster"].as_str()).collect())
            .unwrap_or_default();
        let ips = i.data.pointer("/spec/ips").and_then(Value::as_array);
        if clusters == ["a", "b"] && ips.is_some_and(|ips| ips.len() == 1) {
            Ok(i)
        } else {
            Err(format!("{:?}", i.data))
        }
    })
    .await;
    assert_eq!(import.data["spec"]["type"], "ClusterSetIP");
    assert_eq!(import.data["spec"]["ports"][0]["port"], 80);
    // The IP is the derived Service's, which kube-proxy routes to the
    // imported slices (they name it in kubernetes.io/service-name).
    let derived = import.metadata.annotations.as_ref().unwrap()
        ["multicluster.kubernetes.io/derived-service"]
        .clone();
    let svc = Api::<Service>::namespaced(c.client.clone(), NS)
        .get(&derived)
        .await
        .unwrap();
    assert_eq!(
        svc.spec.as_ref().unwrap().cluster_ip.as_deref(),
        import.data["spec"]["ips"][0].as_str()
    );
    let out = kubectl_ok(
        &c,
        &[
            "get",
            "endpointslices",
            "-n",
            NS,
            "-l",
            &format!("kubernetes.io/service-name={derived}"),
            "-o",
            "name",
        ],
    );
    assert_eq!(out.lines().count(), 2, "{out}");
    // Every cluster imports (the exporters too) and says so on its export.
    wait_imported(
        &a,
        "a imports both",
        &[
            ("10.1.0.1", "a", true),
            ("10.1.0.2", "a", true),
            ("10.2.0.1", "b", true),
        ],
    )
    .await;
    for m in [&a, &b] {
        wait_export_condition(m, "Valid", "True").await;
        wait_export_condition(m, "Ready", "True").await;
        wait_export_condition(m, "Conflict", "False").await;
    }

    // Scaling: a third endpoint on a reaches c.
    apply(&a, &slice(&["10.1.0.1", "10.1.0.2", "10.1.0.3"]));
    wait_imported(
        &c,
        "a's third endpoint",
        &[
            ("10.1.0.1", "a", true),
            ("10.1.0.2", "a", true),
            ("10.1.0.3", "a", true),
            ("10.2.0.1", "b", true),
        ],
    )
    .await;

    // A conflict: b's Service says port 81 for "http"; a's export is older
    // and wins. Both exports say so, naming the other cluster.
    apply(&b, &service(81));
    let on_b = wait_export_condition(&b, "Conflict", "True").await;
    assert!(on_b.contains("in a: 80/TCP"), "{on_b}");
    let on_a = wait_export_condition(&a, "Conflict", "True").await;
    assert!(on_a.contains("in b"), "{on_a}");
    let port = mcs(&c, "ServiceImport").get("cart").await.unwrap().data["spec"]["ports"][0]["port"]
        .clone();
    assert_eq!(port, 80, "the oldest export's port");
    apply(&b, &service(80));
    wait_export_condition(&b, "Conflict", "False").await;

    // Garbage on the bus in b's subtree is counted and loses nothing.
    let client = async_nats::connect(nats.url()).await.unwrap();
    client
        .publish("fleetbus.svc.b.shop.junk", "not a record".into())
        .await
        .unwrap();
    client.flush().await.unwrap();
    wait_for("c to count the malformed record", CONVERGE, || async {
        match c.metric("fleetbus_sync_rejected_total{reason=\"svc_malformed\"}")? {
            v if v >= 1.0 => Ok(()),
            v => Err(format!("{v}")),
        }
    })
    .await;

    // A name no Service can have (it used to panic every importer), and a
    // record that would cost every importer 101 EndpointSlices: refused,
    // counted, and nothing else is lost.
    let js = async_nats::jetstream::new(client.clone());
    let odd = fleetbus_schemas::multicluster::ExportKey {
        cluster: "b".into(),
        namespace: NS.into(),
        name: format!("x{}", "é".repeat(30)),
    };
    let one =
        json!({"addressType": "IPv4", "endpoints": [{"addresses": ["10.3.0.1"], "ready": true}]});
    let record = |slices: Vec<Value>| {
        json!({"schema": "fleetbus.io/service-export/v1", "exportedAt": "2026-01-01T00:00:00.000Z",
               "type": "Headless", "ports": [{"name": "http", "port": 80}], "slices": slices,
               "revision": 1})
    };
    for (subject, rec) in [
        (
            odd.to_subject(&Default::default()),
            record(vec![one.clone()]),
        ),
        (
            "fleetbus.svc.b.shop.many".to_owned(),
            record(vec![one.clone(); 101]),
        ),
    ] {
        js.publish(subject, serde_json::to_vec(&rec).unwrap().into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
    wait_for("c to count both", CONVERGE, || async {
        let bad = c.metric("fleetbus_sync_rejected_total{reason=\"svc_bad_subject\"}")?;
        let malformed = c.metric("fleetbus_sync_rejected_total{reason=\"svc_malformed\"}")?;
        if bad >= 1.0 && malformed >= 2.0 {
            Ok(())
        } else {
            Err(format!("{bad} {malformed}"))
        }
    })
    .await;

    // A ServiceImport someone else wrote on c: fleetbus neither touches it
    // nor gives DNS endpoints under its name.
    apply(
        &c,
        &json!({"apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceImport",
                "metadata": {"name": "mine", "namespace": NS},
                "spec": {"type": "Headless", "ports": [{"port": 53, "protocol": "UDP"}]}}),
    );
    js.publish(
        "fleetbus.svc.a.shop.mine",
        serde_json::to_vec(&json!({"schema": "fleetbus.io/service-export/v1",
            "exportedAt": "2026-01-01T00:00:00.000Z", "type": "Headless",
            "ports": [{"name": "dns", "port": 53, "protocol": "UDP"}],
            "slices": [{"addressType": "IPv4", "endpoints": [{"addresses": ["10.9.4.1"], "ready": true}]}],
            "revision": 1}))
        .unwrap()
        .into(),
    )
    .await
    .unwrap()
    .await
    .unwrap();
    wait_for(
        "c to report the ServiceImport it does not own",
        CONVERGE,
        || async {
            match c.metric("fleetbus_mcs_events_total{event=\"foreign\"}")? {
                v if v >= 1.0 => Ok(()),
                v => Err(format!("{v}")),
            }
        },
    )
    .await;
    let mine = mcs(&c, "ServiceImport").get("mine").await.unwrap();
    assert_eq!(mine.data["spec"]["ports"][0]["port"], 53);
    assert!(mine.labels().get("fleetbus.io/managed").is_none());
    let slices: Api<EndpointSlice> = Api::namespaced(c.client.clone(), NS);
    let under_mine = slices
        .list(&ListParams::default().labels("multicluster.kubernetes.io/service-name=mine"))
        .await
        .unwrap();
    assert!(under_mine.items.is_empty(), "{:?}", under_mine.items);

    // A port added and dropped again on a: the import follows both ways
    // (an update replaces what was written, it does not only add).
    apply(
        &a,
        &json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "cart", "namespace": NS},
            "spec": {"selector": {"app": "cart"}, "ports": [
                {"name": "http", "port": 80, "targetPort": 8080},
                {"name": "admin", "port": 9090}]},
        }),
    );
    let ports = |want: usize| {
        let c = &c;
        async move {
            wait_for(
                &format!("c's import and its derived Service with {want} ports"),
                CONVERGE,
                || async {
                    let i = mcs(c, "ServiceImport")
                        .get("cart")
                        .await
                        .map_err(|e| e.to_string())?;
                    let derived = i
                        .metadata
                        .annotations
                        .as_ref()
                        .and_then(|a| a.get("multicluster.kubernetes.io/derived-service").cloned())
                        .unwrap_or_default();
                    let svc = Api::<Service>::namespaced(c.client.clone(), NS)
                        .get(&derived)
                        .await
                        .map_err(|e| e.to_string())?;
                    let n = i.data["spec"]["ports"].as_array().map_or(0, Vec::len);
                    let m = svc.spec.and_then(|s| s.ports).map_or(0, |p| p.len());
                    if (n, m) == (want, want) {
                        Ok(())
                    } else {
                        Err(format!("{n} {m}"))
                    }
                },
            )
            .await;
        }
    };
    ports(2).await;
    apply(&a, &service(80));
    ports(1).await;

    // b's agent dies: its endpoints stay on c, not ready.
    b.agent.kill9();
    wait_imported(
        &c,
        "b's endpoints kept, not ready",
        &[
            ("10.1.0.1", "a", true),
            ("10.1.0.2", "a", true),
            ("10.1.0.3", "a", true),
            ("10.2.0.1", "b", false),
        ],
    )
    .await;
    b.agent.restart().unwrap();
    wait_mesh(&[&a, &b, &c], &["a", "b", "c"]).await;

    // c's SyncPolicy lets EndpointSlices into `shop` only from a.
    apply(
        &c,
        &json!({
            "apiVersion": "fleetbus.io/v1alpha1", "kind": "SyncPolicy",
            "metadata": {"name": "default"},
            "spec": {"import": {"otherwise": "Allow", "rules": [
                {"action": "Deny", "kinds": [{"group": "discovery.k8s.io", "kind": "EndpointSlice"}],
                 "namespaces": [NS], "authors": ["b"]}
            ]}},
        }),
    );
    wait_imported(
        &c,
        "only a's endpoints under c's policy",
        &[
            ("10.1.0.1", "a", true),
            ("10.1.0.2", "a", true),
            ("10.1.0.3", "a", true),
        ],
    )
    .await;

    // Unexport on a: nothing is left to import on c, and its import goes.
    kubectl_ok(&a, &["delete", "serviceexport", "cart", "-n", NS]);
    wait_imported(&c, "a's endpoints withdrawn", &[]).await;
    wait_for("c's ServiceImport to go", CONVERGE, || async {
        match mcs(&c, "ServiceImport").get_opt("cart").await {
            Ok(None) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    // b still exports: a imports b's endpoints only.
    wait_imported(&a, "a imports only b's", &[("10.2.0.1", "b", true)]).await;
    for m in [&a, &b, &c] {
        assert_quiet_log(m);
        let log = m.agent.log();
        let bad = "could not write an imported object";
        assert!(!log.contains(bad), "{}: {bad}:\n{log}", m.name);
        // Said once, on c, of the ServiceImport it does not own.
        let foreign = log.matches("not importing over").count();
        assert_eq!(foreign, usize::from(m.name == "c"), "{}:\n{log}", m.name);
    }
}
