//! The helm chart (`deploy/helm/fleetbus-agent`) against real devclusters with
//! real helm: install / upgrade / uninstall, and the agent running with exactly
//! the chart's RBAC on a devcluster started with `--authorization rbac`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use crate::common::rules::RuleBuilder;
use fleetbus_schemas::crd::{Cluster, ClusterState, ClusterType, ResourceSyncRule};
use fleetbus_schemas::well_known::ANNOTATION_ORIGIN_CLUSTER;
use fleetbus_testsupport::{
    free_socket_addr, helm_bin, http_get, repo_root, wait_for, Agent, AgentCommand, DevCluster,
    DevClusterOpts, NatsServer,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::ListParams;
use kube::{Api, ResourceExt};

const NAMESPACE: &str = "fleetbus-system";
const CONVERGE: Duration = Duration::from_secs(30);
const KUBECTL: &str = "1.33";

fn chart() -> PathBuf {
    repo_root().join("deploy/helm/fleetbus-agent")
}

/// helm with its config, cache and data in `home` (nothing from the user's).
fn helm(home: &Path, kubeconfig: &Path, args: &[&str]) -> Output {
    let bin = helm_bin();
    Command::new(&bin)
        .args(args)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_DATA_HOME", home.join("data"))
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run helm {} ({e}): run scripts/test once (it installs helm into .tools/bin) or set FLEETBUS_HELM",
                bin.display()
            )
        })
}

fn helm_ok(home: &Path, dc: &DevCluster, args: &[&str]) -> String {
    let out = helm(home, dc.kubeconfig(), args);
    assert!(
        out.status.success(),
        "helm {args:?} failed: {}\n{}\ndevcluster log:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        dc.log()
    );
    String::from_utf8(out.stdout).unwrap()
}

fn kubectl_ok(dc: &DevCluster, args: &[&str]) -> String {
    let out = dc.kubectl(KUBECTL, args);
    assert!(
        out.status.success(),
        "kubectl {args:?} failed: {}\ndevcluster log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        dc.log()
    );
    String::from_utf8(out.stdout).unwrap()
}

fn env_value(d: &Deployment, name: &str) -> Option<String> {
    d.spec.as_ref()?.template.spec.as_ref()?.containers[0]
        .env
        .as_ref()?
        .iter()
        .find(|e| e.name == name)?
        .value
        .clone()
}

#[tokio::test]
async fn helm_install_upgrade_uninstall() {
    let dc = DevCluster::start(DevClusterOpts::new("helm")).unwrap();
    let home = tempfile::tempdir().unwrap();
    let chart = chart();
    let chart = chart.to_str().unwrap();
    let client = dc.client().await.unwrap();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NAMESPACE);

    let notes = helm_ok(
        home.path(),
        &dc,
        &[
            "install",
            "fb",
            chart,
            "-n",
            NAMESPACE,
            "--create-namespace",
            "--set",
            "clusterName=east",
        ],
    );
    assert!(
        notes.contains("kubectl get clusters.fleetbus.io"),
        "{notes}"
    );
    let d = deployments.get("fb-fleetbus-agent").await.unwrap();
    assert_eq!(
        env_value(&d, "FLEETBUS_CLUSTER_NAME").as_deref(),
        Some("east")
    );
    // Plain text to another host is refused unless the values say otherwise.
    assert_eq!(env_value(&d, "FLEETBUS_NATS_ALLOW_INSECURE"), None);
    // helm installed the chart's CRDs (crds/) before the templates.
    kubectl_ok(&dc, &["get", "crd", "clusters.fleetbus.io"]);
    assert!(
        helm_ok(home.path(), &dc, &["status", "fb", "-n", NAMESPACE]).contains("STATUS: deployed")
    );

    // A changed value reaches the Deployment.
    helm_ok(
        home.path(),
        &dc,
        &[
            "upgrade",
            "fb",
            chart,
            "-n",
            NAMESPACE,
            "--reuse-values",
            "--set",
            "clusterName=west",
            "--set",
            "nats.replicas=3",
            "--set",
            "nats.allowInsecure=true",
        ],
    );
    let d = deployments.get("fb-fleetbus-agent").await.unwrap();
    assert_eq!(
        env_value(&d, "FLEETBUS_CLUSTER_NAME").as_deref(),
        Some("west")
    );
    assert_eq!(env_value(&d, "FLEETBUS_REPLICAS").as_deref(), Some("3"));
    assert_eq!(
        env_value(&d, "FLEETBUS_NATS_ALLOW_INSECURE").as_deref(),
        Some("true")
    );
    let history = helm_ok(home.path(), &dc, &["history", "fb", "-n", NAMESPACE]);
    assert!(history.lines().count() >= 3, "{history}");

    helm_ok(
        home.path(),
        &dc,
        &["uninstall", "fb", "-n", NAMESPACE, "--wait"],
    );
    assert!(deployments
        .get_opt("fb-fleetbus-agent")
        .await
        .unwrap()
        .is_none());
    let releases: Api<Secret> = Api::namespaced(client, NAMESPACE);
    let left = releases
        .list(&ListParams::default().labels("owner=helm"))
        .await
        .unwrap();
    assert!(
        left.items.is_empty(),
        "release secrets left: {:?}",
        left.items.iter().map(|s| s.name_any()).collect::<Vec<_>>()
    );
    // CRDs from crds/ are kept on uninstall (helm's policy).
    kubectl_ok(&dc, &["get", "crd", "clusters.fleetbus.io"]);
}

