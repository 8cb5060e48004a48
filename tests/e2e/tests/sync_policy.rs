//! A cluster decides what leaves it and what enters it: the
//! SyncPolicy `default` of each cluster, local and not replicated. Real
//! nats-server, devclusters and agents; users act through kubectl and the
//! `fleetbus` CLI.
//!
//! Absence is asserted only after the positive observation that comes after
//! the decision: the refusing cluster's rule status naming the object (the
//! agent planned it and refused it), or a copy of another object of the same
//! rule that arrived.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::rules::RuleBuilder;
use common::sync::*;
use common::*;
use fleetbus_schemas::crd::ResourceSyncRule;
use fleetbus_testsupport::{wait_for, NatsServer};

/// `fleetbus_policy_refused_total{direction}` of `m` (0 when absent).
fn refused_total(m: &Member, direction: &str) -> f64 {
    let series = format!("fleetbus_policy_refused_total{{direction=\"{direction}\"}}");
    metric_value(&m.metrics().unwrap_or_default(), &series).unwrap_or(0.0)
}

/// A predicate: condition `PolicyRefused` is `status` with `reason`, and
/// its message contains `needle`.
fn refused_is(
    status: &'static str,
    reason: &'static str,
    needle: &'static str,
) -> impl Fn(&ResourceSyncRule) -> Result<(), String> {
    move |r| match rule_condition(r, "PolicyRefused") {
        Some(c) if c.status == status && c.reason == reason && c.message.contains(needle) => Ok(()),
        other => Err(format!("PolicyRefused is {other:?}")),
    }
}

/// The main case: a rule created on c1 selecting the Secrets of `team`
/// gets nothing from c2, whose policy refuses exporting Secrets for rules
/// authored elsewhere; c2's rule status says why (kubectl there, and
/// `fleetbus rules describe` from the bus); allowed for c1's rules, the
/// Secret arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_from_elsewhere_gets_no_secret_the_source_refuses_and_says_why() {
    let nats = NatsServer::start().unwrap();
    let m = fleet(&nats, &["c1", "c2"]).await;
    let (c1, c2) = (&m[0], &m[1]);
    for x in [c1, c2] {
        create_ns(x, "team").await;
    }
    let refuse = r#"apiVersion: fleetbus.io/v1alpha1
kind: SyncPolicy
metadata:
  name: default
spec:
  export:
    rules:
      - {action: Deny, kinds: [{kind: Secret}]}
"#;
    apply_policy(c2, refuse, "True").await;
    create_secret(c2, "team", "db", &[("password", "s3cret")]).await;
    apply_yaml(c1, &secrets_rule("team-secrets", &["team"]).yaml());
    wait_rule_copy(c2, "team-secrets", "c1").await;

    // c2 planned the Secret for c1's rule and refused it: says so, per
    // kind and namespace, with a count and the entry that decided.
    let r = wait_rule(
        c2,
        "team-secrets",
        "to say its policy refused the Secret",
        refused_is("True", "ExportRefused", "Secret in team: 1"),
    )
    .await;
    let c = rule_condition(&r, "PolicyRefused").unwrap();
    assert!(
        c.message
            .contains("Secret team/db: refused by SyncPolicy default (export.rules[0])"),
        "{}",
        c.message
    );
    // Refusing is the policy working, not a failure.
    assert_eq!(rule_condition(&r, "Ready").unwrap().status, "True");
    assert_absent(c1, &secrets(), Some("team"), "db").await;
    assert!(refused_total(c2, "export") >= 1.0);
    // And an Event on the rule there, for `kubectl describe`.
    wait_for(
        "c2: a PolicyRefused Event on team-secrets",
        SYNC,
        || async {
            let events = events_with_reason(c2, "PolicyRefused").await?;
            events
                .iter()
                .find(|e| {
                    e.involved_object.name.as_deref() == Some("team-secrets")
                        && e.message.as_deref().is_some_and(|m| {
                            m.contains("Secret team/db: export of Secret in team refused")
                        })
                })
                .map(|_| ())
                .ok_or_else(|| format!("{events:?}"))
        },
    )
    .await;
    // The same from the bus, for whoever reads every cluster's view.
    let (code, out, err) = fleetbus_cli(&nats, &["rules", "describe", "team-secrets"]).await;
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.contains("c2  Refused  Secret team/db: export of Secret in team refused by SyncPolicy default (export.rules[0])"),
        "{out}"
    );
    let (code, out, err) =
        fleetbus_cli(&nats, &["rules", "describe", "team-secrets", "-o", "json"]).await;
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("\"refused\": 1"), "{out}");

    // Allowed for rules authored on c1 (and only Secrets of team): the
    // Secret arrives, without a restart, and the condition clears.
    let allow = r#"apiVersion: fleetbus.io/v1alpha1
