//! The sink's concurrent writes end to end: a burst of objects
//! all arrives and a burst of changes all lands (creates and replaces run
//! many at a time). The install order of Bundles is checked in `bundles`.
//! Real nats-server, devclusters and agents; users act through kubectl.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;

use common::rules::RuleBuilder;
use common::sync::*;
use common::*;
use fleetbus_schemas::well_known::ANNOTATION_ORIGIN_CLUSTER;
use fleetbus_testsupport::{wait_for, NatsServer};
use kube::api::{ApiResource, DynamicObject, ListParams};
use kube::ResourceExt;

/// Objects in the burst: several times the sink's writes in flight.
const BURST: usize = 300;
/// A debug build on a loaded machine: generous, it guards arrival, not speed.
const BURST_DEADLINE: Duration = Duration::from_secs(180);

fn config_maps() -> ApiResource {
    resource("", "v1", "ConfigMap", "configmaps")
}

/// `BURST` ConfigMaps `cm-<i>` in namespace `burst` with `data.v = <value>-<i>`,
/// as one YAML stream for one `kubectl apply`.
fn burst_yaml(value: &str) -> String {
    (0..BURST)
        .map(|i| {
            format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: cm-{i}, namespace: burst}}\ndata: {{v: {value}-{i}}}\n"
            )
        })
        .collect::<Vec<_>>()
        .join("---\n")
}

/// Waits until `sink` holds every copy of the burst from `c1` with `value`.
async fn wait_burst(sink: &Member, value: &str) {
    let api = dynamic(sink, &config_maps(), Some("burst"));
    let what = format!("{}: {BURST} copies with value {value}", sink.name);
    wait_for(&what, BURST_DEADLINE, || async {
        let list = api
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?;
        let good = |o: &DynamicObject| {
            let Some(i) = o.name_any().strip_prefix("cm-").map(str::to_owned) else {
                return false;
            };
            o.annotations()
                .get(ANNOTATION_ORIGIN_CLUSTER)
                .map(String::as_str)
                == Some("c1")
                && o.data["data"]["v"].as_str() == Some(&format!("{value}-{i}"))
        };
        let n = list.items.iter().filter(|o| good(o)).count();
        if n == BURST {
            Ok(())
        } else {
            Err(format!("{n} of {BURST}"))
        }
    })
    .await;
}

/// 300 ConfigMaps applied at once on c1 all arrive on c2, in a namespace
/// the sink creates first (`createNamespace`); then all 300 change at once
/// and every copy is replaced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_objects_all_arrives_and_all_changes_land() {
    let nats = NatsServer::start().unwrap();
    let m = fleet(&nats, &["c1", "c2"]).await;
    let (c1, c2) = (&m[0], &m[1]);
    create_ns(c1, "burst").await;
    apply_yaml(
        c1,
        &RuleBuilder::new("burst")
            .spec("createNamespace", true.into())
            .namespaces(&["burst"])
            .yaml(),
    );
    wait_rule_copy(c2, "burst", "c1").await;
    apply_yaml(c1, &burst_yaml("one"));
    wait_burst(c2, "one").await;
    apply_yaml(c1, &burst_yaml("two"));
    wait_burst(c2, "two").await;
    wait_rule(c2, "burst", "every copy synced, no errors", |r| {
        match r.status.as_ref().map(|s| (s.objects_synced, s.errors)) {
            Some((n, 0)) if n == BURST as i64 => Ok(()),
            other => Err(format!("synced/errors {other:?}")),
        }
    })
    .await;
}
