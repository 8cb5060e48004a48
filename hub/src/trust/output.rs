//! What `fleetbus join` prints: the creds file, helm values for
//! deploy/helm/fleetbus-agent, or the Secrets those values name.

use super::Joined;

/// Name of the Secret holding `nats.creds` (the chart's `nats.credsSecret`).
pub const CREDS_SECRET: &str = "fleetbus-nats-creds";
/// Name of the Secret holding `ca.crt` (the chart's `nats.tls.caSecret`).
pub const CA_SECRET: &str = "fleetbus-nats-ca";
/// Name of the Secret holding the cluster's keys, its certificate and the
/// fleet root's public key (the chart's `trust.secret`).
pub const TRUST_SECRET: &str = "fleetbus-cluster-trust";
/// Keys of [`TRUST_SECRET`], the file names the chart mounts them under.
pub const TRUST_KEY: &str = "cluster.key";
/// See [`TRUST_KEY`].
pub const TRUST_CERT: &str = "cluster.cert";
/// See [`TRUST_KEY`].
pub const TRUST_ROOT: &str = "fleet-root.pub";

/// `join -o`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum JoinOutput {
    /// The `.creds` file (user JWT and nkey seed), for `--nats-creds`.
    #[default]
    Creds,
    /// Helm values naming the Secrets of `-o manifest`.
    Values,
    /// The Secrets (creds, keys and certificate, and the CA when the fleet has one) to apply first.
    Manifest,
}

/// Renders `joined` as `format`. `ca` is the PEM CA of the fleet's NATS
/// (TLS on), `nats_url` the server the cluster's agent connects to.
pub fn render(
    joined: &Joined,
    format: JoinOutput,
    namespace: &str,
    nats_url: Option<&str>,
    ca: Option<&str>,
) -> String {
    match format {
        JoinOutput::Creds => joined.creds.clone(),
        JoinOutput::Values => values(joined, nats_url, ca.is_some()),
        JoinOutput::Manifest => manifest(joined, namespace, ca),
    }
}

fn values(joined: &Joined, nats_url: Option<&str>, tls: bool) -> String {
    let mut nats = serde_json::json!({ "credsSecret": CREDS_SECRET });
    if let Some(url) = nats_url {
        nats["url"] = url.into();
    }
    if tls {
        nats["tls"] = serde_json::json!({ "enabled": true, "caSecret": CA_SECRET });
    }
    let values = serde_json::json!({
        "clusterName": joined.name,
        "subjectPrefix": joined.info.subject_prefix,
        "nats": nats,
        "trust": { "secret": TRUST_SECRET },
    });
    let body = fleetbus_schemas::yaml::to_string(&values).unwrap_or_default();
    format!(
        "# fleetbus join {name}: values for deploy/helm/fleetbus-agent. Apply the Secrets of\n\
         # `fleetbus join {name} -o manifest` in the release's namespace first.\n{body}",
        name = joined.name
    )
}

fn secret(name: &str, namespace: &str, data: serde_json::Value) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/part-of": "fleetbus"},
        },
        "type": "Opaque",
        "stringData": data,
    })
}

fn manifest(joined: &Joined, namespace: &str, ca: Option<&str>) -> String {
    let id = &joined.identity;
    let mut docs = vec![
        secret(
            CREDS_SECRET,
            namespace,
            serde_json::json!({ "nats.creds": joined.creds }),
        ),
        secret(
            TRUST_SECRET,
            namespace,
            serde_json::json!({
                TRUST_KEY: id.key.as_str(),
                TRUST_CERT: id.cert,
                TRUST_ROOT: id.root_pub,
            }),
        ),
    ];
    if let Some(ca) = ca {
        docs.push(secret(
            CA_SECRET,
            namespace,
            serde_json::json!({ "ca.crt": ca }),
        ));
    }
    let docs: Vec<String> = docs
        .iter()
        .map(|d| fleetbus_schemas::yaml::to_string(d).unwrap_or_default())
        .collect();
    format!(
        "# fleetbus join {}: NATS credentials, keys and certificate of the cluster's agent.\n\
         # Secrets: apply with kubectl, do not commit.\n---\n{}",
        joined.name,
        docs.join("---\n")
    )
}
