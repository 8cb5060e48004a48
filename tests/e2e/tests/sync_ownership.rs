//! fleetbus deletes only what it owns: a copy
//! whose deletion would take objects fleetbus does not manage with it (a
//! Namespace's contents, a CRD's instances) is kept and reported instead,
//! and a copy being deleted (a deletionTimestamp, finalizers pending) is
//! never written: the new source is created once it is gone.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::rules::RuleBuilder;
use common::sync::*;
use common::*;
use fleetbus_testsupport::{wait_for, NatsServer};
use kube::ResourceExt;
use serde_json::json;

fn namespaces() -> kube::api::ApiResource {
    resource("", "v1", "Namespace", "namespaces")
}

fn configmaps() -> kube::api::ApiResource {
    resource("", "v1", "ConfigMap", "configmaps")
}

fn crds() -> kube::api::ApiResource {
    resource(
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
    )
}

/// `kubectl create configmap <name> -n <ns> --from-literal=k=v` on `m`.
fn create_cm(m: &Member, ns: &str, name: &str, value: &str) {
    let literal = format!("--from-literal=k={value}");
    kubectl(m, &["create", "configmap", name, "-n", ns, &literal]);
}

/// `kubectl patch configmap <name> -n <ns> --type <type> -p <patch>` on `m`.
fn patch_configmap(m: &Member, ns: &str, name: &str, type_: &str, patch: &str) {
    kubectl(
        m,
        &[
            "patch",
            "configmap",
            name,
            "-n",
            ns,
            "--type",
            type_,
            "-p",
            patch,
        ],
    );
}

/// Waits until an Event with reason `CopyKept` on `m` says `needle`; returns its message.
async fn wait_kept_event(m: &Member, needle: &str) -> String {
    let what = format!("{}: a CopyKept Event saying {needle:?}", m.name);
    wait_for(&what, SYNC, || async {
        let events = events_with_reason(m, "CopyKept").await?;
        let messages: Vec<String> = events.into_iter().filter_map(|e| e.message).collect();
        messages
            .iter()
            .find(|msg| msg.contains(needle))
            .cloned()
            .ok_or_else(|| format!("CopyKept Events: {messages:?}"))
    })
    .await
}

/// The Namespaces labelled `sync=ns`, deleted with the rule.
fn namespace_rule() -> String {
    RuleBuilder::new("namespaces")
        .kind("", "v1", "Namespace")
        .spec("orphanPolicy", json!("Delete"))
        .matching(json!({"labels": [{"matchLabels": {"sync": "ns"}}]}))
        .yaml()
}

/// A rule `name` syncing the ConfigMaps of namespace `ns`.
fn configmap_rule(name: &str, ns: &str) -> String {
    RuleBuilder::new(name).namespaces(&[ns]).yaml()
}

