//! Snapshot tests of the human output of `status`, `rules ls|describe` and
//! `clusters ls|describe`: the pure render functions fed fixed records and a fixed
//! clock, compared with the text in `hub/snapshots/*.txt` (regenerate after a
//! deliberate change with `FLEETBUS_UPDATE_SNAPSHOTS=1`, then read the diff).

use chrono::{DateTime, Utc};
use fleetbus_schemas::drift::DriftEvent;
use fleetbus_schemas::registry::ClusterRecord;
use fleetbus_schemas::rule_status::{RuleStatusKey, RuleStatusRecord};

use crate::fleet::{views, ClusterView};
use crate::rules::model::rows;

fn now() -> DateTime<Utc> {
    "2026-11-27T01:00:00Z".parse().unwrap()
}

fn cluster(name: &str, id: &str, beat_secs_ago: i64, labels: serde_json::Value) -> ClusterRecord {
    let json = serde_json::json!({
        "schema": "fleetbus.io/cluster/v1", "name": name, "clusterID": id,
        "state": "Active", "agentVersion": "0.1.0", "labels": labels,
        "metadata": {"distribution": "kind", "kubernetesVersion": "v1.31.2",
                     "locality": {"region": "eu-west-1"}},
        "features": [{"featureName": "gpu"}],
        "startedAt": "2026-11-27T00:00:00Z",
        "heartbeatAt": (now() - chrono::Duration::seconds(beat_secs_ago)).to_rfc3339(),
        "heartbeatIntervalSeconds": 10, "seq": 1, "members": [],
    });
    ClusterRecord::decode(json.to_string().as_bytes()).unwrap()
}

fn clusters() -> Vec<ClusterView> {
    views(
        vec![
            cluster("hub", "1", 2, serde_json::json!({"role": "hub"})),
            cluster("east", "2", 4, serde_json::json!({"env": "prod"})),
            cluster("west", "3", 95, serde_json::json!({"env": "prod"})),
        ],
        // Records of older agents (no beats): judged by their heartbeatAt.
        &crate::fleet::Beats::new(),
        now(),
    )
}

fn rec(cluster: &str, id: &str, rule: &str, extra: serde_json::Value) -> RuleStatusRecord {
    let mut v = serde_json::json!({
        "schema": "fleetbus.io/rulestatus/v1", "cluster": cluster, "clusterID": id,
        "rule": rule, "observedGeneration": 1, "state": "Synced", "reason": "Synced",
        "message": "2 object(s) in sync from 1 source cluster(s)", "sink": true,
        "source": false, "objectsSynced": 2, "updatedAt": "2026-11-27T00:59:30Z",
    });
    for (k, x) in extra.as_object().unwrap() {
        v[k] = x.clone();
    }
    let r = RuleStatusRecord::decode(v.to_string().as_bytes()).unwrap();
    let key = RuleStatusKey::parse(&r.key().to_key()).unwrap();
    r.validate(&key).unwrap();
    r
}

fn records() -> Vec<RuleStatusRecord> {
    let hub_source = serde_json::json!({"state": "Synced", "reason": "SourceOnly",
        "message": "this cluster is a source of this rule, not a sink", "sink": false,
        "source": true, "objectsSynced": 0, "readyCopies": 1, "reportedCopies": 2});
    vec![
        rec("hub", "1", "apps", hub_source.clone()),
        rec("east", "2", "apps", serde_json::json!({})),
        rec(
            "west",
            "3",
            "apps",
            serde_json::json!({"state": "Conflict", "conflicts": 1,
            "problems": [{"kind": "Conflict", "object": "ConfigMap apps/web",
                          "message": "exists on this cluster and was not made by fleetbus"}],
            "problemsTotal": 1}),
        ),
        rec(
            "hub",
            "1",
            "edge-only",
            serde_json::json!({"state": "NotSelected",
            "reason": "NotSelected", "message": "this cluster is not selected by this rule",
            "sink": false, "objectsSynced": 0}),
        ),
        rec(
            "east",
            "2",
            "edge-only",
            serde_json::json!({"state": "Error", "reason": "SyncErrors",
            "errors": 1, "problems": [{"kind": "Error", "object": "Secret apps/db",
            "message": "namespace apps not found"}], "problemsTotal": 3}),
        ),
    ]
}

