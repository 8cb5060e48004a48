//! Minting a read-only kubeconfig for this cluster (TokenRequest API) to publish to peers.
//!
//! The reader is the ServiceAccount `fleetbus-reader` in the agent's namespace,
//! bound to the ClusterRole `fleetbus-reader`: get/list/watch on the core
//! resources listed in [`reader_rules`] and on every resource of the common
//! API groups, plus discovery. Never Secrets: in the insecure mode the
//! kubeconfig travels in clear on the bus, so whoever can read the registry
//! bucket holds this token, and it must not open every Secret of every
//! cluster. In the secure mode it is sealed to the peers (PROTOCOL §5.2).
//! Tokens are bound (`expirationSeconds`) and re-minted at 80% of their lifetime.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use fleetbus_schemas::well_known;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, RoleRef, Subject};
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::Api;
use tokio_util::sync::CancellationToken;

use crate::registry::record::{kubeconfig_key, KubeconfigRecord};
use crate::registry::Registry;

/// Name of the reader ServiceAccount, ClusterRole and (suffixed) ClusterRoleBinding.
pub const READER: &str = "fleetbus-reader";
use crate::kube::FIELD_MANAGER;

/// Failure to mint the reader kubeconfig.
#[derive(Debug, thiserror::Error)]
pub enum KubeconfigError {
    /// Creating the ServiceAccount or its RBAC failed.
    #[error("failed to apply {what}")]
    Apply {
        /// Which object.
        what: String,
        /// Cause.
        #[source]
        source: kube::Error,
    },
    /// The TokenRequest was refused.
    #[error("failed to request a token for ServiceAccount {0}")]
    Token(String, #[source] kube::Error),
    /// The TokenRequest succeeded but returned no token.
    #[error("the TokenRequest for ServiceAccount {0} returned no token")]
    EmptyToken(String),
    /// The CA file of the agent's own kube config could not be read.
    #[error("failed to read CA file {0}")]
    CaFile(String, #[source] std::io::Error),
    /// The kubeconfig could not be rendered.
    #[error("failed to render the kubeconfig")]
    Render(#[source] fleetbus_schemas::yaml::YamlError),
    /// The kubeconfig record could not be encoded (a bug).
    #[error("failed to encode the kubeconfig record")]
    Encode(#[source] fleetbus_schemas::EncodeError),
    /// The kubeconfig could not be sealed to the peers or signed (a bug, or a
    /// peer's key the crypto library refuses).
    #[error("failed to seal or sign the kubeconfig record: {0}")]
    Seal(String),
    /// The kubeconfig record could not be put into the registry bucket.
    #[error("failed to put {key} into the registry bucket")]
    Put {
        /// The key.
        key: String,
        /// Cause.
        #[source]
        source: async_nats::jetstream::kv::PutError,
    },
}

impl KubeconfigError {
    /// Whether trying again later can help.
    pub fn is_transient(&self) -> bool {
        match self {
            KubeconfigError::Apply { source, .. } | KubeconfigError::Token(_, source) => {
                crate::kube::client::is_transient(source)
            }
            KubeconfigError::EmptyToken(_)
            | KubeconfigError::CaFile(..)
            | KubeconfigError::Put { .. } => true,
            KubeconfigError::Render(_) | KubeconfigError::Encode(_) | KubeconfigError::Seal(_) => {
                false
            }
        }
    }
}

/// A freshly minted kubeconfig.
#[derive(Debug, Clone)]
pub struct Minted {
    /// The kubeconfig YAML.
    pub kubeconfig: String,
    /// When the embedded token expires.
    pub expires_at: k8s_openapi::jiff::Timestamp,
    /// When to mint the next one (80% of the lifetime from now).
    pub refresh_after: Duration,
}

/// Where peers should reach this cluster's API server and how to trust it.
#[derive(Debug, Clone)]
pub struct ServerInfo {
    /// The API server URL.
    pub server: String,
    /// PEM CA bundle, if the agent's own config had one.
    pub ca_pem: Option<Vec<u8>>,
    /// The agent's own config skips TLS verification.
    pub insecure: bool,
}

impl ServerInfo {
    /// From the agent's own kube config, with an optional URL override.
    pub fn from_config(
        config: &kube::Config,
        advertise: Option<&str>,
    ) -> Result<ServerInfo, KubeconfigError> {
        let ca_pem = if let Some(path) = &config.root_cert_file {
            Some(
                std::fs::read(path)
                    .map_err(|e| KubeconfigError::CaFile(path.display().to_string(), e))?,
            )
        } else {
            config.root_cert.as_ref().map(|ders| ders_to_pem(ders))
        };
        let server = advertise.map(str::to_owned).unwrap_or_else(|| {
            config
                .cluster_url
                .to_string()
                .trim_end_matches('/')
                .to_owned()
        });
        Ok(ServerInfo {
            server,
            ca_pem,
            insecure: config.accept_invalid_certs,
        })
    }
}

fn ders_to_pem(ders: &[Vec<u8>]) -> Vec<u8> {
    let mut out = String::new();
    for der in ders {
        let b64 = base64::engine::general_purpose::STANDARD.encode(der);
        out.push_str("-----BEGIN CERTIFICATE-----\n");
        for chunk in b64.as_bytes().chunks(64) {
            out.push_str(&String::from_utf8_lossy(chunk));
            out.push('\n');
        }
        out.push_str("-----END CERTIFICATE-----\n");
    }
    out.into_bytes()
}

/// Creates (server-side apply, idempotent) the reader ServiceAccount and its RBAC.
#[tracing::instrument(skip(client))]
pub async fn ensure_reader(client: &kube::Client, namespace: &str) -> Result<(), KubeconfigError> {
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    let sa = ServiceAccount {
        metadata: ObjectMeta {
            name: Some(READER.to_owned()),
            namespace: Some(namespace.to_owned()),
            labels: Some(managed_labels()),
            ..ObjectMeta::default()
        },
        ..ServiceAccount::default()
    };
    apply(
        Api::<ServiceAccount>::namespaced(client.clone(), namespace),
        READER,
        &sa,
        &pp,
    )
    .await?;
    let role = ClusterRole {
        metadata: ObjectMeta {
            name: Some(READER.to_owned()),
            labels: Some(managed_labels()),
            ..ObjectMeta::default()
        },
        // Server-side apply with force replaces the whole (atomic) rules list,
        // so a broader role left by an older agent is narrowed here.
        rules: Some(reader_rules()),
        ..ClusterRole::default()
    };
    apply(Api::<ClusterRole>::all(client.clone()), READER, &role, &pp).await?;
    let binding_name = format!("{READER}-{namespace}");
    let binding = ClusterRoleBinding {
        metadata: ObjectMeta {
            name: Some(binding_name.clone()),
            labels: Some(managed_labels()),
            ..ObjectMeta::default()
        },
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".to_owned(),
            kind: "ClusterRole".to_owned(),
            name: READER.to_owned(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".to_owned(),
            name: READER.to_owned(),
            namespace: Some(namespace.to_owned()),
            ..Subject::default()
        }]),
    };
    apply(
        Api::<ClusterRoleBinding>::all(client.clone()),
        &binding_name,
        &binding,
        &pp,
    )
    .await?;
    Ok(())
}

/// Core (`""` group) resources the reader may read. Listed one by one because
/// `*` in the core group would include `secrets`.
pub const CORE_READABLE: &[&str] = &[
    "namespaces",
    "nodes",
    "pods",
    "pods/status",
    "services",
    "endpoints",
    "configmaps",
    "serviceaccounts",
    "events",
    "persistentvolumes",
    "persistentvolumeclaims",
    "limitranges",
    "resourcequotas",
    "replicationcontrollers",
    "podtemplates",
    "componentstatuses",
];

/// API groups whose every resource the reader may read: none of them holds
/// Secrets' contents.
pub const GROUPS_READABLE: &[&str] = &[
    "apps",
    "batch",
    "autoscaling",
    "networking.k8s.io",
    "policy",
    "rbac.authorization.k8s.io",
    "coordination.k8s.io",
    "discovery.k8s.io",
    "storage.k8s.io",
    "apiextensions.k8s.io",
    "events.k8s.io",
    "fleetbus.io",
];

/// Non-resource URLs clients read for discovery (`kubectl` needs them).
pub const DISCOVERY_URLS: &[&str] = &[
    "/version",
    "/version/*",
    "/api",
    "/api/*",
    "/apis",
    "/apis/*",
    "/openapi",
    "/openapi/*",
];

/// The rules of the `fleetbus-reader` ClusterRole: read-only, never Secrets.
pub fn reader_rules() -> Vec<PolicyRule> {
    let strings = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    let read = strings(&["get", "list", "watch"]);
    vec![
        PolicyRule {
            api_groups: Some(vec![String::new()]),
            resources: Some(strings(CORE_READABLE)),
            verbs: read.clone(),
            ..PolicyRule::default()
        },
        PolicyRule {
            api_groups: Some(strings(GROUPS_READABLE)),
            resources: Some(vec!["*".to_owned()]),
            verbs: read,
            ..PolicyRule::default()
        },
        PolicyRule {
            non_resource_urls: Some(strings(DISCOVERY_URLS)),
            verbs: vec!["get".to_owned()],
            ..PolicyRule::default()
        },
    ]
}

async fn apply<K>(api: Api<K>, name: &str, obj: &K, pp: &PatchParams) -> Result<(), KubeconfigError>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
    K::DynamicType: Default,
{
    let mut value = serde_json::to_value(obj).map_err(|e| KubeconfigError::Apply {
        what: name.to_owned(),
        source: kube::Error::SerdeError(e),
    })?;
    // Server-side apply wants apiVersion/kind in the body.
    if let Some(map) = value.as_object_mut() {
        map.insert(
            "apiVersion".into(),
            K::api_version(&Default::default()).into(),
        );
        map.insert("kind".into(), K::kind(&Default::default()).into());
    }
    api.patch(name, pp, &Patch::Apply(&value))
        .await
        .map_err(|source| KubeconfigError::Apply {
            what: format!("{} {name}", K::kind(&Default::default())),
            source,
        })?;
    Ok(())
}

fn managed_labels() -> std::collections::BTreeMap<String, String> {
    [(
        well_known::LABEL_MANAGED_BY.to_owned(),
        well_known::MANAGED_BY_AGENT.to_owned(),
    )]
    .into()
}

/// Requests a bound token for the reader and renders a kubeconfig around it.
#[tracing::instrument(skip(client, server))]
pub async fn mint(
    client: &kube::Client,
    namespace: &str,
    cluster_name: &str,
    server: &ServerInfo,
    lifetime: Duration,
) -> Result<Minted, KubeconfigError> {
    let req = TokenRequest {
        metadata: ObjectMeta::default(),
        spec: TokenRequestSpec {
            audiences: Vec::new(),
            expiration_seconds: Some(i64::try_from(lifetime.as_secs()).unwrap_or(3600)),
            bound_object_ref: None,
        },
        status: None,
    };
    let resp = Api::<ServiceAccount>::namespaced(client.clone(), namespace)
        .create_token_request(READER, &PostParams::default(), &req)
        .await
        .map_err(|e| KubeconfigError::Token(READER.to_owned(), e))?;
    let status = resp
        .status
        .filter(|s| !s.token.is_empty())
        .ok_or_else(|| KubeconfigError::EmptyToken(READER.to_owned()))?;
    let now = k8s_openapi::jiff::Timestamp::now();
    // The server may shorten the lifetime; plan the refresh from what it granted.
    let granted = Duration::try_from(status.expiration_timestamp.0.duration_since(now))
        .unwrap_or(lifetime)
        .min(lifetime);
    let kubeconfig = render(cluster_name, server, &status.token)?;
    Ok(Minted {
        kubeconfig,
        expires_at: status.expiration_timestamp.0,
        refresh_after: granted.mul_f64(0.8),
    })
}

/// Renders a single-context kubeconfig.
pub fn render(
    cluster_name: &str,
    server: &ServerInfo,
    token: &str,
) -> Result<String, KubeconfigError> {
    let mut cluster = serde_json::Map::new();
    cluster.insert("server".into(), server.server.clone().into());
    if let Some(ca) = &server.ca_pem {
        cluster.insert(
            "certificate-authority-data".into(),
            base64::engine::general_purpose::STANDARD.encode(ca).into(),
        );
    }
    if server.insecure {
        cluster.insert("insecure-skip-tls-verify".into(), true.into());
    }
    let user = format!("{READER}@{cluster_name}");
    let doc = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster_name, "cluster": cluster}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": cluster_name, "context": {"cluster": cluster_name, "user": user}}],
        "current-context": cluster_name,
    });
    fleetbus_schemas::yaml::to_string(&doc).map_err(KubeconfigError::Render)
}

