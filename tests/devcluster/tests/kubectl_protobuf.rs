//! kubectl 1.33 typed commands send protobuf request bodies (no JSON fallback):
//! each test runs them against a real `fleetbus-devcluster` and reads the
//! stored objects back with `get -o json`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use fleetbus_testsupport::{DevCluster, DevClusterOpts};
use serde_json::{json, Value};

/// The kubectl that sends protobuf (and that the PATH dispatcher picks for a
/// server reporting 1.33).
const KUBECTL: &str = "1.33";

fn start(name: &str, token: Option<&str>) -> DevCluster {
    DevCluster::start(DevClusterOpts {
        token: token.map(str::to_owned),
        // client-go sends bearer tokens only over https.
        tls: token.is_some(),
        ..DevClusterOpts::new(name)
    })
    .expect("start devcluster")
}

/// Runs kubectl 1.33, asserts it succeeded, returns stdout.
fn ok(dc: &DevCluster, args: &[&str]) -> String {
    let out = dc.kubectl(KUBECTL, args);
    assert!(
        out.status.success(),
        "kubectl {args:?} failed: {}\nserver log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        dc.log()
    );
    String::from_utf8(out.stdout).unwrap()
}

fn get_json(dc: &DevCluster, args: &[&str]) -> Value {
    let mut all = vec!["get"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["-o", "json"]);
    serde_json::from_str(&ok(dc, &all)).unwrap()
}

#[test]
fn create_namespace_configmap_secret_and_service_account() {
    let dc = start("proto-basic", None);
    assert!(ok(&dc, &["create", "ns", "team"]).contains("namespace/team created"));
    let ns = get_json(&dc, &["ns", "team"]);
    assert_eq!(ns["metadata"]["name"], "team");
    assert_eq!(ns["status"]["phase"], "Active");

    ok(
        &dc,
        &[
            "create",
            "configmap",
            "cfg",
            "-n",
            "team",
            "--from-literal=a=1",
            "--from-literal=b=two words",
        ],
    );
    let cm = get_json(&dc, &["configmap", "cfg", "-n", "team"]);
    assert_eq!(cm["data"], json!({"a": "1", "b": "two words"}));

    ok(
        &dc,
        &[
            "create",
            "secret",
            "generic",
            "creds",
            "-n",
            "team",
            "--from-literal=password=hunter2",
        ],
    );
    let secret = get_json(&dc, &["secret", "creds", "-n", "team"]);
    // base64("hunter2"): the protobuf bytes field became JSON base64, once.
    assert_eq!(secret["data"], json!({"password": "aHVudGVyMg=="}));
    assert_eq!(secret["type"], "Opaque");

    ok(&dc, &["create", "sa", "robot", "-n", "team"]);
    let sa = get_json(&dc, &["sa", "robot", "-n", "team"]);
    assert_eq!(sa["metadata"]["namespace"], "team");
    assert!(sa["metadata"]["uid"]
        .as_str()
        .is_some_and(|u| !u.is_empty()));
}