/// Namespace copies `ab` and `ctl` on b; b's own ConfigMap `ab/both` lives
/// in `ab`, `ctl` holds only a copy and what Kubernetes makes in every
/// namespace. Deleting the rule (orphanPolicy Delete) deletes `ctl`, but
/// keeps `ab` (and `both`), no longer managed, with an Event saying why and
/// how to finish by hand.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_holding_unmanaged_objects_is_kept() {
    let nats = NatsServer::start().unwrap();
    let m = fleet(&nats, &["a", "b"]).await;
    let (a, b) = (&m[0], &m[1]);
    // `ab` sorts before `ctl`: it is collected first, so `ctl` gone means
    // `ab`'s fate is decided.
    apply_yaml(
        a,
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: ab, labels: {sync: ns}}\n---\n\
         apiVersion: v1\nkind: Namespace\nmetadata: {name: ctl, labels: {sync: ns}}\n",
    );
    apply_yaml(a, &namespace_rule());
    for ns in ["ab", "ctl"] {
        wait_copy(b, &namespaces(), None, ns, "a", "namespaces", |_| Ok(())).await;
    }
    apply_yaml(a, &configmap_rule("ctl-configmaps", "ctl"));
    create_cm(a, "ctl", "shared", "from-a");
    wait_copy(
        b,
        &configmaps(),
        Some("ctl"),
        "shared",
        "a",
        "ctl-configmaps",
        |_| Ok(()),
    )
    .await;
    // What kube-controller-manager puts in every namespace: the root CA
    // ConfigMap (made here by hand, as its publisher would) and the
    // `default` ServiceAccount (the devcluster makes it, as kube does).
    for ns in ["ab", "ctl"] {
        create_cm(b, ns, "kube-root-ca.crt", "ca");
        let sa = resource("", "v1", "ServiceAccount", "serviceaccounts");
        wait_obj(b, &sa, Some(ns), "default", "to exist", |_| Ok(())).await;
    }
    // b's own object, never managed.
    create_cm(b, "ab", "both", "b-owns-this");

    kubectl(a, &["delete", "resourcesyncrule", "namespaces"]);
    // Nothing unmanaged in it: deleted.
    wait_absent(b, &namespaces(), None, "ctl").await;
    // b's ConfigMap and its namespace are still there; the namespace is b's now.
    let both = get_dynamic(b, &configmaps(), Some("ab"), "both")
        .await
        .unwrap();
    let both = both.expect("b's ConfigMap ab/both was deleted with the namespace copy");
    assert_eq!(data(&both), serde_json::json!({"k": "b-owns-this"}));
    let ab = get_dynamic(b, &namespaces(), None, "ab").await.unwrap();
    let ab = ab.expect("the namespace copy ab holding b's ConfigMap was deleted");
    check_unmanaged(&ab).unwrap();
    assert!(
        ab.metadata.deletion_timestamp.is_none(),
        "ab is terminating"
    );
    let message = wait_kept_event(b, "configmaps ab/both").await;
    assert!(
        message.contains("kubectl delete namespaces ab"),
        "the Event says how to finish: {message}"
    );
    assert!(
        !message.contains("kube-root-ca.crt") && !message.contains("serviceaccounts"),
        "what Kubernetes makes in every namespace does not count: {message}"
    );
    // The Event is on the copy (and on the rule, while b still knows it).
    let kept = events_with_reason(b, "CopyKept").await.unwrap();
    assert!(
        kept.iter().all(|e| e
            .message
            .as_deref()
            .is_some_and(|m| m.starts_with("Namespace ab kept"))),
        "only ab was kept: {:?}",
        kept.iter().map(|e| &e.message).collect::<Vec<_>>()
    );
    // a's originals are untouched.
    wait_obj(a, &namespaces(), None, "ab", "to stay", check_unmanaged).await;
}

/// CRDs from a (`role=src`) only, so a kept copy on b is not published back.
fn crd_rule() -> String {
    let named = |name: &str| json!({"objectKey": {"name": name}});
    RuleBuilder::new("crds")
        .kind("apiextensions.k8s.io", "v1", "CustomResourceDefinition")
        .sources(&[("role", "src")])
        .entry(json!({"match": [named("gizmos.example.com"), named("zooids.example.com")]}))
        .yaml()
}