/// An agent running with a kubeconfig of the test's choosing (e.g. one
/// holding the token of the chart's ServiceAccount).
struct ChartAgent {
    agent: Agent,
    metrics_addr: String,
}

fn start_agent(
    nats: &NatsServer,
    name: &str,
    kubeconfig: &Path,
    publish_kubeconfig: bool,
) -> ChartAgent {
    let metrics_addr = free_socket_addr();
    let cmd = AgentCommand::new(name)
        .nats_url(nats.url())
        .namespace(NAMESPACE)
        .metrics_addr(metrics_addr)
        .heartbeat_interval(Duration::from_millis(500))
        .peer_timeout(Duration::from_secs(2))
        .kubeconfig(kubeconfig)
        .publish_kubeconfig(publish_kubeconfig);
    ChartAgent {
        agent: Agent::start(cmd.argv()).unwrap(),
        metrics_addr: metrics_addr.to_string(),
    }
}

/// The devcluster's kubeconfig with its admin token replaced by `token`.
fn kubeconfig_with_token(dc: &DevCluster, admin: &str, token: &str, dir: &Path) -> PathBuf {
    let kc = std::fs::read_to_string(dc.kubeconfig()).unwrap();
    let replaced = kc.replace(admin, token);
    assert_ne!(
        kc, replaced,
        "admin token not found in the devcluster's kubeconfig"
    );
    let path = dir.join(format!("{}-agent.kubeconfig", dc.name));
    std::fs::write(&path, replaced).unwrap();
    path
}

/// Renders the chart's ServiceAccount, ClusterRoles and Role with helm (plus
/// `set`) and applies them to `dc` as its admin, in [`NAMESPACE`].
fn apply_charts_rbac(home: &Path, dc: &DevCluster, set: &[&str]) {
    let chart = chart();
    let mut args = vec![
        "template",
        "fb",
        chart.to_str().unwrap(),
        "-n",
        NAMESPACE,
        "--set",
        "clusterName=a",
        "--show-only",
        "templates/serviceaccount.yaml",
        "--show-only",
        "templates/clusterrole.yaml",
        "--show-only",
        "templates/role.yaml",
    ];
    args.extend_from_slice(set);
    let rendered = helm_ok(home, dc, &args);
    let rbac_file = home.join("rbac.yaml");
    std::fs::write(&rbac_file, &rendered).unwrap();
    kubectl_ok(dc, &["create", "namespace", NAMESPACE]);
    kubectl_ok(dc, &["apply", "-f", rbac_file.to_str().unwrap()]);
}

/// A kubeconfig for `dc` holding a token of the chart's ServiceAccount.
fn charts_token_kubeconfig(dc: &DevCluster, admin: &str, dir: &Path) -> PathBuf {
    let token = kubectl_ok(
        dc,
        &[
            "create",
            "token",
            "fb-fleetbus-agent",
            "-n",
            NAMESPACE,
            "--duration=1h",
        ],
    );
    kubeconfig_with_token(dc, admin, token.trim(), dir)
}

