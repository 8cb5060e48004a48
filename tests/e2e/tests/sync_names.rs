//! Names that need escaping in a URL, and copies the sink's API server
//! keeps refusing.
//!
//! 1. Every name Kubernetes accepts works for the copies' create, update,
//!    get and delete: RBAC objects (whose names are path segments: anything
//!    but `/`, `%`, `.` and `..`) with spaces, `*`, `>`, `#`, `?` and
//!    unicode, and 253-character dotted names for a DNS-subdomain kind too.
//! 2. A copy the sink refuses (its CRD is stricter than the origin's) backs
//!    off per copy instead of being retried on every pass, shows in the rule
//!    status and as an Event on the rule, and converges once the cause is
//!    gone.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::{Duration, Instant};

use common::rules::{stream, RuleBuilder};
use common::sync::*;
use common::*;
use fleetbus_testsupport::{wait_for, NatsServer};
use kube::api::{ApiResource, DynamicObject, ListParams, ObjectMeta, PostParams};
use kube::{Api, ResourceExt};
use serde_json::{json, Value};

/// The probe's names and the other characters a URL path cannot hold as
/// they are. All are valid RBAC names.
fn hard_names() -> Vec<String> {
    [
        "sp ace*star>gt.dot",
        "q r",
        "hash#tag",
        "what?now&x=1",
        "ünï—名前",
        "system:colon+plus",
    ]
    .into_iter()
    .map(str::to_owned)
    .chain([long_name()])
    .collect()
}

/// A DNS subdomain of the greatest length Kubernetes accepts (253), valid
/// for every kind that takes subdomain names.
fn long_name() -> String {
    let name = ["a", "b", "c"]
        .iter()
        .map(|c| c.repeat(63))
        .chain(["d".repeat(61)])
        .collect::<Vec<_>>()
        .join(".");
    assert_eq!(name.len(), 253);
    name
}

fn cluster_roles() -> ApiResource {
    resource(
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRole",
        "clusterroles",
    )
}

fn roles() -> ApiResource {
    resource("rbac.authorization.k8s.io", "v1", "Role", "roles")
}

fn config_maps() -> ApiResource {
    resource("", "v1", "ConfigMap", "configmaps")
}

const NS: &str = "apps";

/// One rule per kind, for the objects labelled `probe: names`.
fn rules_yaml() -> String {
    let rbac = "rbac.authorization.k8s.io";
    let rules: Vec<RuleBuilder> = [
        ("names-clusterroles", rbac, "ClusterRole"),
        ("names-roles", rbac, "Role"),
        ("names-configmaps", "", "ConfigMap"),
    ]
    .iter()
    .map(|(name, group, kind)| {
        RuleBuilder::new(name)
            .kind(group, "v1", kind)
            .matching(json!({"labels": [{"matchLabels": {"probe": "names"}}]}))
    })
    .collect();
    stream(&rules)
}

/// The originals, as kubectl manifests (JSON documents are YAML): a
/// ClusterRole and a Role per hard name, and a ConfigMap with the long
/// name; `verbs` and `value` are what an update changes.
fn originals_yaml(verbs: &[&str], value: &str) -> String {
    let labels = json!({"probe": "names"});
    let rules = json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": verbs}]);
    let mut docs: Vec<Value> = Vec::new();
    for name in hard_names() {
        docs.push(
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                         "metadata": {"name": name, "labels": labels}, "rules": rules}),
        );
        docs.push(
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                         "metadata": {"name": name, "namespace": NS, "labels": labels},
                         "rules": rules}),
        );
    }
    docs.push(json!({"apiVersion": "v1", "kind": "ConfigMap",
                     "metadata": {"name": long_name(), "namespace": NS, "labels": labels},
                     "data": {"v": value}}));
    docs.iter()
        .map(Value::to_string)
        .collect::<Vec<_>>()
        .join("\n---\n")
}

/// Every object of `ar` on `m` (in `ns`) by name. Read by listing: a get
/// puts the name in the URL, which is what is under test.
async fn list_by_name(
    m: &Member,
    ar: &ApiResource,
    ns: Option<&str>,
) -> Result<std::collections::BTreeMap<String, DynamicObject>, String> {
    dynamic(m, ar, ns)
        .list(&ListParams::default().labels("probe=names"))
        .await
        .map(|l| l.items.into_iter().map(|o| (o.name_any(), o)).collect())
        .map_err(|e| format!("{}: list {}: {e}", m.name, ar.kind))
}