/// CRD copies `gizmos` and `zooids` on b; b has its own Gizmo. Deleting both
/// sources deletes the `zooids` copy and keeps `gizmos` (and the Gizmo): the
/// rule's status (condition Kept) and an Event say why and how to finish.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crd_with_unmanaged_instances_is_kept() {
    let nats = NatsServer::start().unwrap();
    let m = fleet(&nats, &["a", "b"]).await;
    let (a, b) = (&m[0], &m[1]);
    // CRDs are synced on purpose (the built-in import policy keeps them out).
    apply_policy(b, ALLOW_ALL_IMPORTS, "True").await;
    let (code, out, err) = fleetbus_cli(&nats, &["clusters", "label", "a", "role=src"]).await;
    assert_eq!(code, Some(0), "fleetbus clusters label: {out}{err}");
    wait_for("b: Cluster a labelled role=src", SYNC, || async {
        let c = b.clusters().get("a").await.map_err(|e| e.to_string())?;
        match c.labels().get("role").map(String::as_str) {
            Some("src") => Ok(()),
            other => Err(format!("role={other:?}")),
        }
    })
    .await;
    install_crd(a, "Gizmo", "gizmos").await;
    install_crd(a, "Zooid", "zooids").await;
    apply_yaml(a, &crd_rule());
    for name in ["gizmos.example.com", "zooids.example.com"] {
        wait_copy(b, &crds(), None, name, "a", "crds", |_| Ok(())).await;
    }
    let gizmos = resource("example.com", "v1", "Gizmo", "gizmos");
    wait_served(b, "gizmos.example.com").await;
    // b's own Gizmo, never managed.
    apply_yaml(
        b,
        "apiVersion: example.com/v1\nkind: Gizmo\nmetadata: {name: g1, namespace: default}\nspec: {size: 1}\n",
    );

    // gizmos first: its tombstone arrives first and it sorts first, so
    // zooids gone means gizmos' fate is decided.
    kubectl(
        a,
        &["delete", "crd", "gizmos.example.com", "zooids.example.com"],
    );
    wait_absent(b, &crds(), None, "zooids.example.com").await;
    let g1 = get_dynamic(b, &gizmos, Some("default"), "g1")
        .await
        .unwrap();
    assert!(g1.is_some(), "b's Gizmo g1 was deleted with the CRD copy");
    let kept = get_dynamic(b, &crds(), None, "gizmos.example.com")
        .await
        .unwrap();
    check_unmanaged(&kept.expect("the CRD copy gizmos was deleted")).unwrap();
    let r = wait_rule(
        b,
        "crds",
        "to report the kept CRD",
        |r| match rule_condition(r, "Kept") {
            Some(c) if c.status == "True" && c.message.contains("gizmos.example.com") => Ok(()),
            other => Err(format!("Kept is {other:?}")),
        },
    )
    .await;
    let message = &rule_condition(&r, "Kept").unwrap().message;
    assert!(
        message.contains("gizmos.example.com default/g1")
            && message.contains(
                "kubectl delete customresourcedefinitions.apiextensions.k8s.io gizmos.example.com"
            ),
        "the status says what would have gone and how to finish: {message}"
    );
    wait_kept_event(b, "gizmos.example.com default/g1").await;
    // Deleting the kept CRD by hand ends the report.
    kubectl(b, &["delete", "crd", "gizmos.example.com"]);
    wait_rule(
        b,
        "crds",
        "to report nothing kept",
        |r| match rule_condition(r, "Kept") {
            Some(c) if c.status == "False" => Ok(()),
            other => Err(format!("Kept is {other:?}")),
        },
    )
    .await;
}

/// b's copy holds a finalizer; the source is deleted (the copy turns
/// Terminating) and created again. The terminating copy is not written nor
/// counted in sync; once the finalizer is removed it goes, and the new
/// source's copy is created at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminating_copy_is_not_written() {
    let nats = NatsServer::start().unwrap();
    let m = fleet(&nats, &["a", "b"]).await;
    let (a, b) = (&m[0], &m[1]);
    for x in [a, b] {
        create_ns(x, "fin").await;
    }
    apply_yaml(a, &configmap_rule("fin-configmaps", "fin"));
    create_cm(a, "fin", "x", "one");
    wait_copy(
        b,
        &configmaps(),
        Some("fin"),
        "x",
        "a",
        "fin-configmaps",
        data_is(serde_json::json!({"k": "one"})),
    )
    .await;
    patch_configmap(
        b,
        "fin",
        "x",
        "merge",
        r#"{"metadata":{"finalizers":["example.com/hold"]}}"#,
    );
    kubectl_delete(a, "configmap", Some("fin"), "x");
    let doomed = wait_obj(
        b,
        &configmaps(),
        Some("fin"),
        "x",
        "to be terminating",
        |o| match o.metadata.deletion_timestamp {
            Some(_) => Ok(()),
            None => Err("no deletionTimestamp".into()),
        },
    )
    .await;
    create_cm(a, "fin", "x", "two");
    // A later object's copy: the pass that saw the new x has run.
    create_cm(a, "fin", "y", "barrier");
    wait_copy(
        b,
        &configmaps(),
        Some("fin"),
        "y",
        "a",
        "fin-configmaps",
        |_| Ok(()),
    )
    .await;
    let now = get_dynamic(b, &configmaps(), Some("fin"), "x")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (now.resource_version(), data(&now)),
        (doomed.resource_version(), serde_json::json!({"k": "one"})),
        "the terminating copy was written"
    );
    wait_rule(
        b,
        "fin-configmaps",
        "to count the terminating copy as not in sync",
        |r| {
            let s = r.status.as_ref().ok_or("no status")?;
            if s.objects_synced == 1 && s.errors == 1 {
                Ok(())
            } else {
                Err(format!("synced {}, errors {}", s.objects_synced, s.errors))
            }
        },
    )
    .await;
    // The finalizer's owner lets go: the old copy goes, the new one comes.
    patch_configmap(
        b,
        "fin",
        "x",
        "json",
        r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
    );
    let old_uid = doomed.uid().unwrap();
    wait_copy(
        b,
        &configmaps(),
        Some("fin"),
        "x",
        "a",
        "fin-configmaps",
        |o| {
            data_is(serde_json::json!({"k": "two"}))(o)?;
            if o.uid().as_deref() == Some(old_uid.as_str()) {
                return Err("still the old object".into());
            }
            Ok(())
        },
    )
    .await;
    wait_rule(b, "fin-configmaps", "in sync", ready_is("True", "Synced")).await;
}