async fn peer_state(client: &kube::Client, name: &str) -> Result<(), String> {
    let c = Api::<Cluster>::all(client.clone())
        .get(name)
        .await
        .map_err(|e| format!("get cluster {name}: {e}"))?;
    let status = c.status.as_ref();
    let ty = status.and_then(|s| s.type_);
    let state = status.and_then(|s| s.state);
    if state == Some(ClusterState::Ready) && ty.is_some() {
        Ok(())
    } else {
        Err(format!("cluster {name}: type {ty:?} state {state:?}"))
    }
}

/// The agent of cluster `a` runs with a token of the chart's ServiceAccount on
/// a devcluster enforcing RBAC, with only the chart's (rendered) RBAC applied:
/// it joins, sees its peer, stores the peer's kubeconfig Secret and publishes
/// its own, and never meets a 403. A ServiceAccount without the chart's RBAC
/// gets nowhere, so the rules are what makes it work.
#[tokio::test]
async fn agent_runs_with_exactly_the_charts_rbac() {
    let nats = NatsServer::start().unwrap();
    let admin = "admin-token-e2e";
    let a = DevCluster::start(DevClusterOpts {
        token: Some(admin.into()),
        tls: true,
        nodes: 2,
        extra_args: vec!["--authorization".into(), "rbac".into()],
        ..DevClusterOpts::new("rbac-a")
    })
    .unwrap();
    let b = DevCluster::start(DevClusterOpts {
        nodes: 1,
        ..DevClusterOpts::new("rbac-b")
    })
    .unwrap();
    let home = tempfile::tempdir().unwrap();

    // The chart's ServiceAccount and RBAC, rendered by helm, applied by the admin.
    apply_charts_rbac(home.path(), &a, &["--set", "agent.publishKubeconfig=true"]);
    // Another ServiceAccount with no rights at all, for the negative control.
    kubectl_ok(&a, &["create", "serviceaccount", "nobody", "-n", NAMESPACE]);

    // Without the chart's RBAC the agent cannot even read its identity.
    let nobody = kubectl_ok(&a, &["create", "token", "nobody", "-n", NAMESPACE]);
    let kc_nobody = kubeconfig_with_token(&a, admin, nobody.trim(), home.path());
    let mut denied = start_agent(&nats, "a", &kc_nobody, false);
    wait_for("the unbound agent to be refused", CONVERGE, || async {
        let log = denied.agent.log();
        if log.contains("forbidden") || log.contains("403") {
            Ok(())
        } else {
            Err(format!("agent log:\n{log}"))
        }
    })
    .await;
    let (code, body) =
        http_get(&format!("http://{}/readyz", denied.metrics_addr)).unwrap_or((0, String::new()));
    assert_ne!(code, 200, "unbound agent ready: {body}");
    denied.agent.stop();

    let kc = charts_token_kubeconfig(&a, admin, home.path());
    let forbidden_before = forbidden_lines(&a.log()).len();
    let agent_a = start_agent(&nats, "a", &kc, true);
    let agent_b = start_agent(&nats, "b", b.kubeconfig(), true);

    let client_a = a.client().await.unwrap();
    let client_b = b.client().await.unwrap();
    wait_for("a to see itself and peer b Ready", CONVERGE, || async {
        peer_state(&client_a, "a").await?;
        peer_state(&client_a, "b").await
    })
    .await;
    wait_for("b to see peer a Ready", CONVERGE, || {
        peer_state(&client_b, "a")
    })
    .await;
    let a_local = Api::<Cluster>::all(client_a.clone())
        .get("a")
        .await
        .unwrap();
    assert_eq!(
        a_local.status.and_then(|s| s.type_),
        Some(ClusterType::Local)
    );
    // a stored b's published kubeconfig (a Secret in its namespace: the Role).
    wait_for("a to store b's kubeconfig Secret", CONVERGE, || async {
        Api::<Secret>::namespaced(client_a.clone(), NAMESPACE)
            .get("b-kubeconfig")
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    })
    .await;
    // b stored a's kubeconfig: a minted it (ServiceAccount, ClusterRole,
    // binding, TokenRequest) under its RBAC.
    wait_for("b to store a's kubeconfig Secret", CONVERGE, || async {
        Api::<Secret>::namespaced(client_b.clone(), NAMESPACE)
            .get("a-kubeconfig")
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    })
    .await;
    let readyz = format!("http://{}/readyz", agent_a.metrics_addr);
    wait_for("agent a ready", CONVERGE, || async {
        match http_get(&readyz)? {
            (200, _) => Ok(()),
            (code, body) => Err(format!("{code} {body}")),
        }
    })
    .await;
    let forbidden = forbidden_lines(&a.log());
    assert_eq!(
        forbidden.len(),
        forbidden_before,
        "agent a met 403s with the chart's RBAC:\n{}\nagent log:\n{}",
        forbidden.join("\n"),
        agent_a.agent.log()
    );
    drop(agent_b);
}