/// The state of the copies on `m` that differs from `want` (None: all
/// absent), as one message; empty when every copy is as wanted.
async fn copies_differ(m: &Member, want: Option<(&[&str], &str)>) -> Result<String, String> {
    let mut wrong = Vec::new();
    let kinds = [(cluster_roles(), None), (roles(), Some(NS))];
    for (ar, ns) in &kinds {
        let objects = list_by_name(m, ar, *ns).await?;
        for name in hard_names() {
            let got = objects.get(&name);
            let problem = match (want, got) {
                (None, None) => None,
                (None, Some(_)) => Some("still there".to_owned()),
                (Some(_), None) => Some("absent".to_owned()),
                (Some((verbs, _)), Some(o)) => {
                    check_copy(o, "c1", &format!("names-{}s", ar.kind.to_lowercase()))
                        .err()
                        .or_else(|| {
                            let got = &o.data["rules"][0]["verbs"];
                            (*got != json!(verbs)).then(|| format!("verbs {got}"))
                        })
                }
            };
            if let Some(p) = problem {
                wrong.push(format!("{} {name:?}: {p}", ar.kind));
            }
        }
    }
    let maps = list_by_name(m, &config_maps(), Some(NS)).await?;
    match (want, maps.get(&long_name())) {
        (None, None) => {}
        (Some((_, value)), Some(o)) if o.data["data"]["v"] == json!(value) => {}
        (_, got) => wrong.push(format!(
            "ConfigMap {}: {:?}",
            long_name(),
            got.map(|o| o.data["data"].clone())
        )),
    }
    Ok(wrong.join("; "))
}

/// Waits until every copy on `m` is as `want` says.
async fn wait_copies(m: &Member, want: Option<(&[&str], &str)>, what: &str) {
    wait_for(&format!("{}: copies {what}", m.name), SYNC, || async {
        match copies_differ(m, want).await? {
            d if d.is_empty() => Ok(()),
            d => Err(d),
        }
    })
    .await;
}

/// What the API server answers to creating a ClusterRole and a ConfigMap
/// named `name` on `m`: the status code of each (201 when created).
async fn create_status(m: &Member, name: &str) -> (u16, u16) {
    let meta = ObjectMeta {
        name: Some(name.to_owned()),
        namespace: Some(NS.to_owned()),
        ..ObjectMeta::default()
    };
    let code = |r: Result<(), kube::Error>| match r {
        Ok(()) => 201,
        Err(kube::Error::Api(s)) => s.code,
        Err(e) => panic!("{}: create {name:?}: {e}", m.name),
    };
    let role = k8s_openapi::api::rbac::v1::ClusterRole {
        metadata: ObjectMeta {
            namespace: None,
            ..meta.clone()
        },
        ..Default::default()
    };
    let cr = Api::<k8s_openapi::api::rbac::v1::ClusterRole>::all(m.client.clone())
        .create(&PostParams::default(), &role)
        .await
        .map(|_| ());
    let cm = k8s_openapi::api::core::v1::ConfigMap {
        metadata: meta,
        ..Default::default()
    };
    let map = Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(m.client.clone(), NS)
        .create(&PostParams::default(), &cm)
        .await
        .map(|_| ());
    (code(cr), code(map))
}

