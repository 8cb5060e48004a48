//! A fleet as `fleetbus fleet init` and `fleetbus join` make it: the fleet
//! directory, a nats-server in operator mode from its include, clients with
//! the creds `join` mints, and agents in the secure mode.

use std::path::{Path, PathBuf};
use std::time::Duration;

use async_nats::jetstream;
use fleetbus_testsupport::{cargo_bin, AgentCommand, NatsServer};

/// Runs `fleetbus <args>` (no bus needed); returns (exit code, stdout, stderr).
pub fn cli(args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(cargo_bin("fleetbus"))
        .args(args)
        .env_remove("FLEETBUS_FLEET_DIR")
        .env_remove("FLEETBUS_SUBJECT_PREFIX")
        .env_remove("FLEETBUS_NATS_URL")
        .env_remove("FLEETBUS_NATS_CREDS")
        .env_remove("FLEETBUS_NATS_CA")
        .output()
        .expect("run fleetbus");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `fleetbus fleet init --dir <tmp>/fleet` and `join` of each of `names`;
/// returns the fleet dir.
pub fn fleet_dir(tmp: &Path, names: &[&str]) -> PathBuf {
    let dir = tmp.join("fleet");
    let d = dir.to_str().unwrap();
    let (code, out, err) = cli(&["fleet", "init", "--dir", d]);
    assert_eq!(code, 0, "{out}{err}");
    for n in names {
        let (code, out, err) = cli(&["join", n, "--dir", d]);
        assert_eq!(code, 0, "{err}");
        assert!(out.starts_with("-----BEGIN NATS USER JWT-----"), "{out}");
    }
    dir
}

pub fn creds(dir: &Path, name: &str) -> String {
    dir.join("clusters")
        .join(name)
        .join("nats.creds")
        .display()
        .to_string()
}

/// A nats-server in operator mode from `fleet init`'s include (inlined: a
/// relative include would be resolved against the test server's own dir).
pub fn operator_server(dir: &Path) -> NatsServer {
    let include = std::fs::read_to_string(dir.join("nats-operator.conf")).unwrap();
    NatsServer::start_with_config(&include).unwrap()
}

pub async fn connect(nats: &NatsServer, creds: impl AsRef<Path>) -> jetstream::Context {
    let mut options = async_nats::ConnectOptions::with_credentials_file(creds.as_ref())
        .await
        .unwrap();
    // A cluster's user may subscribe only to its agent's inbox (PROTOCOL
    // §2.6): `<fleet>/clusters/<name>/nats.creds` replies there.
    let path = creds.as_ref();
    if path
        .parent()
        .and_then(Path::parent)
        .and_then(Path::file_name)
        == Some("clusters".as_ref())
    {
        let name = path
            .parent()
            .unwrap()
            .file_name()
            .unwrap()
            .to_str()
            .unwrap();
        options = options.custom_inbox_prefix(format!("_INBOX_{name}"));
    }
    let client = options.connect(nats.url()).await.unwrap();
    let mut js = jetstream::new(client);
    js.set_timeout(Duration::from_secs(2));
    js
}

/// The agent of `name` in the secure mode, with the files `join` wrote to
/// the fleet dir (see [`secure_files`]).
pub fn secure_agent(dir: &Path, name: &str) -> AgentCommand {
    secure_files(AgentCommand::new(name), dir, name)
}

/// `cmd` with the creds, the fleet root, and the keys and certificate of
/// cluster `name` from the fleet dir (`name` need not be `cmd`'s cluster:
/// an agent given another's files must refuse them).
pub fn secure_files(cmd: AgentCommand, dir: &Path, name: &str) -> AgentCommand {
    let cluster = dir.join("clusters").join(name);
    cmd.nats_creds(creds(dir, name))
        .fleet_root(dir.join("root.pub"))
        .cluster_key(cluster.join("cluster.key"))
        .cluster_cert(cluster.join("cluster.cert"))
}

/// `fleetbus_rejected_messages_total{reason}` (read with `Member::metric`).
pub fn rejected_series(reason: &str) -> String {
    format!("fleetbus_rejected_messages_total{{reason=\"{reason}\"}}")
}

/// Publishes `payload` on `subject` as an attacker does: a fresh `Nats-Msg-Id`,
/// so the server's duplicate window does not drop it.
pub async fn publish_raw(js: &jetstream::Context, subject: &str, payload: Vec<u8>) {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("Nats-Msg-Id", format!("forged-{n}").as_str());
    js.publish_with_headers(subject.to_owned(), headers, payload.into())
        .await
        .unwrap()
        .await
        .unwrap();
}

/// Publishes the forgery `payload` on `subject` until `m` counts it in the
/// metric `series` above `before`, each publish given 5 s. One publish may
/// never be read: the streams keep the last message of a subject, the
/// cluster the subject names publishes its own over a forgery at once, and
/// a consumer that restarts in between (an ordered consumer does, after a
/// missed heartbeat on a loaded machine) starts past it. What the callers
/// prove is that a forgery that is read is dropped and counted.
pub async fn publish_until_counted(
    js: &jetstream::Context,
    subject: &str,
    payload: &[u8],
    m: &super::Member,
    series: &str,
    before: f64,
) {
    use super::{Member, MemberExt};
    fleetbus_testsupport::wait_for(
        &format!("{}: {series} > {before} after a forgery", m.name),
        super::CONVERGE,
        || async {
            publish_raw(js, subject, payload.to_vec()).await;
            fleetbus_testsupport::try_wait_for(
                "the forgery counted",
                Duration::from_secs(5),
                || async {
                    match m.metric(series) {
                        Ok(n) if n > before => Ok(()),
                        other => Err(format!("{other:?}")),
                    }
                },
            )
            .await
        },
    )
    .await;
}

/// `fleetbus <args> --nats-url <nats> --creds <admin>`: an operator's command.
pub fn admin_cli(nats: &NatsServer, dir: &Path, args: &[&str]) -> (i32, String, String) {
    let url = nats.url();
    let admin = dir.join("admin.creds");
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["--nats-url", &url, "--creds", admin.to_str().unwrap()]);
    cli(&all)
}

/// Secure c1 and c2 from a fresh fleet dir, each with `extra` flags.
pub async fn secure_pair(
    tmp: &Path,
    extra: &[&str],
) -> (PathBuf, NatsServer, super::Member, super::Member) {
    use super::{Member, MemberExt};
    let dir = fleet_dir(tmp, &["c1", "c2"]);
    let nats = operator_server(&dir);
    let agent = |n: &str| secure_agent(&dir, n).extra(extra.iter().copied());
    let c1 = Member::start_cmd(&nats, "c1", agent("c1")).await;
    let c2 = Member::start_cmd(&nats, "c2", agent("c2")).await;
    super::wait_mesh(&[&c1, &c2], &["c1", "c2"]).await;
    (dir, nats, c1, c2)
}