/// Mints, publishes and re-mints the reader kubeconfig until `cancel`, and at
/// once when the registry bucket was recreated (the record went with it).
/// In the secure mode the kubeconfig is sealed to the peers (PROTOCOL §5.2)
/// and published again, without minting, whenever the set of peers it is
/// sealed to changes (a join, a leave). Failures are retried with backoff;
/// peers keep the previous kubeconfig meanwhile (valid until its expiry).
#[tracing::instrument(name = "kubeconfig", skip_all, fields(cluster = %reg.ctx.cfg.cluster_name))]
pub async fn run(reg: Arc<Registry>, server: ServerInfo, cancel: CancellationToken) {
    let mut delay = Duration::from_millis(500);
    let mut fleet = reg.fleet();
    let mut minted: Option<(Minted, tokio::time::Instant)> = None;
    loop {
        let now = tokio::time::Instant::now();
        if minted.as_ref().is_none_or(|(_, refresh)| now >= *refresh) {
            minted = match mint_now(&reg, &server).await {
                Ok(m) => {
                    let refresh = now + m.refresh_after;
                    Some((m, refresh))
                }
                Err(error) => {
                    if !back_off(&cancel, &error, &mut delay).await {
                        return;
                    }
                    continue;
                }
            };
        }
        let Some((m, refresh)) = &minted else {
            continue;
        };
        let to = recipients(&reg, &fleet.borrow_and_update());
        let sealed_to = match publish(&reg, m, &to).await {
            Ok(()) => {
                delay = Duration::from_millis(500);
                to
            }
            Err(error) => {
                if !back_off(&cancel, &error, &mut delay).await {
                    return;
                }
                continue;
            }
        };
        let refresh = *refresh;
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep_until(refresh) => break,
                _ = reg.republish_kubeconfig.notified() => {
                    tracing::info!("registry bucket recreated; publishing the reader kubeconfig again");
                    break;
                }
                changed = fleet.changed(), if reg.ctx.sealing.is_some() => {
                    if changed.is_err() {
                        return;
                    }
                    if recipients(&reg, &fleet.borrow_and_update()) != sealed_to {
                        tracing::info!("the peers changed; sealing the reader kubeconfig to them again");
                        break;
                    }
                }
            }
        }
    }
}

