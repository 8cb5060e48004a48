//! The NATS topologies of `deploy/nats/` (TOPOLOGY.md), run for real on
//! loopback from those very files: a 3-node JetStream hub (`hub.conf`,
//! domain `hub`), site leaf nodes (`leaf.conf`, a domain per site), and the
//! stream sources an operator adds to join the domains. Every server gets
//! random ports and its own store directory through the environment the
//! files read, and is killed on drop. The deploy e2e test and the bench's
//! replication scenarios both start their topologies with this.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use async_nats::jetstream::{self, stream};

use crate::agent::Agent;
use crate::bins::{nats_server_bin, repo_root};
use crate::http::http_get;
use crate::process::free_port;
use crate::wait::try_wait_for;

/// How long a node may take to report healthy, or a stream update to be accepted.
const SETTLE: Duration = Duration::from_secs(60);

const LINK_CA: &str = "ca.pem";
const LINK_CERT: &str = "node.pem";
const LINK_KEY: &str = "node.key";

/// The server-link TLS material every node of this process uses (routes and
/// leaf node links are mutual TLS in `hub.conf`/`leaf.conf`): a CA and one
/// certificate for 127.0.0.1/localhost, for server and client auth, made on
/// first use in a directory kept until the process exits.
pub fn link_tls() -> anyhow::Result<&'static Path> {
    static DIR: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();
    DIR.get_or_init(|| make_link_tls().map_err(|e| format!("{e:#}")))
        .as_deref()
        .map_err(|e| anyhow::anyhow!("server-link TLS: {e}"))
}

fn make_link_tls() -> anyhow::Result<PathBuf> {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
        KeyPair, KeyUsagePurpose,
    };
    let dir = tempfile::Builder::new()
        .prefix("fleetbus-link-tls-")
        .tempdir()?
        .keep();
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.distinguished_name
        .push(DnType::CommonName, "fleetbus test link CA");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_key = KeyPair::generate()?;
    let ca_cert = ca.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca, ca_key);
    let mut node = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])?;
    node.distinguished_name
        .push(DnType::CommonName, "fleetbus test nats node");
    node.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    let key = KeyPair::generate()?;
    let cert = node.signed_by(&key, &issuer)?;
    std::fs::write(dir.join(LINK_CA), ca_cert.pem())?;
    std::fs::write(dir.join(LINK_CERT), cert.pem())?;
    std::fs::write(dir.join(LINK_KEY), key.serialize_pem())?;
    Ok(dir)
}

/// `deploy/nats/<name>`.
pub fn deploy_conf(name: &str) -> PathBuf {
    repo_root().join("deploy/nats").join(name)
}

/// A nats-server started from a `deploy/nats` config file with its variables
/// in the environment; killed on drop (its store directory removed after).
#[derive(Debug)]
pub struct NatsNode {
    proc: Agent,
    client_port: u16,
    http_port: u16,
    _store: tempfile::TempDir,
}

impl NatsNode {
    /// Starts `nats-server -c config` with `env`, plus the client port, a free
    /// monitoring port and a fresh store directory (`NATS_CLIENT_PORT`,
    /// `NATS_HTTP_PORT`, `NATS_STORE_DIR`).
    pub fn start(config: &Path, client_port: u16, env: &[(&str, String)]) -> anyhow::Result<Self> {
        let store = tempfile::Builder::new()
            .prefix("fleetbus-nats-node-")
            .tempdir()?;
        let http_port = free_port();
        let mut vars: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect();
        vars.push(("NATS_CLIENT_PORT".into(), client_port.to_string()));
        vars.push(("NATS_HTTP_PORT".into(), http_port.to_string()));
        vars.push(("NATS_STORE_DIR".into(), store.path().display().to_string()));
        let tls = link_tls()?;
        for (k, f) in [
            ("NATS_TLS_CA", LINK_CA),
            ("NATS_TLS_CERT", LINK_CERT),
            ("NATS_TLS_KEY", LINK_KEY),
        ] {
            // Quoted: nats-server parses a variable's value as configuration.
            vars.push((k.into(), format!("{:?}", tls.join(f).display().to_string())));
        }
        let config = config
            .to_str()
            .with_context(|| format!("config path {} is not UTF-8", config.display()))?;
        let proc = Agent::start_bin(&nats_server_bin(), ["-c", config], vars)?;
        Ok(NatsNode {
            proc,
            client_port,
            http_port,
            _store: store,
        })
    }