/// ClusterRoles (cluster-scoped) and Roles (namespaced) whose names need
/// escaping in a URL, and a ConfigMap with a 253-character name, are synced,
/// follow an update of their source, are read back and corrected when
/// someone changes them, and go when their source is deleted; the rules stay
/// free of errors. Names Kubernetes refuses (`%` for every kind, a
/// space for DNS-subdomain kinds) are refused by the devcluster alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hard_names_are_synced_updated_and_deleted() {
    let nats = NatsServer::start().unwrap();
    let m = fleet(&nats, &["c1", "c2"]).await;
    let (c1, c2) = (&m[0], &m[1]);
    for x in [c1, c2] {
        create_ns(x, NS).await;
        // ClusterRoles are synced on purpose (the built-in import policy
        // keeps them out).
        apply_policy(x, ALLOW_ALL_IMPORTS, "True").await;
    }
    // What kube-apiserver refuses, the devcluster refuses: `%` is in no
    // kind's names (`IsValidPathSegmentName`), a space only in RBAC ones.
    assert_eq!(create_status(c1, "100%").await, (422, 422));
    assert_eq!(create_status(c1, "q r").await, (201, 422));
    kubectl(c1, &["delete", "clusterrole", "q r"]);

    apply_yaml(c1, &rules_yaml());
    for rule in ["names-clusterroles", "names-roles", "names-configmaps"] {
        wait_rule_copy(c2, rule, "c1").await;
    }
    apply_yaml(c1, &originals_yaml(&["get"], "1"));
    wait_copies(c2, Some((&["get"], "1")), "created").await;

    apply_yaml(c1, &originals_yaml(&["get", "list"], "2"));
    wait_copies(c2, Some((&["get", "list"], "2")), "updated").await;

    // Someone labels two copies on c2: drift, which the agent reads back
    // (a get by name) and corrects (a replace by name).
    kubectl(
        c2,
        &["label", "clusterrole", "sp ace*star>gt.dot", "drifted=yes"],
    );
    kubectl(c2, &["label", "role", "-n", NS, "ünï—名前", "drifted=yes"]);
    wait_for("c2: drifted copies corrected", SYNC, || async {
        let mut left = Vec::new();
        for (ar, ns) in [(cluster_roles(), None), (roles(), Some(NS))] {
            for (name, o) in list_by_name(c2, &ar, ns).await? {
                if o.labels().contains_key("drifted") {
                    left.push(format!("{} {name:?}", ar.kind));
                }
            }
        }
        if left.is_empty() {
            Ok(())
        } else {
            Err(format!("still labelled: {left:?}"))
        }
    })
    .await;
    wait_copies(c2, Some((&["get", "list"], "2")), "as after the update").await;

    let file = tempfile::Builder::new().suffix(".yaml").tempfile().unwrap();
    std::fs::write(file.path(), originals_yaml(&["get"], "1")).unwrap();
    kubectl(c1, &["delete", "-f", &file.path().display().to_string()]);
    wait_copies(c2, None, "deleted").await;

    for rule in ["names-clusterroles", "names-roles", "names-configmaps"] {
        wait_rule(c2, rule, "Ready without errors", |r| {
            ready_is("True", "Synced")(r)?;
            match r.status.as_ref().map(|s| s.errors) {
                Some(0) => Ok(()),
                other => Err(format!("errors {other:?}")),
            }
        })
        .await;
    }
    let log = c2.agent.log();
    assert!(
        !log.contains("invalid uri character") && !log.contains("Failed to build request"),
        "c2 failed an operation on a copy:\n{log}"
    );
}

/// A Widget CRD whose `spec.size` is at most `max` (None: any integer).
fn widget_crd(max: Option<u32>) -> String {
    let size = match max {
        Some(m) => format!("{{type: integer, maximum: {m}}}"),
        None => "{type: integer}".to_owned(),
    };
    format!(
        r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {{plural: widgets, singular: widget, kind: Widget, listKind: WidgetList}}
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              properties:
                size: {size}
"#
    )
}

fn widgets() -> ApiResource {
    resource("example.com", "v1", "Widget", "widgets")
}

fn widget_yaml(name: &str, size: u32) -> String {
    format!(
        "apiVersion: example.com/v1\nkind: Widget\nmetadata: {{name: {name}, namespace: default}}\nspec: {{size: {size}}}\n"
    )
}

/// Installs the Widget CRD on `m` and waits until kubectl serves the kind.
async fn install_widgets(m: &Member, max: Option<u32>) {
    apply_crd(m, &widget_crd(max), "widgets").await;
}

/// Requests for Widgets in `default` that `m`'s devcluster refused with 422
/// (its request log): the copy of `big` is the only Widget refused.
fn refused_requests(m: &Member) -> usize {
    m.cluster
        .log()
        .lines()
        .filter(|l| {
            l.contains("/apis/example.com/v1/namespaces/default/widgets")
                && l.contains("status=422")
        })
        .count()
}

/// The agent's WARN lines about the copy `Widget default/big`.
fn warn_lines(m: &Member) -> usize {
    m.agent
        .log()
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("Widget default/big"))
        .count()
}