/// The Ready condition of rule `name` on `client`'s cluster: (status, reason, message).
async fn rule_ready(client: &kube::Client, name: &str) -> Result<(String, String, String), String> {
    let rule = Api::<ResourceSyncRule>::all(client.clone())
        .get(name)
        .await
        .map_err(|e| format!("get rule {name}: {e}"))?;
    rule.status
        .iter()
        .flat_map(|s| s.conditions.iter())
        .find(|c| c.type_ == "Ready")
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
        .ok_or_else(|| format!("rule {name} has no Ready condition: {:?}", rule.status))
}

/// Two clusters with agents: `a` enforces RBAC and its agent runs with a token
/// of the chart's ServiceAccount, with only the chart's RBAC (rendered with
/// `set`) applied; `b` is a plain devcluster with an admin agent.
struct RbacPair {
    a: DevCluster,
    b: DevCluster,
    agent_a: ChartAgent,
    client_a: kube::Client,
    home: tempfile::TempDir,
    _agent_b: ChartAgent,
    _nats: NatsServer,
}

async fn rbac_pair(prefix: &str, set: &[&str]) -> RbacPair {
    let nats = NatsServer::start().unwrap();
    let admin = "admin-token-e2e";
    let a = DevCluster::start(DevClusterOpts {
        token: Some(admin.into()),
        tls: true,
        nodes: 1,
        extra_args: vec!["--authorization".into(), "rbac".into()],
        ..DevClusterOpts::new(&format!("{prefix}-a"))
    })
    .unwrap();
    let b = DevCluster::start(DevClusterOpts {
        nodes: 1,
        ..DevClusterOpts::new(&format!("{prefix}-b"))
    })
    .unwrap();
    let home = tempfile::tempdir().unwrap();
    apply_charts_rbac(home.path(), &a, set);
    let kc = charts_token_kubeconfig(&a, admin, home.path());
    let agent_a = start_agent(&nats, "a", &kc, false);
    let agent_b = start_agent(&nats, "b", b.kubeconfig(), false);
    let client_a = a.client().await.unwrap();
    let client_b = b.client().await.unwrap();
    wait_for("a to see itself and peer b Ready", CONVERGE, || async {
        peer_state(&client_a, "a").await?;
        peer_state(&client_a, "b").await
    })
    .await;
    wait_for("b to see peer a Ready", CONVERGE, || {
        peer_state(&client_b, "a")
    })
    .await;
    RbacPair {
        a,
        b,
        agent_a,
        client_a,
        home,
        _agent_b: agent_b,
        _nats: nats,
    }
}

impl RbacPair {
    /// On b, as its admin: namespace `shared` with ConfigMap `settings`, and a
    /// rule syncing the ConfigMaps of `shared` (creating the namespace).
    fn configmap_rule_on_b(&self) {
        kubectl_ok(&self.b, &["create", "namespace", "shared"]);
        kubectl_ok(
            &self.b,
            &[
                "create",
                "configmap",
                "settings",
                "-n",
                "shared",
                "--from-literal=color=blue",
            ],
        );
        let rule_file = self.home.path().join("rule.yaml");
        std::fs::write(
            &rule_file,
            RuleBuilder::new("sync-configmaps")
                .namespaces(&["shared"])
                .spec("createNamespace", true.into())
                .yaml(),
        )
        .unwrap();
        kubectl_ok(&self.b, &["apply", "-f", rule_file.to_str().unwrap()]);
    }