/// The peers a kubeconfig is sealed to, with their keys (this cluster too):
/// empty in the insecure mode.
type Recipients = Vec<(String, fleetbus_schemas::seal::SealingPublicKey)>;

fn recipients(reg: &Registry, fleet: &crate::registry::view::FleetView) -> Recipients {
    let Some(own) = &reg.ctx.sealing else {
        return Recipients::new();
    };
    let mut out: Recipients = fleet
        .peers
        .values()
        .filter(|p| !p.left && !p.disabled)
        .filter_map(|p| Some((p.name.clone(), p.sealing_key.clone()?)))
        .collect();
    out.push((reg.ctx.cfg.cluster_name.clone(), own.public.clone()));
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// Logs a failure and waits `delay` (doubled for next time, up to 30 s);
/// false when `cancel` fires first.
async fn back_off(
    cancel: &CancellationToken,
    error: &KubeconfigError,
    delay: &mut Duration,
) -> bool {
    tracing::warn!(
        error = %crate::report(error),
        transient = error.is_transient(),
        delay = ?*delay,
        "failed to publish the reader kubeconfig; retrying"
    );
    let waited = tokio::select! {
        _ = cancel.cancelled() => false,
        _ = tokio::time::sleep(*delay) => true,
    };
    *delay = (*delay * 2).min(Duration::from_secs(30));
    waited
}

async fn mint_now(reg: &Registry, server: &ServerInfo) -> Result<Minted, KubeconfigError> {
    ensure_reader(&reg.ctx.client, &reg.ctx.cfg.namespace).await?;
    let minted = mint(
        &reg.ctx.client,
        &reg.ctx.cfg.namespace,
        &reg.ctx.cfg.cluster_name,
        server,
        reg.ctx.cfg.kubeconfig_lifetime,
    )
    .await?;
    reg.ctx.metrics.kubeconfig_mints.inc();
    Ok(minted)
}

/// Puts the record of `minted`: in the secure mode sealed to `recipients`
/// (the admin reading the bucket does not see the token) and signed by this
/// cluster (PROTOCOL §5.2).
async fn publish(
    reg: &Registry,
    minted: &Minted,
    recipients: &Recipients,
) -> Result<(), KubeconfigError> {
    let mut record = KubeconfigRecord {
        name: reg.ctx.cfg.cluster_name.clone(),
        cluster_id: reg.ctx.cluster_id.clone(),
        kubeconfig: minted.kubeconfig.clone(),
        expires_at: chrono::DateTime::from_timestamp(minted.expires_at.as_second(), 0),
        sealed: None,
    };
    if !recipients.is_empty() {
        let keys: Vec<_> = recipients.iter().map(|(n, k)| (n.as_str(), k)).collect();
        record
            .seal(&keys, &mut rand::rng())
            .map_err(|e| KubeconfigError::Seal(e.to_string()))?;
    }
    let key = kubeconfig_key(&record.name, &record.cluster_id);
    let body = record.encode().map_err(KubeconfigError::Encode)?;
    let body = crate::trust::sign_json_as(reg.ctx.cfg.trust.as_deref(), body)
        .map_err(KubeconfigError::Seal)?;
    reg.kv
        .put(&key, body.into())
        .await
        .map_err(|source| KubeconfigError::Put { key, source })?;
    tracing::info!(expires_at = %minted.expires_at, sealed_to = recipients.len(), "published reader kubeconfig");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether `rule` lets its holder read Secrets.
    fn grants_secrets(rule: &PolicyRule) -> bool {
        let groups = rule.api_groups.as_deref().unwrap_or_default();
        let resources = rule.resources.as_deref().unwrap_or_default();
        let core = groups.iter().any(|g| g.is_empty() || g == "*");
        core && resources
            .iter()
            .any(|r| r == "*" || r == "secrets" || r.starts_with("secrets/"))
    }

    #[test]
    fn reader_cannot_read_secrets() {
        let rules = reader_rules();
        assert!(!rules.is_empty());
        for rule in &rules {
            assert!(!grants_secrets(rule), "{rule:?}");
            let groups = rule.api_groups.as_deref().unwrap_or_default();
            assert!(!groups.iter().any(|g| g == "*"), "{rule:?}");
            if groups.iter().any(String::is_empty) {
                // The core group is listed resource by resource.
                let resources = rule.resources.as_deref().unwrap_or_default();
                assert!(!resources.iter().any(|r| r.contains('*')), "{rule:?}");
            }
            // Read-only.
            for verb in &rule.verbs {
                assert!(
                    ["get", "list", "watch"].contains(&verb.as_str()),
                    "{rule:?}"
                );
            }
            assert!(rule.resource_names.is_none(), "{rule:?}");
        }
        // The test's own predicate does catch the old, broad rule.
        assert!(grants_secrets(&PolicyRule {
            api_groups: Some(vec!["*".into()]),
            resources: Some(vec!["*".into()]),
            verbs: vec!["get".into()],
            ..PolicyRule::default()
        }));
    }

    #[test]
    fn reader_can_still_read_what_peers_inspect() {
        let rules = reader_rules();
        let core = &rules[0];
        assert_eq!(core.api_groups.as_deref(), Some(&[String::new()][..]));
        let core_resources = core.resources.as_deref().unwrap_or_default();
        for r in ["namespaces", "pods", "configmaps", "services", "nodes"] {
            assert!(core_resources.iter().any(|x| x == r), "{r}");
        }
        let groups = rules[1].api_groups.as_deref().unwrap_or_default();
        for g in ["apps", "fleetbus.io", "apiextensions.k8s.io"] {
            assert!(groups.iter().any(|x| x == g), "{g}");
        }
        let urls = rules[2].non_resource_urls.as_deref().unwrap_or_default();
        assert!(urls.iter().any(|u| u == "/apis/*"));
        assert_eq!(rules[2].verbs, vec!["get".to_owned()]);
    }

    #[test]
    fn renders_a_loadable_kubeconfig() {
        let server = ServerInfo {
            server: "https://10.0.0.1:6443".into(),
            ca_pem: Some(ders_to_pem(&[vec![1, 2, 3]])),
            insecure: false,
        };
        let yaml = render("c1", &server, "tok").unwrap();
        let kc = kube::config::Kubeconfig::from_yaml(&yaml).unwrap();
        assert_eq!(kc.current_context.as_deref(), Some("c1"));
        let cluster = kc.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(cluster.server.as_deref(), Some("https://10.0.0.1:6443"));
        let ca = cluster.certificate_authority_data.as_deref().unwrap();
        let pem = base64::engine::general_purpose::STANDARD
            .decode(ca)
            .unwrap();
        assert!(String::from_utf8(pem)
            .unwrap()
            .starts_with("-----BEGIN CERTIFICATE-----\nAQID\n"));
        let user = kc.auth_infos[0].auth_info.as_ref().unwrap();
        assert!(user.token.is_some());
    }
}
