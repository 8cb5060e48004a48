//! ServiceAccount tokens and `--authorization rbac` against a real
//! `fleetbus-devcluster`, driven by kubectl 1.33 as an admin and as a
//! ServiceAccount (`--token`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use fleetbus_testsupport::{DevCluster, DevClusterOpts};
use serde_json::Value;

const KUBECTL: &str = "1.33";
const SA_USER: &str = "system:serviceaccount:team:bot";

fn start(name: &str, rbac: bool) -> DevCluster {
    DevCluster::start(DevClusterOpts {
        token: Some("admin-secret".into()),
        // client-go sends bearer tokens only over https.
        tls: true,
        extra_args: if rbac {
            vec!["--authorization".into(), "rbac".into()]
        } else {
            Vec::new()
        },
        ..DevClusterOpts::new(name)
    })
    .expect("start devcluster")
}

fn run(dc: &DevCluster, args: &[&str]) -> (bool, String, String) {
    let out = dc.kubectl(KUBECTL, args);
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).trim().to_string(),
        String::from_utf8_lossy(&out.stderr).trim().to_string(),
    )
}

fn ok(dc: &DevCluster, args: &[&str]) -> String {
    let (success, stdout, stderr) = run(dc, args);
    assert!(
        success,
        "kubectl {args:?} failed: {stderr}\nserver log:\n{}",
        dc.log()
    );
    stdout
}

/// `kubectl <args> --token <token>`: (success, stdout, stderr).
fn as_sa(dc: &DevCluster, token: &str, args: &[&str]) -> (bool, String, String) {
    let mut all = args.to_vec();
    all.extend_from_slice(&["--token", token]);
    run(dc, &all)
}

fn can_i(dc: &DevCluster, token: &str, args: &[&str]) -> String {
    let mut all = vec!["auth", "can-i"];
    all.extend_from_slice(args);
    // can-i exits 1 for "no": only stdout matters.
    as_sa(dc, token, &all).1
}

fn team_bot(dc: &DevCluster) -> String {
    ok(dc, &["create", "ns", "team"]);
    ok(dc, &["create", "sa", "bot", "-n", "team"]);
    ok(
        dc,
        &[
            "create",
            "token",
            "bot",
            "-n",
            "team",
            "--audience=fleetbus",
        ],
    )
}

#[test]
fn create_token_returns_a_jwt_with_kube_claims() {
    let dc = start("jwt", false);
    let token = team_bot(&dc);
    let parts: Vec<&str> = token.split('.').collect();
    assert_eq!(parts.len(), 3, "not a compact JWT: {token}");
    let header: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[0]).unwrap()).unwrap();
    assert_eq!(header["alg"], "ES256");
    let claims: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[1]).unwrap()).unwrap();
    assert_eq!(claims["sub"], SA_USER);
    assert_eq!(
        claims["iss"],
        "https://kubernetes.default.svc.cluster.local"
    );
    assert_eq!(claims["aud"], serde_json::json!(["fleetbus"]));
    assert_eq!(claims["kubernetes.io"]["namespace"], "team");
    assert_eq!(claims["kubernetes.io"]["serviceaccount"]["name"], "bot");
    let uid = ok(
        &dc,
        &[
            "get",
            "sa",
            "bot",
            "-n",
            "team",
            "-o",
            "jsonpath={.metadata.uid}",
        ],
    );
    assert_eq!(
        claims["kubernetes.io"]["serviceaccount"]["uid"],
        uid.as_str()
    );
    let lifetime = claims["exp"].as_i64().unwrap() - claims["iat"].as_i64().unwrap();
    assert_eq!(lifetime, 3600, "kubectl's default --duration is 1h");

    // Accepted while valid; without --authorization rbac it may do anything.
    let (success, _, stderr) = as_sa(&dc, &token, &["get", "secrets", "-n", "kube-system"]);
    assert!(success, "{stderr}");
    // A tampered token (claims of another SA, same signature) is refused.
    let mut forged_claims = claims.clone();
    forged_claims["kubernetes.io"]["serviceaccount"]["name"] = "default".into();
    let forged = format!(
        "{}.{}.{}",
        parts[0],
        URL_SAFE_NO_PAD.encode(serde_json::to_vec(&forged_claims).unwrap()),
        parts[2]
    );
    let (success, _, stderr) = as_sa(&dc, &forged, &["get", "ns", "team"]);
    assert!(!success && stderr.contains("Unauthorized"), "{stderr}");
    // Deleting the ServiceAccount invalidates its tokens, as in kube-apiserver.
    ok(&dc, &["delete", "sa", "bot", "-n", "team"]);
    let (success, _, stderr) = as_sa(&dc, &token, &["get", "ns", "team"]);
    assert!(!success && stderr.contains("Unauthorized"), "{stderr}");
}

