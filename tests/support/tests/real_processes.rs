//! The harness against the real `fleetbus-devcluster` (needs `cargo build --workspace`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use fleetbus_testsupport::{
    free_socket_addr, http_get, wait_for, wait_for_blocking, Agent, AgentCommand, DevCluster,
    DevClusterOpts, NatsServer,
};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, ListParams, PostParams};

fn kubectl_ok(dc: &DevCluster, args: &[&str]) -> String {
    let out = dc.kubectl("1.33", args);
    assert!(
        out.status.success(),
        "kubectl {args:?} failed: {}\n--- devcluster log ---\n{}",
        String::from_utf8_lossy(&out.stderr),
        dc.log()
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test]
async fn devcluster_serves_kubectl_and_client_and_survives_restart() {
    let mut dc = DevCluster::start(DevClusterOpts::new("harness")).unwrap();
    assert!(dc.url().starts_with("http://127.0.0.1:"), "{}", dc.url());
    assert!(kubectl_ok(&dc, &["get", "ns", "-o", "name"]).contains("namespace/default"));
    let client = dc.client().await.unwrap();
    let cm: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "kept"}, "data": {"k": "v"}
    }))
    .unwrap();
    Api::<ConfigMap>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();
    let names: Vec<String> = Api::<Namespace>::all(client)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    assert!(names.contains(&"kube-system".to_string()), "{names:?}");

    let writes = dc.writes().await.unwrap();
    assert!(writes["core/configmaps"].as_u64().unwrap() >= 1, "{writes}");

    let url = dc.url().to_string();
    dc.kill9();
    assert!(!dc.is_running());
    dc.restart().unwrap();
    assert_eq!(dc.url(), url, "restart keeps the listen port");
    let got = wait_for(
        "configmap after restart",
        Duration::from_secs(20),
        || async {
            let out = dc.kubectl(
                "1.33",
                &["get", "configmap", "kept", "-o", "jsonpath={.data.k}"],
            );
            if out.status.success() {
                Ok(String::from_utf8_lossy(&out.stdout).into_owned())
            } else {
                Err(String::from_utf8_lossy(&out.stderr).into_owned())
            }
        },
    )
    .await;
    assert_eq!(got, "v");
}

#[tokio::test]
async fn devcluster_with_tls_and_token() {
    let dc = DevCluster::start(DevClusterOpts {
        tls: true,
        token: Some("s3cret".into()),
        nodes: 2,
        ..DevClusterOpts::new("secure")
    })
    .unwrap();
    assert!(dc.url().starts_with("https://127.0.0.1:"), "{}", dc.url());
    assert_eq!(
        kubectl_ok(&dc, &["get", "nodes", "-o", "name"])
            .lines()
            .count(),
        2
    );
    let writes = dc.writes().await.unwrap();
    assert!(writes.is_object(), "{writes}");
}

#[test]
fn agent_against_real_nats_and_devcluster_becomes_ready_and_stops_on_sigterm() {
    let nats = NatsServer::start().unwrap();
    let dc = DevCluster::start(DevClusterOpts::new("a")).unwrap();
    let metrics = free_socket_addr();
    let cmd = AgentCommand::new("a")
        .nats_url(nats.url())
        .kubeconfig(dc.kubeconfig())
        .metrics_addr(metrics);
    let mut agent = Agent::start(cmd.argv()).unwrap();
    let readyz = format!("http://{metrics}/readyz");
    let ready = |agent: &mut Agent| {
        wait_for_blocking("agent /readyz", Duration::from_secs(60), || {
            assert!(
                agent.is_running(),
                "agent exited: {:?}\n{}",
                agent.exit_status(),
                agent.log()
            );
            match http_get(&readyz) {
                Ok((200, _)) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        })
    };
    ready(&mut agent);
    agent.restart().unwrap();
    ready(&mut agent);
    let status = agent.stop();
    assert!(
        status.success(),
        "agent exit on SIGTERM: {status}\n{}",
        agent.log()
    );
}
