//! The exec credential plugin of a ClusterProfile's `fleetbus` access
//! provider (KEP-5339): run by a consumer's client in the consumer's
//! cluster, it reads the peer's reader kubeconfig from the Secret the
//! profile names (with the consumer's own RBAC: `get` on that Secret) and
//! answers with its short-lived token as an `ExecCredential`.

use base64::Engine;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use serde_json::{json, Value};

/// The environment variable client-go passes the `ExecCredential` in.
pub const EXEC_INFO: &str = "KUBERNETES_EXEC_INFO";

/// Why no credential could be given.
#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    /// The `ExecCredential` input is missing or not JSON.
    #[error("cannot read the ExecCredential in {EXEC_INFO} (set provideClusterInfo: true in the kubeconfig's exec section)")]
    Input(#[source] Option<serde_json::Error>),
    /// The cluster's config names no Secret.
    #[error("the ExecCredential's spec.cluster.config has no {0} (the ClusterProfile's exec extension gives it)")]
    Missing(&'static str),
    /// No client for the consumer's own cluster.
    #[error("cannot reach this cluster's API server (KUBECONFIG or in-cluster)")]
    Client(#[source] kube::Error),
    /// The Secret could not be read.
    #[error("cannot read Secret {0}")]
    Read(String, #[source] kube::Error),
    /// The Secret holds no kubeconfig with a token.
    #[error("Secret {0} holds no kubeconfig with a token (the peer publishes none without --publish-kubeconfig)")]
    NoToken(String),
}

/// Where the reader kubeconfig is: from `spec.cluster.config` of the
/// `ExecCredential` (`secretNamespace`, `secretName`).
pub fn secret_of(exec_info: &str) -> Result<(String, String, String), CredentialsError> {
    let info: Value =
        serde_json::from_str(exec_info).map_err(|e| CredentialsError::Input(Some(e)))?;
    let config = info.pointer("/spec/cluster/config");
    let field = |name: &'static str| {
        config
            .and_then(|c| c.get(name))
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .ok_or(CredentialsError::Missing(name))
    };
    let version = info
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("client.authentication.k8s.io/v1")
        .to_owned();
    Ok((version, field("secretNamespace")?, field("secretName")?))
}

/// The current context's cluster and user of a kubeconfig.
fn current(
    cfg: &kube::config::Kubeconfig,
) -> Option<(&kube::config::Cluster, &kube::config::AuthInfo)> {
    let context = cfg.current_context.as_deref()?;
    let ctx = cfg
        .contexts
        .iter()
        .find(|c| c.name == context)?
        .context
        .as_ref()?;
    let cluster = cfg
        .clusters
        .iter()
        .find(|c| c.name == ctx.cluster)?
        .cluster
        .as_ref()?;
    let user = ctx.user.as_deref()?;
    let auth = cfg
        .auth_infos
        .iter()
        .find(|a| a.name == user)?
        .auth_info
        .as_ref()?;
    Some((cluster, auth))
}

/// The token of the current context of `kubeconfig`.
pub fn token_of(kubeconfig: &str) -> Option<String> {
    use secrecy::ExposeSecret;
    let cfg = kube::config::Kubeconfig::from_yaml(kubeconfig).ok()?;
    let (_, auth) = current(&cfg)?;
    auth.token.as_ref().map(|t| t.expose_secret().to_owned())
}

/// The API server and CA (base64 PEM) of the current context of `kubeconfig`.
pub fn endpoint_of(kubeconfig: &str) -> Option<(String, Option<String>)> {
    let cfg = kube::config::Kubeconfig::from_yaml(kubeconfig).ok()?;
    let (cluster, _) = current(&cfg)?;
    Some((
        cluster.server.clone()?,
        cluster.certificate_authority_data.clone(),
    ))
}

/// When a JWT expires (its `exp` claim), RFC 3339; None when it does not say.
pub fn expiry_of(token: &str) -> Option<String> {
    let claims = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(claims.trim_end_matches('='))
        .ok()?;
    let exp = serde_json::from_slice::<Value>(&bytes)
        .ok()?
        .get("exp")?
        .as_i64()?;
    let at = chrono::DateTime::from_timestamp(exp, 0)?;
    Some(at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
}

/// The `ExecCredential` answering `exec_info`: the reader token of the
/// Secret it names, read from the cluster this process's own configuration
/// reaches.
pub async fn exec(exec_info: &str) -> Result<Value, CredentialsError> {
    let (version, namespace, name) = secret_of(exec_info)?;
    let client = kube::Client::try_default()
        .await
        .map_err(CredentialsError::Client)?;
    let object = format!("{namespace}/{name}");
    let secret = Api::<Secret>::namespaced(client, &namespace)
        .get(&name)
        .await
        .map_err(|e| CredentialsError::Read(object.clone(), e))?;
    let token = secret
        .data
        .as_ref()
        .and_then(|d| d.get(fleetbus_schemas::well_known::SECRET_KEY_KUBECONFIG))
        .and_then(|k| std::str::from_utf8(&k.0).ok())
        .and_then(token_of)
        .ok_or(CredentialsError::NoToken(object))?;
    let mut status = json!({"token": token});
    if let Some(at) = expiry_of(&token) {
        status["expirationTimestamp"] = json!(at);
    }
    Ok(json!({"apiVersion": version, "kind": "ExecCredential", "status": status}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_secret_comes_from_the_cluster_config() {
        let info = r#"{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential",
            "spec":{"cluster":{"server":"https://b:6443","config":{"clusterName":"b",
            "secretNamespace":"fleetbus-system","secretName":"b-kubeconfig"}},"interactive":false}}"#;
        let (v, ns, name) = secret_of(info).unwrap();
        assert_eq!(
            (v.as_str(), ns.as_str(), name.as_str()),
            (
                "client.authentication.k8s.io/v1",
                "fleetbus-system",
                "b-kubeconfig"
            )
        );
        let bare =
            r#"{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","spec":{}}"#;
        assert!(matches!(
            secret_of(bare),
            Err(CredentialsError::Missing("secretNamespace"))
        ));
        assert!(matches!(secret_of("nope"), Err(CredentialsError::Input(_))));
    }

    #[test]
    fn the_token_and_its_expiry_are_read() {
        let payload =
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(r#"{"exp":2000000000}"#);
        let token = format!("e30.{payload}.sig");
        let kubeconfig = format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: r\ncontexts:\n- name: r\n  context: {{cluster: c, user: u}}\nclusters:\n- name: c\n  cluster: {{server: 'https://b:6443'}}\nusers:\n- name: u\n  user: {{token: '{token}'}}\n"
        );
        assert_eq!(token_of(&kubeconfig).as_deref(), Some(token.as_str()));
        assert_eq!(
            endpoint_of(&kubeconfig),
            Some(("https://b:6443".to_owned(), None))
        );
        assert_eq!(expiry_of(&token).as_deref(), Some("2033-05-18T03:33:20Z"));
        assert_eq!(expiry_of("opaque"), None);
    }
}
