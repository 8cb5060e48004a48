//! Helpers of the rule-sync end-to-end tests: a fleet of members,
//! user actions through kubectl, reads through kube-rs, and waits on copies,
//! rule status, Events and conflict messages.
//!
//! Every wait has a deadline ([`SYNC`]) and fails with what it saw last.
//! A test asserts that something did NOT happen only after a later,
//! positive observation that would have come after it (e.g. the copy of an
//! object created afterwards arrived), never after a bare sleep.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::time::Duration;

use fleetbus_schemas::crd::ResourceSyncRule;
use fleetbus_schemas::well_known::{
    ANNOTATION_ORIGIN_CLUSTER, ANNOTATION_ORIGIN_UID, ANNOTATION_ORPHANED_FROM, ANNOTATION_RULE,
    ANNOTATION_SOURCE_HASH, LABEL_MANAGED, LABEL_MANAGED_VALUE,
};
use fleetbus_testsupport::{wait_for, NatsServer};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Event, Namespace};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, ObjectMeta, PostParams,
};
use kube::{Api, ResourceExt};

use super::rules::RuleBuilder;
use super::{wait_mesh, Member, MemberExt};

/// The kubectl every user action goes through.
pub const KUBECTL: &str = "1.33";
/// How long a change may take to reach every copy.
pub const SYNC: Duration = Duration::from_secs(20);
/// The annotation that records the orphan policy a copy was written under.
pub const ANNOTATION_ORPHAN_POLICY: &str = "fleetbus.io/orphan-policy";

/// A rule `shared-secrets` syncing every Secret of namespace `shared` from
/// every cluster to every cluster.
pub fn shared_secrets_rule() -> RuleBuilder {
    secrets_rule("shared-secrets", &["shared"])
}

/// A rule `name` for every Secret of `namespaces`, from every cluster to
/// every cluster.
pub fn secrets_rule(name: &str, namespaces: &[&str]) -> RuleBuilder {
    RuleBuilder::new(name)
        .kind("", "v1", "Secret")
        .namespaces(namespaces)
}

/// `fleetbus_sync_rejected_total{reason="<reason>"}` of `m` (0 when absent).
pub fn sync_rejected(m: &Member, reason: &str) -> f64 {
    let series = format!("fleetbus_sync_rejected_total{{reason=\"{reason}\"}}");
    super::metric_value(&m.metrics().unwrap_or_default(), &series).unwrap_or(0.0)
}

/// `fleetbus_rejected_messages_total{reason="<reason>"}` of `m`: messages
/// the trust checks dropped (0 when absent).
pub fn rejected_messages(m: &Member, reason: &str) -> f64 {
    let series = format!("fleetbus_rejected_messages_total{{reason=\"{reason}\"}}");
    super::metric_value(&m.metrics().unwrap_or_default(), &series).unwrap_or(0.0)
}

/// Starts one member per name (devcluster and agent named alike) and waits
/// until they form a mesh.
pub async fn fleet(nats: &NatsServer, names: &[&str]) -> Vec<Member> {
    let mut members = Vec::new();
    for n in names {
        members.push(Member::start(nats, n, n, &[]).await);
    }
    let refs: Vec<&Member> = members.iter().collect();
    wait_mesh(&refs, names).await;
    members
}