fn drift() -> DriftEvent {
    let json = serde_json::json!({
        "schema": "fleetbus.io/drift/v1", "id": "d1", "cluster": "east",
        "rule": "apps", "origin": "hub", "phase": "Detected", "type": "Modified", "action": "Report",
        "object": {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "apps", "name": "web"},
        "detectedAt": "2026-11-27T00:58:00Z", "changes": [{"path": "/data/color", "desired": "blue", "live": "red"}],
        "changedBy": {"manager": "kubectl-edit", "operation": "Update"},
    });
    DriftEvent::decode(json.to_string().as_bytes()).unwrap()
}

/// Compares `text` with the snapshot `name`, or writes it when asked to.
fn check(name: &str, text: &[u8]) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("snapshots")
        .join(format!("{name}.txt"));
    let text = String::from_utf8(text.to_vec()).unwrap();
    if std::env::var_os("FLEETBUS_UPDATE_SNAPSHOTS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &text).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (FLEETBUS_UPDATE_SNAPSHOTS=1 writes it)",
            path.display()
        )
    });
    assert_eq!(text, want, "snapshot {name} differs");
}

#[test]
fn rules_ls() {
    let mut out = Vec::new();
    crate::rules::render::ls(&mut out, &rows(&records(), &clusters()), 2).unwrap();
    check("rules_ls", &out);
}

#[test]
fn rules_describe() {
    let all = rows(&records(), &clusters());
    let mut out = Vec::new();
    for row in &all {
        crate::rules::render::describe(&mut out, row, 0, now()).unwrap();
        out.extend_from_slice(b"----\n");
    }
    check("rules_describe", &out);
}

#[test]
fn status() {
    let cl = clusters();
    let all = rows(&records(), &cl);
    let drifted = vec![drift()];
    let attention = crate::status::model::attention(&cl, &all, &drifted, now());
    let by_state = crate::status::model::clusters_by_state(&cl);
    let last = vec![(drift(), Some(now() - chrono::Duration::seconds(120)))];
    let mut out = Vec::new();
    crate::status::render::summary(
        &mut out,
        &crate::status::render::Summary {
            attention: &attention,
            clusters: &by_state,
            rules: &all,
            drifted: drifted.len(),
            last_events: &last,
            skipped: 1,
        },
    )
    .unwrap();
    check("status", &out);
    // And a fleet where all is well says so first.
    let quiet = rows(&records()[..2], &cl[..2]);
    let attention = crate::status::model::attention(&cl[..2], &quiet, &[], now());
    assert!(attention.is_empty(), "{attention:?}");
}

#[test]
fn clusters_ls_and_describe() {
    let cl = clusters();
    let mut out = Vec::new();
    crate::clusters::render::ls(&mut out, &cl).unwrap();
    check("clusters_ls", &out);
    let all = rows(&records(), &cl);
    let cells: Vec<_> = all
        .iter()
        .flat_map(|r| r.cells.iter())
        .filter(|c| c.record.cluster == "east")
        .collect();
    let mut out = Vec::new();
    crate::clusters::render::describe(&mut out, &[&cl[1]], &cells, &[drift()], now()).unwrap();
    check("clusters_describe", &out);
}