/// Copies written before this cluster's copy-mark key existed — by an
/// agent of an earlier version, or under a key since lost — carry the whole
/// earlier stamp and are older than the key: the agent takes them up as its
/// own (never a conflict, never recreated), marks them under its key, and
/// keeps them in sync and collects them as before. Simulated by deleting the
/// key Secret and restarting the agent, which makes a new key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copies_older_than_the_mark_key_are_taken_up_and_marked() {
    use fleetbus_schemas::well_known::ANNOTATION_COPY_MARK;
    let nats = NatsServer::start().unwrap();
    let mut m = fleet(&nats, &["a", "b"]).await;
    for x in &m {
        create_ns(x, "up").await;
    }
    apply_yaml(&m[0], &configmap_rule("up-configmaps", "up"));
    create_cm(&m[0], "up", "x", "one");
    let copy = wait_copy(
        &m[1],
        &configmaps(),
        Some("up"),
        "x",
        "a",
        "up-configmaps",
        data_is(serde_json::json!({"k": "one"})),
    )
    .await;
    let uid = copy.uid().expect("uid");
    let old_mark = copy
        .annotations()
        .get(ANNOTATION_COPY_MARK)
        .cloned()
        .expect("a copy carries its mark");

    // The key is lost; the agent starts again and makes a new one, in a
    // later second than the copy's creation (both are whole seconds, and
    // only an older object is taken up).
    let created = copy
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0.as_second())
        .expect("a creation time");
    wait_for(
        "a second later than the copy's creation",
        CONVERGE,
        || async {
            let now = chrono::Utc::now().timestamp();
            (now > created)
                .then_some(())
                .ok_or(format!("{now} <= {created}"))
        },
    )
    .await;
    kubectl(
        &m[1],
        &["delete", "secret", "fleetbus-copy-mark", "-n", NAMESPACE],
    );
    m[1].agent.kill9();
    m[1].agent.restart().unwrap();
    wait_readyz(&m[1], 200, CONVERGE).await;
    let remarked = wait_copy(
        &m[1],
        &configmaps(),
        Some("up"),
        "x",
        "a",
        "up-configmaps",
        |o| match o.annotations().get(ANNOTATION_COPY_MARK) {
            Some(mark) if *mark != old_mark => Ok(()),
            other => Err(format!(
                "mark {other:?}, the old one {old_mark:?}; agent log:\n{}",
                m[1].agent
                    .log()
                    .lines()
                    .rev()
                    .take(40)
                    .collect::<Vec<_>>()
                    .join("\n")
            )),
        },
    )
    .await;
    assert_eq!(
        remarked.uid().as_ref(),
        Some(&uid),
        "taken up, not recreated"
    );
    let conflicts = rule(&m[1], "up-configmaps")
        .await
        .unwrap()
        .and_then(|r| r.status)
        .map(|s| s.conflicts);
    assert_eq!(conflicts, Some(0), "the earlier copy is no conflict");

    // Still ours: kept in sync, and collected with its source.
    patch_configmap(&m[0], "up", "x", "merge", r#"{"data":{"k":"two"}}"#);
    wait_copy(
        &m[1],
        &configmaps(),
        Some("up"),
        "x",
        "a",
        "up-configmaps",
        data_is(serde_json::json!({"k": "two"})),
    )
    .await;
    kubectl(&m[0], &["delete", "configmap", "x", "-n", "up"]);
    wait_absent(&m[1], &configmaps(), Some("up"), "x").await;
}