    /// `nats://127.0.0.1:<client port>`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.client_port)
    }

    pub fn port(&self) -> u16 {
        self.client_port
    }

    pub fn pid(&self) -> Option<u32> {
        self.proc.pid()
    }

    /// The server's log (stdout and stderr).
    pub fn log(&self) -> String {
        self.proc.log()
    }

    /// GET `path` on the monitoring port: the body of a 200, else an error.
    pub fn monitor(&self, path: &str) -> Result<String, String> {
        match http_get(&format!("http://127.0.0.1:{}{path}", self.http_port))? {
            (200, body) => Ok(body),
            (code, body) => Err(format!("{path}: {code} {body}")),
        }
    }

    /// Waits until `/healthz` says the server and its JetStream are up.
    pub async fn wait_healthy(&self) -> anyhow::Result<()> {
        let outcome = try_wait_for("nats-server healthy with JetStream", SETTLE, || async {
            let log = self.proc.log();
            // A port `free_port` found free was taken before the server
            // bound it: it exits at once, and waiting would not help.
            if log.contains(PORT_TAKEN) {
                return Ok(Err(PortTaken(log)));
            }
            self.monitor("/healthz?js-enabled-only=true")
                .map(|_| Ok(()))
                .map_err(|e| format!("{e}\n{log}"))
        })
        .await
        .map_err(anyhow::Error::msg)?;
        Ok(outcome?)
    }

    /// The number of leaf node connections (`/leafz`).
    pub fn leafnodes(&self) -> Result<u64, String> {
        let body = self.monitor("/leafz")?;
        let v: serde_json::Value = serde_json::from_str(&body).map_err(|e| e.to_string())?;
        v["leafnodes"]
            .as_u64()
            .ok_or_else(|| format!("no leafnodes in {body}"))
    }

    /// Waits until this (leaf) node has a connection to the hub.
    pub async fn wait_leaf_connected(&self) -> anyhow::Result<()> {
        try_wait_for("the leaf to connect to the hub", SETTLE, || async {
            match self.leafnodes()? {
                0 => Err("no leaf connection".into()),
                _ => Ok(()),
            }
        })
        .await
        .map_err(anyhow::Error::msg)
    }
}

/// The hub of TOPOLOGY.md: three nodes from `hub.conf` with routes on
/// loopback (JetStream domain `hub`, clients run with `--replicas 3`).
#[derive(Debug)]
pub struct HubCluster {
    pub nodes: Vec<NatsNode>,
    /// Each node's leaf node port (sites dial in there).
    pub leaf_ports: Vec<u16>,
}

impl HubCluster {
    /// Starts the three nodes and waits until each is healthy; again on
    /// fresh ports when one was taken meanwhile ([`PortTaken`]).
    pub async fn start() -> anyhow::Result<HubCluster> {
        Self::start_from("hub.conf", &[]).await
    }

    /// The same from `deploy/nats/<config>` (`hub-accounts.conf`: with the
    /// accounts of `accounts.conf`, whose passwords `env` gives).
    pub async fn start_from(config: &str, env: &[(&str, String)]) -> anyhow::Result<HubCluster> {
        retry_taken_ports(|| Self::start_once(config, env)).await
    }

