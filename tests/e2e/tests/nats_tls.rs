//! `--nats-tls-ca/--nats-tls-cert/--nats-tls-key` against a real nats-server
//! that requires client certificates (`verify: true`), with certificates
//! generated here; `--nats-creds` against a nats-server in operator (JWT)
//! mode, with operator/account/user JWTs signed here with `nkeys`; and the
//! start-up checks of these flags.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;
use fleetbus_testsupport::{http_get, wait_for, Agent, AgentCommand, NatsServer};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// A CA, a server certificate for 127.0.0.1 and a client certificate, as PEM
/// files named like the chart's Secrets (`ca.crt`, `tls.crt`, `tls.key`).
struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    fn generate() -> Pki {
        let dir = tempfile::tempdir().unwrap();
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.distinguished_name
            .push(DnType::CommonName, "fleetbus-test-ca");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_key = KeyPair::generate().unwrap();
        let ca_cert = ca.self_signed(&ca_key).unwrap();
        std::fs::write(dir.path().join("ca.crt"), ca_cert.pem()).unwrap();
        let issuer = Issuer::new(ca, ca_key);

        let leaf = |cn: &str, sans: Vec<String>, usage: ExtendedKeyUsagePurpose| {
            let mut p = CertificateParams::new(sans).unwrap();
            p.distinguished_name.push(DnType::CommonName, cn);
            p.extended_key_usages = vec![usage];
            let key = KeyPair::generate().unwrap();
            let cert = p.signed_by(&key, &issuer).unwrap();
            (cert.pem(), key.serialize_pem())
        };
        let (crt, key) = leaf(
            "nats-server",
            vec!["127.0.0.1".into(), "localhost".into()],
            ExtendedKeyUsagePurpose::ServerAuth,
        );
        std::fs::write(dir.path().join("server.crt"), crt).unwrap();
        std::fs::write(dir.path().join("server.key"), key).unwrap();
        let (crt, key) = leaf("agent", vec![], ExtendedKeyUsagePurpose::ClientAuth);
        std::fs::write(dir.path().join("tls.crt"), crt).unwrap();
        std::fs::write(dir.path().join("tls.key"), key).unwrap();
        Pki { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A nats-server that speaks TLS only and requires a client certificate
    /// signed by the CA.
    fn nats_server(&self) -> NatsServer {
        let q = |p: PathBuf| serde_json::to_string(&p.display().to_string()).unwrap();
        NatsServer::start_with_config(&format!(
            "tls {{\n  cert_file: {}\n  key_file: {}\n  ca_file: {}\n  verify: true\n  timeout: 2\n}}\n",
            q(self.path("server.crt")),
            q(self.path("server.key")),
            q(self.path("ca.crt")),
        ))
        .unwrap()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_with_client_certificate_joins_over_mutual_tls() {
    let pki = Pki::generate();
    let nats = pki.nats_server();
    let cmd = AgentCommand::new("tls-a")
        .nats_tls_ca(pki.path("ca.crt"))
        .nats_tls_cert(pki.path("tls.crt"))
        .nats_tls_key(pki.path("tls.key"));
    let mut m = Member::start_cmd(&nats, "tls-a", cmd).await;
    m.wait_ready().await;
    let log = m.agent.log();
    assert!(log.contains("NATS server version accepted"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_without_client_certificate_is_refused_and_says_why() {
    let pki = Pki::generate();
    let nats = pki.nats_server();
    let cmd = AgentCommand::new("tls-b").nats_tls_ca(pki.path("ca.crt"));
    let m = Member::start_cmd(&nats, "tls-b", cmd).await;
    // The agent retries the connection; its log names the failure each time:
    // the server's TLS alert that a client certificate is required.
    wait_for(
        "the refused NATS connection in the agent log",
        CONVERGE,
        || {
            let log = m.agent.log();
            async move {
                if log.contains("failed to connect to NATS") && log.contains("CertificateRequired")
                {
                    Ok(())
                } else {
                    Err(log)
                }
            }
        },
    )
    .await;
    let (code, body) =
        http_get(&format!("http://{}/readyz", m.metrics_addr)).unwrap_or((0, "unreachable".into()));
    assert_ne!(code, 200, "{body}");
    assert!(body.contains("nats"), "readyz: {code} {body}");
    assert!(
        !m.agent.log().contains("NATS server version accepted"),
        "{}",
        m.agent.log()
    );
}

/// Starts the agent `cmd` (no cluster or server needed: it must stop before
/// using them) and returns its exit code and log.
async fn exits_with(cmd: AgentCommand) -> (i32, String) {
    let mut agent = Agent::start(cmd.argv()).unwrap();
    let code = wait_for("the agent to exit", Duration::from_secs(20), || {
        let status = agent.exit_status();
        async move { status.ok_or_else(|| "still running".to_owned()) }
    })
    .await;
    (code.code().unwrap_or(-1), agent.log())
}

#[tokio::test]
async fn missing_auth_files_and_half_client_certificates_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let absent = dir.path().join("nats.creds");
    let absent_s = absent.display().to_string();
    let a1 = || AgentCommand::new("a1");
    let (code, log) = exits_with(a1().nats_creds(&absent)).await;
    assert_eq!(code, 2, "{log}");
    assert_eq!(log.lines().count(), 1, "{log}");
    assert!(log.starts_with("error: --nats-creds"), "{log}");
    assert!(log.contains(&absent_s), "{log}");

    let (code, log) = exits_with(a1().nats_tls_ca(&absent)).await;
    assert_eq!(code, 2, "{log}");
    assert!(log.contains("--nats-tls-ca"), "{log}");

    let present = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
    let (code, log) = exits_with(a1().nats_tls_cert(present)).await;
    assert_eq!(code, 2, "{log}");
    assert!(
        log.starts_with("error: --nats-tls-cert needs --nats-tls-key"),
        "{log}"
    );
}

#[tokio::test]
async fn plain_text_nats_to_another_host_exits_2_unless_allowed() {
    // 192.0.2.1 (TEST-NET-1) is never reached: the check comes first.
    let cmd = AgentCommand::new("a1").nats_url("nats://u:pw@192.0.2.1:4222");
    let (code, log) = exits_with(cmd).await;
    assert_eq!(code, 2, "{log}");
    assert_eq!(log.lines().count(), 1, "{log}");
    assert!(
        log.starts_with("error: --nats-url nats://192.0.2.1:4222 is plain-text"),
        "{log}"
    );
    assert!(
        log.contains("--allow-insecure") && !log.contains("pw"),
        "{log}"
    );
}

// --- `--nats-creds` against a nats-server in operator (JWT) mode ---

/// A NATS JWT (header, claims, ed25519 signature by `issuer`) as nsc writes them.
fn jwt(issuer: &nkeys::KeyPair, subject: &str, name: &str, nats: serde_json::Value) -> String {
    use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
    use base64::Engine;
    let header = B64.encode(r#"{"typ":"JWT","alg":"ed25519-nkey"}"#);
    let claims = serde_json::json!({
        "jti": format!("{name}-{subject}"),
        "iat": 1_700_000_000u64,
        "iss": issuer.public_key(),
        "name": name,
        "sub": subject,
        "nats": nats,
    });
    let claims = B64.encode(claims.to_string());
    let signing_input = format!("{header}.{claims}");
    let sig = issuer.sign(signing_input.as_bytes()).unwrap();
    format!("{signing_input}.{}", B64.encode(sig))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_with_creds_file_joins_an_operator_mode_server() {
    let operator = nkeys::KeyPair::new_operator();
    let account = nkeys::KeyPair::new_account();
    let user = nkeys::KeyPair::new_user();
    let operator_jwt = jwt(
        &operator,
        &operator.public_key(),
        "test-operator",
        serde_json::json!({"type": "operator", "version": 2}),
    );
    let unlimited = serde_json::json!({
        "subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1,
        "wildcards": true, "conn": -1, "leaf": -1,
        "mem_storage": -1, "disk_storage": -1, "streams": -1, "consumer": -1,
    });
    let account_jwt = jwt(
        &operator,
        &account.public_key(),
        "fleet",
        serde_json::json!({"type": "account", "version": 2, "limits": unlimited}),
    );
    // JetStream needs a system account for its internal subscriptions.
    let system = nkeys::KeyPair::new_account();
    let system_jwt = jwt(
        &operator,
        &system.public_key(),
        "SYS",
        serde_json::json!({"type": "account", "version": 2}),
    );
    let user_jwt = jwt(
        &account,
        &user.public_key(),
        "agent",
        serde_json::json!({
            "type": "user", "version": 2, "pub": {}, "sub": {},
            "subs": -1, "data": -1, "payload": -1,
        }),
    );
    let dir = tempfile::tempdir().unwrap();
    let creds = dir.path().join("nats.creds");
    std::fs::write(
        &creds,
        format!(
            "-----BEGIN NATS USER JWT-----\n{user_jwt}\n------END NATS USER JWT------\n\n\
             -----BEGIN USER NKEY SEED-----\n{}\n------END USER NKEY SEED------\n",
            user.seed().unwrap()
        ),
    )
    .unwrap();
    let nats = NatsServer::start_with_config(&format!(
        "operator: {operator_jwt}\nsystem_account: {sys}\nresolver: MEMORY\n\
         resolver_preload: {{\n  {acc}: {account_jwt}\n  {sys}: {system_jwt}\n}}\n",
        acc = account.public_key(),
        sys = system.public_key(),
    ))
    .unwrap();
    let cmd = AgentCommand::new("creds-a").nats_creds(&creds);
    let mut m = Member::start_cmd(&nats, "creds-a", cmd).await;
    m.wait_ready().await;
    assert!(
        nats.log().contains("Using configuration file"),
        "{}",
        nats.log()
    );

    // Without the creds file, the same server refuses the agent.
    let m2 = Member::start(&nats, "creds-b", "creds-b", &[]).await;
    wait_for(
        "the refused NATS connection in the agent log",
        CONVERGE,
        || {
            let log = m2.agent.log();
            async move {
                if log.contains("failed to connect to NATS")
                    && log.contains("authorization violation")
                {
                    Ok(())
                } else {
                    Err(log)
                }
            }
        },
    )
    .await;
}