    fn configmaps_a(&self) -> Api<ConfigMap> {
        Api::namespaced(self.client_a.clone(), "shared")
    }

    /// Waits for b's ConfigMap on a, as a copy from b with b's data; then for
    /// the rule to be Ready there.
    async fn wait_synced(&self, what: &str, timeout: Duration) {
        let configmaps_a = self.configmaps_a();
        let copy = wait_for(what, timeout, || async {
            let cm = configmaps_a
                .get_opt("settings")
                .await
                .map_err(|e| e.to_string())?
                .ok_or_else(|| "no copy yet".to_owned())?;
            let origin = cm.annotations().get(ANNOTATION_ORIGIN_CLUSTER).cloned();
            if origin.as_deref() == Some("b") {
                Ok(cm)
            } else {
                Err(format!("settings has origin {origin:?}"))
            }
        })
        .await;
        assert_eq!(
            copy.data
                .unwrap_or_default()
                .get("color")
                .map(String::as_str),
            Some("blue")
        );
        wait_for("the rule on a to be Ready", CONVERGE, || async {
            match rule_ready(&self.client_a, "sync-configmaps").await? {
                (s, r, _) if s == "True" && r == "Synced" => Ok(()),
                other => Err(format!("Ready {other:?}")),
            }
        })
        .await;
    }

    /// The granted verbs are every verb sync uses: an edit of the copy is
    /// reverted (PUT), and the copy goes when its original does (DELETE).
    async fn edit_reverted_and_delete_propagates(&self) {
        let configmaps_a = self.configmaps_a();
        kubectl_ok(
            &self.a,
            &[
                "label",
                "configmap",
                "settings",
                "-n",
                "shared",
                "edited=yes",
            ],
        );
        wait_for("the edit on a's copy to be reverted", CONVERGE, || async {
            let cm = configmaps_a
                .get("settings")
                .await
                .map_err(|e| e.to_string())?;
            match cm.labels().get("edited") {
                None => Ok(()),
                Some(v) => Err(format!("label edited={v} still there")),
            }
        })
        .await;
        kubectl_ok(
            &self.b,
            &["delete", "configmap", "settings", "-n", "shared"],
        );
        wait_for("a's copy to go with b's original", CONVERGE, || async {
            match configmaps_a
                .get_opt("settings")
                .await
                .map_err(|e| e.to_string())?
            {
                None => Ok(()),
                Some(_) => Err("copy still there".to_owned()),
            }
        })
        .await;
    }
}

/// Rule sync under exactly the chart's RBAC: agent a runs with the chart's
/// ServiceAccount on a devcluster enforcing RBAC, b as admin. A rule for
/// ConfigMaps (a kind the chart does not grant) created on b reaches a (rules
/// are replicated under the chart's own rights) and shows `Ready=False`
/// `Invalid` there with a message saying the kind is forbidden. Once the
/// example ClusterRole of the chart (`examples/grant-configmaps.yaml`, label
/// `fleetbus.io/aggregate-to-agent`) is applied, the same agent process, not
/// restarted, lists ConfigMaps (its watch retries with backoff), writes b's
/// ConfigMap as a copy (creating its namespace) and reports the rule Ready;
/// the example's verbs are enough to revert an edit and delete the copy.
#[tokio::test]
async fn rule_sync_under_the_charts_rbac_waits_for_a_granted_kind() {
    let mut pair = rbac_pair("grant", &[]).await;
    pair.configmap_rule_on_b();

    // On a the rule copy arrives (the chart grants rules) but its kind is
    // forbidden: the rule says so.
    let forbidden = wait_for(
        "the rule on a to say ConfigMaps are forbidden",
        CONVERGE,
        || async {
            match rule_ready(&pair.client_a, "sync-configmaps").await? {
                (s, r, m)
                    if s == "False" && r == "Invalid" && m.to_lowercase().contains("forbidden") =>
                {
                    Ok(m)
                }
                other => Err(format!("Ready {other:?}")),
            }
        },
    )
    .await;
    assert!(forbidden.contains("ConfigMap"), "{forbidden}");
    assert!(
        pair.configmaps_a()
            .get_opt("settings")
            .await
            .unwrap()
            .is_none(),
        "a ConfigMap copy was written without the right to"
    );
    let pid = pair.agent_a.agent.pid();

    // Grant ConfigMaps the way the chart documents: an aggregated ClusterRole.
    let grant = chart().join("examples/grant-configmaps.yaml");
    kubectl_ok(&pair.a, &["apply", "-f", grant.to_str().unwrap()]);
    // The watch retries with kube's default backoff (at most 30 s apart).
    pair.wait_synced(
        "b's ConfigMap copied to a after the grant",
        CONVERGE + Duration::from_secs(45),
    )
    .await;
    pair.edit_reverted_and_delete_propagates().await;
    assert!(
        pair.agent_a.agent.is_running(),
        "agent a stopped:\n{}",
        pair.agent_a.agent.log()
    );
    assert_eq!(pair.agent_a.agent.pid(), pid, "agent a was restarted");
}