#[test]
fn rbac_grants_what_bindings_say_and_nothing_else() {
    let dc = start("rbac", true);
    let token = team_bot(&dc);

    // Nothing bound yet: 403 with kube-apiserver's message.
    let (success, _, stderr) = as_sa(&dc, &token, &["get", "configmaps", "-n", "team"]);
    assert!(!success);
    assert!(
        stderr.contains(&format!(
            "configmaps is forbidden: User \"{SA_USER}\" cannot list resource \"configmaps\" in API group \"\" in the namespace \"team\""
        )),
        "{stderr}"
    );
    assert_eq!(
        can_i(&dc, &token, &["list", "configmaps", "-n", "team"]),
        "no"
    );
    // Discovery is open to every authenticated user (kube's system:discovery).
    let (success, _, stderr) = as_sa(&dc, &token, &["api-resources"]);
    assert!(success, "{stderr}");
    // The admin token is never subject to RBAC.
    ok(&dc, &["get", "secrets", "-A"]);

    // A Role + RoleBinding: allowed in that namespace, for those verbs only.
    ok(
        &dc,
        &[
            "create",
            "role",
            "cm",
            "--verb=get,list",
            "--resource=configmaps",
            "-n",
            "team",
        ],
    );
    ok(
        &dc,
        &[
            "create",
            "rolebinding",
            "cm",
            "--role=cm",
            "--serviceaccount=team:bot",
            "-n",
            "team",
        ],
    );
    let (success, _, stderr) = as_sa(&dc, &token, &["get", "configmaps", "-n", "team"]);
    assert!(success, "{stderr}");
    assert_eq!(
        can_i(&dc, &token, &["list", "configmaps", "-n", "team"]),
        "yes"
    );
    assert_eq!(
        can_i(&dc, &token, &["create", "configmaps", "-n", "team"]),
        "no"
    );
    assert_eq!(
        can_i(&dc, &token, &["list", "configmaps", "-n", "default"]),
        "no"
    );
    // `auth can-i --list` (a SelfSubjectRulesReview) shows the granted rules.
    let list = can_i(&dc, &token, &["--list", "-n", "team"]);
    let cm_line = list
        .lines()
        .find(|l| l.starts_with("configmaps "))
        .unwrap_or_else(|| panic!("no configmaps rule in:\n{list}"));
    assert!(cm_line.contains("[get list]"), "{list}");
    assert!(
        !list
            .lines()
            .any(|l| l.starts_with("secrets ") || l.starts_with("*.* ")),
        "{list}"
    );
    let (success, _, stderr) = as_sa(&dc, &token, &["create", "configmap", "x", "-n", "team"]);
    assert!(
        !success && stderr.contains("cannot create resource \"configmaps\""),
        "{stderr}"
    );

    // resourceNames and subresources.
    ok(
        &dc,
        &[
            "create",
            "clusterrole",
            "one-ns",
            "--verb=get",
            "--resource=namespaces",
            "--resource-name=team",
        ],
    );
    ok(
        &dc,
        &[
            "create",
            "clusterrolebinding",
            "one-ns",
            "--clusterrole=one-ns",
            "--serviceaccount=team:bot",
        ],
    );
    let (success, _, stderr) = as_sa(&dc, &token, &["get", "ns", "team"]);
    assert!(success, "{stderr}");
    let (success, _, stderr) = as_sa(&dc, &token, &["get", "ns", "default"]);
    assert!(
        !success && stderr.contains("namespaces \"default\" is forbidden"),
        "{stderr}"
    );
    assert_eq!(
        can_i(
            &dc,
            &token,
            &["create", "serviceaccounts/token", "-n", "team"]
        ),
        "no"
    );

    // Aggregation: an aggregated ClusterRole gains the rules of every
    // ClusterRole its selector matches, as soon as that role exists.
    let aggregated = r#"{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole","metadata":{"name":"agg"},"aggregationRule":{"clusterRoleSelectors":[{"matchLabels":{"example.com/aggregate-to-agg":"true"}}]},"rules":[]}"#;
    apply(&dc, aggregated);
    ok(
        &dc,
        &[
            "create",
            "clusterrolebinding",
            "agg",
            "--clusterrole=agg",
            "--serviceaccount=team:bot",
        ],
    );
    assert_eq!(can_i(&dc, &token, &["list", "secrets", "-n", "team"]), "no");
    let granted = r#"{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole","metadata":{"name":"agg-secrets","labels":{"example.com/aggregate-to-agg":"true"}},"rules":[{"apiGroups":[""],"resources":["secrets"],"verbs":["list"]}]}"#;
    apply(&dc, granted);
    assert_eq!(
        can_i(&dc, &token, &["list", "secrets", "-n", "team"]),
        "yes"
    );
    let (success, _, stderr) = as_sa(&dc, &token, &["get", "secrets", "-A"]);
    assert!(success, "{stderr}");
}

fn apply(dc: &DevCluster, json: &str) {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("obj.json");
    std::fs::write(&f, json).unwrap();
    ok(dc, &["apply", "-f", f.to_str().unwrap()]);
}