    async fn start_once(config: &str, env: &[(&str, String)]) -> anyhow::Result<HubCluster> {
        let cluster_ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
        let leaf_ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
        let routes = format!(
            "[{}]",
            cluster_ports
                .iter()
                .map(|p| format!("nats://127.0.0.1:{p}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let mut nodes = Vec::new();
        for (i, (cluster_port, leaf_port)) in cluster_ports.iter().zip(&leaf_ports).enumerate() {
            let mut vars = vec![
                ("NATS_SERVER_NAME", format!("hub-{}", i + 1)),
                ("NATS_CLUSTER_PORT", cluster_port.to_string()),
                ("NATS_LEAF_PORT", leaf_port.to_string()),
                ("NATS_CLUSTER_ROUTES", routes.clone()),
            ];
            vars.extend(env.iter().cloned());
            nodes.push(NatsNode::start(&deploy_conf(config), free_port(), &vars)?);
        }
        for n in &nodes {
            n.wait_healthy().await?;
        }
        Ok(HubCluster { nodes, leaf_ports })
    }

    /// `[nats-leaf://127.0.0.1:<leaf port>, ...]` of every node, for a site's
    /// `NATS_HUB_LEAF_URLS`.
    pub fn leaf_urls(&self) -> String {
        leaf_urls(&self.leaf_ports)
    }
}

/// `[nats-leaf://127.0.0.1:<port>, ...]`.
pub fn leaf_urls(ports: &[u16]) -> String {
    leaf_urls_with(ports, "")
}

/// `[nats-leaf://<user>:<password>@127.0.0.1:<port>, ...]`: a link into the
/// hub's account of `user` (leaf-accounts.conf).
pub fn leaf_urls_as(ports: &[u16], user: &str, password: &str) -> String {
    leaf_urls_with(ports, &format!("{user}:{password}@"))
}

fn leaf_urls_with(ports: &[u16], userinfo: &str) -> String {
    format!(
        "[{}]",
        ports
            .iter()
            .map(|p| format!("nats-leaf://{userinfo}127.0.0.1:{p}"))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// A site's leaf node from `leaf.conf`: JetStream domain `domain`, dialing
/// `hub_leaf_urls` (see [`HubCluster::leaf_urls`]). Clients of a single-node
/// site run with `--replicas 1`. Returns once the node is healthy; whether its
/// link is up is [`NatsNode::wait_leaf_connected`]'s to say.
pub async fn start_site(domain: &str, hub_leaf_urls: &str) -> anyhow::Result<NatsNode> {
    let urls = [("NATS_HUB_LEAF_URLS", hub_leaf_urls.to_owned())];
    start_site_from("leaf.conf", domain, &urls).await
}

/// The same from `deploy/nats/<config>` with `env` added: `leaf-accounts.conf`
/// takes a list of URLs per account (`NATS_HUB_LEAF_STREAMS_URLS`,
/// `NATS_HUB_LEAF_MEMBERS_URLS`, see [`leaf_urls_as`]) and accounts.conf's
/// passwords.
pub async fn start_site_from(
    config: &str,
    domain: &str,
    env: &[(&str, String)],
) -> anyhow::Result<NatsNode> {
    retry_taken_ports(|| start_site_once(config, domain, env)).await
}

async fn start_site_once(
    config: &str,
    domain: &str,
    env: &[(&str, String)],
) -> anyhow::Result<NatsNode> {
    let mut vars = vec![
        ("NATS_SERVER_NAME", format!("{domain}-nats")),
        ("NATS_SITE_DOMAIN", domain.to_owned()),
    ];
    vars.extend(env.iter().cloned());
    let node = NatsNode::start(&deploy_conf(config), free_port(), &vars)?;
    node.wait_healthy().await?;
    Ok(node)
}

/// What nats-server logs when a port it was given is in use.
const PORT_TAKEN: &str = "address already in use";

/// A nats-server exited because a port it was given was taken between
/// `free_port` finding it free and the server binding it (another test's
/// process got it first); the server's log.
#[derive(Debug)]
pub struct PortTaken(String);

impl std::fmt::Display for PortTaken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "a port of the nats-server was taken before it bound it:\n{}",
            self.0
        )
    }
}

impl std::error::Error for PortTaken {}

/// Runs `start` up to three times while it fails with [`PortTaken`]: each
/// run picks fresh ports.
async fn retry_taken_ports<T, F, Fut>(mut start: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<T>>,
{
    let mut tries = 0;
    loop {
        tries += 1;
        match start().await {
            Err(e) if tries < 3 && e.downcast_ref::<PortTaken>().is_some() => {
                eprintln!("{e}\nstarting it again on other ports");
            }
            other => return other,
        }
    }
}

/// The destination that maps `filter` onto itself: each `*` becomes
/// `{{wildcard(n)}}` (nats-server refuses a bare `*` in a destination).
pub fn identity_destination(filter: &str) -> String {
    let mut n = 0;
    filter
        .split('.')
        .map(|t| {
            if t == "*" {
                n += 1;
                format!("{{{{wildcard({n})}}}}")
            } else {
                t.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join(".")
}

/// Makes stream `name` in `js`'s domain source the stream of the same name in
/// JetStream domain `domain`, filtered to `filters` (TOPOLOGY.md: through
/// `external.api_prefix`, never the `domain` field). Replaces the stream's
/// sources. Retried until [`SETTLE`]: a loaded R3 hub may time out a stream
/// update, and the update is idempotent.
pub async fn add_source(
    js: &jetstream::Context,
    name: &str,
    domain: &str,
    filters: &[&str],
) -> anyhow::Result<()> {
    try_wait_for(&format!("source {domain}/{name} added"), SETTLE, || {
        try_add_source(js, name, domain, filters)
    })
    .await
    .map_err(anyhow::Error::msg)
}

async fn try_add_source(
    js: &jetstream::Context,
    name: &str,
    domain: &str,
    filters: &[&str],
) -> Result<(), String> {
    let mut cfg = js
        .get_stream(name)
        .await
        .map_err(|e| e.to_string())?
        .info()
        .await
        .map_err(|e| e.to_string())?
        .config
        .clone();
    cfg.sources = Some(vec![stream::Source {
        name: name.into(),
        subject_transforms: filters
            .iter()
            .map(|f| stream::SubjectTransform {
                source: (*f).into(),
                destination: identity_destination(f),
            })
            .collect(),
        external: Some(stream::External {
            api_prefix: format!("$JS.{domain}.API"),
            delivery_prefix: None,
        }),
        ..Default::default()
    }]);
    js.update_stream(cfg)
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Waits until stream `name` exists in `js`'s domain (the agents create them).
pub async fn wait_stream(js: &jetstream::Context, name: &str) -> anyhow::Result<()> {
    try_wait_for(&format!("stream {name}"), SETTLE, || async {
        js.get_stream(name)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    })
    .await
    .map_err(anyhow::Error::msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_destination_names_each_wildcard() {
        assert_eq!(
            identity_destination("$KV.fleetbus-registry.*.a.*"),
            "$KV.fleetbus-registry.{{wildcard(1)}}.a.{{wildcard(2)}}"
        );
        assert_eq!(identity_destination("fleetbus.obj.a.>"), "fleetbus.obj.a.>");
    }

    #[test]
    fn leaf_urls_list_every_port() {
        assert_eq!(
            leaf_urls(&[1, 2]),
            "[nats-leaf://127.0.0.1:1, nats-leaf://127.0.0.1:2]"
        );
        assert_eq!(
            leaf_urls_as(&[1], "leaf-streams", "pw"),
            "[nats-leaf://leaf-streams:pw@127.0.0.1:1]"
        );
    }

    /// `leaf-accounts.conf` is `leaf.conf` with a remote per account: the
    /// two files say the same outside their comments and `leafnodes` block
    /// (and the include of the accounts).
    #[test]
    fn the_site_with_accounts_is_the_site_of_leaf_conf() {
        let settings = |name: &str| -> Vec<String> {
            let text = std::fs::read_to_string(deploy_conf(name)).unwrap();
            let mut out = Vec::new();
            let mut depth = 0usize;
            for line in text.lines().map(str::trim) {
                if line.starts_with("leafnodes") {
                    depth = 1;
                    continue;
                }
                if depth > 0 {
                    depth += line.matches('{').count() + line.matches('[').count();
                    depth -= line.matches('}').count() + line.matches(']').count();
                    continue;
                }
                if !line.is_empty() && !line.starts_with('#') && !line.starts_with("include") {
                    out.push(line.to_owned());
                }
            }
            out
        };
        let site = settings("leaf.conf");
        assert!(site.iter().any(|l| l.starts_with("domain:")), "{site:?}");
        assert_eq!(settings("leaf-accounts.conf"), site);
        let with = std::fs::read_to_string(deploy_conf("leaf-accounts.conf")).unwrap();
        for remote in ["account: FLEETBUS\n", "account: FLEETBUS_MEMBERS\n"] {
            assert!(with.contains(remote), "{remote}");
        }
    }

    /// A node given a port another process holds exits; `wait_healthy`
    /// says so at once instead of waiting out its minute, and the start is
    /// made again on other ports.
    #[tokio::test]
    async fn a_taken_port_is_seen_at_once_and_the_start_is_made_again() {
        let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let taken = held.local_addr().unwrap().port();
        let started = std::time::Instant::now();
        let node = NatsNode::start(
            &deploy_conf("leaf.conf"),
            taken,
            &[
                ("NATS_SERVER_NAME", "taken".to_owned()),
                ("NATS_SITE_DOMAIN", "taken".to_owned()),
                ("NATS_HUB_LEAF_URLS", "[nats-leaf://127.0.0.1:1]".to_owned()),
            ],
        )
        .unwrap();
        let err = node.wait_healthy().await.unwrap_err();
        assert!(err.downcast_ref::<PortTaken>().is_some(), "{err:#}");
        assert!(started.elapsed() < SETTLE / 2, "{:?}", started.elapsed());

        let tries = std::sync::atomic::AtomicU32::new(0);
        let ok = retry_taken_ports(|| async {
            match tries.fetch_add(1, std::sync::atomic::Ordering::SeqCst) {
                0 | 1 => Err(anyhow::Error::new(PortTaken("taken".into()))),
                n => Ok(n),
            }
        })
        .await
        .unwrap();
        assert_eq!(ok, 2);
        let other = retry_taken_ports(|| async { Err::<(), _>(anyhow::anyhow!("other")) }).await;
        assert!(other.is_err());
        let always = retry_taken_ports(|| async {
            Err::<(), _>(anyhow::Error::new(PortTaken("taken".into())))
        })
        .await
        .unwrap_err();
        assert!(always.downcast_ref::<PortTaken>().is_some());
    }
}