kind: SyncPolicy
metadata:
  name: default
spec:
  export:
    rules:
      - {action: Allow, kinds: [{kind: Secret}], namespaces: [team], authors: [c1]}
      - {action: Deny, kinds: [{kind: Secret}]}
"#;
    apply_policy(c2, allow, "True").await;
    wait_copy(
        c1,
        &secrets(),
        Some("team"),
        "db",
        "c2",
        "team-secrets",
        data_is(secret_data(&[("password", "s3cret")])),
    )
    .await;
    wait_rule(
        c2,
        "team-secrets",
        "to refuse nothing any more",
        refused_is("False", "NothingRefused", ""),
    )
    .await;

    // Refused again: the published Secret is withdrawn (`Unpublished`), and
    // the copy follows the rule's orphanPolicy (Delete).
    apply_policy(c2, refuse, "True").await;
    wait_absent(c1, &secrets(), Some("team"), "db").await;
}

/// With no policy object, the built-in default: a Secret in c2's
/// kube-system selected by a rule from c1 is not published (another Secret
/// the same rule selects is); garbage policies (unknown fields, wrong
/// types, a huge list) are reported on the object and never panic the
/// agent. With no valid version of the policy known, they close it: not the
/// built-in default (the object may have meant to deny more), not "allow
/// all": nothing new out for rules from elsewhere, nothing withdrawn.
/// Deleted, the built-in default again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_keeps_kube_system_secrets_home_and_garbage_closes_the_policy() {
    let nats = NatsServer::start().unwrap();
    let m = fleet(&nats, &["c1", "c2"]).await;
    let (c1, c2) = (&m[0], &m[1]);
    for x in [c1, c2] {
        create_ns(x, "team").await;
    }
    create_secret(c2, "kube-system", "cloud-key", &[("key", "k")]).await;
    create_secret(c2, "team", "ok", &[("v", "1")]).await;
    apply_yaml(
        c1,
        &secrets_rule("ks-secrets", &["kube-system", "team"]).yaml(),
    );
    wait_copy(
        c1,
        &secrets(),
        Some("team"),
        "ok",
        "c2",
        "ks-secrets",
        |_| Ok(()),
    )
    .await;
    let needle = "export Secret in kube-system: 1";
    wait_rule(
        c2,
        "ks-secrets",
        "to say the default policy refused kube-system",
        refused_is("True", "ExportRefused", needle),
    )
    .await;
    assert_absent(c1, &secrets(), Some("kube-system"), "cloud-key").await;

    // Garbage the API server accepts (unknown fields are kept for the
    // agent to refuse; the lists have no bound in the schema): Valid=False
    // with why and what is in force: nothing, the policy is closed.
    let many: Vec<String> = (0..300)
        .map(|i| format!("      - {{action: Allow, namespaces: [ns{i}]}}"))
        .collect();
    let garbage = [
        (
            "spec:\n  exprot: {otherwise: Allow}\n".to_owned(),
            "unknown field `exprot`",
        ),
        (
            "spec:\n  export:\n    otherwise: Allow\n    rules:\n      - {action: Allow, kind: Secret}\n".to_owned(),
            "unknown field `kind`",
        ),
        (
            format!("spec:\n  export:\n    otherwise: Allow\n    rules:\n{}\n", many.join("\n")),
            "spec.export.rules: 300 entries, at most 256",
        ),
    ];
    let mut held = Vec::new();
    for (spec, why) in &garbage {
        let yaml = format!(
            "apiVersion: fleetbus.io/v1alpha1\nkind: SyncPolicy\nmetadata:\n  name: default\n{spec}"
        );
        let c = apply_policy(c2, &yaml, "False").await;
        assert_eq!(c["reason"], "Invalid", "{c}");
        let msg = c["message"].as_str().unwrap_or_default();
        assert!(msg.contains(why), "{msg} lacks {why}");
        assert!(
            msg.contains("no valid SyncPolicy default is known to this agent"),
            "{msg}"
        );
        // A later object the rule selects is refused (c2's rule status names
        // it, by the invalid policy), in team as in kube-system; what was
        // out stays out.
        let name = format!("after-{}", spec.len());
        create_secret(c2, "team", &name, &[("v", "2")]).await;
        create_secret(c2, "kube-system", &name, &[("v", "2")]).await;
        held.push(name.clone());
        let needle = format!("export Secret in team: {}", held.len() + 1);
        wait_rule(
            c2,
            "ks-secrets",
            "to refuse every Secret of team under the closed policy",
            move |r| match rule_condition(r, "PolicyRefused") {
                Some(c) if c.status == "True" && c.message.contains(&needle) => Ok(()),
                other => Err(format!("PolicyRefused is {other:?}, want {needle}")),
            },
        )
        .await;
        let r = rule(c2, "ks-secrets").await.unwrap().unwrap();
        let c = rule_condition(&r, "PolicyRefused").unwrap();
        // The kube-system Secrets sort first among the five named.
        assert!(
            c.message.contains(&format!(
                "Secret kube-system/{name}: refused by the invalid SyncPolicy default"
            )),
            "{}",
            c.message
        );
        assert_absent(c1, &secrets(), Some("team"), &name).await;
        assert_absent(c1, &secrets(), Some("kube-system"), &name).await;
        assert_absent(c1, &secrets(), Some("kube-system"), "cloud-key").await;
        wait_copy(
            c1,
            &secrets(),
            Some("team"),
            "ok",
            "c2",
            "ks-secrets",
            |_| Ok(()),
        )
        .await;
    }
    // Wrong types: refused by the API server's schema (kube-apiserver
    // does the same), the object unchanged.
    let out = c2.cluster.kubectl(
        KUBECTL,
        &[
            "patch",
            "syncpolicies.fleetbus.io",
            "default",
            "--type=merge",
            "-p",
            r#"{"spec":{"export":{"rules":"all"}}}"#,
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a list as a string was accepted");
    assert!(err.contains("rules"), "{err}");
    // The agent is alive and the Events say the policy was refused.
    wait_for("c2: an InvalidPolicy Event", SYNC, || async {
        let e = events_with_reason(c2, "InvalidPolicy").await?;
        if e.is_empty() {
            Err("none".to_owned())
        } else {
            Ok(())
        }
    })
    .await;
    wait_readyz(c2, 200, SYNC).await;
    assert_eq!(policy_invalid(c2), Ok(1.0));
    // Deleted: the built-in default again; what was held in team goes out,
    // kube-system stays home.
    kubectl_delete(c2, "syncpolicies.fleetbus.io", None, "default");
    for name in &held {
        wait_copy(
            c1,
            &secrets(),
            Some("team"),
            name,
            "c2",
            "ks-secrets",
            |_| Ok(()),
        )
        .await;
    }
    wait_rule(
        c2,
        "ks-secrets",
        "to refuse only kube-system again",
        refused_is("True", "ExportRefused", "(export Secret in kube-system: 4)"),
    )
    .await;
    for name in &held {
        assert_absent(c1, &secrets(), Some("kube-system"), name).await;
    }
    assert_eq!(policy_invalid(c2), Ok(0.0));
}

/// Import: c2 refuses a ClusterRole copy by default (its rule status says
/// so, no ClusterRole appears); a policy allowing it lets it in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_roles_stay_out_by_default_until_the_policy_lets_them_in() {
    let nats = NatsServer::start().unwrap();
    let m = fleet(&nats, &["c1", "c2"]).await;
    let (c1, c2) = (&m[0], &m[1]);
    let rule = RuleBuilder::new("roles")
        .kind("rbac.authorization.k8s.io", "v1", "ClusterRole")
        .matching(serde_json::json!({"labels": [{"matchLabels": {"probe": "policy"}}]}))
        .yaml();
    let role = r#"apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: policy-probe
  labels: {probe: policy}
rules:
  - {apiGroups: [""], resources: [secrets], verbs: ["*"]}
"#;
    apply_yaml(c1, role);
    apply_yaml(c1, &rule);
    wait_rule_copy(c2, "roles", "c1").await;
    wait_rule(
        c2,
        "roles",
        "to say the default policy refused the ClusterRole",
        refused_is(
            "True",
            "ImportRefused",
            "import ClusterRole.rbac.authorization.k8s.io (cluster-scoped): 1",
        ),
    )
    .await;
    let roles = resource(
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRole",
        "clusterroles",
    );
    assert_absent(c2, &roles, None, "policy-probe").await;
    assert!(refused_total(c2, "import") >= 1.0);
    apply_policy(c2, ALLOW_ALL_IMPORTS, "True").await;
    wait_copy(c2, &roles, None, "policy-probe", "c1", "roles", |_| Ok(())).await;
    wait_rule(
        c2,
        "roles",
        "to refuse nothing any more",
        refused_is("False", "NothingRefused", ""),
    )
    .await;
    // The policy deleted: the built-in default again, and the copy is no
    // longer wanted (its rule's orphanPolicy, Delete, applies).
    kubectl_delete(c2, "syncpolicies.fleetbus.io", None, "default");
    wait_absent(c2, &roles, None, "policy-probe").await;
    wait_rule(
        c2,
        "roles",
        "to say it is refused again",
        refused_is("True", "ImportRefused", "ClusterRole policy-probe"),
    )
    .await;
}