#[test]
fn garbage_records_are_skipped_and_counted_never_hiding_good_ones() {
    let good = records().remove(1);
    let key = good.key().to_key();
    // A record claiming west, under a key of east's.
    let mut forged = good.clone();
    forged.cluster = "west".into();
    forged.rule = "other".into();
    let mut under_east = forged.key();
    under_east.cluster = "east".into();
    let mut huge = serde_json::to_value(&good).unwrap();
    huge["schema"] = "fleetbus.io/rulestatus/v1".into();
    huge["problems"] = serde_json::Value::Array(vec![
        serde_json::json!({"kind": "Error", "object": "x", "message": "m"});
        10_000
    ]);
    let entries = vec![
        (key.clone(), good.encode().unwrap()),
        ("cluster.a.b".to_owned(), good.encode().unwrap()),
        ("status.east.2.x".to_owned(), b"{not json".to_vec()),
        (
            "status.east.2.y".to_owned(),
            br#"{"schema":"fleetbus.io/rulestatus/v2"}"#.to_vec(),
        ),
        ("status.east.2.z".to_owned(), huge.to_string().into_bytes()),
        (under_east.to_key(), forged.encode().unwrap()),
    ];
    let parsed = crate::rules::read::parse(entries);
    assert_eq!(parsed.records, vec![good]);
    assert_eq!(parsed.skipped.len(), 5, "{:?}", parsed.skipped);
}

#[test]
fn rules_preview() {
    use fleetbus_schemas::preview::PreviewReply;
    let reply = |json: serde_json::Value| {
        let mut v = json;
        v["schema"] = "fleetbus.io/preview-reply/v1".into();
        PreviewReply::decode(v.to_string().as_bytes()).unwrap()
    };
    let east = reply(serde_json::json!({
        "cluster": "east", "rule": "web", "selected": true, "unchanged": 3, "held": 0, "omitted": 0,
        "creates": [{"object": {"apiVersion": "v1", "kind": "Secret", "namespace": "b", "name": "new"}, "origin": "hub"}],
        "updates": [{"object": {"apiVersion": "v1", "kind": "Secret", "namespace": "a", "name": "web"}, "origin": "hub",
                     "changes": [{"path": "/data/token", "desired": "(redacted: desired value)", "live": "(redacted: live value)"},
                                 {"path": "/metadata/labels/tier", "desired": "gold", "live": null}],
                     "changesOmitted": 2},
                    {"object": {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "a", "name": "api"}, "origin": "hub",
                     "reason": "corrects drift", "changes": [{"path": "/spec/replicas", "desired": 3, "live": 5}]}],
        "deletes": [{"object": {"apiVersion": "v1", "kind": "Secret", "namespace": "a", "name": "x"}, "action": "Delete"},
                    {"object": {"apiVersion": "v1", "kind": "Namespace", "namespace": null, "name": "b"}, "action": "Keep",
                     "reason": "deleting it would delete what fleetbus does not manage: v1/ConfigMap/b/mine"}],
        "conflicts": [{"object": {"apiVersion": "v1", "kind": "Secret", "namespace": "a", "name": "dup"}, "message": "rule other from west wins"}],
        "errors": [], "incomplete": ["the candidate selects other source objects than the current rule"],
    }));
    let west = reply(serde_json::json!({
        "cluster": "west", "rule": "web", "selected": false, "unchanged": 0, "held": 0, "omitted": 4,
        "creates": [], "updates": [], "conflicts": [], "errors": [], "incomplete": [],
        "deletes": [{"object": {"apiVersion": "v1", "kind": "Secret", "namespace": "a", "name": "web"}, "action": "Orphan"}],
    }));
    let hub = reply(serde_json::json!({
        "cluster": "hub", "rule": "web", "selected": true, "unchanged": 0, "held": 0, "omitted": 0,
        "creates": [], "updates": [], "deletes": [], "conflicts": [], "errors": [], "incomplete": [],
    }));
    let answers = vec![
        ("east".to_owned(), Ok(east)),
        ("hub".to_owned(), Ok(hub)),
        (
            "north".to_owned(),
            Err("no agent answers for cluster north (is it running and connected?)".to_owned()),
        ),
        (
            "south".to_owned(),
            Ok(PreviewReply::refused(
                "south",
                "rate limited: retry in 200ms",
            )),
        ),
        ("west".to_owned(), Ok(west)),
    ];
    let mut out = Vec::new();
    crate::rules::preview::render(&mut out, &answers).unwrap();
    check("rules_preview", &out);
}
