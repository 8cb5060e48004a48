//! `fleetbus dashboard` end to end: the real binary against a real
//! nats-server (and, for the browser test, devclusters and agents), driven over
//! HTTP as an intruder would and in Debian's headless Chromium as an operator would.
//!
//! The browser is driven through W3C WebDriver (`fantoccini` + `chromedriver`):
//! a small client over plain HTTP to the local driver, where chromiumoxide's
//! generated DevTools bindings would be one of the largest crates of the workspace
//! and tied to one DevTools protocol revision.
//!
//! Screenshots go to `target/dashboard-screenshots/*.png`; each path is printed.
//! Without Chromium the browser tests skip loudly, unless FLEETBUS_REQUIRE_BROWSER
//! is set (CI sets it: there they fail instead).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::rules::RuleBuilder;
use common::sync::*;
use common::*;
use fantoccini::{Client, ClientBuilder, Locator};
use fleetbus_testsupport::{
    cargo_bin, free_addr, http_request, repo_root, wait_for, Agent, NatsServer,
};
use serde_json::{json, Value};

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
/// How long the page may take to show what the bus says (it polls every 2 s).
const SHOW: Duration = Duration::from_secs(30);
const RULE_STATUS_BUCKET: &str = "fleetbus-rulestatus";

/// A running `fleetbus dashboard`.
struct Dashboard {
    proc: Agent,
    url: String,
}

impl Dashboard {
    /// Starts `fleetbus dashboard --listen <free loopback port> <extra>` on `nats` and
    /// waits until it serves.
    async fn start(nats: &NatsServer, extra: &[&str]) -> Dashboard {
        let addr = free_addr();
        let mut args = vec!["dashboard", "--listen", &addr];
        args.extend_from_slice(extra);
        let proc = Agent::start_bin(
            &cargo_bin("fleetbus"),
            &args,
            [("FLEETBUS_NATS_URL", nats.url())],
        )
        .expect("start fleetbus dashboard");
        let url = format!("http://{addr}");
        let probe = format!("{url}/api/config");
        let auth: Vec<(&str, String)> = extra
            .windows(2)
            .filter(|w| w[0] == "--token")
            .map(|w| ("Authorization", format!("Bearer {}", w[1])))
            .collect();
        wait_for("the dashboard to serve", SHOW, || async {
            let headers: Vec<(&str, &str)> = auth.iter().map(|(k, v)| (*k, v.as_str())).collect();
            match http_request("GET", &probe, &headers, None) {
                Ok(r) if r.status == 200 => Ok(()),
                other => Err(format!("{other:?}\n{}", proc.log())),
            }
        })
        .await;
        Dashboard { proc, url }
    }

    fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&str>,
    ) -> (u16, Value) {
        let r = http_request(method, &format!("{}{path}", self.url), headers, body)
            .unwrap_or_else(|e| panic!("{method} {path}: {e}\n{}", self.proc.log()));
        (
            r.status,
            serde_json::from_str(&r.body).unwrap_or(Value::String(r.body)),
        )
    }

    fn get(&self, path: &str) -> (u16, Value) {
        self.request("GET", path, &[], None)
    }
}

/// Asserts `status` and that the JSON error names `needle`.
fn assert_error(what: &str, (status, body): (u16, Value), want: u16, needle: &str) {
    let msg = body["error"].as_str().unwrap_or_default();
    assert!(
        status == want && msg.contains(needle),
        "{what}: want {want} with {needle:?}, got {status} {body}"
    );
}