/// ConfigMaps of the probe: those labelled `probe: policy` in `secretns`
/// and `public`, selected by a rule created on c1 (so c2's `export` is
/// asked for them).
fn configmaps_rule() -> String {
    RuleBuilder::new("probe-configmaps")
        .matching(serde_json::json!({
            "namespaces": ["secretns", "public"],
            "labels": [{"matchLabels": {"probe": "policy"}}],
        }))
        .yaml()
}

/// c2's policy: no ConfigMap of `secretns` out, for rules from elsewhere.
/// `extra` is appended to `spec` (a typo, for the tests that need one).
fn deny_secretns(extra: &str) -> String {
    format!(
        "apiVersion: fleetbus.io/v1alpha1\nkind: SyncPolicy\nmetadata:\n  name: default\nspec:\n  \
         export:\n    rules:\n      - {{action: Deny, kinds: [{{kind: ConfigMap}}], namespaces: [secretns]}}\n{extra}"
    )
}

/// A typo the API server keeps (the schema preserves unknown fields of
/// `spec`) and the agent refuses: `exprot` for `export`.
const TYPO: &str = "  exprot: {otherwise: Allow}\n";

fn configmaps() -> kube::api::ApiResource {
    resource("", "v1", "ConfigMap", "configmaps")
}

/// Creates the ConfigMap `ns/name` labelled for the probe's rule on `m`.
fn create_configmap(m: &Member, ns: &str, name: &str, value: &str) {
    apply_yaml(
        m,
        &format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: {ns}\n  \
             labels: {{probe: policy}}\ndata: {{v: \"{value}\"}}\n"
        ),
    );
}

/// A predicate: condition `PolicyRefused` is True and its message contains `needle`.
fn refusing(needle: String) -> impl Fn(&ResourceSyncRule) -> Result<(), String> {
    move |r| match rule_condition(r, "PolicyRefused") {
        Some(c) if c.status == "True" && c.message.contains(&needle) => Ok(()),
        other => Err(format!(
            "PolicyRefused is {other:?}, want it to name {needle}"
        )),
    }
}

/// `fleetbus_sync_policy_invalid` of `m`.
fn policy_invalid(m: &Member) -> Result<f64, String> {
    m.metric("fleetbus_sync_policy_invalid")
}

/// The probe: a typo in a SyncPolicy that denied exporting the ConfigMaps
/// of `secretns` must not let them out. The last valid policy stays in
/// force, and the object's status, a Warning Event and the metric say so;
/// a ConfigMap of `secretns` that existed before the typo and one created
/// after it stay on c2, while one of `public` created after it arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_typo_keeps_the_last_valid_policy_and_lets_nothing_out() {
    let nats = NatsServer::start().unwrap();
    let m = fleet(&nats, &["c1", "c2"]).await;
    let (c1, c2) = (&m[0], &m[1]);
    for x in [c1, c2] {
        create_ns(x, "secretns").await;
        create_ns(x, "public").await;
    }
    apply_policy(c2, &deny_secretns(""), "True").await;
    create_configmap(c2, "secretns", "private", "s3cret");
    create_configmap(c2, "public", "before", "1");
    apply_yaml(c1, &configmaps_rule());
    wait_rule_copy(c2, "probe-configmaps", "c1").await;
    wait_copy(
        c1,
        &configmaps(),
        Some("public"),
        "before",
        "c2",
        "probe-configmaps",
        |_| Ok(()),
    )
    .await;
    let by_policy = "ConfigMap secretns/private: refused by SyncPolicy default (export.rules[0])";
    wait_rule(
        c2,
        "probe-configmaps",
        "to say its policy refused secretns/private",
        refusing(by_policy.to_owned()),
    )
    .await;
    assert_absent(c1, &configmaps(), Some("secretns"), "private").await;

    // The typo: Valid=False, and the message says the last valid version stays.
    let c = apply_policy(c2, &deny_secretns(TYPO), "False").await;
    assert_eq!(c["reason"], "Invalid", "{c}");
    let msg = c["message"].as_str().unwrap_or_default();
    assert!(msg.contains("unknown field `exprot`"), "{msg}");
    // Objects planned after the agent read the typo: one of secretns (new)
    // and one of public. The public one arriving on c1 comes after whatever
    // c2 published when it read the typo.
    create_configmap(c2, "secretns", "private-after", "s3cret");
    create_configmap(c2, "public", "after", "2");
    wait_copy(
        c1,
        &configmaps(),
        Some("public"),
        "after",
        "c2",
        "probe-configmaps",
        |_| Ok(()),
    )
    .await;
    assert_absent(c1, &configmaps(), Some("secretns"), "private").await;
    wait_rule(
        c2,
        "probe-configmaps",
        "to refuse both ConfigMaps of secretns under the last valid policy",
        refusing("export ConfigMap in secretns: 2".to_owned()),
    )
    .await;
    assert_absent(c1, &configmaps(), Some("secretns"), "private").await;
    assert_absent(c1, &configmaps(), Some("secretns"), "private-after").await;
    assert!(
        msg.contains("the last valid SyncPolicy default (generation 1) stays in force"),
        "{msg}"
    );

    // Loud: a Warning Event, the gauge, a log line.
    wait_for(
        "c2: an InvalidPolicy Event naming the policy in force",
        SYNC,
        || async {
            let events = events_with_reason(c2, "InvalidPolicy").await?;
            events
                .iter()
                .find(|e| {
                    e.type_.as_deref() == Some("Warning")
                        && e.message
                            .as_deref()
                            .is_some_and(|m| m.contains("(generation 1) stays in force"))
                })
                .map(|_| ())
                .ok_or_else(|| format!("{events:?}"))
        },
    )
    .await;
    assert_eq!(policy_invalid(c2), Ok(1.0));
    assert_logged(c2, "SyncPolicy default is invalid");

    // Fixed: valid again, the gauge back to 0, secretns still refused.
    apply_policy(c2, &deny_secretns(""), "True").await;
    assert_eq!(policy_invalid(c2), Ok(0.0));
    create_configmap(c2, "public", "fixed", "3");
    wait_copy(
        c1,
        &configmaps(),
        Some("public"),
        "fixed",
        "c2",
        "probe-configmaps",
        |_| Ok(()),
    )
    .await;
    assert_absent(c1, &configmaps(), Some("secretns"), "private").await;
    assert_absent(c1, &configmaps(), Some("secretns"), "private-after").await;
}