/// Runs kubectl against `m`; panics with stderr unless it succeeds. Returns stdout.
pub fn kubectl(m: &Member, args: &[&str]) -> String {
    let out = m.cluster.kubectl(KUBECTL, args);
    assert!(
        out.status.success(),
        "{}: kubectl {args:?} failed: {}{}",
        m.name,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `kubectl apply -f <file holding yaml>` on `m`.
pub fn apply_yaml(m: &Member, yaml: &str) -> String {
    let mut f = tempfile::Builder::new()
        .suffix(".yaml")
        .tempfile()
        .expect("temp file");
    f.write_all(yaml.as_bytes()).expect("write yaml");
    f.flush().expect("flush yaml");
    let path = f.path().display().to_string();
    kubectl(m, &["apply", "-f", &path])
}

/// Creates namespace `ns` on `m` (setup, not the behaviour under test).
pub async fn create_ns(m: &Member, ns: &str) {
    let obj = Namespace {
        metadata: ObjectMeta {
            name: Some(ns.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<Namespace>::all(m.client.clone())
        .create(&PostParams::default(), &obj)
        .await
        .unwrap_or_else(|e| panic!("{}: create namespace {ns}: {e}", m.name));
}

/// `kubectl apply` of a CustomResourceDefinition (`yaml`) on `m`, then waits
/// until kubectl can list its resource (`<plural>.<group>`, or the plural).
pub async fn apply_crd(m: &Member, yaml: &str, resource: &str) {
    apply_yaml(m, yaml);
    wait_served(m, resource).await;
}

/// A predicate: `.spec` equals `want`.
pub fn spec_is(want: serde_json::Value) -> impl Fn(&DynamicObject) -> Result<(), String> {
    move |o| {
        if o.data["spec"] == want {
            Ok(())
        } else {
            Err(format!("spec {}", o.data["spec"]))
        }
    }
}

/// An `ApiResource` for `group/version kind` served as `plural`.
pub fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

pub fn secrets() -> ApiResource {
    resource("", "v1", "Secret", "secrets")
}

pub fn rules() -> ApiResource {
    resource(
        "fleetbus.io",
        "v1alpha1",
        "ResourceSyncRule",
        "resourcesyncrules",
    )
}

/// The dynamic API of `ar` on `m`, in `ns` (cluster-scoped when `None`).
pub fn dynamic(m: &Member, ar: &ApiResource, ns: Option<&str>) -> Api<DynamicObject> {
    match ns {
        Some(ns) => Api::namespaced_with(m.client.clone(), ns, ar),
        None => Api::all_with(m.client.clone(), ar),
    }
}

/// The object, `None` when it does not exist.
pub async fn get_dynamic(
    m: &Member,
    ar: &ApiResource,
    ns: Option<&str>,
    name: &str,
) -> Result<Option<DynamicObject>, String> {
    dynamic(m, ar, ns)
        .get_opt(name)
        .await
        .map_err(|e| format!("{}: get {} {ns:?}/{name}: {e}", m.name, ar.kind))
}

/// Waits until the object exists on `m` and satisfies `pred`; returns it.
pub async fn wait_obj<P>(
    m: &Member,
    ar: &ApiResource,
    ns: Option<&str>,
    name: &str,
    what: &str,
    pred: P,
) -> DynamicObject
where
    P: Fn(&DynamicObject) -> Result<(), String>,
{
    let pred = &pred;
    let desc = format!("{}: {} {ns:?}/{name} {what}", m.name, ar.kind);
    wait_for(&desc, SYNC, || async move {
        match get_dynamic(m, ar, ns, name).await? {
            None => Err("absent".into()),
            Some(o) => pred(&o).map(|()| o.clone()).map_err(|e| {
                format!(
                    "{e}; object: {}",
                    serde_json::to_string(&o).unwrap_or_default()
                )
            }),
        }
    })
    .await
}

/// Waits until the object is a copy written by `rule` from `origin` and
/// satisfies `pred`.
pub async fn wait_copy<P>(
    m: &Member,
    ar: &ApiResource,
    ns: Option<&str>,
    name: &str,
    origin: &str,
    rule: &str,
    pred: P,
) -> DynamicObject
where
    P: Fn(&DynamicObject) -> Result<(), String>,
{
    let what = format!("to be a copy from {origin} by rule {rule}");
    wait_obj(m, ar, ns, name, &what, |o| {
        check_copy(o, origin, rule)?;
        pred(o)
    })
    .await
}

/// Waits until the object does not exist on `m`.
pub async fn wait_absent(m: &Member, ar: &ApiResource, ns: Option<&str>, name: &str) {
    let desc = format!("{}: {} {ns:?}/{name} to be gone", m.name, ar.kind);
    wait_for(&desc, SYNC, || async move {
        match get_dynamic(m, ar, ns, name).await? {
            None => Ok(()),
            Some(o) => Err(format!(
                "still there: {}",
                serde_json::to_string(&o).unwrap_or_default()
            )),
        }
    })
    .await;
}

/// Asserts that the object is absent now.
pub async fn assert_absent(m: &Member, ar: &ApiResource, ns: Option<&str>, name: &str) {
    if let Some(o) = get_dynamic(m, ar, ns, name).await.unwrap() {
        panic!(
            "{}: {} {ns:?}/{name} should not exist: {}",
            m.name,
            ar.kind,
            serde_json::to_string(&o).unwrap_or_default()
        );
    }
}

/// The copy marks of the contract: origin-cluster, origin-uid, rule,
/// source-hash annotations and the managed label.
pub fn check_copy(o: &DynamicObject, origin: &str, rule: &str) -> Result<(), String> {
    let ann = o.annotations();
    let want = |k: &str, v: &str| match ann.get(k) {
        Some(x) if x == v => Ok(()),
        other => Err(format!("annotation {k}={other:?}, want {v}")),
    };
    want(ANNOTATION_ORIGIN_CLUSTER, origin)?;
    want(ANNOTATION_RULE, rule)?;
    for k in [ANNOTATION_ORIGIN_UID, ANNOTATION_SOURCE_HASH] {
        if ann.get(k).is_none_or(|v| v.is_empty()) {
            return Err(format!("no annotation {k}"));
        }
    }
    match o.labels().get(LABEL_MANAGED) {
        Some(v) if v == LABEL_MANAGED_VALUE => Ok(()),
        other => Err(format!("label {LABEL_MANAGED}={other:?}")),
    }
}

/// No fleetbus mark at all: an original object, or an orphaned copy.
pub fn check_unmanaged(o: &DynamicObject) -> Result<(), String> {
    let marks: Vec<&String> = o
        .annotations()
        .keys()
        .chain(o.labels().keys())
        .filter(|k| k.starts_with("fleetbus.io/") && *k != ANNOTATION_ORPHANED_FROM)
        .collect();
    if marks.is_empty() {
        Ok(())
    } else {
        Err(format!("still carries {marks:?}"))
    }
}

/// A predicate: unmanaged (`check_unmanaged`), and saying it was a copy
/// from `origin` that its sink left in place.
pub fn orphaned_from(origin: &str) -> impl Fn(&DynamicObject) -> Result<(), String> + '_ {
    move |o| {
        check_unmanaged(o)?;
        match o.annotations().get(ANNOTATION_ORPHANED_FROM) {
            Some(v) if v == origin => Ok(()),
            other => Err(format!(
                "{ANNOTATION_ORPHANED_FROM} is {other:?}, not {origin:?}"
            )),
        }
    }
}

/// `.data` of a Secret or ConfigMap (`null` when absent).
pub fn data(o: &DynamicObject) -> serde_json::Value {
    o.data
        .get("data")
        .cloned()
        .unwrap_or(serde_json::Value::Null)
}

/// A predicate: `.data` equals `want`.
pub fn data_is(want: serde_json::Value) -> impl Fn(&DynamicObject) -> Result<(), String> {
    move |o| {
        let got = data(o);
        if got == want {
            Ok(())
        } else {
            Err(format!("data {got}, want {want}"))
        }
    }
}

/// Base64 of `s`, as a Secret's `.data` holds it.
pub fn b64(s: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(s)
}

/// `kubectl create secret generic <name> -n <ns> --from-literal=k=v ...` on `m`;
/// returns the created object's uid.
pub async fn create_secret(m: &Member, ns: &str, name: &str, literals: &[(&str, &str)]) -> String {
    let mut args = vec![
        "create".to_owned(),
        "secret".into(),
        "generic".into(),
        name.into(),
        "-n".into(),
        ns.into(),
    ];
    args.extend(
        literals
            .iter()
            .map(|(k, v)| format!("--from-literal={k}={v}")),
    );
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    kubectl(m, &refs);
    let o = get_dynamic(m, &secrets(), Some(ns), name)
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("{}: secret {ns}/{name} absent after create", m.name));
    o.uid().expect("uid")
}

/// The expected `.data` of a Secret created from `literals`.
pub fn secret_data(literals: &[(&str, &str)]) -> serde_json::Value {
    let map: serde_json::Map<String, serde_json::Value> = literals
        .iter()
        .map(|(k, v)| ((*k).to_owned(), serde_json::Value::String(b64(v))))
        .collect();
    serde_json::Value::Object(map)
}

/// The ResourceSyncRule `name` on `m`, if any.
pub async fn rule(m: &Member, name: &str) -> Result<Option<ResourceSyncRule>, String> {
    Api::<ResourceSyncRule>::all(m.client.clone())
        .get_opt(name)
        .await
        .map_err(|e| format!("{}: get rule {name}: {e}", m.name))
}

/// The condition `type_` of a rule's status.
pub fn rule_condition<'a>(r: &'a ResourceSyncRule, type_: &str) -> Option<&'a Condition> {
    r.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
}

/// A short text of a rule's status for failure messages.
pub fn rule_summary(r: &ResourceSyncRule) -> String {
    serde_json::to_string(&r.status).unwrap_or_default()
}

/// Waits until the rule exists on `m` and `pred` holds for it.
pub async fn wait_rule<P>(m: &Member, name: &str, what: &str, pred: P) -> ResourceSyncRule
where
    P: Fn(&ResourceSyncRule) -> Result<(), String>,
{
    let pred = &pred;
    let desc = format!("{}: rule {name} {what}", m.name);
    wait_for(&desc, SYNC, || async move {
        match rule(m, name).await? {
            None => Err("no such rule".into()),
            Some(r) => pred(&r)
                .map(|()| r.clone())
                .map_err(|e| format!("{e}; status: {}", rule_summary(&r))),
        }
    })
    .await
}

/// A predicate: condition `Ready` has `status` and `reason`.
pub fn ready_is(
    status: &'static str,
    reason: &'static str,
) -> impl Fn(&ResourceSyncRule) -> Result<(), String> {
    move |r| match rule_condition(r, "Ready") {
        Some(c) if c.status == status && c.reason == reason => Ok(()),
        other => Err(format!("Ready is {other:?}, want {status}/{reason}")),
    }
}

/// Waits until the rule `name` on `m` is a copy from `origin` (rules are
/// replicated by the built-in implicit rule).
pub async fn wait_rule_copy(m: &Member, name: &str, origin: &str) {
    let desc = format!("{}: rule {name} to arrive as a copy from {origin}", m.name);
    wait_for(&desc, SYNC, || async move {
        let r = rule(m, name).await?.ok_or("no such rule")?;
        match r.annotations().get(ANNOTATION_ORIGIN_CLUSTER) {
            Some(o) if o == origin => Ok(()),
            other => Err(format!("origin-cluster {other:?}")),
        }
    })
    .await;
}

/// Every Event on `m` (all namespaces) with `reason`.
pub async fn events_with_reason(m: &Member, reason: &str) -> Result<Vec<Event>, String> {
    Api::<Event>::all(m.client.clone())
        .list(&ListParams::default())
        .await
        .map(|l| {
            l.items
                .into_iter()
                .filter(|e| e.reason.as_deref() == Some(reason))
                .collect()
        })
        .map_err(|e| format!("{}: list events: {e}", m.name))
}

/// Deletes an object through kubectl (`kubectl delete <resource> <name> [-n ns]`).
pub fn kubectl_delete(m: &Member, resource: &str, ns: Option<&str>, name: &str) {
    let mut args = vec!["delete", resource, name];
    if let Some(ns) = ns {
        args.extend(["-n", ns]);
    }
    kubectl(m, &args);
}

/// Deletes with kube-rs (setup only).
pub async fn delete_dynamic(m: &Member, ar: &ApiResource, ns: Option<&str>, name: &str) {
    dynamic(m, ar, ns)
        .delete(name, &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("{}: delete {} {ns:?}/{name}: {e}", m.name, ar.kind));
}

/// A plain NATS subscription to every drift event of the fleet.
pub async fn subscribe_drift(nats: &NatsServer) -> async_nats::Subscriber {
    let client = async_nats::connect(nats.url()).await.expect("connect nats");
    let sub = client
        .subscribe("fleetbus.drift.>")
        .await
        .expect("subscribe");
    // Registered with the server once a round trip completed.
    client.flush().await.expect("flush");
    sub
}

/// A plain NATS subscription to `fleetbus.conflict.<sink>.>`.
pub async fn subscribe_conflicts(nats: &NatsServer, sink: &str) -> async_nats::Subscriber {
    let client = async_nats::connect(nats.url()).await.expect("connect nats");
    let sub = client
        .subscribe(format!("fleetbus.conflict.{sink}.>"))
        .await
        .expect("subscribe");
    // The subscription is registered with the server once a round trip
    // after it completed; a message published before would be missed.
    client.flush().await.expect("flush");
    sub
}

/// Reads conflict messages until one parses and satisfies `pred`; returns
/// (subject, message).
pub async fn next_conflict<P>(
    sub: &mut async_nats::Subscriber,
    what: &str,
    pred: P,
) -> (String, serde_json::Value)
where
    P: Fn(&serde_json::Value) -> bool,
{
    let mut seen = Vec::new();
    let found = tokio::time::timeout(SYNC, async {
        while let Some(msg) = sub.next().await {
            let text = String::from_utf8_lossy(&msg.payload).into_owned();
            match serde_json::from_str::<serde_json::Value>(&text) {
                Ok(v) if pred(&v) => return Some((msg.subject.to_string(), v)),
                _ => seen.push(format!("{}: {text}", msg.subject)),
            }
        }
        None
    })
    .await;
    match found {
        Ok(Some(hit)) => hit,
        _ => panic!("no conflict message {what} within {SYNC:?}; seen: {seen:#?}"),
    }
}

/// At most this many tries of one failing copy fit into `elapsed` when the
/// agent's waits double from one second (less up to a fifth of jitter),
/// whatever the attempt they start from: one per step of 0.8 s, 1.6 s,
/// 3.2 s …, plus the one under way.
pub fn backoff_tries_bound(elapsed: Duration) -> usize {
    let mut n = 1;
    let mut step = 0.8;
    let mut spent = 0.0;
    while spent <= elapsed.as_secs_f64() {
        spent += step;
        step *= 2.0;
        n += 1;
    }
    n
}

/// `GET /debug/writes` of `m`'s devcluster.
pub async fn writes(m: &Member) -> serde_json::Value {
    m.cluster.writes().await.expect("/debug/writes")
}

/// The labels of `o` as a sorted map (for messages and comparisons).
pub fn labels_of(o: &DynamicObject) -> BTreeMap<String, String> {
    o.labels().clone()
}

/// A namespaced CRD `example.com/v1 <kind>` with a status subresource and
/// free-form spec and status.
pub fn crd(kind: &str, plural: &str) -> String {
    format!(
        r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: {plural}.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {{plural: {plural}, singular: {singular}, kind: {kind}, listKind: {kind}List}}
  versions:
    - name: v1
      served: true
      storage: true
      subresources: {{status: {{}}}}
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec: {{type: object, x-kubernetes-preserve-unknown-fields: true}}
            status: {{type: object, x-kubernetes-preserve-unknown-fields: true}}
"#,
        singular = kind.to_lowercase()
    )
}

/// `kubectl apply` of the CRD on `m`, then waits until kubectl can list its kind.
pub async fn install_crd(m: &Member, kind: &str, plural: &str) {
    apply_crd(m, &crd(kind, plural), &format!("{plural}.example.com")).await;
}

/// Waits until kubectl can list `resource` (`plural.group`) on `m`.
pub async fn wait_served(m: &Member, resource: &str) {
    wait_for(&format!("{}: {resource} served", m.name), SYNC, || async {
        let out = m.cluster.kubectl(KUBECTL, &["get", resource, "-A"]);
        if out.status.success() {
            Ok(())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    })
    .await;
}

/// A SyncPolicy that lets every copy in, whoever authored its rule (the
/// built-in default keeps cluster-wide RBAC, webhooks and CRDs out): for the
/// tests that sync those kinds on purpose. Export stays the built-in default.
pub const ALLOW_ALL_IMPORTS: &str = r#"apiVersion: fleetbus.io/v1alpha1
kind: SyncPolicy
metadata:
  name: default
spec:
  import: {otherwise: Allow}
"#;

/// `kubectl apply` of a SyncPolicy on `m`, then waits until the agent has
/// read this generation (`Valid` observed at it) with `valid` status.
pub async fn apply_policy(m: &Member, yaml: &str, valid: &str) -> serde_json::Value {
    apply_yaml(m, yaml);
    wait_policy(m, valid).await
}

/// Waits until `m`'s agent has judged its SyncPolicy `default` at its
/// current generation: `Valid` with status `valid`. Returns the object.
pub async fn wait_policy(m: &Member, valid: &str) -> serde_json::Value {
    let ar = resource("fleetbus.io", "v1alpha1", "SyncPolicy", "syncpolicies");
    let what = format!("{}: SyncPolicy default Valid={valid}", m.name);
    wait_for(&what, SYNC, || async {
        let o = get_dynamic(m, &ar, None, "default")
            .await?
            .ok_or("no SyncPolicy default")?;
        let generation = o.metadata.generation;
        let c = o.data["status"]["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == "Valid"))
            .cloned()
            .ok_or_else(|| format!("no Valid condition: {}", o.data["status"]))?;
        if c["status"] == valid && c["observedGeneration"].as_i64() == generation {
            Ok(c)
        } else {
            Err(format!("{c} at generation {generation:?}"))
        }
    })
    .await
}

/// Waits until `m`'s agent says a sync pass wrote nothing and left nothing
/// queued or due (`fleetbus_sync_settled`): after that, nothing is written
/// until an input changes. For quiet-window checks that must not race a
/// coalesced write.
pub async fn wait_settled(m: &Member, deadline: std::time::Duration) {
    wait_for(&format!("{}: sync settled", m.name), deadline, || async {
        let v = m.metric("fleetbus_sync_settled")?;
        if v >= 1.0 {
            Ok(())
        } else {
            Err(format!("fleetbus_sync_settled {v}"))
        }
    })
    .await;
}