/// The chart's other way to grant a synced kind, `rbac.extraRules`, with
/// exactly the verbs the READMEs say sync needs (no `patch`): the ConfigMap
/// rule works from the start, edits are reverted, deletes propagate, and the
/// agent never meets a 403.
#[tokio::test]
async fn rbac_extra_rules_grant_a_synced_kind() {
    let extra = r#"rbac.extraRules=[{"apiGroups":[""],"resources":["configmaps"],"verbs":["get","list","watch","create","update","delete"]}]"#;
    let pair = rbac_pair("extra", &["--set-json", extra]).await;
    let forbidden_before = forbidden_lines(&pair.a.log()).len();
    pair.configmap_rule_on_b();
    pair.wait_synced("b's ConfigMap copied to a", CONVERGE)
        .await;
    pair.edit_reverted_and_delete_propagates().await;
    let forbidden = forbidden_lines(&pair.a.log());
    assert_eq!(
        forbidden.len(),
        forbidden_before,
        "agent a met 403s with rbac.extraRules:\n{}",
        forbidden.join("\n")
    );
}

/// The devcluster's request log lines answered 403 (ANSI colours removed).
fn forbidden_lines(log: &str) -> Vec<String> {
    log.lines()
        .map(strip_ansi)
        .filter(|l| l.contains("status=403"))
        .collect()
}

fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // ESC [ ... m
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The chart's crds/ are byte-for-byte the generated deploy/crds/.
#[test]
fn chart_crds_are_the_generated_crds() {
    let generated = repo_root().join("deploy/crds");
    let in_chart = chart().join("crds");
    let names = |dir: &Path| {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    assert_eq!(
        names(&generated),
        names(&in_chart),
        "cp deploy/crds/*.yaml {}/",
        in_chart.display()
    );
    for name in names(&generated) {
        assert_eq!(
            std::fs::read(generated.join(&name)).unwrap(),
            std::fs::read(in_chart.join(&name)).unwrap(),
            "{name} differs: cp deploy/crds/*.yaml {}/",
            in_chart.display()
        );
    }
}

/// The image's user is the chart's runAsUser/runAsGroup (a mismatch would
/// make the pod run as a user the image was not built for).
#[test]
fn image_user_is_the_charts_run_as_user() {
    let dockerfile = std::fs::read_to_string(repo_root().join("Dockerfile")).unwrap();
    let user = dockerfile
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("USER "))
        .expect("Dockerfile has a USER")
        .trim()
        .to_string();
    let values = std::fs::read_to_string(chart().join("values.yaml")).unwrap();
    let value = |key: &str| -> Vec<String> {
        values
            .lines()
            .filter_map(|l| {
                l.trim()
                    .strip_prefix(&format!("{key}: "))
                    .map(|v| v.trim().to_string())
            })
            .collect()
    };
    let (uid, gid) = user.split_once(':').expect("USER uid:gid");
    let run_as_user = value("runAsUser");
    assert!(
        !run_as_user.is_empty() && run_as_user.iter().all(|u| u == uid),
        "runAsUser {run_as_user:?} vs USER {user}"
    );
    let run_as_group = value("runAsGroup");
    assert!(
        !run_as_group.is_empty() && run_as_group.iter().all(|g| g == gid),
        "runAsGroup {run_as_group:?} vs USER {user}"
    );
    assert_eq!(value("runAsNonRoot"), vec!["true", "true"]);
    assert_eq!(value("readOnlyRootFilesystem"), vec!["true"]);
}