#[test]
fn create_deployment_and_job_keep_the_pod_template() {
    let dc = start("proto-workloads", None);
    ok(
        &dc,
        &[
            "create",
            "deployment",
            "web",
            "--image=nginx:1.27",
            "--port=80",
            "--replicas=2",
            "-n",
            "default",
        ],
    );
    let d = get_json(&dc, &["deployment", "web", "-n", "default"]);
    assert_eq!(d["spec"]["replicas"], 2);
    assert_eq!(
        d["spec"]["selector"],
        json!({"matchLabels": {"app": "web"}})
    );
    assert_eq!(
        d["spec"]["template"]["metadata"]["labels"],
        json!({"app": "web"})
    );
    let c = &d["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["name"], "nginx");
    assert_eq!(c["image"], "nginx:1.27");
    assert_eq!(c["ports"][0]["containerPort"], 80);

    ok(
        &dc,
        &[
            "create",
            "job",
            "pi",
            "--image=perl:5.40",
            "-n",
            "default",
            "--",
            "perl",
            "-e",
            "print 1",
        ],
    );
    let job = get_json(&dc, &["job", "pi", "-n", "default"]);
    let c = &job["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["image"], "perl:5.40");
    assert_eq!(c["command"], json!(["perl", "-e", "print 1"]));
    assert_eq!(job["spec"]["template"]["spec"]["restartPolicy"], "Never");
}

#[test]
fn create_role_and_rolebinding() {
    let dc = start("proto-rbac", None);
    ok(
        &dc,
        &[
            "create",
            "role",
            "reader",
            "--verb=get,list",
            "--resource=pods,configmaps",
            "-n",
            "default",
        ],
    );
    let role = get_json(&dc, &["role", "reader", "-n", "default"]);
    assert_eq!(
        role["rules"],
        json!([{"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods", "configmaps"]}])
    );

    ok(
        &dc,
        &[
            "create",
            "rolebinding",
            "read",
            "--role=reader",
            "--serviceaccount=default:robot",
            "--user=alice",
            "-n",
            "default",
        ],
    );
    let rb = get_json(&dc, &["rolebinding", "read", "-n", "default"]);
    assert_eq!(
        rb["roleRef"],
        json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"})
    );
    let subjects = rb["subjects"].as_array().unwrap();
    assert!(subjects
        .contains(&json!({"kind": "ServiceAccount", "name": "robot", "namespace": "default"})));
    assert!(subjects.contains(
        &json!({"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "alice"})
    ));
}

#[test]
fn create_token_mints_a_bearer_token_the_server_accepts() {
    let dc = start("proto-token", Some("admin-secret"));
    ok(&dc, &["create", "sa", "robot", "-n", "default"]);
    let token = ok(
        &dc,
        &[
            "create",
            "token",
            "robot",
            "-n",
            "default",
            "--duration=10m",
            "--audience=nats",
        ],
    );
    let token = token.trim();
    assert!(!token.is_empty(), "kubectl create token printed nothing");

    // The minted token replaces the kubeconfig's admin token.
    let ns = get_json(&dc, &["ns", "default", "--token", token]);
    assert_eq!(ns["metadata"]["name"], "default");

    // A token the server never minted is refused: the check above is not vacuous.
    let refused = dc.kubectl(KUBECTL, &["get", "ns", "default", "--token", "not-minted"]);
    assert!(!refused.status.success());
}

#[test]
fn create_cronjob_service_pdb_ingress_and_cluster_rbac() {
    let dc = start("proto-more", None);
    ok(
        &dc,
        &[
            "create",
            "cronjob",
            "nightly",
            "--image=busybox",
            "--schedule=0 3 * * *",
            "-n",
            "default",
            "--",
            "date",
        ],
    );
    let cj = get_json(&dc, &["cronjob", "nightly", "-n", "default"]);
    assert_eq!(cj["spec"]["schedule"], "0 3 * * *");
    assert_eq!(
        cj["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["command"],
        json!(["date"])
    );

    ok(
        &dc,
        &[
            "create",
            "service",
            "clusterip",
            "web",
            "--tcp=80:8080",
            "--tcp=443:https",
            "-n",
            "default",
        ],
    );
    let svc = get_json(&dc, &["service", "web", "-n", "default"]);
    let ports = &svc["spec"]["ports"];
    assert_eq!(ports[0]["port"], 80);
    assert_eq!(ports[0]["targetPort"], 8080);
    assert_eq!(ports[1]["targetPort"], "https");
    assert_eq!(svc["spec"]["selector"], json!({"app": "web"}));

    ok(
        &dc,
        &[
            "create",
            "pdb",
            "web",
            "--selector=app=web",
            "--min-available=50%",
            "-n",
            "default",
        ],
    );
    let pdb = get_json(&dc, &["pdb", "web", "-n", "default"]);
    assert_eq!(pdb["spec"]["minAvailable"], "50%");

    ok(
        &dc,
        &[
            "create",
            "ingress",
            "web",
            "--class=nginx",
            "--rule=foo.test/api*=web:8080,tls=web-tls",
            "-n",
            "default",
        ],
    );
    let ing = get_json(&dc, &["ingress", "web", "-n", "default"]);
    let path = &ing["spec"]["rules"][0]["http"]["paths"][0];
    assert_eq!(path["pathType"], "Prefix");
    assert_eq!(
        path["backend"]["service"],
        json!({"name": "web", "port": {"number": 8080}})
    );
    assert_eq!(ing["spec"]["tls"][0]["secretName"], "web-tls");

    ok(
        &dc,
        &[
            "create",
            "clusterrole",
            "agg",
            "--aggregation-rule=fleetbus.dev/aggregate=true",
        ],
    );
    let cr = get_json(&dc, &["clusterrole", "agg"]);
    assert_eq!(
        cr["aggregationRule"]["clusterRoleSelectors"],
        json!([{"matchLabels": {"fleetbus.dev/aggregate": "true"}}])
    );
    ok(
        &dc,
        &[
            "create",
            "clusterrole",
            "metrics",
            "--verb=get",
            "--non-resource-url=/metrics",
        ],
    );
    let cr = get_json(&dc, &["clusterrole", "metrics"]);
    assert_eq!(
        cr["rules"],
        json!([{"verbs": ["get"], "nonResourceURLs": ["/metrics"]}])
    );
    ok(
        &dc,
        &[
            "create",
            "clusterrolebinding",
            "metrics",
            "--clusterrole=metrics",
            "--user=alice",
        ],
    );
    let crb = get_json(&dc, &["clusterrolebinding", "metrics"]);
    assert_eq!(crb["roleRef"]["name"], "metrics");
    assert_eq!(crb["subjects"][0]["name"], "alice");
}

#[test]
fn auth_can_i_reviews_allow_everything() {
    let dc = start("proto-auth", None);
    let out = dc.kubectl(KUBECTL, &["auth", "can-i", "create", "deployments"]);
    assert!(
        out.status.success(),
        "can-i failed: {}\nserver log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        dc.log()
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "yes");
    assert_eq!(
        ok(&dc, &["auth", "can-i", "get", "/healthz"]).trim(),
        "yes",
        "a non-resource URL"
    );
    let list = ok(&dc, &["auth", "can-i", "--list", "-n", "kube-system"]);
    let rows: Vec<Vec<&str>> = list
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert!(
        rows.iter()
            .any(|r| r.first() == Some(&"*.*") && r.last() == Some(&"[*]")),
        "{list}"
    );
    assert!(
        rows.iter()
            .any(|r| r.first() == Some(&"[*]") && r.last() == Some(&"[*]")),
        "non-resource rule:\n{list}"
    );
    // Reviews are never stored: the collection has no list verb.
    let err = dc.kubectl(KUBECTL, &["get", "selfsubjectaccessreviews"]);
    assert!(!err.status.success());
}
