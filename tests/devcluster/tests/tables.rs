//! `kubectl get` tables from a real `fleetbus-devcluster`: CRD printer columns
//! (JSONPath filters, priority, dates) and the built-in Event printer, read from
//! kubectl 1.33's human-readable output.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use fleetbus_testsupport::{DevCluster, DevClusterOpts};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

const KUBECTL: &str = "1.33";
const T: Duration = Duration::from_secs(20);

/// The harness finds this crate's binary in the target dir (`cargo test`
/// builds it before integration tests run).
fn start(name: &str) -> DevCluster {
    DevCluster::start(DevClusterOpts::new(name)).expect("start devcluster")
}

/// Runs kubectl 1.33, asserts success, returns stdout.
fn ok(dc: &DevCluster, args: &[&str]) -> String {
    let out = dc.kubectl(KUBECTL, args);
    assert!(
        out.status.success(),
        "kubectl {args:?} failed ({}):\nstdout: {}\nstderr: {}\nserver log:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        dc.log()
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Retries `kubectl args` until it succeeds (a new CRD is served shortly after creation).
fn ok_eventually(dc: &DevCluster, args: &[&str]) -> String {
    fleetbus_testsupport::wait_for_blocking(&format!("kubectl {args:?} to succeed"), T, || {
        let out = dc.kubectl(KUBECTL, args);
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    })
}

fn write(dir: &tempfile::TempDir, name: &str, yaml: &str) -> String {
    let p: PathBuf = dir.path().join(name);
    std::fs::write(&p, yaml).unwrap();
    p.to_str().unwrap().to_string()
}

/// kubectl's table output as rows of header -> cell. Headers may contain one
/// space ("LAST SEEN"); columns are separated by at least two.
fn parse_table(out: &str) -> (Vec<String>, Vec<BTreeMap<String, String>>) {
    let mut lines = out.lines().filter(|l| !l.trim().is_empty());
    let header = lines.next().expect("a header line");
    let mut starts = vec![0];
    let b = header.as_bytes();
    for i in 2..b.len() {
        if b[i] != b' ' && b[i - 1] == b' ' && b[i - 2] == b' ' {
            starts.push(i);
        }
    }
    let cut = |line: &str, k: usize| -> String {
        let from = starts[k].min(line.len());
        let to = starts
            .get(k + 1)
            .map_or(line.len(), |e| (*e).min(line.len()));
        line[from..to].trim().to_string()
    };
    let names: Vec<String> = (0..starts.len()).map(|k| cut(header, k)).collect();
    let rows = lines
        .map(|l| {
            names
                .iter()
                .enumerate()
                .map(|(k, n)| (n.clone(), cut(l, k)))
                .collect()
        })
        .collect();
    (names, rows)
}

const WIDGET_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.fleetbus.io
spec:
  group: example.fleetbus.io
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
    additionalPrinterColumns:
    - {name: Ready, type: string, jsonPath: '.status.conditions[?(@.type=="Ready")].status'}
    - {name: Replicas, type: integer, jsonPath: .spec.replicas}
    - {name: Zone, type: string, jsonPath: ".metadata.labels['example.fleetbus.io/zone']"}
    - {name: First-Port, type: integer, jsonPath: '.spec.ports[*].port'}
    - {name: Seen, type: date, jsonPath: .status.seenAt}
    - {name: Owner, type: string, priority: 1, jsonPath: .spec.owner}
"#;

#[test]
fn crd_printer_columns_follow_jsonpath_priority_and_types() {
    let dc = start("tables-crd");
    let dir = tempfile::tempdir().unwrap();
    ok(&dc, &["apply", "-f", &write(&dir, "crd.yaml", WIDGET_CRD)]);
    let seen = (chrono::Utc::now() - chrono::Duration::minutes(5))
        .format("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let cr = format!(
        r#"
apiVersion: example.fleetbus.io/v1
kind: Widget
metadata:
  name: w1
  namespace: default
  labels: {{example.fleetbus.io/zone: eu-1}}
spec:
  replicas: 3
  owner: team-a
  ports: [{{port: 8080}}, {{port: 9090}}]
status:
  seenAt: "{seen}"
  conditions:
  - {{type: Synced, status: "False"}}
  - {{type: Ready, status: "True"}}
"#
    );
    let path = write(&dir, "w1.yaml", &cr);
    ok_eventually(&dc, &["apply", "-f", &path]);

    let (cols, rows) = parse_table(&ok(&dc, &["get", "widgets", "-n", "default"]));
    assert_eq!(
        cols,
        ["NAME", "READY", "REPLICAS", "ZONE", "FIRST-PORT", "SEEN"],
        "priority-1 columns are hidden by default"
    );
    let w = &rows[0];
    assert_eq!(w["NAME"], "w1");
    assert_eq!(w["READY"], "True", "the filter picks the Ready condition");
    assert_eq!(w["REPLICAS"], "3");
    assert_eq!(w["ZONE"], "eu-1");
    assert_eq!(w["FIRST-PORT"], "8080", "kube prints the first match");
    // 300..599s prints as `5m` or `5mNs`, whatever this machine's pace.
    assert!(
        w["SEEN"].starts_with("5m"),
        "date columns print as an age: {}",
        w["SEEN"]
    );

    let wide = ok(&dc, &["get", "widget", "w1", "-n", "default", "-o", "wide"]);
    let (cols, rows) = parse_table(&wide);
    assert_eq!(
        cols,
        [
            "NAME",
            "READY",
            "REPLICAS",
            "ZONE",
            "FIRST-PORT",
            "SEEN",
            "OWNER"
        ]
    );
    assert_eq!(rows[0]["OWNER"], "team-a", "{wide}");

    // Like kube-apiserver, a column path that does not parse rejects the CRD
    // (rather than serving a silently empty column).
    let broken = WIDGET_CRD.replace("jsonPath: .spec.owner}", "jsonPath: '.spec.x[?(@.y=='}");
    let out = dc.kubectl(
        KUBECTL,
        &["apply", "-f", &write(&dir, "broken.yaml", &broken)],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a broken column path was accepted");
    assert!(
        stderr.contains("is invalid") && stderr.contains("additionalPrinterColumns"),
        "{stderr}"
    );
}

#[test]
fn fleetbus_cluster_crd_shows_synced_and_wide_columns() {
    let dc = start("tables-cluster");
    let dir = tempfile::tempdir().unwrap();
    let crd = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/crds/clusters.fleetbus.io.yaml"
    );
    ok(&dc, &["apply", "-f", crd]);
    let cluster = r#"
apiVersion: fleetbus.io/v1alpha1
kind: Cluster
metadata: {name: east}
spec: {clusterID: 0b6c7c7e-1111-2222-3333-444455556666}
"#;
    ok_eventually(&dc, &["apply", "-f", &write(&dir, "east.yaml", cluster)]);
    let heartbeat = (chrono::Utc::now() - chrono::Duration::seconds(30))
        .format("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let status = format!(
        r#"{{"status": {{"type": "Peer", "state": "Ready", "agentVersion": "0.1.0",
            "lastHeartbeatTime": "{heartbeat}",
            "metadata": {{"kubernetesVersion": "v1.33.1", "provider": "kind",
                          "distribution": "kind", "locality": {{"region": "us-east-1"}}}},
            "conditions": [
              {{"type": "Ready", "status": "True", "reason": "Heartbeat", "message": "",
                "lastTransitionTime": "{heartbeat}"}},
              {{"type": "ClustersSynced", "status": "False", "reason": "Pending", "message": "",
                "lastTransitionTime": "{heartbeat}"}}]}}}}"#
    );
    ok(
        &dc,
        &[
            "patch",
            "cluster",
            "east",
            "--subresource=status",
            "--type=merge",
            "-p",
            &status,
        ],
    );

    let (cols, rows) = parse_table(&ok(&dc, &["get", "clusters"]));
    assert_eq!(
        cols,
        ["NAME", "TYPE", "STATE", "SYNCED", "VERSION", "REGION", "AGE"]
    );
    let east = rows.iter().find(|r| r["NAME"] == "east").unwrap();
    assert_eq!(east["SYNCED"], "False");
    assert_eq!(east["STATE"], "Ready");
    assert_eq!(east["REGION"], "us-east-1");

    let (cols, rows) = parse_table(&ok(&dc, &["get", "clusters", "-o", "wide"]));
    assert_eq!(
        cols,
        [
            "NAME",
            "TYPE",
            "STATE",
            "SYNCED",
            "VERSION",
            "REGION",
            "AGE",
            "ID",
            "PROVIDER",
            "DISTRIBUTION",
            "HEARTBEAT",
            "AGENT"
        ]
    );
    let east = rows.iter().find(|r| r["NAME"] == "east").unwrap();
    assert_eq!(east["ID"], "0b6c7c7e-1111-2222-3333-444455556666");
    assert_eq!(east["AGENT"], "0.1.0");
    let secs: u64 = east["HEARTBEAT"].trim_end_matches('s').parse().unwrap();
    assert!((30..120).contains(&secs), "{}", east["HEARTBEAT"]);
}