/// `fleetbus <args>`; panics unless it succeeds. Returns stdout.
fn fleetbus_ok(args: &[&str]) -> String {
    let out = Command::new(fleetbus_testsupport::cargo_bin("fleetbus"))
        .args(args)
        .env_remove("FLEETBUS_FLEET_DIR")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "fleetbus {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `fleetbus join -o manifest` applied with kubectl and `-o values` given to
/// helm install as is: the Deployment mounts the cluster's creds and the
/// fleet's CA from the Secrets and points the agent at them over TLS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn join_output_installs_as_is() {
    let dc = DevCluster::start(DevClusterOpts::new("joined")).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let fleet = tmp.path().join("fleet");
    let f = fleet.to_str().unwrap();
    fleetbus_ok(&["fleet", "init", "--dir", f]);
    std::fs::write(fleet.join("ca.pem"), "-----BEGIN CERTIFICATE-----\n").unwrap();
    let url = "tls://nats.example:4222";
    let manifest = fleetbus_ok(&["join", "east", "--dir", f, "-o", "manifest"]);
    let values = fleetbus_ok(&[
        "join",
        "east",
        "--dir",
        f,
        "-o",
        "values",
        "--nats-url",
        url,
    ]);
    let creds = fleetbus_ok(&["join", "east", "--dir", f]);
    let (manifest_path, values_path) = (tmp.path().join("m.yaml"), tmp.path().join("v.yaml"));
    std::fs::write(&manifest_path, manifest).unwrap();
    std::fs::write(&values_path, values).unwrap();

    kubectl_ok(&dc, &["create", "namespace", NAMESPACE]);
    kubectl_ok(&dc, &["apply", "-f", manifest_path.to_str().unwrap()]);
    let home = tempfile::tempdir().unwrap();
    let chart = chart();
    helm_ok(
        home.path(),
        &dc,
        &[
            "install",
            "fb",
            chart.to_str().unwrap(),
            "-n",
            NAMESPACE,
            "-f",
            values_path.to_str().unwrap(),
        ],
    );
    let client = dc.client().await.unwrap();
    let d = Api::<Deployment>::namespaced(client.clone(), NAMESPACE)
        .get("fb-fleetbus-agent")
        .await
        .unwrap();
    for (name, want) in [
        ("FLEETBUS_CLUSTER_NAME", "east"),
        ("FLEETBUS_NATS_URL", url),
        ("FLEETBUS_NATS_CREDS", "/etc/fleetbus/nats/creds/nats.creds"),
        ("FLEETBUS_NATS_TLS_CA", "/etc/fleetbus/nats/ca/ca.crt"),
    ] {
        assert_eq!(env_value(&d, name).as_deref(), Some(want), "{name}");
    }
    assert_eq!(env_value(&d, "FLEETBUS_NATS_ALLOW_INSECURE"), None);
    let volumes = d.spec.unwrap().template.spec.unwrap().volumes.unwrap();
    let secret_of = |v: &str| {
        volumes
            .iter()
            .find(|x| x.name == v)
            .and_then(|x| x.secret.as_ref())
            .and_then(|s| s.secret_name.clone())
    };
    let secrets: Api<Secret> = Api::namespaced(client, NAMESPACE);
    let creds_secret = secret_of("nats-creds").expect("creds volume");
    let stored = secrets.get(&creds_secret).await.unwrap().data.unwrap();
    assert_eq!(stored["nats.creds"].0, creds.as_bytes());
    let ca_secret = secret_of("nats-ca").expect("CA volume");
    let stored = secrets.get(&ca_secret).await.unwrap().data.unwrap();
    assert_eq!(stored["ca.crt"].0, b"-----BEGIN CERTIFICATE-----\n");
}