/// The agent restarts while its policy is invalid: the last valid version
/// is not stored, so none is known and the policy is closed. Nothing new
/// leaves (not even `public`, which the last valid version allowed) or
/// enters c2, and nothing that is out or in is removed: c1 keeps its copy of
/// c2's ConfigMap, c2 keeps its copy of c1's. Fixed, both flow again, and
/// `secretns` stays home.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_while_the_policy_is_invalid_closes_it_and_removes_nothing() {
    let nats = NatsServer::start().unwrap();
    let mut m = fleet(&nats, &["c1", "c2"]).await;
    for x in &m {
        create_ns(x, "secretns").await;
        create_ns(x, "public").await;
    }
    apply_policy(&m[1], &deny_secretns(""), "True").await;
    create_configmap(&m[1], "secretns", "private", "s3cret");
    create_configmap(&m[1], "public", "from-c2", "1");
    create_configmap(&m[0], "public", "from-c1", "1");
    apply_yaml(&m[0], &configmaps_rule());
    let rule_name = "probe-configmaps";
    wait_copy(
        &m[0],
        &configmaps(),
        Some("public"),
        "from-c2",
        "c2",
        rule_name,
        |_| Ok(()),
    )
    .await;
    wait_copy(
        &m[1],
        &configmaps(),
        Some("public"),
        "from-c1",
        "c1",
        rule_name,
        |_| Ok(()),
    )
    .await;
    let c = apply_policy(&m[1], &deny_secretns(TYPO), "False").await;
    assert!(
        c["message"].as_str().is_some_and(
            |m| m.contains("the last valid SyncPolicy default (generation 1) stays in force")
        ),
        "{c}"
    );

    m[1].agent.restart().unwrap();
    let (c1, c2) = (&m[0], &m[1]);
    let closed = "no valid SyncPolicy default is known to this agent";
    // The old agent's message said the last valid version stays; the new
    // one knows none.
    let ar = resource("fleetbus.io", "v1alpha1", "SyncPolicy", "syncpolicies");
    wait_for("c2: Valid=False saying none is in force", SYNC, || async {
        let o = get_dynamic(c2, &ar, None, "default")
            .await?
            .ok_or("no SyncPolicy default")?;
        let c = o.data["status"]["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == "Valid"))
            .cloned()
            .ok_or_else(|| format!("no Valid condition: {}", o.data["status"]))?;
        match c["message"].as_str() {
            Some(msg) if c["status"] == "False" && msg.contains(closed) => Ok(()),
            _ => Err(c.to_string()),
        }
    })
    .await;
    assert_eq!(policy_invalid(c2), Ok(1.0));
    create_configmap(c2, "public", "from-c2-after", "2");
    create_configmap(c1, "public", "from-c1-after", "2");
    // c2 refused both ways, by the invalid policy: its ConfigMaps of public
    // and secretns (3) out, c1's of public (2) in.
    let counts = "(export ConfigMap in public: 2, export ConfigMap in secretns: 1, import ConfigMap in public: 2)";
    let r = wait_rule(
        c2,
        rule_name,
        "to refuse everything under the closed policy",
        refusing(counts.to_owned()),
    )
    .await;
    let c = rule_condition(&r, "PolicyRefused").unwrap();
    assert!(
        c.message
            .contains("ConfigMap public/from-c2-after: refused by the invalid SyncPolicy default"),
        "{}",
        c.message
    );
    assert_absent(c1, &configmaps(), Some("public"), "from-c2-after").await;
    assert_absent(c2, &configmaps(), Some("public"), "from-c1-after").await;
    assert_absent(c1, &configmaps(), Some("secretns"), "private").await;
    // Nothing removed: neither withdrawn from c1 nor collected on c2.
    for (x, name, origin) in [(c1, "from-c2", "c2"), (c2, "from-c1", "c1")] {
        wait_copy(
            x,
            &configmaps(),
            Some("public"),
            name,
            origin,
            rule_name,
            |_| Ok(()),
        )
        .await;
    }

    // Fixed: valid again, both ways flow, secretns stays home.
    apply_policy(c2, &deny_secretns(""), "True").await;
    assert_eq!(policy_invalid(c2), Ok(0.0));
    wait_copy(
        c1,
        &configmaps(),
        Some("public"),
        "from-c2-after",
        "c2",
        rule_name,
        |_| Ok(()),
    )
    .await;
    wait_copy(
        c2,
        &configmaps(),
        Some("public"),
        "from-c1-after",
        "c1",
        rule_name,
        |_| Ok(()),
    )
    .await;
    wait_rule(
        c2,
        rule_name,
        "to refuse only secretns again",
        refusing("(export ConfigMap in secretns: 1)".to_owned()),
    )
    .await;
    assert_absent(c1, &configmaps(), Some("secretns"), "private").await;
}