/// Nothing but nats-server: what the server refuses needs no fleet.
#[tokio::test]
async fn the_read_only_server_refuses_actions_and_garbage() {
    let nats = NatsServer::start().unwrap();
    let d = Dashboard::start(&nats, &[]).await;
    let (code, config) = d.get("/api/config");
    assert_eq!((code, config["allowActions"].clone()), (200, json!(false)));
    let json = [("Content-Type", "application/json")];
    let body = Some(r#"{"cluster":"c2"}"#);
    for action in ["/api/actions/correct", "/api/actions/label"] {
        assert_error(
            action,
            d.request("POST", action, &json, body),
            403,
            "--allow-actions",
        );
        assert_eq!(d.get(action).0, 405, "GET {action}");
    }
    for read in ["/api/clusters", "/api/rules", "/api/drift", "/"] {
        assert_eq!(
            d.request("POST", read, &json, Some("{}")).0,
            405,
            "POST {read}"
        );
    }
    assert_error("unknown path", d.get("/api/nope"), 404, "/api/nope");
    assert_error(
        "unknown param",
        d.get("/api/clusters?bogus=1"),
        400,
        "bogus",
    );
    assert_error(
        "bad state",
        d.get("/api/clusters?state=Sideways"),
        400,
        "Sideways",
    );
    assert_error("empty label", d.get("/api/clusters?label="), 400, "KEY");
    assert_error("no cluster", d.get("/api/progress"), 400, "cluster");
    assert_error(
        "wildcard",
        d.get("/api/progress?cluster=b.%3E"),
        400,
        "not a cluster name",
    );
    assert_error(
        "events wildcard",
        d.get("/api/events?cluster=*"),
        400,
        "not a cluster name",
    );
    assert_error(
        "bad object",
        d.get("/api/drift/history?object=web"),
        400,
        "KIND/NAMESPACE/NAME",
    );
    // No agent has created the drift bucket: unavailable, naming the prefix, not a 500.
    assert_error("no drift bucket", d.get("/api/drift"), 503, "fleetbus");
    // A bus without a registry is not an empty fleet (a wrong prefix must not look
    // like one).
    assert_error(
        "no registry",
        d.get("/api/clusters"),
        503,
        "fleetbus-registry",
    );
    // The rules grid says why it is empty instead of failing.
    let (code, rules) = d.get("/api/rules");
    assert_eq!(code, 200, "{rules}");
    assert!(
        rules["note"]
            .as_str()
            .unwrap_or_default()
            .contains(RULE_STATUS_BUCKET),
        "{rules}"
    );
    // Without a token, a page elsewhere that rebinds its name to 127.0.0.1 is refused.
    assert_error(
        "rebinding",
        d.request("GET", "/api/config", &[("Host", "evil.example:8080")], None),
        403,
        "loopback",
    );
}

#[tokio::test]
async fn actions_reach_the_agent_with_the_cli_code_paths() {
    let nats = NatsServer::start().unwrap();
    let d = Dashboard::start(&nats, &["--allow-actions"]).await;
    let json = [("Content-Type", "application/json")];
    // The same errors as `fleetbus drift correct --cluster nobody`.
    assert_error(
        "no agent",
        d.request(
            "POST",
            "/api/actions/correct",
            &json,
            Some(r#"{"cluster":"nobody"}"#),
        ),
        404,
        "no agent answers for cluster nobody",
    );
    assert_error(
        "bad cluster",
        d.request(
            "POST",
            "/api/actions/label",
            &json,
            Some(r#"{"cluster":"a.*","labels":["x=y"]}"#),
        ),
        400,
        "not a cluster name",
    );
    assert_error(
        "bad label",
        d.request(
            "POST",
            "/api/actions/label",
            &json,
            Some(r#"{"cluster":"c1","labels":["=v"]}"#),
        ),
        400,
        "=v",
    );
    assert_error(
        "unknown member",
        d.request(
            "POST",
            "/api/actions/correct",
            &json,
            Some(r#"{"cluster":"c1","all":true}"#),
        ),
        422,
        "all",
    );
    // A form post from another site cannot be JSON without a preflight.
    let form = [("Content-Type", "application/x-www-form-urlencoded")];
    assert_eq!(
        d.request("POST", "/api/actions/correct", &form, Some("cluster=c1"))
            .0,
        415
    );
    assert_eq!(
        d.request("POST", "/api/actions/correct", &json, Some("{"))
            .0,
        400
    );
}

#[tokio::test]
async fn other_addresses_need_a_token_and_the_token_is_checked() {
    let nats = NatsServer::start().unwrap();
    let (code, _, stderr) = fleetbus_cli(&nats, &["dashboard", "--listen", "0.0.0.0:0"]).await;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("without a token") && stderr.contains("--token"),
        "{stderr}"
    );
    let (code, _, stderr) = fleetbus_cli(
        &nats,
        &["dashboard", "--listen", "0.0.0.0:0", "--token", "a b"],
    )
    .await;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("--token must be"), "{stderr}");

    let d = Dashboard::start(&nats, &["--token", "s3cret-t0ken"]).await;
    assert_error("no token", d.get("/api/config"), 401, "?token=");
    assert_error("no token page", d.get("/"), 401, "?token=");
    let wrong = d.request(
        "GET",
        "/api/config",
        &[("Authorization", "Bearer s3cret-t0kem")],
        None,
    );
    assert_eq!(wrong.0, 401);
    assert_error("wrong login", d.get("/?token=nope"), 401, "wrong token");
    let login = http_request("GET", &format!("{}/?token=s3cret-t0ken", d.url), &[], None).unwrap();
    assert_eq!(login.status, 303, "{login:?}");
    let cookie = login.header("set-cookie").expect("login sets a cookie");
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    let cookie = cookie.split(';').next().unwrap();
    let (code, _) = d.request("GET", "/api/config", &[("Cookie", cookie)], None);
    assert_eq!(code, 200);
    let (code, _) = d.request("GET", "/", &[("Cookie", cookie)], None);
    assert_eq!(code, 200);
    // With a token, any Host is fine: the token is the gate.
    let (code, _) = d.request(
        "GET",
        "/api/config",
        &[
            ("Authorization", "Bearer s3cret-t0ken"),
            ("Host", "fleet.example"),
        ],
        None,
    );
    assert_eq!(code, 200);
}

// ---------- one watch per process ----------

/// A server-sent events client over a plain socket: the body as it arrives.
struct EventClient {
    socket: tokio::net::TcpStream,
    seen: String,
}

impl EventClient {
    /// Opens `path` and waits for `event: ready`.
    async fn open(d: &Dashboard, path: &str) -> EventClient {
        use tokio::io::AsyncWriteExt;
        let host = d.url.strip_prefix("http://").unwrap();
        let mut socket = tokio::net::TcpStream::connect(host).await.unwrap();
        let head =
            format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nAccept: text/event-stream\r\n\r\n");
        socket.write_all(head.as_bytes()).await.unwrap();
        let mut c = EventClient {
            socket,
            seen: String::new(),
        };
        c.until(&format!("{path}: ready"), "event: ready").await;
        c
    }

    /// Reads until what arrived contains `needle` (for at most [`SHOW`]).
    async fn until(&mut self, what: &str, needle: &str) {
        let deadline = tokio::time::Instant::now() + SHOW;
        while !self.seen.contains(needle) {
            assert!(
                self.read_until(deadline).await,
                "{what}: no {needle:?} within {SHOW:?}; the stream so far:\n{}",
                self.seen
            );
        }
    }

    /// Reads what arrives until `deadline`; false when nothing more did.
    async fn read_until(&mut self, deadline: tokio::time::Instant) -> bool {
        use tokio::io::AsyncReadExt;
        let mut buf = [0u8; 16 * 1024];
        match tokio::time::timeout_at(deadline, self.socket.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => {
                self.seen.push_str(&String::from_utf8_lossy(&buf[..n]));
                true
            }
            Ok(Ok(_)) => panic!("the event stream ended:\n{}", self.seen),
            Ok(Err(e)) => panic!("reading the event stream: {e}\n{}", self.seen),
            Err(_) => false,
        }
    }
}

/// How many consumers each of `streams` has.
async fn consumer_counts(js: &async_nats::jetstream::Context, streams: &[String]) -> Vec<usize> {
    let mut counts = Vec::new();
    for name in streams {
        let mut stream = js.get_stream(name).await.unwrap();
        counts.push(stream.info().await.unwrap().state.consumer_count);
    }
    counts
}

/// The dashboard reads the rule status and drift buckets and the drift stream once per
/// process, however many requests and event clients it serves: 50 GETs of
/// `/api/rules` and of `/api/drift` and 30 event clients add at most a few consumers
/// to the streams they read (reading per request added one per request and per
/// client), and a drift made in the fleet still shows in both.
#[tokio::test]
async fn requests_and_event_clients_share_one_watch_per_process() {
    const GETS: usize = 50;
    const CLIENTS: usize = 30;
    /// The dashboard's own consumers (one per stream), and room for one restarted.
    const MOST: usize = 3;
    let nats = NatsServer::start().unwrap();
    let m = fleet(&nats, &["c1", "c2"]).await;
    for x in &m {
        create_ns(x, "team-a").await;
    }
    // Report mode: the drift stays in the drift bucket until corrected.
    apply_yaml(
        &m[0],
        &team_config()
            .spec("drift", json!({"mode": "Report"}))
            .yaml(),
    );
    wait_rule_copy(&m[1], "team-config", "c1").await;
    kubectl(
        &m[0],
        &[
            "create",
            "configmap",
            "settings",
            "-n",
            "team-a",
            "--from-literal=color=blue",
        ],
    );
    let cms = resource("", "v1", "ConfigMap", "configmaps");
    wait_copy(
        &m[1],
        &cms,
        Some("team-a"),
        "settings",
        "c1",
        "team-config",
        |_| Ok(()),
    )
    .await;
    let prefix: fleetbus_schemas::subject::Prefix = "fleetbus".parse().unwrap();
    let streams = [
        fleetbus_schemas::jetstream::Layout::new(prefix.clone(), 1)
            .drift_stream()
            .name,
        format!("KV_{}", fleetbus_schemas::drift::drift_bucket(&prefix)),
        format!("KV_{RULE_STATUS_BUCKET}"),
    ];
    let js = async_nats::jetstream::new(async_nats::connect(nats.url()).await.unwrap());
    // The rule status bucket exists once the agents have reported the rule.
    wait_for("the rule status bucket", SHOW, || async {
        match js.get_key_value(RULE_STATUS_BUCKET).await {
            Ok(_) => Ok(()),
            Err(e) => Err(e.to_string()),
        }
    })
    .await;
    let before = consumer_counts(&js, &streams).await;

    let d = Dashboard::start(&nats, &[]).await;
    // A third of the clients follow c1 only: c2's drift must not reach them.
    let mut clients = Vec::new();
    for i in 0..CLIENTS {
        let path = match i % 3 {
            0 => "/api/events?cluster=c1",
            1 => "/api/events?cluster=c2",
            _ => "/api/events",
        };
        clients.push((path, EventClient::open(&d, path).await));
    }
    for _ in 0..GETS {
        let (code, grid) = d.get("/api/rules");
        assert_eq!(code, 200, "{grid}");
        let (code, drift) = d.get("/api/drift");
        assert_eq!(
            (code, drift["drifted"].clone()),
            (200, json!([])),
            "{drift}"
        );
    }
    let during = consumer_counts(&js, &streams).await;
    println!("consumers before the dashboard {before:?}, after {GETS} GETs of each read and {CLIENTS} event clients {during:?} ({streams:?})");
    for ((name, b), a) in streams.iter().zip(&before).zip(&during) {
        assert!(
            a.saturating_sub(*b) <= MOST,
            "{name}: {b} consumers before the dashboard, {a} after {GETS} GETs of each read \
             and {CLIENTS} event clients"
        );
    }

    // The answers still follow the fleet: the rules grid, and a drift on c2 in
    // /api/drift and in the events of every client that follows c2.
    let (_, grid) = d.get("/api/rules?rule=team-config");
    let cells: Vec<&Value> = grid["cells"].as_array().unwrap().iter().collect();
    assert_eq!(cells.len(), 2, "{grid}");
    kubectl(
        &m[1],
        &[
            "patch",
            "configmap",
            "settings",
            "-n",
            "team-a",
            "--type=merge",
            "-p",
            r#"{"data":{"color":"red"}}"#,
        ],
    );
    wait_for("the drift in /api/drift", SHOW, || async {
        match d.get("/api/drift?cluster=c2") {
            (200, v)
                if v["drifted"]
                    .as_array()
                    .is_some_and(|a| a.iter().any(|e| e.to_string().contains("settings"))) =>
            {
                Ok(())
            }
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let (code, c1) = d.get("/api/drift?cluster=c1");
    assert_eq!((code, c1["drifted"].clone()), (200, json!([])), "{c1}");
    for (path, c) in clients.iter_mut().filter(|(p, _)| !p.ends_with("c1")) {
        c.until(path, "event: drift").await;
        assert!(c.seen.contains("settings"), "{path}: {}", c.seen);
    }
    // The c2 clients have had c2's event; had it gone to c1's, it would be there by now.
    let deadline = tokio::time::Instant::now() + Duration::from_millis(500);
    for (path, c) in clients.iter_mut().filter(|(p, _)| p.ends_with("c1")) {
        while c.read_until(deadline).await {}
        assert!(!c.seen.contains("event: drift"), "{path}: {}", c.seen);
    }
    let after = consumer_counts(&js, &streams).await;
    println!("consumers at the end {after:?}");
    for ((name, b), a) in streams.iter().zip(&before).zip(&after) {
        assert!(
            a.saturating_sub(*b) <= MOST,
            "{name}: {b} before, {a} at the end"
        );
    }
}

// ---------- the browser ----------

/// A headless Chromium session through chromedriver; both are killed on drop.
struct Browser {
    client: Client,
    _driver: Agent,
    _profile: tempfile::TempDir,
    shots: PathBuf,
}

impl Browser {
    /// `None` (with a loud message) when Chromium is absent and not required.
    async fn start() -> Option<Browser> {
        if !Path::new(CHROMIUM).exists() || !Path::new(CHROMEDRIVER).exists() {
            assert!(
                std::env::var_os("FLEETBUS_REQUIRE_BROWSER").is_none(),
                "FLEETBUS_REQUIRE_BROWSER is set but {CHROMIUM} or {CHROMEDRIVER} is missing \
                 (apt-get install -y chromium chromium-driver)"
            );
            eprintln!(
                "\n!!!!!!!! SKIPPED: no {CHROMIUM} / {CHROMEDRIVER}; the dashboard's browser test \
                 did NOT run. Install chromium and chromium-driver (scripts/test does). !!!!!!!!\n"
            );
            return None;
        }
        let port = fleetbus_testsupport::free_port();
        let driver = Agent::start_bin(
            Path::new(CHROMEDRIVER),
            [format!("--port={port}")],
            std::iter::empty::<(&str, &str)>(),
        )
        .expect("start chromedriver");
        let webdriver = format!("http://127.0.0.1:{port}");
        // chromedriver answers HTTP/1.1 only: wait for its port, then let the client talk.
        wait_for("chromedriver to listen", SHOW, || async {
            std::net::TcpStream::connect(("127.0.0.1", port))
                .map(|_| ())
                .map_err(|e| format!("{e}\n{}", driver.log()))
        })
        .await;
        let profile = tempfile::tempdir().unwrap();
        // The flags this closed network needs (no background connections), and a
        // fresh profile.
        let args = [
            "--headless".to_owned(),
            "--no-sandbox".into(),
            "--disable-gpu".into(),
            "--disable-quic".into(),
            "--no-first-run".into(),
            "--disable-background-networking".into(),
            "--disable-component-update".into(),
            "--disable-sync".into(),
            "--disable-dev-shm-usage".into(),
            "--hide-scrollbars".into(),
            "--window-size=1600,1000".into(),
            format!("--user-data-dir={}", profile.path().display()),
        ];
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".into(),
            json!({ "binary": CHROMIUM, "args": args }),
        );
        let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(caps)
            .connect(&webdriver)
            .await
            .unwrap_or_else(|e| panic!("start a Chromium session: {e}\n{}", driver.log()));
        let shots = repo_root().join("target/dashboard-screenshots");
        std::fs::create_dir_all(&shots).unwrap();
        let shots = shots.canonicalize().unwrap_or(shots);
        Some(Browser {
            client,
            _driver: driver,
            _profile: profile,
            shots,
        })
    }

    async fn js(&self, script: &str) -> Value {
        self.client
            .execute(script, vec![])
            .await
            .unwrap_or_else(|e| panic!("script {script}: {e}"))
    }

    /// Waits until `script` returns something truthy; returns it.
    async fn until(&self, what: &str, script: &str) -> Value {
        wait_for(what, SHOW, || async {
            match self.client.execute(script, vec![]).await {
                Ok(v) if !(v.is_null() || v == json!(false) || v == json!(0) || v == json!("")) => {
                    Ok(v)
                }
                Ok(v) => Err(format!("{v}")),
                Err(e) => Err(e.to_string()),
            }
        })
        .await
    }

    /// Clicks the first element matching `css`, found and clicked in one script (the
    /// page redraws parts of itself every few seconds).
    async fn click(&self, css: &str) {
        let script = format!(
            "const e = document.querySelector({}); if (e) e.click(); return !!e",
            json!(css)
        );
        self.until(&format!("{css} to click"), &script).await;
    }

    /// Saves a PNG of the viewport as `<name>.png` and prints its path.
    async fn shot(&self, name: &str) {
        let png = self.client.screenshot().await.expect("screenshot");
        assert!(png.starts_with(b"\x89PNG"), "{name}: not a PNG");
        let path = self.shots.join(format!("{name}.png"));
        std::fs::write(&path, png).unwrap();
        println!("screenshot: {}", path.display());
    }

    async fn close(self) {
        let _ = self.client.close().await;
    }
}

/// Counts elements matching `css` (in a script: a CSS string, quoted as JSON).
fn count(css: &str) -> String {
    format!("return document.querySelectorAll({}).length", json!(css))
}

/// The ConfigMaps of `team-a`, everywhere.
fn team_config() -> RuleBuilder {
    RuleBuilder::new("team-config").namespaces(&["team-a"])
}

/// A rule status record as an agent writes it (plain JSON: PROTOCOL §5.3).
fn status_record(rule: &str, cluster: &str, id: &str, state: &str, problems: Value) -> Value {
    let n = problems.as_array().map_or(0, Vec::len);
    json!({
        "schema": "fleetbus.io/rulestatus/v1", "cluster": cluster, "clusterID": id,
        "rule": rule, "observedGeneration": 1, "state": state, "reason": state,
        "message": format!("{state} on {cluster}"), "sink": state != "NotSelected",
        "source": false, "objectsSynced": 3, "conflicts": 0, "errors": n,
        "skipped": 0, "problems": problems, "problemsTotal": n,
        "updatedAt": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
    })
}

/// `record` of a sink of a placement rule whose decisions chose it `here`
/// times and other clusters `elsewhere` times.
fn placed(mut record: Value, here: u64, elsewhere: u64) -> Value {
    record["placedHere"] = json!(here);
    record["placedElsewhere"] = json!(elsewhere);
    record
}

/// Writes rule status records into the bucket with a plain NATS client, as agents do
/// (creating the bucket if no agent has yet).
async fn write_rule_status(nats: &NatsServer, records: &[Value]) {
    let js = async_nats::jetstream::new(async_nats::connect(nats.url()).await.unwrap());
    let kv = match js.get_key_value(RULE_STATUS_BUCKET).await {
        Ok(kv) => kv,
        Err(_) => js
            .create_key_value(async_nats::jetstream::kv::Config {
                bucket: RULE_STATUS_BUCKET.into(),
                history: 1,
                ..Default::default()
            })
            .await
            .unwrap(),
    };
    for r in records {
        let key = format!(
            "status.{}.{}.{}",
            r["cluster"].as_str().unwrap(),
            r["clusterID"].as_str().unwrap(),
            r["rule"].as_str().unwrap()
        );
        kv.put(key, r.to_string().into()).await.unwrap();
    }
}

/// The whole dashboard in Chromium against a two-cluster mesh: cards, both themes,
/// the rules grid and a cell's problems, a kubectl edit in the live drift feed and
/// its history.
#[tokio::test]
async fn the_browser_shows_the_fleet_rules_and_live_drift() {
    let Some(b) = Browser::start().await else {
        return;
    };
    let nats = NatsServer::start().unwrap();
    let m = fleet(&nats, &["c1", "c2"]).await;
    for x in &m {
        create_ns(x, "team-a").await;
    }
    apply_yaml(&m[0], &team_config().yaml());
    wait_rule_copy(&m[1], "team-config", "c1").await;
    kubectl(
        &m[0],
        &[
            "create",
            "configmap",
            "settings",
            "-n",
            "team-a",
            "--from-literal=color=blue",
        ],
    );
    let cms = resource("", "v1", "ConfigMap", "configmaps");
    wait_copy(
        &m[1],
        &cms,
        Some("team-a"),
        "settings",
        "c1",
        "team-config",
        |_| Ok(()),
    )
    .await;
    let problem = json!([{
        "kind": "Error", "message": "admission webhook denied the request",
        "object": "ConfigMap team-a/limits",
    }]);
    // `team-config` is real: its agents report it. `web` is not in this mesh: records
    // written as an agent would, for the states a healthy mesh does not show.
    write_rule_status(
        &nats,
        &[
            status_record("web", "c1", "id-c1", "NotSelected", json!([])),
            status_record("web", "c2", "id-c2", "Error", problem),
            // A placement rule: of its 3 decisions, 2 chose c1 and none c2.
            placed(
                status_record("spread", "c1", "id-c1", "Synced", json!([])),
                2,
                1,
            ),
            placed(
                status_record("spread", "c2", "id-c2", "Synced", json!([])),
                0,
                3,
            ),
        ],
    )
    .await;
    let d = Dashboard::start(&nats, &[]).await;

    // Fleet: a card per cluster, Ready, in both themes.
    b.client.goto(&format!("{}/#fleet", d.url)).await.unwrap();
    b.until(
        "both clusters as Ready cards",
        &count(".card[data-state=Ready]"),
    )
    .await;
    assert_eq!(b.js(&count(".card")).await, json!(2));
    b.js("localStorage.removeItem('fleetbus-theme')").await;
    b.js("document.documentElement.dataset.theme = 'light'")
        .await;
    b.shot("fleet-light").await;
    b.click("#theme").await;
    assert_eq!(
        b.js("return document.documentElement.dataset.theme").await,
        json!("dark")
    );
    b.shot("fleet-dark").await;
    b.click(".card[data-cluster=c2]").await;
    b.until(
        "c2's sync progress",
        "return /copies/.test(document.getElementById('progress').textContent)",
    )
    .await;
    b.shot("fleet-detail").await;

    // Rules: the grid shows each cell's state (the real rule as its agents report it);
    // a cell opens its errors.
    b.client.goto(&format!("{}/#rules", d.url)).await.unwrap();
    let want = json!([
        "spread/c1=Synced",
        "spread/c2=Synced",
        "team-config/c1=Synced",
        "team-config/c2=Synced",
        "web/c1=NotSelected",
        "web/c2=Error"
    ]);
    let cells = "return [...document.querySelectorAll('.cell[data-rule]')]\
                 .map(c => c.dataset.rule + '/' + c.dataset.cluster + '=' + c.dataset.state).sort()";
    wait_for("the rules grid's cells", SHOW, || async {
        match b.client.execute(cells, vec![]).await {
            Ok(v) if v == want => Ok(()),
            other => Err(format!("{other:?}; /api/rules: {}", d.get("/api/rules").1)),
        }
    })
    .await;
    // The grid marks the clusters a placement rule's decisions chose.
    assert_eq!(
        b.js(
            "const c = document.querySelector('.cell[data-rule=spread][data-cluster=c1]'); \
              return [c.classList.contains('placed'), c.dataset.placed, c.textContent, c.title]"
        )
        .await,
        json!([
            true,
            "2",
            "OK ◆2",
            "Synced: Synced on c1 · placement: chosen here for 2 of 3"
        ])
    );
    assert_eq!(
        b.js(
            "const c = document.querySelector('.cell[data-rule=spread][data-cluster=c2]'); \
              return [c.classList.contains('unplaced'), c.dataset.placed, c.textContent]"
        )
        .await,
        json!([true, "0", "OK"])
    );
    assert_eq!(
        b.js(
            "return document.querySelectorAll('.cell[data-rule=team-config][data-placed]').length"
        )
        .await,
        json!(0),
        "a rule without placement is not marked"
    );
    b.click(".cell[data-rule=web][data-cluster=c2]").await;
    b.until(
        "the cell's problem",
        "return document.getElementById('detail-body').textContent.includes('admission webhook denied')",
    )
    .await;
    b.shot("rules").await;

    // Drift: a kubectl edit of the copy on c2 appears in the live feed within seconds.
    b.client.goto(&format!("{}/#drift", d.url)).await.unwrap();
    b.until(
        "the live feed to subscribe",
        "return document.body.dataset.feed === 'live'",
    )
    .await;
    let edited = std::time::Instant::now();
    kubectl(
        &m[1],
        &[
            "patch",
            "configmap",
            "settings",
            "-n",
            "team-a",
            "--type=merge",
            "-p",
            r#"{"data":{"color":"red"}}"#,
        ],
    );
    let feed_item = "li.event[data-cluster=c2][data-object='ConfigMap/team-a/settings']";
    b.until("the edit in the live feed", &count(feed_item))
        .await;
    println!("drift of a kubectl edit shown after {:?}", edited.elapsed());
    let text = b
        .js(&format!(
            "return document.querySelector({}).textContent",
            json!(feed_item)
        ))
        .await;
    assert!(
        text.as_str().unwrap_or_default().contains("/data/color"),
        "{text}"
    );
    b.click(feed_item).await;
    b.until(
        "the object's history with the changed path",
        "return document.getElementById('history').textContent.includes('/data/color')",
    )
    .await;
    b.shot("drift").await;
    b.close().await;

    // A record that does not decode, and one that claims another cluster than its
    // key's (a forgery): neither is shown, both are counted.
    let js = async_nats::jetstream::new(async_nats::connect(nats.url()).await.unwrap());
    let kv = js.get_key_value(RULE_STATUS_BUCKET).await.unwrap();
    kv.put("status.c9.id-c9.web", "not json".into())
        .await
        .unwrap();
    let forged = status_record("web", "c1", "id-c1", "Synced", json!([]));
    kv.put("status.c9.id-c1.web", forged.to_string().into())
        .await
        .unwrap();
    // The dashboard watches the bucket: the puts reach it within moments, not at once.
    wait_for("both bad records skipped", SHOW, || async {
        match d.get("/api/rules") {
            (200, grid) if grid["skipped"] == json!(2) => Ok(grid),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let (code, grid) = d.get("/api/rules");
    assert_eq!((code, grid["skipped"].clone()), (200, json!(2)), "{grid}");
    assert_eq!(grid["cells"].as_array().map(Vec::len), Some(6), "{grid}");

    // With --allow-actions, the actions reach the agents as the CLI's requests do.
    let a = Dashboard::start(&nats, &["--allow-actions"]).await;
    let json_body = [("Content-Type", "application/json")];
    let (code, reply) = a.request(
        "POST",
        "/api/actions/label",
        &json_body,
        Some(r#"{"cluster":"c2","labels":["env=prod"]}"#),
    );
    assert_eq!(
        (code, reply["labels"]["env"].clone()),
        (200, json!("prod")),
        "{reply}"
    );
    wait_for("c2 relabelled in the registry", SHOW, || async {
        match a.get("/api/clusters?label=env%3Dprod") {
            (200, v) if v["clusters"][0]["name"] == "c2" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let (code, reply) = a.request(
        "POST",
        "/api/actions/correct",
        &json_body,
        Some(r#"{"cluster":"c2","namespace":"team-a","name":"settings"}"#),
    );
    assert_eq!(
        (code, reply["cluster"].clone()),
        (200, json!("c2")),
        "{reply}"
    );
}

/// 1,000 clusters (records put into the registry by a plain client, no agents): the
/// grid keeps only what is in view in the DOM, filters by label and state, and the
/// last cluster is reachable by scrolling.
#[tokio::test]
async fn a_thousand_clusters_stay_usable() {
    let Some(b) = Browser::start().await else {
        return;
    };
    let nats = NatsServer::start().unwrap();
    let js = async_nats::jetstream::new(async_nats::connect(nats.url()).await.unwrap());
    let kv = js
        .create_key_value(async_nats::jetstream::kv::Config {
            bucket: BUCKET.into(),
            history: 1,
            ..Default::default()
        })
        .await
        .unwrap();
    for i in 0..1000 {
        let name = format!("c{i:04}");
        let env = if i % 2 == 0 { "prod" } else { "dev" };
        let labels = [("env", env), ("region", ["eu", "us", "ap"][i % 3])]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        let mut r = peer_record(&name, &format!("id-{i}"), labels);
        // Alive for the whole test, except every tenth: silent for two hours.
        r.heartbeat_interval_seconds = 600;
        if i % 10 == 0 {
            r.heartbeat_at -= chrono::Duration::hours(2);
        }
        kv.put(r.key().to_key(), r.encode().unwrap().into())
            .await
            .unwrap();
    }
    let d = Dashboard::start(&nats, &[]).await;
    b.client.goto(&format!("{}/#fleet", d.url)).await.unwrap();
    b.until(
        "1,000 clusters read",
        "return document.body.dataset.clusters === '1000'",
    )
    .await;
    b.until("cards drawn", &count(".card")).await;
    let drawn = b.js(&count(".card")).await.as_u64().unwrap();
    assert!(
        (1..200).contains(&drawn),
        "{drawn} cards in the DOM for 1,000 clusters"
    );
    b.shot("fleet-1000").await;
    b.js("const g = document.getElementById('grid'); g.scrollTop = g.scrollHeight; g.dispatchEvent(new Event('scroll'))").await;
    b.until(
        "the last cluster after scrolling",
        &count(".card[data-cluster=c0999]"),
    )
    .await;
    b.client
        .find(Locator::Css("#f-label"))
        .await
        .unwrap()
        .send_keys("env=dev")
        .await
        .unwrap();
    b.until(
        "500 dev clusters",
        "return document.getElementById('f-count').textContent.startsWith('500 of 1000')",
    )
    .await;
    b.click("#f-states .chip[data-state=Disconnected]").await;
    // i % 10 == 0 is even, so no dev cluster is Disconnected.
    b.until(
        "no dev cluster is Disconnected",
        "return document.getElementById('f-count').textContent.startsWith('0 of 1000')",
    )
    .await;
    b.js("document.getElementById('f-label').value = ''; document.getElementById('f-label').dispatchEvent(new Event('input'))").await;
    b.until(
        "100 Disconnected clusters",
        "return document.getElementById('f-count').textContent.startsWith('100 of 1000')",
    )
    .await;
    assert_eq!(b.js(&count(".card[data-state=Ready]")).await, json!(0));
    b.shot("fleet-1000-disconnected").await;
    b.close().await;
}