/// The sink's CRD is stricter than the origin's, so the copy of one Widget
/// is refused (422) by the sink's API server, as kube-apiserver would. The
/// rule status counts it with the message, an Event on the rule names it,
/// and while other objects keep passes running the refused copy is tried
/// only as its backoff allows (the devcluster's request log and the agent's
/// WARN lines stay far below the number of passes). Once the sink's CRD is
/// relaxed, the copy converges.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_copy_backs_off_is_reported_and_converges_when_fixed() {
    let nats = NatsServer::start().unwrap();
    let m = fleet(&nats, &["c1", "c2"]).await;
    let (c1, c2) = (&m[0], &m[1]);
    install_widgets(c1, None).await;
    install_widgets(c2, Some(5)).await;
    apply_yaml(
        c1,
        &RuleBuilder::new("widgets")
            .kind("example.com", "v1", "Widget")
            .yaml(),
    );
    wait_rule_copy(c2, "widgets", "c1").await;
    apply_yaml(c1, &widget_yaml("big", 9));
    apply_yaml(c1, &widget_yaml("small", 1));
    wait_copy(
        c2,
        &widgets(),
        Some("default"),
        "small",
        "c1",
        "widgets",
        |_| Ok(()),
    )
    .await;

    wait_rule(c2, "widgets", "to report the refused copy", |r| {
        ready_is("False", "SyncErrors")(r)?;
        let s = r.status.as_ref().ok_or("no status")?;
        let message = &rule_condition(r, "Ready").ok_or("no Ready")?.message;
        if s.errors == 1 && message.contains("Widget default/big") && message.contains("spec.size")
        {
            Ok(())
        } else {
            Err(format!("errors {}, message {message:?}", s.errors))
        }
    })
    .await;
    wait_for("c2: an Event on the rule naming the copy", SYNC, || async {
        let events = events_with_reason(c2, "SyncFailed").await?;
        events
            .iter()
            .find(|e| {
                e.involved_object.kind.as_deref() == Some("ResourceSyncRule")
                    && e.involved_object.name.as_deref() == Some("widgets")
                    && e.message.as_deref().is_some_and(|m| {
                        m.contains("Widget default/big") && m.contains("spec.size")
                    })
            })
            .map(|_| ())
            .ok_or_else(|| format!("events: {events:?}"))
    })
    .await;

    // Passes keep running (each edit of `small` is one at least); the
    // refused copy is tried only when its backoff step is over.
    let started = Instant::now();
    let (requests, warns) = (refused_requests(c2), warn_lines(c2));
    let passes = c2.metric("fleetbus_sync_passes_total").unwrap();
    let mut i = 0u32;
    // At least 30 passes and ten seconds: long enough for several steps.
    while i < 30 || started.elapsed() < Duration::from_secs(10) {
        i += 1;
        // 2, 3, 4, 5, 2 …: each a change, each within the sink's maximum.
        let size = i % 4 + 2;
        apply_yaml(c1, &widget_yaml("small", size));
        let want = json!({ "size": size });
        wait_copy(
            c2,
            &widgets(),
            Some("default"),
            "small",
            "c1",
            "widgets",
            spec_is(want),
        )
        .await;
    }
    let elapsed = started.elapsed();
    let passes = c2.metric("fleetbus_sync_passes_total").unwrap() - passes;
    let requests = refused_requests(c2) - requests;
    let warns = warn_lines(c2) - warns;
    let bound = backoff_tries_bound(elapsed);
    eprintln!(
        "c2 in {elapsed:?}: {passes} passes, {requests} refused requests, {warns} WARN lines \
         (bound {bound})"
    );
    assert!(passes >= 30.0, "only {passes} passes on c2");
    assert!(
        requests <= bound && warns <= bound,
        "in {elapsed:?} ({passes} passes) the refused copy was tried {requests} times and \
         warned {warns} times; at most {bound} fit its backoff"
    );
    assert!(
        c2.metric("fleetbus_sync_write_failures_total{op=\"write\"}")
            .unwrap()
            >= 1.0
    );
    // The per-rule series the chart's FleetbusRuleInError alert reads.
    let rule_errors = "fleetbus_rule_objects{rule=\"widgets\",state=\"errors\"}";
    c2.wait_metric_at_least(rule_errors, 1.0).await;

    // The cause removed: the copy converges and the rule is Ready.
    install_widgets(c2, None).await;
    wait_copy(
        c2,
        &widgets(),
        Some("default"),
        "big",
        "c1",
        "widgets",
        spec_is(json!({"size": 9})),
    )
    .await;
    wait_rule(c2, "widgets", "Ready", ready_is("True", "Synced")).await;
    wait_for("c2: the rule's error series back at 0", SYNC, || async {
        let n = c2.metric(rule_errors)?;
        if n == 0.0 {
            Ok(())
        } else {
            Err(format!("{n} objects in error"))
        }
    })
    .await;
}
