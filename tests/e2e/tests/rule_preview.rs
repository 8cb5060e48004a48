//! `fleetbus rules preview`, with real agents and devclusters,
//! driven as a user would: write a rule file, preview it, then
//! `kubectl apply` it. The preview lists exactly the creates, updates (at the
//! paths it names) and deletes that applying the rule then performs on each
//! cluster, as kube watches on the copies record them; a preview writes
//! nothing; an invalid rule is a clear error with exit 2; `--rule NAME -f
//! source.yaml` shows what a changed source would update.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test crate

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::sync::{Arc, Mutex};

use common::rules::RuleBuilder;
use common::sync::*;
use common::{fleetbus_cli, Member, MemberExt, CONVERGE};
use fleetbus_schemas::preview::{PreviewReply, PreviewRequest, PreviewSource};
use fleetbus_schemas::subject::{CommandKey, ObjectKey, Prefix};
use fleetbus_schemas::well_known::ANNOTATION_RULE;
use fleetbus_testsupport::{wait_for, NatsServer};
use futures::StreamExt;
use kube::api::{ListParams, WatchEvent, WatchParams};
use kube::ResourceExt;
use serde_json::{json, Value};

const RULE: &str = "web";

/// Rule `web`: the Secrets `matched` selects (one match entry), from every
/// cluster, to the clusters `sinks` selects.
fn web_rule(sinks: Value, matched: Value) -> RuleBuilder {
    RuleBuilder::new(RULE)
        .kind("", "v1", "Secret")
        .spec("clusterSelector", sinks)
        .matching(matched)
}

/// v1: to `env=edge` clusters, every Secret of `a`.
fn v1() -> RuleBuilder {
    web_rule(
        json!({"matchLabels": {"env": "edge"}}),
        json!({"namespaces": ["a"]}),
    )
}

/// v2: also to `env=later` clusters (creates there), a label added to every
/// copy (updates), and Secrets labelled `drop` no longer matched (deletes).
fn v2() -> RuleBuilder {
    web_rule(
        json!({"matchExpressions": [{"key": "env", "operator": "In", "values": ["edge", "later"]}]}),
        json!({
            "namespaces": ["a"],
            "labels": [{"matchExpressions": [{"key": "drop", "operator": "DoesNotExist"}]}],
        }),
    )
    .mutations(json!({"labels": {"add": {"tier": "gold"}}}))
}

fn temp_file(text: &str) -> tempfile::NamedTempFile {
    let mut f = tempfile::Builder::new().suffix(".yaml").tempfile().unwrap();
    f.write_all(text.as_bytes()).unwrap();
    f.flush().unwrap();
    f
}

async fn preview(nats: &NatsServer, args: &[&str]) -> (Option<i32>, String, String) {
    let mut all = vec!["rules", "preview"];
    all.extend_from_slice(args);
    fleetbus_cli(nats, &all).await
}