/// ConfigMaps of `shared` from every cluster to the clusters labelled
/// `env=prod`, orphaned (not deleted) where they are no longer wanted.
fn prod_rule() -> String {
    RuleBuilder::new("prod-config")
        .sinks(&[("env", "prod")])
        .spec("orphanPolicy", json!("Orphan"))
        .namespaces(&["shared"])
        .yaml()
}

/// c2 is a source of the rule (every cluster is) and a sink while it is
/// labelled `env=prod`. Unlabelled, it orphans its copy of c1's ConfigMap,
/// which then says where it came from and is never published back as c2's
/// own original: the rule on c2 reports it withheld, nothing of c2's is on
/// the bus under that name, and c3's copy stays c1's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orphaned_copy_is_not_published_back() {
    let nats = NatsServer::start().unwrap();
    let m = fleet(&nats, &["c1", "c2", "c3"]).await;
    let (c1, c2, c3) = (&m[0], &m[1], &m[2]);
    for x in &m {
        create_ns(x, "shared").await;
    }
    for x in [c2, c3] {
        kubectl(x, &["label", "clusters.fleetbus.io", &x.name, "env=prod"]);
    }
    apply_yaml(c1, &prod_rule());
    create_cm(c1, "shared", "cfg", "from-c1");
    for x in [c2, c3] {
        wait_copy(
            x,
            &configmaps(),
            Some("shared"),
            "cfg",
            "c1",
            "prod-config",
            |_| Ok(()),
        )
        .await;
    }

    kubectl(c2, &["label", "clusters.fleetbus.io", "c2", "env-"]);
    let orphaned = wait_obj(
        c2,
        &configmaps(),
        Some("shared"),
        "cfg",
        "orphaned, from c1",
        orphaned_from("c1"),
    )
    .await;
    assert_eq!(data(&orphaned), serde_json::json!({"k": "from-c1"}));
    let r = wait_rule(
        c2,
        "prod-config",
        "to report the orphaned copy withheld",
        |r| {
            let c = rule_condition(r, "Skipped").ok_or("no Skipped condition")?;
            match c.message.contains("ConfigMap shared/cfg: an orphaned copy") {
                true => Ok(()),
                false => Err(format!("Skipped: {}", c.message)),
            }
        },
    )
    .await;
    assert_eq!(r.status.map(|s| s.skipped), Some(1));
    // Nothing of c2's under that name on the bus: a plain client reads the stream.
    let js = async_nats::jetstream::new(async_nats::connect(nats.url()).await.unwrap());
    let stream = js.get_stream("FLEETBUS_OBJECTS").await.unwrap();
    let key = fleetbus_schemas::subject::ObjectKey {
        origin: "c2".into(),
        group: String::new(),
        version: "v1".into(),
        kind: "ConfigMap".into(),
        namespace: Some("shared".into()),
        name: "cfg".into(),
    };
    let subject = key.to_subject(&fleetbus_schemas::subject::Prefix::default());
    let last = stream.get_last_raw_message_by_subject(&subject).await;
    assert!(last.is_err(), "c2 published its orphaned copy on {subject}");
    // c3 still holds c1's copy, unchanged.
    let copy = get_dynamic(c3, &configmaps(), Some("shared"), "cfg")
        .await
        .unwrap();
    check_copy(&copy.expect("c3's copy"), "c1", "prod-config").unwrap();
}