#[test]
fn events_print_type_reason_object_and_message() {
    let dc = start("tables-events");
    let dir = tempfile::tempdir().unwrap();
    let ts = (chrono::Utc::now() - chrono::Duration::minutes(3))
        .format("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let event = format!(
        r#"
apiVersion: v1
kind: Event
metadata: {{name: web-1.probe, namespace: default}}
type: Warning
reason: BackOff
message: Back-off restarting failed container
involvedObject: {{kind: Pod, name: web-1, namespace: default, fieldPath: "spec.containers{{app}}"}}
source: {{component: kubelet, host: node-1}}
firstTimestamp: "{ts}"
lastTimestamp: "{ts}"
count: 7
"#
    );
    ok(&dc, &["create", "-f", &write(&dir, "ev.yaml", &event)]);

    let (cols, rows) = parse_table(&ok(&dc, &["get", "events", "-n", "default"]));
    assert_eq!(cols, ["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]);
    let ev = rows.iter().find(|r| r["OBJECT"] == "pod/web-1").unwrap();
    assert_eq!(ev["TYPE"], "Warning");
    assert_eq!(ev["REASON"], "BackOff");
    assert_eq!(ev["MESSAGE"], "Back-off restarting failed container");
    assert!(ev["LAST SEEN"].starts_with("3m"), "{}", ev["LAST SEEN"]);

    let (cols, rows) = parse_table(&ok(&dc, &["get", "events", "-n", "default", "-o", "wide"]));
    assert_eq!(
        cols,
        [
            "LAST SEEN",
            "TYPE",
            "REASON",
            "OBJECT",
            "SUBOBJECT",
            "SOURCE",
            "MESSAGE",
            "FIRST SEEN",
            "COUNT",
            "NAME"
        ]
    );
    let ev = rows.iter().find(|r| r["OBJECT"] == "pod/web-1").unwrap();
    assert_eq!(ev["SUBOBJECT"], "spec.containers{app}");
    assert_eq!(ev["SOURCE"], "kubelet, node-1");
    assert_eq!(ev["COUNT"], "7");
    assert_eq!(ev["NAME"], "web-1.probe");
}