/// `-o json` of a preview: each answering cluster's reply by name.
fn replies(out: &str) -> BTreeMap<String, Value> {
    let v: Value = serde_json::from_str(out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(v["errors"], json!([]), "{v:#}");
    v["clusters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["cluster"].as_str().unwrap().to_owned(), r.clone()))
        .collect()
}

/// (verb, name) → changed paths: what a reply says happens in namespace `a`.
type Effects = BTreeMap<(String, String), BTreeSet<String>>;

fn predicted(reply: &Value) -> Effects {
    let mut out = Effects::new();
    let name = |o: &Value| o["object"]["name"].as_str().unwrap().to_owned();
    for c in reply["creates"].as_array().unwrap() {
        out.insert(("ADDED".into(), name(c)), BTreeSet::new());
    }
    for u in reply["updates"].as_array().unwrap() {
        let paths = u["changes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["path"].as_str().unwrap().to_owned())
            .collect();
        out.insert(("MODIFIED".into(), name(u)), paths);
    }
    for d in reply["deletes"].as_array().unwrap() {
        assert_eq!(d["action"], "Delete", "{reply:#}");
        out.insert(("DELETED".into(), name(d)), BTreeSet::new());
    }
    assert_eq!(reply["conflicts"], json!([]), "{reply:#}");
    assert_eq!(reply["errors"], json!([]), "{reply:#}");
    out
}

/// Leaf differences as the preview's diff names them: maps recursed into,
/// anything else (and a key only one side has) one path.
fn leaf_paths(path: &str, a: Option<&Value>, b: Option<&Value>, out: &mut BTreeSet<String>) {
    match (a, b) {
        (Some(Value::Object(x)), Some(Value::Object(y))) => {
            let keys: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                let p = format!("{path}/{}", k.replace('~', "~0").replace('/', "~1"));
                leaf_paths(&p, x.get(k), y.get(k), out);
            }
        }
        (a, b) if a != b => {
            out.insert(path.to_owned());
        }
        _ => {}
    }
}

/// What a write changed: leaf paths, server-kept metadata aside.
fn changed(before: &Value, after: &Value) -> BTreeSet<String> {
    let strip = |v: &Value| {
        let mut v = v.clone();
        // A list's items carry no apiVersion and kind; watch events do.
        if let Some(top) = v.as_object_mut() {
            top.remove("apiVersion");
            top.remove("kind");
        }
        if let Some(m) = v["metadata"].as_object_mut() {
            for f in ["resourceVersion", "managedFields", "generation"] {
                m.remove(f);
            }
        }
        v
    };
    let mut out = BTreeSet::new();
    leaf_paths("", Some(&strip(before)), Some(&strip(after)), &mut out);
    out
}

/// Records what happens to the managed copies of Secrets in namespace `a` on
/// `m` from now on, as a kube watch sees it.
struct Recorder {
    effects: Arc<Mutex<Effects>>,
    last: Arc<Mutex<BTreeMap<String, Value>>>,
}

impl Recorder {
    async fn start(m: &Member) -> Recorder {
        Recorder::of(m, &secrets()).await
    }

    /// As `start`, for the copies of kind `ar`.
    async fn of(m: &Member, ar: &kube::api::ApiResource) -> Recorder {
        let api = dynamic(m, ar, Some("a"));
        let list = api.list(&ListParams::default()).await.unwrap();
        let rv = list.metadata.resource_version.clone().unwrap();
        let last: BTreeMap<String, Value> = list
            .items
            .iter()
            .map(|o| (o.name_any(), serde_json::to_value(o).unwrap()))
            .collect();
        let effects = Arc::new(Mutex::new(Effects::new()));
        let last = Arc::new(Mutex::new(last));
        let mut stream = api
            .watch(&WatchParams::default(), &rv)
            .await
            .unwrap()
            .boxed();
        let (e, l) = (effects.clone(), last.clone());
        tokio::spawn(async move {
            while let Some(ev) = stream.next().await {
                let (verb, o) = match ev.unwrap() {
                    WatchEvent::Added(o) => ("ADDED", o),
                    WatchEvent::Modified(o) => ("MODIFIED", o),
                    WatchEvent::Deleted(o) => ("DELETED", o),
                    _ => continue,
                };
                let managed =
                    o.annotations().get(ANNOTATION_RULE).map(String::as_str) == Some(RULE);
                let name = o.name_any();
                let now = serde_json::to_value(&o).unwrap();
                let before = l.lock().unwrap().insert(name.clone(), now.clone());
                // A delete in progress (finalizers) is the delete's, not an update.
                if !managed || (verb == "MODIFIED" && o.metadata.deletion_timestamp.is_some()) {
                    continue;
                }
                let paths = match (verb, before) {
                    ("MODIFIED", Some(before)) => changed(&before, &now),
                    _ => BTreeSet::new(),
                };
                e.lock()
                    .unwrap()
                    .entry((verb.to_owned(), name))
                    .or_default()
                    .extend(paths);
            }
        });
        Recorder { effects, last }
    }

    fn effects(&self) -> Effects {
        self.effects.lock().unwrap().clone()
    }

    /// Waits until the watch of `cluster` has seen exactly `want`.
    async fn wait_effects(&self, cluster: &str, want: &Effects) {
        let what = format!("{cluster}'s watch to see what was previewed");
        wait_for(&what, SYNC, || async {
            (self.effects() == *want)
                .then_some(())
                .ok_or(format!("seen {:?}, previewed {want:?}", self.effects()))
        })
        .await;
    }

    /// The copy of `name` as the watch last saw it.
    fn seen(&self, name: &str) -> Option<Value> {
        self.last.lock().unwrap().get(name).cloned()
    }
}

/// `rules preview -f <path> -o json`, which must list changes (exit 1) and
/// write nothing on `m`: each answering cluster's reply by name, and the
/// output.
async fn preview_changes(
    nats: &NatsServer,
    m: &[Member],
    path: &str,
) -> (BTreeMap<String, Value>, String) {
    let before = state(m).await;
    let (code, out, err) = preview(nats, &["-f", path, "-o", "json"]).await;
    assert_eq!(code, Some(1), "changes exit 1: {out}{err}");
    assert_eq!(state(m).await, before, "a preview wrote something");
    (replies(&out), out)
}

/// resourceVersions of every Secret in `a` and of the rule, and the writes
/// of copies' kinds each devcluster counted.
async fn state(m: &[Member]) -> Vec<(String, Value, BTreeMap<String, String>)> {
    let mut out = Vec::new();
    for x in m {
        let mut rvs = BTreeMap::new();
        for o in dynamic(x, &secrets(), Some("a"))
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
        {
            rvs.insert(o.name_any(), o.resource_version().unwrap());
        }
        if let Some(r) = get_dynamic(x, &rules(), None, RULE).await.unwrap() {
            rvs.insert("rule".into(), r.resource_version().unwrap());
        }
        // Of the kinds a preview could write (its copies', the namespaces
        // they need): status writes of the agents' own go on meanwhile.
        let w = writes(x).await;
        let copies = ["core/secrets", "core/configmaps", "core/namespaces"].map(|k| w[k].clone());
        out.push((x.name.clone(), json!(copies), rvs));
    }
    out
}

async fn label(m: &[Member], cluster: &str, value: &str) {
    let x = m.iter().find(|x| x.name == cluster).unwrap();
    kubectl(
        x,
        &[
            "label",
            "clusters.fleetbus.io",
            cluster,
            &format!("env={value}"),
        ],
    );
    for seer in m {
        let what = format!("{}: {cluster} labelled env={value}", seer.name);
        wait_for(&what, SYNC, || async {
            let c = seer
                .clusters()
                .get(cluster)
                .await
                .map_err(|e| e.to_string())?;
            match c.labels().get("env") {
                Some(v) if v == value => Ok(()),
                other => Err(format!("{other:?}")),
            }
        })
        .await;
    }
}

fn tier_gold(o: &kube::api::DynamicObject) -> Result<(), String> {
    match o.labels().get("tier") {
        Some(v) if v == "gold" => Ok(()),
        other => Err(format!("tier={other:?}")),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_preview_lists_what_applying_the_rule_does_and_writes_nothing() {
    let nats = NatsServer::start().unwrap();
    let m = fleet(&nats, &["c1", "c2", "c3"]).await;
    let (c1, c2, c3) = (&m[0], &m[1], &m[2]);
    for x in &m {
        create_ns(x, "a").await;
    }
    label(&m, "c2", "edge").await;
    label(&m, "c3", "later").await;
    create_secret(c1, "a", "keep", &[("k", "v1")]).await;
    create_secret(c1, "a", "drop", &[("k", "v1")]).await;
    kubectl(c1, &["-n", "a", "label", "secret", "drop", "drop=yes"]);
    apply_yaml(c1, &v1().yaml());
    for name in ["keep", "drop"] {
        wait_copy(c2, &secrets(), Some("a"), name, "c1", RULE, |_| Ok(())).await;
    }
    wait_rule(c3, RULE, "replicated", |_| Ok(())).await;

    // The preview, which writes nothing anywhere.
    let v2_file = temp_file(&v2().yaml());
    let v2_path = v2_file.path().to_str().unwrap();
    let (said, out) = preview_changes(&nats, &m, v2_path).await;
    assert_eq!(said.keys().collect::<Vec<_>>(), ["c1", "c2", "c3"], "{out}");
    let want: BTreeMap<&str, Effects> = said
        .iter()
        .map(|(c, r)| (c.as_str(), predicted(r)))
        .collect();
    // What the scenario makes of it, so a preview that lists nothing cannot pass.
    assert!(want["c1"].is_empty(), "{out}");
    let keys = |c: &str| want[c].keys().cloned().collect::<Vec<_>>();
    let k = |v: &str, n: &str| (v.to_owned(), n.to_owned());
    assert_eq!(
        keys("c2"),
        [k("DELETED", "drop"), k("MODIFIED", "keep")],
        "{out}"
    );
    assert_eq!(keys("c3"), [k("ADDED", "keep")], "{out}");
    assert!(
        want["c2"][&k("MODIFIED", "keep")].contains("/metadata/labels/tier"),
        "{out}"
    );
    // The text form says the same per cluster.
    let (code, text, _) = preview(&nats, &["-f", v2_path]).await;
    assert_eq!(code, Some(1));
    for line in [
        "cluster c2: 0 to create, 1 to update, 1 to delete",
        "~ update v1/Secret/a/keep (from c1)",
        "    /metadata/labels/tier: (absent) -> \"gold\"",
        "- delete v1/Secret/a/drop",
        "cluster c3: 1 to create, 0 to update, 0 to delete",
        "+ create v1/Secret/a/keep (from c1)",
    ] {
        assert!(text.contains(line), "{line:?} not in:\n{text}");
    }

    // Applying it does exactly that.
    let watches = [Recorder::start(c2).await, Recorder::start(c3).await];
    kubectl(c1, &["apply", "-f", v2_path]);
    wait_copy(c2, &secrets(), Some("a"), "keep", "c1", RULE, tier_gold).await;
    wait_copy(c3, &secrets(), Some("a"), "keep", "c1", RULE, tier_gold).await;
    wait_absent(c2, &secrets(), Some("a"), "drop").await;
    // Until each watch has seen the end state too.
    for (w, cluster) in watches.iter().zip(["c2", "c3"]) {
        wait_for(
            &format!("{cluster}'s watch to see the new state"),
            SYNC,
            || async {
                let keep = w.seen("keep").ok_or("no keep")?;
                let gold = keep["metadata"]["labels"]["tier"] == "gold";
                let dropped =
                    w.effects().keys().all(|(_, n)| n != "drop") || w.seen("drop").is_some();
                (gold && dropped && w.effects() == want[cluster])
                    .then_some(())
                    .ok_or(format!(
                        "seen {:?}, previewed {:?}",
                        w.effects(),
                        want[cluster]
                    ))
            },
        )
        .await;
    }
    assert_absent(c3, &secrets(), Some("a"), "drop").await;

    // Applied, the same rule previews no change.
    let (code, out, err) = preview(&nats, &["-f", v2_path, "-o", "json"]).await;
    assert_eq!(code, Some(0), "{out}{err}");
    for (c, r) in replies(&out) {
        assert_eq!(predicted(&r), Effects::new(), "{c}: {r:#}");
        assert!(r["unchanged"].as_u64().unwrap() <= 1, "{c}: {r:#}");
    }

    // A changed source: updates on both sinks, values redacted, nothing written.
    let keep = get_dynamic(c1, &secrets(), Some("a"), "keep")
        .await
        .unwrap()
        .unwrap();
    let mut changed_src = serde_json::to_value(&keep).unwrap();
    changed_src["data"]["k"] = json!(b64("v2-secret"));
    let src_file = temp_file(&serde_json::to_string(&changed_src).unwrap());
    let src_path = src_file.path().to_str().unwrap();
    let before = state(&m).await;
    let (code, out, err) = preview(
        &nats,
        &[
            "--rule", RULE, "-f", src_path, "--origin", "c1", "-o", "json",
        ],
    )
    .await;
    assert_eq!(code, Some(1), "{out}{err}");
    assert_eq!(state(&m).await, before, "a preview wrote something");
    assert!(
        !out.contains(&b64("v2-secret")) && !out.contains(&b64("v1")),
        "{out}"
    );
    for (c, r) in replies(&out) {
        let effects = predicted(&r);
        if c == "c1" {
            assert!(effects.is_empty(), "{r:#}");
            continue;
        }
        let paths = &effects[&k("MODIFIED", "keep")];
        assert!(paths.contains("/data/k"), "{c}: {r:#}");
        assert_eq!(effects.len(), 1, "{c}: {r:#}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_rule_is_a_clear_error_and_exits_2() {
    let nats = NatsServer::start().unwrap();
    let mut m = fleet(&nats, &["c1", "c2"]).await;
    // Agents answer once they have read their fleet, rules and policy; a
    // rule name no cluster has is refused by each, and exits 2.
    wait_for("every agent answers previews", SYNC, || async {
        let (code, out, err) = preview(&nats, &["--rule", "nosuch"]).await;
        let both = ["c1", "c2"].iter().all(|c| {
            out.contains(&format!(
                "cluster {c}: refused: no rule nosuch on this cluster"
            ))
        });
        (both && code == Some(2))
            .then_some(())
            .ok_or(format!("{code:?} {out}{err}"))
    })
    .await;
    let bad_kind = temp_file(&v1().kind("", "v1", "not a kind").yaml());
    let (code, out, err) = preview(&nats, &["-f", bad_kind.path().to_str().unwrap()]).await;
    assert_eq!(code, Some(2), "{out}{err}");
    assert!(err.contains("invalid rule: spec.groupVersionKind"), "{err}");
    let bad_template = web_rule(json!({}), json!({"namespaces": ["a"]})).mutations(json!({
        "overrides": [{"type": "replace", "path": "/data/x", "value": "{{ .Object.metadata.name"}]
    }));
    let bad_template = temp_file(&bad_template.yaml());
    let (code, out, err) = preview(&nats, &["-f", bad_template.path().to_str().unwrap()]).await;
    assert_eq!(code, Some(2), "{out}{err}");
    assert!(err.contains("unbalanced template delimiters"), "{err}");
    // A health expression only the agents find wrong (they compile it as
    // they compile every rule): each refuses, saying why.
    let bad_cel = v1().spec("health", json!({"current": "object.status.phase =="}));
    let bad_cel = temp_file(&bad_cel.yaml());
    let (code, out, err) = preview(&nats, &["-f", bad_cel.path().to_str().unwrap()]).await;
    assert_eq!(code, Some(2), "{out}{err}");
    for c in ["c1", "c2"] {
        assert!(
            out.contains(&format!("cluster {c}: refused: invalid rule {RULE}: ")),
            "{out}{err}"
        );
    }
    assert!(out.contains("does not compile"), "{out}");
    // A cluster that does not answer is named: one gone from the registry's
    // view, and one asked by name that never was.
    m[1].agent.kill9();
    let (code, out, _) = preview(&nats, &["--rule", "nosuch", "--timeout", "2s"]).await;
    assert_eq!(code, Some(2));
    assert!(out.contains("cluster c1: refused: no rule nosuch"), "{out}");
    assert!(
        out.contains("cluster c2: error: no agent answers for cluster c2"),
        "{out}"
    );
    // A new rule: c2 is asked for its sources even when only c1 is previewed.
    let new_rule = temp_file(&v1().yaml());
    let path = new_rule.path().to_str().unwrap();
    let (code, out, _) = preview(&nats, &["-f", path, "--cluster", "c1", "--timeout", "2s"]).await;
    assert_eq!(code, Some(2), "{out}");
    assert!(
        out.contains("cluster c2: error: preview-source: no agent answers for cluster c2"),
        "{out}"
    );
    let (code, out, _) = preview(
        &nats,
        &["--rule", RULE, "--cluster", "c9", "--timeout", "2s"],
    )
    .await;
    assert_eq!(code, Some(2));
    assert!(
        out.contains("cluster c9: error: no agent answers for cluster c9"),
        "{out}"
    );
}

/// One token every 5 s, 6 at once: the hostile requests below are each
/// answered on its merits, then a flood finds the bucket empty.
const RATE: &[&str] = &["--command-rate", "0.2", "--command-burst", "6"];

/// Sends `payload` to c1's preview subject as a plain NATS client would.
async fn raw(client: &async_nats::Client, payload: Vec<u8>) -> PreviewReply {
    raw_to(client, "c1", payload).await
}

/// Sends `payload` to `cluster`'s preview subject.
async fn raw_to(client: &async_nats::Client, cluster: &str, payload: Vec<u8>) -> PreviewReply {
    let subject = CommandKey::preview(cluster).to_subject(&Prefix::default());
    let msg = tokio::time::timeout(SYNC, client.request(subject, payload.into()))
        .await
        .expect("no reply in time")
        .expect("request");
    PreviewReply::decode(&msg.payload).expect("a preview reply")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_requests_are_refused_with_why_and_a_flood_is_rate_limited() {
    let nats = NatsServer::start().unwrap();
    let mut c1 = Member::start(&nats, "c1", "c1", RATE).await;
    c1.wait_ready().await;
    let client = async_nats::connect(nats.url()).await.unwrap();
    let ask = PreviewRequest {
        rule_name: Some("nosuch".into()),
        ..PreviewRequest::default()
    };
    wait_for("c1 answers previews", CONVERGE, || async {
        let subject = CommandKey::preview("c1").to_subject(&Prefix::default());
        let msg = client
            .request(subject, ask.encode().unwrap().into())
            .await
            .map_err(|e| e.to_string())?;
        let reply = PreviewReply::decode(&msg.payload).map_err(|e| e.to_string())?;
        match reply.error.as_deref() {
            Some("no rule nosuch on this cluster") => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;

    let refused = |r: &PreviewReply, want: &str| {
        let e = r.error.as_deref().unwrap_or_default();
        assert!(e.contains(want), "{e:?} does not say {want:?}: {r:?}");
        assert!(!r.has_changes() && r.retry_after_ms.is_none(), "{r:?}");
    };
    refused(
        &raw(&client, b"\xff garbage".to_vec()).await,
        "cannot read the request",
    );
    // Nested past serde_json's limit: an error, not a stack overflow.
    let deep = format!(
        r#"{{"schema":"fleetbus.io/preview-request/v1","rule":{}{}}}"#,
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    refused(
        &raw(&client, deep.into_bytes()).await,
        "cannot read the request",
    );
    // A huge rule: refused for what it is, nothing compiled.
    let huge = json!({"apiVersion": "fleetbus.io/v1alpha1", "kind": "ResourceSyncRule",
        "metadata": {"name": "huge"},
        "spec": {"groupVersionKind": {"version": "v1", "kind": "Secret"},
                 "health": {"current": "x".repeat(600_000)}}});
    let req = PreviewRequest {
        rule: Some(huge),
        ..PreviewRequest::default()
    };
    refused(
        &raw(&client, req.encode().unwrap()).await,
        "invalid rule huge",
    );
    // A source object forged for a subject-like origin.
    let forged = PreviewRequest {
        rule_name: Some("nosuch".into()),
        source: Some(PreviewSource {
            origin: "c2.>".into(),
            object: json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}}),
        }),
        ..PreviewRequest::default()
    };
    refused(
        &raw(&client, forged.encode().unwrap()).await,
        "origin is not a cluster name",
    );

    // A flood: answered, nearly all refused for rate with when to retry.
    let payload = ask.encode().unwrap();
    let mut flood = futures::stream::iter(0..100)
        .map(|_| raw(&client, payload.clone()))
        .buffer_unordered(50);
    let mut limited = 0;
    while let Some(r) = flood.next().await {
        if r.retry_after_ms.is_some() {
            refused(
                &PreviewReply {
                    retry_after_ms: None,
                    ..r
                },
                "rate limited",
            );
            limited += 1;
        }
    }
    assert!(limited >= 95, "{limited} of 100 refused for rate");
    // The CLI, refused for rate with when to ask again, asks again then
    // (the bucket gives one request per 5 s) and shows the agent's answer.
    let (code, out, _) = preview(&nats, &["--rule", "nosuch"]).await;
    assert_eq!(code, Some(2));
    assert!(
        out.contains("cluster c1: refused: no rule nosuch on this cluster"),
        "{out}"
    );
    // Its own bucket: a correction still goes through.
    let (code, out, err) = fleetbus_cli(&nats, &["drift", "correct", "--cluster", "c1"]).await;
    assert_eq!(code, Some(0), "{out}{err}");
    let series = "fleetbus_commands_rejected_total{verb=\"preview\",reason=\"rate\"}";
    wait_for("c1 counts the refusals", CONVERGE, || async {
        match c1.metric(series)? {
            n if n >= limited as f64 => Ok(()),
            n => Err(format!("{series} = {n}")),
        }
    })
    .await;
    // preview-source, with the preview bucket empty: its own.
    hostile_preview_sources(&c1, &client).await;
}

/// Sends `payload` to c1's preview-source subject as a plain NATS client would.
async fn raw_source(
    client: &async_nats::Client,
    payload: Vec<u8>,
) -> fleetbus_schemas::preview::PreviewSourceReply {
    let subject = CommandKey::preview_source("c1").to_subject(&Prefix::default());
    let msg = tokio::time::timeout(SYNC, client.request(subject, payload.into()))
        .await
        .expect("no reply in time")
        .expect("request");
    fleetbus_schemas::preview::PreviewSourceReply::decode(&msg.payload).expect("a reply")
}

/// `preview-source` attacked: garbage, a forged paging token and a kind the
/// API server does not serve are refused with why; a kind no rule has c1
/// watch is read with one LIST; a flood finds its own bucket empty. Called
/// with the preview bucket empty: these are answered from their own.
async fn hostile_preview_sources(c1: &Member, client: &async_nats::Client) {
    use fleetbus_schemas::preview::PreviewSourceRequest;
    let cm_rule = |kind: &str| {
        json!({"apiVersion": "fleetbus.io/v1alpha1", "kind": "ResourceSyncRule",
            "metadata": {"name": "cms"},
            "spec": {"groupVersionKind": {"version": "v1", "kind": kind},
                     "rules": [{"match": [{"namespaces": ["default"]}]}]}})
    };
    let ask = |kind: &str, after: Option<&str>| PreviewSourceRequest {
        rule: cm_rule(kind),
        author: None,
        after: after.map(str::to_owned),
    };
    let refused = |r: &fleetbus_schemas::preview::PreviewSourceReply, want: &str| {
        let e = r.error.as_deref().unwrap_or_default();
        assert!(e.contains(want), "{e:?} does not say {want:?}: {r:?}");
        assert!(r.envelopes.is_empty(), "{r:?}");
    };
    refused(
        &raw_source(client, b"\x00 garbage".to_vec()).await,
        "cannot read the request",
    );
    let bad_token = ask("ConfigMap", Some("../../etc/passwd"));
    refused(
        &raw_source(client, bad_token.encode().unwrap()).await,
        "invalid paging token",
    );
    let unserved = ask("NoSuchKind", None);
    refused(
        &raw_source(client, unserved.encode().unwrap()).await,
        "kind v1 NoSuchKind is not served",
    );
    // No rule takes ConfigMaps: one LIST finds c1's.
    kubectl(
        c1,
        &[
            "-n",
            "default",
            "create",
            "configmap",
            "listed",
            "--from-literal=k=v",
        ],
    );
    let listed = raw_source(client, ask("ConfigMap", None).encode().unwrap()).await;
    assert_eq!(listed.error, None, "{listed:?}");
    assert!(
        listed
            .envelopes
            .iter()
            .any(|e| e.subject.ends_with(".ConfigMap.default.listed")),
        "{listed:?}"
    );
    // A flood: its own bucket.
    let payload = ask("ConfigMap", None).encode().unwrap();
    let mut flood = futures::stream::iter(0..40)
        .map(|_| raw_source(client, payload.clone()))
        .buffer_unordered(20);
    let mut limited = 0;
    while let Some(r) = flood.next().await {
        if r.retry_after_ms.is_some() {
            refused(&r, "rate limited");
            limited += 1;
        }
    }
    assert!(limited >= 35, "{limited} of 40 refused for rate");
    let series = "fleetbus_commands_rejected_total{verb=\"preview-source\",reason=\"rate\"}";
    c1.wait_metric_at_least(series, limited as f64).await;
}

/// Rule `stacks`: Bundles unwrapped on every cluster `sinks` selects.
fn stacks_rule(sinks: Value) -> String {
    RuleBuilder::new("stacks")
        .kind("fleetbus.io", "v1alpha1", "Bundle")
        .spec("unwrap", true.into())
        .spec("clusterSelector", sinks)
        .yaml()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unwrap_rule_is_previewed_from_its_bundles_manifests() {
    let nats = NatsServer::start().unwrap();
    let m = fleet(&nats, &["c1", "c2"]).await;
    let (c1, c2) = (&m[0], &m[1]);
    for x in &m {
        create_ns(x, "apps").await;
    }
    apply_yaml(c1, &stacks_rule(json!({})));
    apply_yaml(
        c1,
        r#"apiVersion: fleetbus.io/v1alpha1
kind: Bundle
metadata: {name: stack, namespace: apps}
spec:
  manifests:
    - apiVersion: v1
      kind: ConfigMap
      metadata: {name: cfg, namespace: apps}
      data: {k: v}
"#,
    );
    let config_maps = kube::api::ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
    wait_copy(
        c2,
        &config_maps,
        Some("apps"),
        "cfg",
        "c1",
        "stacks",
        |_| Ok(()),
    )
    .await;

    // As it is: the manifest's copy is there, nothing to do (not the Bundle
    // itself as a copy).
    let (code, out, err) = preview(&nats, &["--rule", "stacks", "-o", "json"]).await;
    assert_eq!(code, Some(0), "{out}{err}");
    let said = replies(&out);
    assert_eq!(said["c2"]["unchanged"], 1, "{out}");
    assert_eq!(predicted(&said["c2"]), Effects::new(), "{out}");

    // No longer selecting c2: its copy of the manifest goes, and does.
    let narrowed = temp_file(&stacks_rule(json!({"matchLabels": {"nowhere": "here"}})));
    let path = narrowed.path().to_str().unwrap();
    let (said, out) = preview_changes(&nats, &m, path).await;
    let k = |v: &str, n: &str| (v.to_owned(), n.to_owned());
    let c2_effects: Vec<_> = predicted(&said["c2"]).into_keys().collect();
    assert_eq!(c2_effects, [k("DELETED", "cfg")], "{out}");
    assert_eq!(
        said["c2"]["deletes"][0]["object"]["kind"], "ConfigMap",
        "{out}"
    );
    assert_eq!(predicted(&said["c1"]), Effects::new(), "{out}");
    kubectl(c1, &["apply", "-f", path]);
    wait_absent(c2, &config_maps, Some("apps"), "cfg").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_rule_is_previewed_as_its_author_s_against_each_sinks_policy() {
    let nats = NatsServer::start().unwrap();
    let m = fleet(&nats, &["c1", "c2"]).await;
    let (c1, c2) = (&m[0], &m[1]);
    for x in &m {
        create_ns(x, "a").await;
    }
    // c2 takes Secrets only from rules created on c1.
    apply_policy(
        c2,
        r#"apiVersion: fleetbus.io/v1alpha1
kind: SyncPolicy
metadata: {name: default}
spec:
  import:
    rules:
      - {action: Allow, kinds: [{kind: Secret}], authors: [c1]}
    otherwise: Deny
"#,
        "True",
    )
    .await;
    create_secret(c1, "a", "s", &[("k", "v")]).await;
    // A current rule has c1 publish its Secrets of `a`, to nobody yet.
    apply_yaml(
        c1,
        &web_rule(
            json!({"matchLabels": {"nowhere": "here"}}),
            json!({"namespaces": ["a"]}),
        )
        .yaml(),
    );
    wait_rule(c2, RULE, "replicated", |_| Ok(())).await;

    let everywhere = web_rule(json!({}), json!({"namespaces": ["a"]})).name("everywhere");
    let new_rule = temp_file(&everywhere.yaml());
    let path = new_rule.path().to_str().unwrap();
    let ask = |author: Option<&'static str>| {
        let nats = &nats;
        async move {
            let mut args = vec!["-f", path, "-o", "json"];
            args.extend(author.map(|a| ["--author", a]).into_iter().flatten());
            wait_for("c2 to preview the new rule", SYNC, || {
                let args = args.clone();
                async move {
                    let (_, out, err) = preview(nats, &args).await;
                    let v: Value =
                        serde_json::from_str(&out).map_err(|e| format!("{e}: {out}{err}"))?;
                    let c2 = v["clusters"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .find(|r| r["cluster"] == "c2");
                    match c2 {
                        Some(r)
                            if r["creates"].as_array().is_some_and(|c| !c.is_empty())
                                || r["errors"].as_array().is_some_and(|e| !e.is_empty()) =>
                        {
                            Ok(r.clone())
                        }
                        other => Err(format!("{other:?}")),
                    }
                }
            })
            .await
        }
    };
    // Taken as c2's own rule, the policy refuses its copy.
    let own = ask(None).await;
    assert_eq!(own["creates"], json!([]), "{own:#}");
    let refused = own["errors"][0]["message"].as_str().unwrap();
    assert!(
        refused.contains("refused by this cluster's SyncPolicy"),
        "{own:#}"
    );
    // Created on c1, as it will be: the copy is a create, and it is.
    let as_c1 = ask(Some("c1")).await;
    assert_eq!(as_c1["errors"], json!([]), "{as_c1:#}");
    assert_eq!(as_c1["creates"][0]["object"]["name"], "s", "{as_c1:#}");
    kubectl(c1, &["apply", "-f", path]);
    wait_copy(c2, &secrets(), Some("a"), "s", "c1", "everywhere", |_| {
        Ok(())
    })
    .await;
}

/// Rule `base`: c1's Secrets of namespace `b` everywhere, so every agent
/// follows Secrets while no rule selects those of `a`.
fn base_rule() -> String {
    web_rule(json!({}), json!({"namespaces": ["b"]}))
        .name("base")
        .yaml()
}

/// The new rule `web`: the Secrets labelled `app=new` of `namespaces`, to
/// every cluster.
fn new_rule(namespaces: &[&str]) -> RuleBuilder {
    web_rule(
        json!({}),
        json!({"namespaces": namespaces, "labels": [{"matchLabels": {"app": "new"}}]}),
    )
}

async fn new_secret(m: &Member, ns: &str, name: &str, value: &str) {
    create_secret(m, ns, name, &[("k", value)]).await;
    kubectl(m, &["-n", ns, "label", "secret", name, "app=new"]);
}

/// The `creates` of `reply` by name, each from c1.
fn creates_from_c1(reply: &Value) -> BTreeSet<String> {
    reply["creates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            assert_eq!(c["origin"], "c1", "{reply:#}");
            c["object"]["name"].as_str().unwrap().to_owned()
        })
        .collect()
}

/// The most common preview: a brand-new rule selecting objects on c1
/// that no rule has c1 publish yet. The CLI asks c1 (`preview-source`) and
/// hands its envelopes to every sink: c2 and c3 list exactly the creates
/// `kubectl apply -f` then performs, and say nothing is missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_rule_s_preview_sees_the_objects_no_origin_publishes_yet() {
    let nats = NatsServer::start().unwrap();
    let m = fleet(&nats, &["c1", "c2", "c3"]).await;
    let (c1, c2, c3) = (&m[0], &m[1], &m[2]);
    for x in &m {
        create_ns(x, "a").await;
        create_ns(x, "b").await;
    }
    new_secret(c1, "a", "one", "v1").await;
    new_secret(c1, "a", "two", "v2").await;
    // Not labelled: the new rule does not select it.
    create_secret(c1, "a", "other", &[("k", "v")]).await;
    create_secret(c1, "b", "base", &[("k", "v")]).await;
    apply_yaml(c1, &base_rule());
    for x in [c2, c3] {
        wait_copy(x, &secrets(), Some("b"), "base", "c1", "base", |_| Ok(())).await;
    }

    let rule = temp_file(&new_rule(&["a"]).yaml());
    let path = rule.path().to_str().unwrap();
    let (said, out) = preview_changes(&nats, &m, path).await;
    assert_eq!(said.keys().collect::<Vec<_>>(), ["c1", "c2", "c3"], "{out}");
    let both: BTreeSet<String> = ["one", "two"].map(String::from).into();
    for c in ["c2", "c3"] {
        assert_eq!(creates_from_c1(&said[c]), both, "{c}: {out}");
        assert_eq!(said[c]["incomplete"], json!([]), "{c}: {out}");
    }
    assert_eq!(predicted(&said["c1"]), Effects::new(), "{out}");
    // Nothing of it is on the bus: the objects came from c1's answer.
    assert!(!out.contains("\"other\""), "{out}");
    let want: BTreeMap<&str, Effects> = ["c2", "c3"]
        .iter()
        .map(|c| (*c, predicted(&said[*c])))
        .collect();

    // Applying it does exactly that: copies of one and two, as c1 has them.
    let watches = [Recorder::start(c2).await, Recorder::start(c3).await];
    kubectl(c1, &["apply", "-f", path]);
    for (w, x) in watches.iter().zip([c2, c3]) {
        for (name, value) in [("one", "v1"), ("two", "v2")] {
            wait_copy(x, &secrets(), Some("a"), name, "c1", RULE, |o| {
                (o.data["data"]["k"] == b64(value))
                    .then_some(())
                    .ok_or(format!("{:?}", o.data["data"]))
            })
            .await;
        }
        w.wait_effects(&x.name, &want[x.name.as_str()]).await;
        assert_absent(x, &secrets(), Some("a"), "other").await;
    }
}

/// c1's SyncPolicy: no Secret of `hidden` is exported, whoever asks.
const HIDE: &str = r#"apiVersion: fleetbus.io/v1alpha1
kind: SyncPolicy
metadata: {name: default}
spec:
  export:
    rules:
      - {action: Deny, kinds: [{kind: Secret}], namespaces: [hidden]}
    otherwise: Allow
"#;

const OPEN_VALUE: &str = "open-value-4242";
const HIDDEN_VALUE: &str = "hidden-value-4242";

/// `name`'s signing key and its certificate's serial (the key id) from the fleet dir.
fn signer_of(dir: &std::path::Path, name: &str) -> (fleetbus_schemas::trust::ClusterKeys, String) {
    use fleetbus_schemas::trust::{ClusterKeys, SignedCertificate};
    let c = dir.join("clusters").join(name);
    let keys = ClusterKeys::decode(&std::fs::read_to_string(c.join("cluster.key")).unwrap());
    let cert = SignedCertificate::decode(&std::fs::read_to_string(c.join("cluster.cert")).unwrap());
    (keys.unwrap(), cert.unwrap().cert.serial_hex())
}

/// The secure mode: the CLI's requests are signed with the fleet root
/// (`--dir`), c1's answer holds only what its SyncPolicy exports, sealed
/// (a plain client with the admin's creds reads no value in it), and the
/// sinks list what applying the rule then does. Attacked: an unsigned
/// `preview-source` is refused; a preview whose `sources` carry an envelope
/// signed by another member, or c1's genuine envelope moved to c3's
/// subject, creates neither and names both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secure_fleet_previews_a_new_rule_from_signed_sealed_exported_sources_only() {
    use common::fleet::*;
    use fleetbus_schemas::envelope::Envelope;
    use fleetbus_schemas::preview::{PreviewSourceReply, PreviewSourceRequest, SourceEnvelope};
    use fleetbus_schemas::subject::ObjectKey;
    use fleetbus_schemas::trust::sign_request;

    let tmp = tempfile::tempdir().unwrap();
    let names = ["c1", "c2", "c3"];
    let dir = fleet_dir(tmp.path(), &names);
    let d = dir.to_str().unwrap();
    let nats = operator_server(&dir);
    let mut m = Vec::new();
    for n in names {
        m.push(Member::start_cmd(&nats, n, secure_agent(&dir, n)).await);
    }
    common::wait_mesh(&m.iter().collect::<Vec<_>>(), &names).await;
    let (c1, c2, c3) = (&m[0], &m[1], &m[2]);
    for x in &m {
        for ns in ["a", "b", "hidden"] {
            create_ns(x, ns).await;
        }
    }
    apply_policy(c1, HIDE, "True").await;
    new_secret(c1, "a", "open", OPEN_VALUE).await;
    new_secret(c1, "hidden", "kept", HIDDEN_VALUE).await;
    create_secret(c1, "b", "base", &[("k", "v")]).await;
    apply_yaml(c1, &base_rule());
    for x in [c2, c3] {
        wait_copy(x, &secrets(), Some("b"), "base", "c1", "base", |_| Ok(())).await;
    }

    // The operator's preview of a rule to be created on c2, signed.
    let text = new_rule(&["a", "hidden"]).spec("seal", true.into()).yaml();
    let rule = temp_file(&text);
    let path = rule.path().to_str().unwrap();
    let args = [
        "rules", "preview", "-f", path, "--author", "c2", "-o", "json",
    ];
    let (code, out, err) = admin_cli(&nats, &dir, &[&args[..], &["--dir", d]].concat());
    assert_eq!(code, 1, "{out}{err}");
    let said = replies(&out);
    for c in ["c2", "c3"] {
        assert_eq!(
            creates_from_c1(&said[c]),
            ["open".to_owned()].into(),
            "{c}: {out}"
        );
        assert_eq!(said[c]["incomplete"], json!([]), "{c}: {out}");
        assert_eq!(said[c]["errors"], json!([]), "{c}: {out}");
    }
    assert!(!out.contains("kept"), "{out}");

    // c1's answer as a plain client with the admin's creds reads it.
    let client = connect(&nats, dir.join("admin.creds")).await.client();
    let root = std::fs::read_to_string(dir.join("root.key")).unwrap();
    let root = fleetbus_schemas::trust::parse_root_key(&root).unwrap();
    let rule_json: Value = fleetbus_schemas::yaml::from_str(&text).unwrap();
    let ask = PreviewSourceRequest {
        rule: rule_json.clone(),
        author: Some("c2".into()),
        after: None,
    }
    .encode()
    .unwrap();
    let to_c1 = CommandKey::preview_source("c1").to_subject(&Prefix::default());
    let signed = sign_request(&ask, &to_c1, &root, chrono::Utc::now()).unwrap();
    let raw = client.request(to_c1.clone(), signed.into()).await.unwrap();
    let answer = PreviewSourceReply::decode(&raw.payload).unwrap();
    assert_eq!(answer.error, None, "{answer:?}");
    let open = ObjectKey::from_api_version("c1", "v1", "Secret", Some("a"), "open");
    let subjects: Vec<&str> = answer
        .envelopes
        .iter()
        .map(|e| e.subject.as_str())
        .collect();
    assert_eq!(
        subjects,
        [open.to_subject(&Prefix::default())],
        "{answer:?}"
    );
    let genuine = &answer.envelopes[0];
    let env = Envelope::decode(&genuine.bytes().unwrap()).unwrap();
    assert!(env.is_sealed(), "{env:?}");
    for value in [
        OPEN_VALUE,
        &b64(OPEN_VALUE),
        HIDDEN_VALUE,
        &b64(HIDDEN_VALUE),
    ] {
        let bytes = genuine.bytes().unwrap();
        let seen = String::from_utf8_lossy(&bytes);
        assert!(!seen.contains(value) && !String::from_utf8_lossy(&raw.payload).contains(value));
    }
    // Unsigned: refused, nothing given.
    let raw = client.request(to_c1.clone(), ask.into()).await.unwrap();
    let refused = PreviewSourceReply::decode(&raw.payload).unwrap();
    let e = refused.error.unwrap_or_default();
    assert!(e.contains("fleet root"), "{e}");
    assert!(refused.envelopes.is_empty());

    // Forged sources handed to c2's preview: a Secret on c1's subject signed
    // by c2, and c1's genuine envelope moved to c3's subject.
    let (c2_keys, c2_serial) = signer_of(&dir, "c2");
    let forged_obj = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"namespace": "a", "name": "forged", "uid": "u-forged",
                     "resourceVersion": "1", "labels": {"app": "new"}},
        "data": {"k": b64("pwned")}});
    let forged_key = ObjectKey::from_object("c1", &forged_obj).unwrap();
    let mut forged = Envelope::snapshot("c1", None, forged_obj, chrono::Utc::now()).unwrap();
    forged.sign(&forged_key, c2_keys.signing(), &c2_serial);
    let moved = ObjectKey {
        origin: "c3".into(),
        ..open.clone()
    };
    let request = PreviewRequest {
        rule: Some(rule_json),
        author: Some("c2".into()),
        sources: vec![
            SourceEnvelope::new(
                forged_key.to_subject(&Prefix::default()),
                &forged.encode().unwrap(),
            ),
            SourceEnvelope {
                subject: moved.to_subject(&Prefix::default()),
                data: genuine.data.clone(),
            },
        ],
        sources_complete: true,
        ..PreviewRequest::default()
    };
    let to_c2 = CommandKey::preview("c2").to_subject(&Prefix::default());
    let signed = sign_request(
        &request.encode().unwrap(),
        &to_c2,
        &root,
        chrono::Utc::now(),
    );
    let raw = client.request(to_c2, signed.unwrap().into()).await.unwrap();
    let reply = PreviewReply::decode(&raw.payload).unwrap();
    assert_eq!(reply.error, None, "{reply:?}");
    assert!(reply.creates.is_empty(), "{reply:?}");
    let names: BTreeSet<&str> = reply
        .errors
        .iter()
        .map(|p| p.object.name.as_str())
        .collect();
    assert_eq!(names, ["forged", "open"].into(), "{reply:?}");
    for p in &reply.errors {
        assert!(p.message.contains("refused the source envelope"), "{p:?}");
    }

    // A kind c2 does not follow (only c1's and c3's pair rule takes
    // ConfigMaps): c2's preview reads it on the bus, where it takes c1's
    // signed envelope, and not one c2 signed on c1's subject, which it counts.
    pair_up(c1, c3, c2, "cfg").await;
    let forged_cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"namespace": "a", "name": "forged-cm", "uid": "u-forged-cm",
                     "resourceVersion": "1", "labels": {"app": "new"}},
        "data": {"k": "pwned"}});
    let forged_key = ObjectKey::from_object("c1", &forged_cm).unwrap();
    let mut forged = Envelope::snapshot("c1", None, forged_cm, chrono::Utc::now()).unwrap();
    forged.sign(&forged_key, c2_keys.signing(), &c2_serial);
    async_nats::jetstream::new(client.clone())
        .publish(
            forged_key.to_subject(&Prefix::default()),
            forged.encode().unwrap().into(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    let mismatch_before = rejected_messages(c2, "signer_mismatch");
    let cm_request = PreviewRequest {
        rule: Some(cm_rule(json!({}), &["a"]).json()),
        author: Some("c2".into()),
        sources_complete: true,
        ..PreviewRequest::default()
    };
    let to_c2 = CommandKey::preview("c2").to_subject(&Prefix::default());
    let signed = sign_request(
        &cm_request.encode().unwrap(),
        &to_c2,
        &root,
        chrono::Utc::now(),
    );
    let raw = client.request(to_c2, signed.unwrap().into()).await.unwrap();
    let reply = serde_json::to_value(PreviewReply::decode(&raw.payload).unwrap()).unwrap();
    assert_eq!(
        creates_from_c1(&reply),
        ["cfg".to_owned()].into(),
        "{reply:#}"
    );
    assert_eq!(reply["incomplete"], json!([]), "{reply:#}");
    assert_eq!(reply["errors"], json!([]), "{reply:#}");
    assert!(
        rejected_messages(c2, "signer_mismatch") > mismatch_before,
        "{reply:#}"
    );

    // Created on c2 as previewed: c3 gets `open`, and never `kept`.
    kubectl(c2, &["apply", "-f", path]);
    wait_copy(c3, &secrets(), Some("a"), "open", "c1", RULE, |o| {
        (o.data["data"]["k"] == b64(OPEN_VALUE))
            .then_some(())
            .ok_or(format!("{:?}", o.data["data"]))
    })
    .await;
    assert_absent(c3, &secrets(), Some("hidden"), "kept").await;
}

/// `n` characters no compressor shrinks much (xorshift over the alphabet).
fn noise(seed: u64, n: usize) -> String {
    let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            alphabet[(x % alphabet.len() as u64) as usize] as char
        })
        .collect()
}

/// On a bus with a 64 KiB `max_payload`, c1's answer takes pages and the
/// CLI follows them all; what does not fit in one preview request is left
/// out and said to be (PROTOCOL §6.8's bound), and the sink, not told it has
/// everything, says its creates may be incomplete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sources_past_one_request_are_paged_then_cut_and_the_preview_says_so() {
    let nats = NatsServer::start_with_config("max_payload: 65536\n").unwrap();
    let m = fleet(&nats, &["c1", "c2"]).await;
    let (c1, c2) = (&m[0], &m[1]);
    for x in &m {
        create_ns(x, "a").await;
        create_ns(x, "b").await;
    }
    create_secret(c1, "b", "base", &[("k", "v")]).await;
    apply_yaml(c1, &base_rule());
    wait_copy(c2, &secrets(), Some("b"), "base", "c1", "base", |_| Ok(())).await;
    let names: BTreeSet<String> = (0..16).map(|i| format!("big-{i:02}")).collect();
    for (i, name) in names.iter().enumerate() {
        new_secret(c1, "a", name, &noise(i as u64 + 1, 8000)).await;
    }

    let rule = temp_file(&new_rule(&["a"]).yaml());
    let path = rule.path().to_str().unwrap();
    let (code, out, err) = preview(&nats, &["-f", path, "-o", "json"]).await;
    assert_eq!(code, Some(1), "{out}{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    // c1's answer took more than one page of 64 KiB, and the CLI stopped
    // asking once they could no longer fit.
    let notes = v["sourcesNotSent"].to_string();
    let stopped =
        "cluster c1 has more source envelopes than one preview request holds: not asked past page ";
    let pages: usize = notes
        .split_once(stopped)
        .and_then(|(_, rest)| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{v:#}"));
    assert!(pages >= 2, "{v:#}");
    assert!(
        notes.contains("source envelopes the origins gave fit in one preview request"),
        "{v:#}"
    );
    let said = replies(&out);
    let creates = creates_from_c1(&said["c2"]);
    assert!(!creates.is_empty() && creates.len() < 16, "{creates:?}");
    assert!(creates.is_subset(&names), "{creates:?}");
    let incomplete = said["c2"]["incomplete"].as_array().unwrap();
    assert!(!incomplete.is_empty(), "{out}");
    let (_, text, _) = preview(&nats, &["-f", path]).await;
    assert!(text.contains("note: only "), "{text}");
}

fn configmaps() -> kube::api::ApiResource {
    resource("", "v1", "ConfigMap", "configmaps")
}

/// Rule `web` for ConfigMaps: those labelled `app=new` of `namespaces`, to
/// the clusters `sinks` selects.
fn cm_rule(sinks: Value, namespaces: &[&str]) -> RuleBuilder {
    new_rule(namespaces)
        .kind("", "v1", "ConfigMap")
        .spec("clusterSelector", sinks)
}

/// ConfigMap `ns/name` on `m` with `labels` (YAML flow map entries).
fn new_cm(m: &Member, ns: &str, name: &str, labels: &str) {
    apply_yaml(
        m,
        &format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: {ns}, labels: {{{labels}}}}}\ndata: {{k: {name}-of-{}}}\n",
            m.name
        ),
    );
}

/// c1's ConfigMap `a/<name>` on the bus for rule `pair`, which only c1 and
/// `other` have (`resource-sync-disabled`), so `outside` follows no
/// ConfigMap.
async fn pair_up(c1: &Member, other: &Member, outside: &Member, name: &str) {
    new_cm(c1, "a", name, "app: new");
    let pair = cm_rule(json!({}), &["a"])
        .name("pair")
        .annotation("fleetbus.io/resource-sync-disabled", "true")
        .yaml();
    apply_yaml(c1, &pair);
    apply_yaml(other, &pair);
    // On the bus: `other` has its copy.
    wait_copy(other, &configmaps(), Some("a"), name, "c1", "pair", |_| {
        Ok(())
    })
    .await;
    assert_eq!(get_dynamic(outside, &rules(), None, "pair").await, Ok(None));
}

/// The names of `reply`'s `conflicts`.
fn conflict_names(reply: &Value) -> BTreeSet<String> {
    reply["conflicts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["object"]["name"].as_str().unwrap().to_owned())
        .collect()
}

/// The first rule for a kind: no rule in the fleet takes ConfigMaps,
/// so no agent follows them, on the bus or locally. Each sink reads what
/// it lacks once (the kind's envelopes on the bus, its local ConfigMaps)
/// and answers in full: exactly the creates `kubectl apply -f` then
/// performs, c3's own unmanaged `two` a conflict (which applying then
/// reports), nothing missing, nothing written by the preview.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_rule_for_a_kind_is_previewed_in_full_on_every_sink() {
    let nats = NatsServer::start().unwrap();
    let m = fleet(&nats, &["c1", "c2", "c3"]).await;
    let (c1, c2, c3) = (&m[0], &m[1], &m[2]);
    for x in &m {
        create_ns(x, "a").await;
    }
    new_cm(c1, "a", "one", "app: new");
    new_cm(c1, "a", "two", "app: new");
    new_cm(c1, "a", "other", "app: old");
    // c3's own, of the name of a copy the rule wants there.
    new_cm(c3, "a", "two", "app: local");

    let rule = temp_file(&cm_rule(json!({}), &["a"]).yaml());
    let path = rule.path().to_str().unwrap();
    let (mut said, out) = preview_changes(&nats, &m, path).await;
    assert_eq!(said.keys().collect::<Vec<_>>(), ["c1", "c2", "c3"], "{out}");
    for (c, r) in &said {
        assert_eq!(r["incomplete"], json!([]), "{c}: {out}");
    }
    let two: BTreeSet<String> = ["two".to_owned()].into();
    assert_eq!(conflict_names(&said["c3"]), two, "{out}");
    let why = said["c3"]["conflicts"][0]["message"].to_string();
    assert!(why.contains("was not made by fleetbus"), "{why}");
    said.get_mut("c3").unwrap()["conflicts"] = json!([]);
    let names = |n: &[&str]| n.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
    assert_eq!(
        creates_from_c1(&said["c2"]),
        names(&["one", "two"]),
        "{out}"
    );
    assert_eq!(creates_from_c1(&said["c3"]), names(&["one"]), "{out}");
    assert_eq!(predicted(&said["c1"]), Effects::new(), "{out}");
    let want: BTreeMap<&str, Effects> = ["c2", "c3"]
        .iter()
        .map(|c| (*c, predicted(&said[*c])))
        .collect();

    // Copies of a kind no cluster serves (no CRD): an error on each, as a
    // pass names it, and nothing else.
    let gadgets = cm_rule(json!({}), &["a"]).mutations(json!({
        "groupVersionKind": {"group": "example.com", "version": "v1", "kind": "Gadget"}
    }));
    let gadgets = temp_file(&gadgets.yaml());
    let before = state(&m).await;
    let (_, out, _) = preview(
        &nats,
        &["-f", gadgets.path().to_str().unwrap(), "-o", "json"],
    )
    .await;
    let c2_said = &replies(&out)["c2"];
    let errors = c2_said["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 2, "{c2_said:#}");
    for e in errors {
        let why = e["message"].as_str().unwrap();
        assert!(
            why.contains("Gadget") && why.contains("not served by this cluster"),
            "{c2_said:#}"
        );
    }
    assert_eq!(c2_said["creates"], json!([]), "{c2_said:#}");
    assert_eq!(c2_said["incomplete"], json!([]), "{c2_said:#}");
    assert_eq!(state(&m).await, before, "a preview wrote something");
    // A rule for a kind this cluster does not serve cannot work here, as
    // its status would say: nothing is listed, and the preview says why.
    let client = async_nats::connect(nats.url()).await.unwrap();
    let widgets = cm_rule(json!({}), &["a"]).kind("example.com", "v1", "Widget");
    let ask = PreviewRequest {
        rule: Some(widgets.json()),
        sources_complete: true,
        ..PreviewRequest::default()
    };
    let reply = raw_to(&client, "c2", ask.encode().unwrap()).await;
    assert_eq!(reply.error, None, "{reply:?}");
    assert!(!reply.has_changes(), "{reply:?}");
    let [why] = reply.incomplete.as_slice() else {
        panic!("{reply:?}")
    };
    assert!(
        why.starts_with("the rule cannot work here: ") && why.contains("not served"),
        "{why}"
    );

    // Applying it does exactly that, and reports the conflict.
    let watches = [
        Recorder::of(c2, &configmaps()).await,
        Recorder::of(c3, &configmaps()).await,
    ];
    let mut conflicts = subscribe_conflicts(&nats, "c3").await;
    kubectl(c1, &["apply", "-f", path]);
    next_conflict(&mut conflicts, "LocalObject for two", |v| {
        v["reason"] == "LocalObject" && v["object"]["name"] == "two"
    })
    .await;
    for (w, x) in watches.iter().zip([c2, c3]) {
        wait_copy(x, &configmaps(), Some("a"), "one", "c1", RULE, |_| Ok(())).await;
        w.wait_effects(&x.name, &want[x.name.as_str()]).await;
        assert_absent(x, &configmaps(), Some("a"), "other").await;
    }
    let local = get_dynamic(c3, &configmaps(), Some("a"), "two").await;
    check_unmanaged(&local.unwrap().unwrap()).unwrap();
}

/// Objects of a kind already on the bus for a rule c2 does not have (one
/// c1 and c3 keep to themselves, `resource-sync-disabled`): c2 follows no
/// ConfigMap, and c1 does not give them again in its `preview-source`
/// (they are on the bus as they are). c2's preview of a new rule reads
/// them from the bus once, and applying creates them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_on_the_bus_for_a_rule_elsewhere_are_read_once_by_a_sink_that_does_not_follow_them()
{
    let nats = NatsServer::start().unwrap();
    let m = fleet(&nats, &["c1", "c2", "c3"]).await;
    let (c1, c2, c3) = (&m[0], &m[1], &m[2]);
    for x in &m {
        create_ns(x, "a").await;
    }
    label(&m, "c2", "edge").await;
    pair_up(c1, c3, c2, "base").await;
    // And what no origin sent: garbage, and c1's envelope of `base` under
    // another name. c2's read skips and counts them, as its consumer would.
    let client = async_nats::connect(nats.url()).await.unwrap();
    let js = async_nats::jetstream::new(client.clone());
    let at = |name: &str| {
        ObjectKey::from_api_version("c1", "v1", "ConfigMap", Some("a"), name)
            .to_subject(&Prefix::default())
    };
    let base_env = js
        .get_stream("FLEETBUS_OBJECTS")
        .await
        .unwrap()
        .get_last_raw_message_by_subject(&at("base"))
        .await
        .unwrap()
        .payload;
    for (name, payload) in [
        ("junk", b"{not json".to_vec()),
        ("moved", base_env.to_vec()),
    ] {
        js.publish(at(name), payload.into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
    let rejected =
        |m: &Member| sync_rejected(m, "malformed") + sync_rejected(m, "subject_mismatch");
    let rejected_before = rejected(c2);

    let text = cm_rule(json!({"matchLabels": {"env": "edge"}}), &["a"]).yaml();
    let rule = temp_file(&text);
    let path = rule.path().to_str().unwrap();
    let (said, out) = preview_changes(&nats, &m, path).await;
    let base: BTreeSet<String> = ["base".to_owned()].into();
    assert_eq!(creates_from_c1(&said["c2"]), base, "{out}");
    assert_eq!(said["c2"]["incomplete"], json!([]), "{out}");
    assert_eq!(said["c2"]["errors"], json!([]), "{out}");
    assert!(rejected(c2) >= rejected_before + 2.0, "{}", rejected(c2));
    // From the bus, not from c1's answer: asked with no sources, c2 still
    // lists it (and says other objects may be missing).
    let bare = PreviewRequest {
        rule: Some(fleetbus_schemas::yaml::from_str(&text).unwrap()),
        ..PreviewRequest::default()
    };
    let reply = raw_to(&client, "c2", bare.encode().unwrap()).await;
    let reply = serde_json::to_value(&reply).unwrap();
    assert_eq!(creates_from_c1(&reply), base, "{reply:#}");
    assert_eq!(
        reply["incomplete"].as_array().unwrap().len(),
        1,
        "{reply:#}"
    );

    let watch = Recorder::of(c2, &configmaps()).await;
    kubectl(c1, &["apply", "-f", path]);
    wait_copy(c2, &configmaps(), Some("a"), "base", "c1", RULE, |_| Ok(())).await;
    watch.wait_effects("c2", &predicted(&said["c2"])).await;
}
