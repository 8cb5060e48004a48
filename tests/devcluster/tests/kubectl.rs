//! Conformance tests: real kubectl binaries (1.33, with spot checks of 1.27
//! and 1.30) against a real `fleetbus-devcluster` process. Every assertion
//! reads kubectl's output (mostly `get -o json`), not only exit codes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use fleetbus_testsupport::{DevCluster, DevClusterOpts};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;
use tempfile::TempDir;

const T: Duration = Duration::from_secs(20);

/// The harness finds this crate's binary in the target dir (`cargo test`
/// builds it before integration tests run).
fn start(name: &str) -> DevCluster {
    DevCluster::start(DevClusterOpts::new(name)).expect("start devcluster")
}

/// One kubectl version with its own, fresh discovery/OpenAPI cache.
struct Kubectl<'a> {
    dc: &'a DevCluster,
    bin: PathBuf,
    dir: TempDir,
}

impl<'a> Kubectl<'a> {
    fn new(dc: &'a DevCluster, version: &str) -> Kubectl<'a> {
        let bin = PathBuf::from(format!("/usr/lib/google-cloud-sdk/bin/kubectl.{version}"));
        assert!(bin.is_file(), "{} is not installed", bin.display());
        Kubectl {
            dc,
            bin,
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.bin);
        c.arg("--kubeconfig")
            .arg(self.dc.kubeconfig())
            .arg("--cache-dir")
            .arg(self.dir.path().join("cache"))
            .args(args)
            .stdin(Stdio::null());
        c
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    /// Runs kubectl, asserts success, returns stdout.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "kubectl {args:?} failed ({}):\nstdout: {}\nstderr: {}\nserver log tail:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            log_tail(self.dc)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Runs kubectl, asserts failure, returns stderr.
    fn fails(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            !out.status.success(),
            "kubectl {args:?} unexpectedly succeeded:\n{}",
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8(out.stderr).unwrap()
    }

    fn json(&self, args: &[&str]) -> Value {
        let mut a = args.to_vec();
        a.extend(["-o", "json"]);
        let out = self.ok(&a);
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
    }

    /// Writes `yaml` to a file in this kubectl's directory and returns its path.
    fn file(&self, name: &str, yaml: &str) -> String {
        let p = self.dir.path().join(name);
        std::fs::write(&p, yaml).unwrap();
        p.to_str().unwrap().to_string()
    }

    /// `get -o json`, or None when kubectl reports NotFound.
    fn get(&self, args: &[&str]) -> Option<Value> {
        let mut a = vec!["get"];
        a.extend(args);
        a.extend(["-o", "json"]);
        let out = self.run(&a);
        if out.status.success() {
            return Some(serde_json::from_slice(&out.stdout).unwrap());
        }
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("NotFound"), "kubectl {a:?}: {err}");
        None
    }
}

fn log_tail(dc: &DevCluster) -> String {
    let log = dc.log();
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

/// Lines like `configmap/settings configured` as (object, verb) pairs.
fn actions(stdout: &str) -> Vec<(String, String)> {
    stdout
        .lines()
        .filter_map(|l| l.rsplit_once(' '))
        .map(|(o, v)| (o.to_string(), v.to_string()))
        .collect()
}

fn action_of(stdout: &str, object: &str) -> String {
    actions(stdout)
        .into_iter()
        .find(|(o, _)| o == object)
        .map(|(_, v)| v)
        .unwrap_or_else(|| panic!("no line for {object} in:\n{stdout}"))
}

const BUILTINS_V1: &str = r#"apiVersion: v1
kind: Namespace
metadata:
  name: demo
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  namespace: demo
data:
  a: "1"
  b: "2"
  mode: blue
---
apiVersion: v1
kind: Secret
metadata:
  name: creds
  namespace: demo
type: Opaque
data:
  user: YWRtaW4=
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: demo
  labels: {app: web}
spec:
  replicas: 1
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: app
        image: nginx:1
        env:
        - {name: A, value: "1"}
        - {name: B, value: "2"}
        ports:
        - containerPort: 80
        - containerPort: 8080
      - name: side
        image: busybox:1
"#;

const CRD: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  names: {kind: Widget, listKind: WidgetList, plural: widgets, singular: widget, shortNames: [wd]}
  scope: Namespaced
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
              size: {type: integer}
              color: {type: string}
"#;

const WIDGET_V1: &str = r#"apiVersion: example.com/v1
kind: Widget
metadata:
  name: w1
  namespace: demo
spec:
  size: 1
  color: red
"#;

/// The same objects after an edit: cm b removed and c added; deployment
/// replicas, image, env (A removed, C added), port 80 and container `side`
/// removed; widget color changed. Namespace, Secret and CRD unchanged.
const BUILTINS_V2: &str = r#"apiVersion: v1
kind: Namespace
metadata:
  name: demo
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  namespace: demo
data:
  a: "1"
  c: "3"
  mode: blue
---
apiVersion: v1
kind: Secret
metadata:
  name: creds
  namespace: demo
type: Opaque
data:
  user: YWRtaW4=
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: demo
  labels: {app: web}
spec:
  replicas: 2
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: app
        image: nginx:2
        env:
        - {name: B, value: "2"}
        - {name: C, value: "3"}
        ports:
        - containerPort: 8080
"#;

const WIDGET_V2: &str = r#"apiVersion: example.com/v1
kind: Widget
metadata:
  name: w1
  namespace: demo
spec:
  size: 1
  color: blue
"#;

/// Applies the built-ins + CRD manifest, then the CR once the CRD is established.
fn apply_all(k: &Kubectl<'_>) {
    let all = format!("{BUILTINS_V1}---\n{CRD}");
    let f = k.file("all.yaml", &all);
    let out = k.ok(&["apply", "-f", &f]);
    for obj in [
        "namespace/demo",
        "configmap/settings",
        "secret/creds",
        "deployment.apps/web",
        "customresourcedefinition.apiextensions.k8s.io/widgets.example.com",
    ] {
        assert_eq!(action_of(&out, obj), "created", "{out}");
    }
    // A CR in the same file as its CRD fails on a real cluster too ("ensure
    // CRDs are installed first": kubectl maps every document before sending
    // any), so the CR is applied in a second call once the CRD is established.
    k.ok(&[
        "wait",
        "--for=condition=Established",
        "crd/widgets.example.com",
        "--timeout=20s",
    ]);
    let f = k.file("widget.yaml", WIDGET_V1);
    let out = k.ok(&["apply", "-f", &f]);
    assert_eq!(action_of(&out, "widget.example.com/w1"), "created");
}

fn container_names(dep: &Value) -> Vec<String> {
    dep["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn apply_manifest_then_changes_then_unchanged() {
    let dc = start("apply");
    let k = Kubectl::new(&dc, "1.33");
    apply_all(&k);

    let cm = k.json(&["get", "cm", "settings", "-n", "demo"]);
    assert_eq!(cm["data"], json!({"a":"1","b":"2","mode":"blue"}));
    let last = cm["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
        .as_str()
        .unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(last).unwrap()["data"]["b"],
        "2"
    );
    let secret = k.json(&["get", "secret", "creds", "-n", "demo"]);
    assert_eq!(secret["data"]["user"], "YWRtaW4=");
    let dep = k.json(&["get", "deploy", "web", "-n", "demo"]);
    assert_eq!(dep["spec"]["replicas"], 1);
    assert_eq!(container_names(&dep), ["app", "side"]);
    let w = k.json(&["get", "widgets", "w1", "-n", "demo"]);
    assert_eq!(w["spec"], json!({"size":1,"color":"red"}));
    let ns = k.json(&["get", "ns", "demo"]);
    assert_eq!(ns["status"]["phase"], "Active");

    // Re-apply with changes: strategic merge patches for built-ins (with
    // $setElementOrder and $patch: delete directives), a merge patch for the CR.
    let f = k.file(
        "all2.yaml",
        &format!("{BUILTINS_V2}---\n{CRD}---\n{WIDGET_V2}"),
    );
    let out = k.ok(&["apply", "-f", &f]);
    assert_eq!(action_of(&out, "namespace/demo"), "unchanged");
    assert_eq!(action_of(&out, "secret/creds"), "unchanged");
    assert_eq!(
        action_of(
            &out,
            "customresourcedefinition.apiextensions.k8s.io/widgets.example.com"
        ),
        "unchanged"
    );
    assert_eq!(action_of(&out, "configmap/settings"), "configured");
    assert_eq!(action_of(&out, "deployment.apps/web"), "configured");
    assert_eq!(action_of(&out, "widget.example.com/w1"), "configured");

    let cm = k.json(&["get", "cm", "settings", "-n", "demo"]);
    assert_eq!(cm["data"], json!({"a":"1","c":"3","mode":"blue"}));
    let dep = k.json(&["get", "deploy", "web", "-n", "demo"]);
    assert_eq!(dep["spec"]["replicas"], 2);
    assert_eq!(
        dep["spec"]["template"]["spec"]["containers"],
        json!([{"name":"app","image":"nginx:2",
            "env":[{"name":"B","value":"2"},{"name":"C","value":"3"}],
            "ports":[{"containerPort":8080}]}])
    );
    let w = k.json(&["get", "widget", "w1", "-n", "demo"]);
    assert_eq!(w["spec"], json!({"size":1,"color":"blue"}));

    // Unchanged re-apply: no PATCH at all, every object "unchanged".
    let rv_before = dep["metadata"]["resourceVersion"].clone();
    let out = k.ok(&["apply", "-f", &f]);
    let verbs: Vec<String> = actions(&out).into_iter().map(|(_, v)| v).collect();
    assert_eq!(verbs.len(), 6, "{out}");
    assert!(verbs.iter().all(|v| v == "unchanged"), "{out}");
    let dep = k.json(&["get", "deploy", "web", "-n", "demo"]);
    assert_eq!(dep["metadata"]["resourceVersion"], rv_before);
}

#[test]
fn label_annotate_and_patch_every_type() {
    let dc = start("patch");
    let k = Kubectl::new(&dc, "1.33");
    apply_all(&k);
    let objects: [&[&str]; 5] = [
        &["ns", "demo"],
        &["cm", "settings", "-n", "demo"],
        &["secret", "creds", "-n", "demo"],
        &["deployment", "web", "-n", "demo"],
        &["widget", "w1", "-n", "demo"],
    ];
    for obj in objects {
        let with = |verb: &str, extra: &[&str]| {
            let mut a = vec![verb];
            a.extend_from_slice(obj);
            a.extend_from_slice(extra);
            k.ok(&a)
        };
        let get = || {
            let mut a = vec!["get"];
            a.extend_from_slice(obj);
            k.json(&a)
        };
        assert!(with("label", &["tier=gold"]).contains("labeled"));
        assert_eq!(get()["metadata"]["labels"]["tier"], "gold", "{obj:?}");
        assert!(with("label", &["tier-"]).contains("unlabeled"));
        assert!(get()["metadata"]["labels"].get("tier").is_none(), "{obj:?}");
        assert!(with("annotate", &["note=hello"]).contains("annotated"));
        assert_eq!(get()["metadata"]["annotations"]["note"], "hello", "{obj:?}");

        // --type=merge and --type=json work on every kind.
        let out = with(
            "patch",
            &["--type=merge", "-p", r#"{"metadata":{"labels":{"m":"1"}}}"#],
        );
        assert!(out.contains("patched"), "{out}");
        assert_eq!(get()["metadata"]["labels"]["m"], "1", "{obj:?}");
        let out = with(
            "patch",
            &[
                "--type=json",
                "-p",
                r#"[{"op":"add","path":"/metadata/annotations/j","value":"2"}]"#,
            ],
        );
        assert!(out.contains("patched"), "{out}");
        assert_eq!(get()["metadata"]["annotations"]["j"], "2", "{obj:?}");
        // A no-op patch is reported as such (no resourceVersion bump).
        let rv = get()["metadata"]["resourceVersion"].clone();
        let out = with(
            "patch",
            &["--type=merge", "-p", r#"{"metadata":{"labels":{"m":"1"}}}"#],
        );
        assert!(out.contains("patched (no change)"), "{obj:?}: {out}");
        assert_eq!(get()["metadata"]["resourceVersion"], rv);
    }

    // Strategic merge patch (kubectl's default) on built-ins.
    k.ok(&[
        "patch",
        "cm",
        "settings",
        "-n",
        "demo",
        "-p",
        r#"{"data":{"a":null,"s":"x"}}"#,
    ]);
    let cm = k.json(&["get", "cm", "settings", "-n", "demo"]);
    assert_eq!(cm["data"], json!({"b":"2","mode":"blue","s":"x"}));
    k.ok(&[
        "patch",
        "secret",
        "creds",
        "-n",
        "demo",
        "-p",
        r#"{"data":{"pass":"cHc="}}"#,
    ]);
    let s = k.json(&["get", "secret", "creds", "-n", "demo"]);
    assert_eq!(s["data"]["pass"], "cHc=");
    k.ok(&[
        "patch",
        "ns",
        "demo",
        "-p",
        r#"{"metadata":{"labels":{"s":"1"}}}"#,
    ]);
    assert_eq!(
        k.json(&["get", "ns", "demo"])["metadata"]["labels"]["s"],
        "1"
    );
    // Containers merge by name, env by name: only `app`'s env changes.
    k.ok(&[
        "patch",
        "deploy",
        "web",
        "-n",
        "demo",
        "-p",
        r#"{"spec":{"template":{"spec":{"containers":[{"name":"app","env":[{"name":"Z","value":"26"}]}]}}}}"#,
    ]);
    let dep = k.json(&["get", "deploy", "web", "-n", "demo"]);
    assert_eq!(container_names(&dep), ["app", "side"]);
    let env = &dep["spec"]["template"]["spec"]["containers"][0]["env"];
    assert_eq!(
        env,
        &json!([{"name":"Z","value":"26"},{"name":"A","value":"1"},{"name":"B","value":"2"}])
    );
    // ... and `$patch: delete` removes one container.
    k.ok(&[
        "patch",
        "deploy",
        "web",
        "-n",
        "demo",
        "-p",
        r#"{"spec":{"template":{"spec":{"containers":[{"name":"side","$patch":"delete"}]}}}}"#,
    ]);
    assert_eq!(
        container_names(&k.json(&["get", "deploy", "web", "-n", "demo"])),
        ["app"]
    );

    // Custom resources refuse strategic merge patch, as kube-apiserver does.
    let err = k.fails(&[
        "patch",
        "widget",
        "w1",
        "-n",
        "demo",
        "-p",
        r#"{"spec":{"size":3}}"#,
    ]);
    assert!(
        err.contains("the body of the request was in an unknown format"),
        "{err}"
    );
    k.ok(&[
        "patch",
        "widget",
        "w1",
        "-n",
        "demo",
        "--type=merge",
        "-p",
        r#"{"spec":{"size":3}}"#,
    ]);
    assert_eq!(
        k.json(&["get", "widget", "w1", "-n", "demo"])["spec"]["size"],
        3
    );

    // A failed JSON-patch test operation is rejected and changes nothing.
    let err = k.fails(&[
        "patch",
        "cm",
        "settings",
        "-n",
        "demo",
        "--type=json",
        "-p",
        r#"[{"op":"test","path":"/data/mode","value":"red"},{"op":"remove","path":"/data/mode"}]"#,
    ]);
    assert!(err.contains("invalid"), "{err}");
    assert_eq!(
        k.json(&["get", "cm", "settings", "-n", "demo"])["data"]["mode"],
        "blue"
    );
}

#[test]
fn delete_waits_until_gone_and_api_resources_lists_the_crd() {
    let dc = start("delete");
    let k = Kubectl::new(&dc, "1.33");
    apply_all(&k);

    let out = k.ok(&["api-resources"]);
    let rows: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    let row = |name: &str| {
        rows.iter()
            .find(|r| r.first() == Some(&name))
            .unwrap_or_else(|| panic!("{name} missing from api-resources:\n{out}"))
            .clone()
    };
    assert_eq!(
        row("configmaps"),
        ["configmaps", "cm", "v1", "true", "ConfigMap"]
    );
    assert_eq!(
        row("deployments"),
        ["deployments", "deploy", "apps/v1", "true", "Deployment"]
    );
    assert_eq!(
        row("widgets"),
        ["widgets", "wd", "example.com/v1", "true", "Widget"]
    );
    assert!(row("namespaces").contains(&"false"));

    for (obj, printed) in [
        (
            &["widget", "w1", "-n", "demo"][..],
            "widget.example.com \"w1\" deleted",
        ),
        (
            &["cm", "settings", "-n", "demo"][..],
            "configmap \"settings\" deleted",
        ),
        (
            &["deploy", "web", "-n", "demo"][..],
            "deployment.apps \"web\" deleted",
        ),
    ] {
        let mut a = vec!["delete"];
        a.extend_from_slice(obj);
        let out = k.ok(&a);
        assert!(out.contains(printed), "{out}");
        assert!(
            k.get(obj).is_none(),
            "{obj:?} still exists after delete returned"
        );
    }
    // Namespace deletion waits for the namespace to empty and disappear.
    let out = k.ok(&["delete", "ns", "demo", "--timeout=30s"]);
    assert!(out.contains("namespace \"demo\" deleted"), "{out}");
    assert!(k.get(&["ns", "demo"]).is_none());
    assert!(k.get(&["secret", "creds", "-n", "demo"]).is_none());
    let out = k.ok(&["delete", "crd", "widgets.example.com"]);
    assert!(out.contains("deleted"), "{out}");
    let out = k.ok(&["api-resources"]);
    assert!(!out.contains("example.com/v1"), "{out}");
}

#[test]
fn edit_through_kube_editor() {
    let dc = start("edit");
    let k = Kubectl::new(&dc, "1.33");
    let f = k.file("cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: default\ndata:\n  mode: blue\n");
    k.ok(&["apply", "-f", &f]);
    let editor = k.dir.path().join("editor.sh");
    std::fs::write(
        &editor,
        "#!/bin/sh\nsed -i 's/mode: blue/mode: green/' \"$1\"\n",
    )
    .unwrap();
    set_executable(&editor);
    let out = k
        .command(&["edit", "cm", "settings", "-n", "default"])
        .env("KUBE_EDITOR", &editor)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("configmap/settings edited"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cm = k.json(&[
        "get",
        "cm",
        "settings",
        "-n",
        "default",
        "--show-managed-fields",
    ]);
    assert_eq!(cm["data"]["mode"], "green");
    let managers: Vec<&str> = cm["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["manager"].as_str().unwrap())
        .collect();
    assert!(managers.contains(&"kubectl-edit"), "{managers:?}");
}

fn set_executable(p: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Kills the watching kubectl (a child of this test) when dropped.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Spawns `kubectl <args>` and forwards its stdout lines into a channel.
fn spawn_lines(k: &Kubectl<'_>, args: &[&str]) -> (KillOnDrop, mpsc::Receiver<String>) {
    let mut child = k
        .command(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    (KillOnDrop(child), rx)
}

/// Reads lines until one satisfies `pred`, failing after `T` with what was seen.
fn read_until(rx: &mpsc::Receiver<String>, what: &str, pred: impl Fn(&str) -> bool) -> String {
    let deadline = std::time::Instant::now() + T;
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) if pred(&line) => return line,
            Ok(line) => seen.push(line),
            Err(_) => panic!("timed out after {T:?} waiting for {what}; saw: {seen:?}"),
        }
    }
}

/// `apiVersion: v1` ConfigMap manifest in namespace default.
fn cm_yaml(name: &str, data: &[(&str, &str)]) -> String {
    let mut y = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: default\ndata:\n"
    );
    for (k, v) in data {
        y.push_str(&format!("  {k}: \"{v}\"\n"));
    }
    y
}

/// Whether a `--output-watch-events` table row is `<event> <name> ...`.
fn event_row(line: &str, event: &str, name: &str) -> bool {
    let mut cols = line.split_whitespace();
    cols.next() == Some(event) && cols.next() == Some(name)
}

#[test]
fn get_watch_sees_changes() {
    let dc = start("watch");
    let k = Kubectl::new(&dc, "1.33");
    // `kubectl create configmap` in 1.33 sends protobuf, which the devcluster
    // does not decode; `apply -f` sends JSON.
    let first = k.file("first.yaml", &cm_yaml("first", &[("a", "1")]));
    k.ok(&["apply", "-f", &first]);

    // Default (table) output.
    let (_child, rx) = spawn_lines(&k, &["get", "cm", "-n", "default", "-w"]);
    let header = read_until(&rx, "the table header", |l| l.starts_with("NAME"));
    assert!(
        header.contains("DATA") && header.contains("AGE"),
        "{header}"
    );
    read_until(&rx, "the initial row", |l| l.starts_with("first "));
    let second = k.file("second.yaml", &cm_yaml("second", &[("a", "1"), ("b", "2")]));
    k.ok(&["apply", "-f", &second]);
    let row = read_until(&rx, "the new configmap's row", |l| l.starts_with("second "));
    assert_eq!(row.split_whitespace().nth(1), Some("2"), "{row}");

    // A single object by name, seeing a label change as MODIFIED.
    let (_child2, rx2) = spawn_lines(
        &k,
        &[
            "get",
            "cm",
            "first",
            "-n",
            "default",
            "-w",
            "--output-watch-events",
        ],
    );
    read_until(&rx2, "the synthetic ADDED event", |l| {
        event_row(l, "ADDED", "first")
    });
    k.ok(&["label", "cm", "first", "-n", "default", "seen=yes"]);
    read_until(&rx2, "the MODIFIED event", |l| {
        event_row(l, "MODIFIED", "first")
    });

    // A delete shows up as DELETED.
    let (_child3, rx3) = spawn_lines(
        &k,
        &["get", "cm", "-n", "default", "-w", "--output-watch-events"],
    );
    read_until(&rx3, "ADDED second", |l| event_row(l, "ADDED", "second"));
    k.ok(&["delete", "cm", "second", "-n", "default"]);
    read_until(&rx3, "DELETED second", |l| {
        event_row(l, "DELETED", "second")
    });
}

#[test]
fn server_side_apply_conflicts_and_force() {
    let dc = start("ssa");
    let k = Kubectl::new(&dc, "1.33");
    let v1 = k.file("v1.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: shared\n  namespace: default\ndata:\n  a: \"1\"\n  b: \"1\"\n");
    let out = k.ok(&["apply", "--server-side", "-f", &v1]);
    assert_eq!(action_of(&out, "configmap/shared"), "serverside-applied");
    let out = k.ok(&["apply", "--server-side", "-f", &v1]);
    assert_eq!(action_of(&out, "configmap/shared"), "serverside-applied");

    let cm = k.json(&[
        "get",
        "cm",
        "shared",
        "-n",
        "default",
        "--show-managed-fields",
    ]);
    assert_eq!(cm["data"], json!({"a":"1","b":"1"}));
    let mf = cm["metadata"]["managedFields"].as_array().unwrap();
    assert_eq!(mf.len(), 1, "{mf:?}");
    assert_eq!(mf[0]["manager"], "kubectl");
    assert_eq!(mf[0]["operation"], "Apply");
    assert_eq!(mf[0]["fieldsV1"], json!({"f:data":{"f:a":{},"f:b":{}}}));

    // A second manager changing a field the first owns: conflict.
    let v2 = k.file("v2.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: shared\n  namespace: default\ndata:\n  a: \"2\"\n");
    let err = k.fails(&["apply", "--server-side", "--field-manager=other", "-f", &v2]);
    assert!(
        err.contains(r#"Apply failed with 1 conflict: conflict with "kubectl": .data.a"#),
        "{err}"
    );
    assert!(err.contains("--force-conflicts"), "{err}");
    assert_eq!(
        k.json(&["get", "cm", "shared", "-n", "default"])["data"]["a"],
        "1"
    );

    // Forced: the value changes and ownership of .data.a moves.
    let out = k.ok(&[
        "apply",
        "--server-side",
        "--field-manager=other",
        "--force-conflicts",
        "-f",
        &v2,
    ]);
    assert_eq!(action_of(&out, "configmap/shared"), "serverside-applied");
    let cm = k.json(&[
        "get",
        "cm",
        "shared",
        "-n",
        "default",
        "--show-managed-fields",
    ]);
    assert_eq!(cm["data"], json!({"a":"2","b":"1"}));
    let fields = |m: &str| {
        cm["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["manager"] == m)
            .unwrap_or_else(|| panic!("no entry for {m}: {cm}"))["fieldsV1"]
            .clone()
    };
    assert_eq!(fields("other"), json!({"f:data":{"f:a":{}}}));
    assert_eq!(fields("kubectl"), json!({"f:data":{"f:b":{}}}));

    // The first manager dropping b from its config removes it (nobody else owns it).
    let v3 = k.file("v3.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: shared\n  namespace: default\ndata:\n  c: \"3\"\n");
    k.ok(&["apply", "--server-side", "-f", &v3]);
    assert_eq!(
        k.json(&["get", "cm", "shared", "-n", "default"])["data"],
        json!({"a":"2","c":"3"})
    );
}

#[test]
fn strict_validation_rejects_unknown_fields() {
    let dc = start("strict");
    let k = Kubectl::new(&dc, "1.33");
    let typo = k.file(
        "typo.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: typo\n  namespace: default\ndota:\n  a: b\n",
    );
    let err = k.fails(&["apply", "-f", &typo]);
    assert!(err.contains(r#"unknown field "dota""#), "{err}");
    assert!(k.get(&["cm", "typo", "-n", "default"]).is_none());

    let dep = k.file(
        "dep.yaml",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  namespace: default\nspec:\n  selector:\n    matchLabels: {app: web}\n  template:\n    metadata:\n      labels: {app: web}\n    spec:\n      containers:\n      - name: app\n        imagee: nginx\n",
    );
    let err = k.fails(&["apply", "-f", &dep]);
    assert!(
        err.contains(r#"unknown field "spec.template.spec.containers[0].imagee""#),
        "{err}"
    );

    // Server-side apply validates too.
    let err = k.fails(&["apply", "--server-side", "-f", &typo]);
    assert!(err.contains(r#"unknown field "dota""#), "{err}");

    // With validation off kubectl sends fieldValidation=Ignore and the object is created.
    k.ok(&["apply", "--validate=false", "-f", &typo]);
    let cm = k.json(&["get", "cm", "typo", "-n", "default"]);
    assert_eq!(cm["metadata"]["name"], "typo");
}

#[test]
fn older_kubectl_versions_apply_and_get() {
    let dc = start("versions");
    for (i, version) in ["1.27", "1.30"].into_iter().enumerate() {
        let k = Kubectl::new(&dc, version);
        let name = format!("v{i}");
        let manifest = format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: default\ndata:\n  a: \"1\"\n---\n\
             apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\n  namespace: default\nspec:\n  selector:\n    matchLabels: {{app: {name}}}\n  template:\n    metadata:\n      labels: {{app: {name}}}\n    spec:\n      containers:\n      - name: app\n        image: nginx:1\n"
        );
        let f = k.file("m.yaml", &manifest);
        let out = k.ok(&["apply", "-f", &f]);
        assert_eq!(
            action_of(&out, &format!("configmap/{name}")),
            "created",
            "{version}: {out}"
        );
        assert_eq!(
            action_of(&out, &format!("deployment.apps/{name}")),
            "created",
            "{version}: {out}"
        );
        let out = k.ok(&["apply", "-f", &f]);
        assert_eq!(
            action_of(&out, &format!("configmap/{name}")),
            "unchanged",
            "{version}: {out}"
        );

        let changed = k.file(
            "m2.yaml",
            &manifest
                .replace("a: \"1\"", "a: \"2\"")
                .replace("nginx:1", "nginx:2"),
        );
        let out = k.ok(&["apply", "-f", &changed]);
        assert_eq!(
            action_of(&out, &format!("configmap/{name}")),
            "configured",
            "{version}: {out}"
        );
        let cm = k.json(&["get", "cm", &name, "-n", "default"]);
        assert_eq!(cm["data"]["a"], "2", "{version}");
        let dep = k.json(&["get", "deploy", &name, "-n", "default"]);
        assert_eq!(
            dep["spec"]["template"]["spec"]["containers"][0]["image"], "nginx:2",
            "{version}"
        );
        let list = k.json(&["get", "cm", "-n", "default"]);
        assert!(
            list["items"]
                .as_array()
                .unwrap()
                .iter()
                .any(|i| i["metadata"]["name"] == name.as_str()),
            "{version}: {list}"
        );
        let table = k.ok(&["get", "deploy", "-n", "default"]);
        assert!(
            table.lines().any(|l| l.starts_with(&format!("{name} "))),
            "{version}: {table}"
        );
    }
    // Both versions ran against the same cluster; 1.33 sees what they made.
    let k = Kubectl::new(&dc, "1.33");
    let list = k.json(&["get", "cm", "-n", "default"]);
    let names: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| i["metadata"]["name"].as_str())
        .collect();
    assert!(names.contains(&"v0") && names.contains(&"v1"), "{names:?}");
}

#[test]
fn explain_reads_the_published_schemas() {
    let dc = start("explain");
    let k = Kubectl::new(&dc, "1.33");
    let out = k.ok(&["explain", "configmap.data"]);
    assert!(
        out.contains("Data contains the configuration data"),
        "{out}"
    );
    let out = k.ok(&["explain", "deployment.spec.template.spec.containers.image"]);
    assert!(out.contains("FIELD: image <string>"), "{out}");

    let f = k.file("crd.yaml", CRD);
    k.ok(&["apply", "-f", &f]);
    k.ok(&[
        "wait",
        "--for=condition=Established",
        "crd/widgets.example.com",
        "--timeout=20s",
    ]);
    let out = k.ok(&["explain", "widget.spec"]);
    let size = out.lines().find(|l| l.trim_start().starts_with("size"));
    assert!(size.is_some_and(|l| l.contains("<integer>")), "{out}");
}

#[test]
fn secret_string_data_is_stored_as_data() {
    let dc = start("secret");
    let k = Kubectl::new(&dc, "1.33");
    let f = k.file(
        "secret.yaml",
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: creds\n  namespace: default\nstringData:\n  user: admin\n",
    );
    k.ok(&["apply", "-f", &f]);
    let s = k.json(&["get", "secret", "creds", "-n", "default"]);
    // kube-apiserver merges stringData into data (base64) and never stores stringData.
    assert_eq!(s["data"]["user"], "YWRtaW4=", "{s}");
    assert!(s.get("stringData").is_none(), "{s}");
    assert_eq!(s["type"], "Opaque");
    // Re-applying the same manifest: kubectl's three-way merge always sends a
    // patch for stringData (the server never stores it), so real kube prints
    // "configured" (kubernetes/kubernetes#87736); the write itself must be a
    // no-op that leaves the resourceVersion alone.
    let rv = s["metadata"]["resourceVersion"].clone();
    let out = k.ok(&["apply", "-f", &f]);
    assert_eq!(action_of(&out, "secret/creds"), "configured", "{out}");
    let again = k.json(&["get", "secret", "creds", "-n", "default"]);
    assert_eq!(again["metadata"]["resourceVersion"], rv, "{again}");
    assert_eq!(again["data"]["user"], "YWRtaW4=", "{again}");
}
