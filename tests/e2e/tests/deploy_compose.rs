//! The docker-compose mesh's demo (`deploy/compose/docker-compose.yaml`,
//! profile k3s, services `demo-*`) run for real without a Docker engine:
//! each one-shot step's kubectl command, read from the compose file, is run
//! against the devcluster of the cluster whose network namespace it shares,
//! with its bind mounts mapped back to the repository. The rule it applies
//! must sync the demo Secret from a to b and c, as the README promises after
//! `up`. The profile local runs in Docker in CI (`scripts/compose-check`);
//! here, both profiles' agents are checked to differ only in how they reach
//! their cluster.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use common::sync::*;
use common::*;
use fleetbus_testsupport::{repo_root, wait_for, NatsServer};
use serde_json::Value;

/// One `demo-*` service: the cluster it targets and its kubectl arguments.
#[derive(Debug)]
struct DemoStep {
    service: String,
    cluster: String,
    args: Vec<String>,
}

/// Reads the demo steps of the compose file, bind mounts resolved against
/// `compose_dir` (the compose file's directory, as docker compose does).
fn demo_steps(compose_dir: &Path) -> Vec<DemoStep> {
    let doc = compose_file(compose_dir);
    let services = doc["services"].as_object().expect("services");
    let mut steps = Vec::new();
    for (name, svc) in services {
        let name = name.clone();
        if !name.starts_with("demo-") {
            continue;
        }
        let strings = |v: &Value| -> Vec<String> {
            v.as_array()
                .unwrap_or_else(|| panic!("{name}: not a list: {v:?}"))
                .iter()
                .map(|s| s.as_str().unwrap().to_owned())
                .collect()
        };
        assert_eq!(strings(&svc["entrypoint"]), vec!["kubectl"], "{name}");
        let cluster = svc["network_mode"]
            .as_str()
            .and_then(|n| n.strip_prefix("service:k3s-"))
            .unwrap_or_else(|| panic!("{name}: network_mode is not a k3s service's"))
            .to_owned();
        // container path -> host path, for the bind mounts (./x or ../x).
        let mounts: BTreeMap<String, PathBuf> = strings(&svc["volumes"])
            .iter()
            .filter_map(|v| {
                let mut parts = v.split(':');
                let (host, container) = (parts.next()?, parts.next()?);
                host.starts_with('.')
                    .then(|| (container.to_owned(), compose_dir.join(host)))
            })
            .collect();
        let args = strings(&svc["command"])
            .into_iter()
            .map(|arg| {
                for (container, host) in &mounts {
                    if let Some(rest) = arg.strip_prefix(container.as_str()) {
                        let path = format!("{}{rest}", host.display());
                        assert!(
                            Path::new(&path).exists(),
                            "{name}: {arg} ({path}) does not exist"
                        );
                        return path;
                    }
                }
                arg
            })
            .collect();
        steps.push(DemoStep {
            service: name,
            cluster,
            args,
        });
    }
    steps
}

/// The compose file, `<<` merge keys resolved as docker compose does (the
/// reader resolves them, nested ones too: `<<: *agent` brings in the
/// `<<: *hardened` of the x-agent block).
fn compose_file(compose_dir: &Path) -> Value {
    let text = std::fs::read_to_string(compose_dir.join("docker-compose.yaml")).unwrap();
    fleetbus_schemas::yaml::from_str(&text).unwrap()
}

#[test]
fn both_profiles_agents_share_every_setting_but_how_they_reach_their_cluster() {
    let doc = compose_file(&repo_root().join("deploy/compose"));
    let services = &doc["services"];
    // Where an agent of one profile may differ from its twin in the other.
    let reach = ["profiles", "network_mode", "ports", "volumes", "depends_on"];
    for cluster in ["a", "b", "c"] {
        let mut local = services[format!("agent-{cluster}").as_str()].clone();
        let mut k3s = services[format!("k3s-agent-{cluster}").as_str()].clone();
        assert!(local.is_object() && k3s.is_object(), "agents of {cluster}");
        for agent in [&mut local, &mut k3s] {
            let map = agent.as_object_mut().unwrap();
            for key in reach {
                map.remove(key);
            }
            let env = map
                .get_mut("environment")
                .and_then(Value::as_object_mut)
                .expect("environment");
            assert!(env.remove("FLEETBUS_KUBECONFIG").is_some(), "{cluster}");
            assert_eq!(env["FLEETBUS_CLUSTER_NAME"], Value::from(cluster));
        }
        assert_eq!(local, k3s, "agents of {cluster}: local vs k3s profile");
        assert_eq!(local["read_only"], Value::Bool(true));
        assert_eq!(local["user"], Value::from("65532:65532"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compose_demo_syncs_a_secret_from_a_to_b_and_c() {
    let compose_dir = repo_root().join("deploy/compose");
    let steps = demo_steps(&compose_dir);
    let targeted: Vec<&str> = steps.iter().map(|s| s.cluster.as_str()).collect();
    assert_eq!(targeted, vec!["a", "b", "c"], "{steps:?}");

    let nats = NatsServer::start().unwrap();
    let m = fleet(&nats, &["a", "b", "c"]).await;
    // In compose order (a first: its copies wait for b's and c's namespace).
    // Each step is retried until it succeeds, as `restart: on-failure` does.
    for step in &steps {
        let member = m.iter().find(|x| x.name == step.cluster).unwrap();
        let args: Vec<&str> = step.args.iter().map(String::as_str).collect();
        let what = format!("{} (kubectl {})", step.service, step.args.join(" "));
        wait_for(&what, CONVERGE, || async {
            let out = member.cluster.kubectl(KUBECTL, &args);
            if out.status.success() {
                Ok(())
            } else {
                Err(String::from_utf8_lossy(&out.stderr).into_owned())
            }
        })
        .await;
    }

    let greeting = base64::engine::general_purpose::STANDARD.encode("hello from cluster a");
    for sink in &m[1..] {
        wait_copy(
            sink,
            &secrets(),
            Some("shared"),
            "demo",
            "a",
            "sync-secrets",
            |o| match o.data.pointer("/data/greeting").and_then(|v| v.as_str()) {
                Some(g) if g == greeting => Ok(()),
                other => Err(format!("data.greeting {other:?}")),
            },
        )
        .await;
    }
}
