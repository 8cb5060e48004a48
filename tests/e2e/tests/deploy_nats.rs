//! The NATS configurations in `deploy/nats/` run for real on loopback: a
//! 3-node JetStream hub plus a site leaf node (its own domain), agents on
//! both sides, a cut of the site's link and its reconvergence; and the
//! per-cluster accounts example confining each agent to its own subtree.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_nats::jetstream;
use fleetbus_schemas::crd::{Cluster, ClusterState};
use fleetbus_testsupport::{
    add_source, deploy_conf, free_port, http_get, leaf_urls, leaf_urls_as, nats_server_bin,
    start_site, start_site_from, wait_for, wait_stream, Agent, AgentCommand, DevClusterOpts,
    HubCluster, Member,
};
use futures::StreamExt;
use kube::Api;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::AbortHandle;

const CONVERGE: Duration = Duration::from_secs(60);
/// After a cut: nats-server retries a stream source with a backoff of up to 2 min.
const RECONVERGE: Duration = Duration::from_secs(200);

/// A TCP proxy standing for the site's WAN link: `cut` drops every
/// connection and refuses new ones until `restore`.
struct Link {
    port: u16,
    cut: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<AbortHandle>>>,
    accept: AbortHandle,
}

impl Link {
    async fn start(target: u16) -> Link {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let cut = Arc::new(AtomicBool::new(false));
        let conns: Arc<Mutex<Vec<AbortHandle>>> = Arc::default();
        let (c, cs) = (cut.clone(), conns.clone());
        let accept = tokio::spawn(async move {
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    continue;
                };
                if c.load(Ordering::SeqCst) {
                    continue; // dropped: the link is down
                }
                let task = tokio::spawn(async move {
                    if let Ok(mut outbound) = TcpStream::connect(("127.0.0.1", target)).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                cs.lock().unwrap().push(task.abort_handle());
            }
        })
        .abort_handle();
        Link {
            port,
            cut,
            conns,
            accept,
        }
    }

    fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        for c in self.conns.lock().unwrap().drain(..) {
            c.abort();
        }
    }

    fn restore(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.cut();
        self.accept.abort();
    }
}

/// A devcluster `name` whose agent connects to `nats_url` and asks for
/// `replicas` of every stream.
async fn member(name: &str, nats_url: &str, replicas: usize) -> Member {
    let cmd = AgentCommand::new(name)
        .nats_url(nats_url)
        .heartbeat_interval(Duration::from_millis(500))
        .peer_timeout(Duration::from_secs(2))
        .replicas(replicas);
    Member::launch(DevClusterOpts::new(name), cmd)
        .await
        .unwrap()
}

async fn seen(m: &Member, state: ClusterState) -> Result<Vec<String>, String> {
    let list = Api::<Cluster>::all(m.client.clone())
        .list(&Default::default())
        .await
        .map_err(|e| format!("{}: {e}", m.name))?;
    let mut names: Vec<String> = list
        .items
        .iter()
        .filter(|c| c.status.as_ref().and_then(|s| s.state) == Some(state))
        .filter_map(|c| c.metadata.name.clone())
        .collect();
    names.sort();
    Ok(names)
}

async fn wait_sees(m: &Member, state: ClusterState, want: &[&str], timeout: Duration) {
    let what = format!("{} to see {want:?} {state:?}", m.name);
    wait_for(&what, timeout, || async {
        let got = seen(m, state).await?;
        let ok = want.iter().all(|w| got.iter().any(|g| g == w));
        if ok {
            Ok(())
        } else {
            let log = m.agent.log();
            let tail = &log[log.len().saturating_sub(3000)..];
            let all = Api::<Cluster>::all(m.client.clone())
                .list(&Default::default())
                .await
                .map_err(|e| e.to_string())?;
            let states: Vec<String> = all
                .items
                .iter()
                .map(|c| {
                    format!(
                        "{:?}={:?}",
                        c.metadata.name,
                        c.status.as_ref().and_then(|s| s.state)
                    )
                })
                .collect();
            Err(format!(
                "{state:?}: {got:?} (all: {states:?})\nagent log tail:\n{tail}"
            ))
        }
    })
    .await;
}

/// The sources an operator adds to join a site's domain `site-a` to the hub
/// (TOPOLOGY.md): the hub sources the site's clusters' registry keys, beats
/// and objects, the site the hub's clusters' registry keys and beats, each
/// through the other's domain API (api_prefix, not `domain`).
async fn join_domains(
    hub: &jetstream::Context,
    site: &jetstream::Context,
    at_site: &[&str],
    at_hub: &[&str],
) {
    for (js, domain, clusters) in [(hub, "site-a", at_site), (site, "hub", at_hub)] {
        let registry: Vec<String> = clusters
            .iter()
            .map(|c| format!("$KV.fleetbus-registry.*.{c}.*"))
            .collect();
        let beats: Vec<String> = clusters
            .iter()
            .map(|c| format!("$KV.fleetbus-beats.beat.{c}.*"))
            .collect();
        for (stream, filters) in [
            ("KV_fleetbus-registry", registry),
            ("KV_fleetbus-beats", beats),
        ] {
            let filters: Vec<&str> = filters.iter().map(String::as_str).collect();
            add_source(js, stream, domain, &filters).await.unwrap();
        }
    }
    let objects: Vec<String> = at_site
        .iter()
        .map(|c| format!("fleetbus.obj.{c}.>"))
        .collect();
    let objects: Vec<&str> = objects.iter().map(String::as_str).collect();
    add_source(hub, "FLEETBUS_OBJECTS", "site-a", &objects)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hub_cluster_and_site_leaf_survive_a_cut_link() {
    // The hub: three nodes from hub.conf, routes on loopback.
    let hub = HubCluster::start().await.unwrap();
    // The site: a leaf node dialing hub-1 through a link the test can cut.
    let link = Link::start(hub.leaf_ports[0]).await;
    let leaf = start_site("site-a", &leaf_urls(&[link.port]))
        .await
        .unwrap();
    leaf.wait_leaf_connected().await.unwrap();
    // Server links are mutual TLS (hub.conf, leaf.conf): routes and the
    // leaf port require and verify client certificates, and the site's link
    // is up, so it presented one.
    let varz: serde_json::Value =
        serde_json::from_str(&hub.nodes[0].monitor("/varz").unwrap()).unwrap();
    for link in ["cluster", "leaf"] {
        assert_eq!(varz[link]["tls_required"], true, "{link}: {}", varz[link]);
        assert_eq!(varz[link]["tls_verify"], true, "{link}: {}", varz[link]);
    }
    // A plain-text leaf node is not let in.
    let plain = tokio::net::TcpStream::connect(("127.0.0.1", hub.leaf_ports[1]))
        .await
        .unwrap();
    let mut first = [0u8; 512];
    plain.readable().await.unwrap();
    let n = plain.try_read(&mut first).unwrap_or(0);
    let info = String::from_utf8_lossy(&first[..n]);
    assert!(info.contains("\"tls_required\":true"), "{info}");

    // Two clusters at the site (through the leaf), one at the hub. Each side
    // has its own registry bucket and streams (its own JetStream domain).
    let a = member("a", &leaf.url(), 1).await;
    let b = member("b", &leaf.url(), 1).await;
    let c = member("c", &hub.nodes[1].url(), 3).await;
    let all = ["a", "b", "c"];
    let hub_js = jetstream::new(async_nats::connect(hub.nodes[0].url()).await.unwrap());
    let site_js = jetstream::new(async_nats::connect(leaf.url()).await.unwrap());
    for (js, stream) in [
        (&hub_js, "KV_fleetbus-registry"),
        (&site_js, "KV_fleetbus-registry"),
        (&hub_js, "KV_fleetbus-beats"),
        (&site_js, "KV_fleetbus-beats"),
        (&hub_js, "FLEETBUS_OBJECTS"),
    ] {
        wait_stream(js, stream).await.unwrap();
    }
    // The operator's part (TOPOLOGY.md).
    join_domains(&hub_js, &site_js, &["a", "b"], &["c"]).await;
    for m in [&a, &b, &c] {
        wait_sees(m, ClusterState::Ready, &all, CONVERGE).await;
    }

    // Cut the site off.
    link.cut();
    wait_for("the leaf to lose the hub", CONVERGE, || async {
        match leaf.leafnodes()? {
            0 => Ok(()),
            n => Err(format!("{n} leaf connections")),
        }
    })
    .await;
    // The site keeps working on its own: a and b still Ready to each other,
    // the hub's c Disconnected; and the other way round at the hub.
    wait_sees(&c, ClusterState::Disconnected, &["a", "b"], CONVERGE).await;
    wait_sees(&a, ClusterState::Disconnected, &["c"], CONVERGE).await;
    for m in [&a, &b] {
        let ready = seen(m, ClusterState::Ready).await.unwrap();
        assert!(
            ready.contains(&"a".to_string()) && ready.contains(&"b".to_string()),
            "{}: {ready:?}",
            m.name
        );
    }
    // The site's JetStream still accepts writes (stands for a's objects).
    let subject = "fleetbus.obj.a.core.v1.ConfigMap.default.during-cut";
    stored_ack(&site_js, subject, "offline").await;

    // FLEETBUS_CUT_SECS keeps the link down that long (the scenario's length,
    // for measuring reconvergence after long cuts; TOPOLOGY.md has the figures).
    if let Some(secs) = std::env::var("FLEETBUS_CUT_SECS")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
    {
        tokio::time::sleep(Duration::from_secs(secs)).await;
    }
    link.restore();
    let restored = Instant::now();
    for m in [&a, &b, &c] {
        wait_sees(m, ClusterState::Ready, &all, RECONVERGE).await;
    }
    let membership = restored.elapsed();
    let hub_objects = hub_js.get_stream("FLEETBUS_OBJECTS").await.unwrap();
    wait_for(
        "the hub to source what the site wrote while cut off",
        RECONVERGE,
        || async {
            hub_objects
                .get_last_raw_message_by_subject(subject)
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        },
    )
    .await;
    let sourced = restored.elapsed();
    // Measured figures for deploy/nats/TOPOLOGY.md.
    eprintln!("reconverged after the link returned: membership {membership:?}, sourced objects {sourced:?}");
    assert!(membership < RECONVERGE);
}

const PASSWORDS: [(&str, &str); 5] = [
    ("FLEETBUS_C1_PASSWORD", "pw-c1"),
    ("FLEETBUS_C2_PASSWORD", "pw-c2"),
    ("FLEETBUS_C3_PASSWORD", "pw-c3"),
    ("FLEETBUS_ADMIN_PASSWORD", "pw-admin"),
    ("FLEETBUS_LEAF_PASSWORD", "pw-leaf"),
];

/// A nats-server with JetStream whose users come from deploy/nats/accounts.conf.
fn accounts_server(dir: &Path) -> (Agent, u16, u16) {
    std::fs::copy(deploy_conf("accounts.conf"), dir.join("accounts.conf")).unwrap();
    let (port, http_port) = (free_port(), free_port());
    let server_conf = dir.join("server.conf");
    std::fs::write(
        &server_conf,
        format!(
            "port: {port}\nhttp_port: {http_port}\njetstream {{ store_dir: \"{}\" }}\ninclude \"accounts.conf\"\n",
            dir.join("store").display()
        ),
    )
    .unwrap();
    let proc = Agent::start_bin(
        &nats_server_bin(),
        ["-c", server_conf.to_str().unwrap()],
        PASSWORDS,
    )
    .unwrap();
    (proc, port, http_port)
}

/// Agents c1 and c2 run as their own NATS users and form a fleet (so the
/// permission set is enough for an agent); c1's user is refused when it
/// publishes as c2, on an object subject, on c2's registry key, its drift key
/// and its rule status key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accounts_confine_each_cluster_to_its_own_subtree() {
    let dir = tempfile::tempdir().unwrap();
    let (server, port, http_port) = accounts_server(dir.path());
    wait_for("nats-server with accounts", CONVERGE, || async {
        match http_get(&format!("http://127.0.0.1:{http_port}/healthz"))? {
            (200, _) => Ok(()),
            (code, body) => Err(format!("{code} {body}\n{}", server.log())),
        }
    })
    .await;
    let url_as = |user: &str, pw: &str| format!("nats://{user}:{pw}@127.0.0.1:{port}");
    let c1 = member("c1", &url_as("c1", "pw-c1"), 1).await;
    let c2 = member("c2", &url_as("c2", "pw-c2"), 1).await;
    for m in [&c1, &c2] {
        wait_sees(m, ClusterState::Ready, &["c1", "c2"], CONVERGE).await;
    }

    // c1's user, with the server's errors collected.
    let errors: Arc<Mutex<Vec<String>>> = Arc::default();
    let sink = errors.clone();
    let client = async_nats::ConnectOptions::with_user_and_password("c1".into(), "pw-c1".into())
        // The only inbox c1's user may subscribe to (PROTOCOL §2.6).
        .custom_inbox_prefix("_INBOX_c1")
        .event_callback(move |event| {
            let sink = sink.clone();
            async move { sink.lock().unwrap().push(event.to_string()) }
        })
        .connect(format!("127.0.0.1:{port}"))
        .await
        .unwrap();
    let mut js = jetstream::new(client);
    js.set_timeout(Duration::from_secs(2));
    // Its own subtree is accepted (the refusals below are not vacuous)...
    let own = "fleetbus.obj.c1.core.v1.ConfigMap.default.mine";
    stored_ack(&js, own, "ok").await;
    // (and so are its conflict events, on the stream the agents created)
    let own_conflict = "fleetbus.conflict.c1.core.v1.ConfigMap.default.mine";
    stored_ack(&js, own_conflict, "{}").await;
    // (and its rollout records and stored versions)
    for own in [
        "fleetbus.rollout.c1.web.apps.v1.Deployment.default.web",
        "fleetbus.ver.c1.apps.v1.Deployment.default.web.0123abcd",
    ] {
        stored_ack(&js, own, "{}").await;
    }
    // ...c2's is not: neither an object nor c2's registry key, nor a rollout
    // record or version that would move c2's copies.
    for forged in [
        "fleetbus.obj.c2.core.v1.ConfigMap.default.forged",
        "fleetbus.rollout.c2.web.apps.v1.Deployment.default.web",
        "fleetbus.ver.c2.apps.v1.Deployment.default.web.0123abcd",
    ] {
        let refused = async { js.publish(forged, "forged".into()).await?.await.map(|_| ()) }.await;
        assert!(refused.is_err(), "c1 published {forged} as c2");
    }
    let kv = js.get_key_value("fleetbus-registry").await.unwrap();
    assert!(
        kv.put("cluster.c2.forged", "{}".into()).await.is_err(),
        "c1 wrote c2's registry key"
    );
    // The drift bucket the agents created: c1 keeps its own current drift, not c2's.
    let drift = js.get_key_value("fleetbus-drift").await.unwrap();
    drift
        .put("c1.core.ConfigMap.default.mine", "{}".into())
        .await
        .unwrap();
    assert!(
        drift
            .put("c2.core.ConfigMap.default.forged", "{}".into())
            .await
            .is_err(),
        "c1 wrote c2's drift key"
    );
    // The rule status bucket the agents created: c1 reports its own rules only.
    let rules = js.get_key_value("fleetbus-rulestatus").await.unwrap();
    rules.put("status.c1.id1.mine", "{}".into()).await.unwrap();
    assert!(
        rules
            .put("status.c2.id2.forged", "{}".into())
            .await
            .is_err(),
        "c1 wrote c2's rule status key"
    );
    wait_for("the server to report the violations", CONVERGE, || async {
        let seen = errors.lock().unwrap().clone();
        let violations = seen
            .iter()
            .filter(|e| e.contains("Permissions Violation for Publish"))
            .count();
        if violations >= 4 {
            Ok(())
        } else {
            Err(format!("{seen:?}"))
        }
    })
    .await;
    // Nothing of it was stored, as the admin sees.
    let admin =
        async_nats::ConnectOptions::with_user_and_password("admin".into(), "pw-admin".into())
            .connect(format!("127.0.0.1:{port}"))
            .await
            .unwrap();
    let admin = jetstream::new(admin);
    let objects = admin.get_stream("FLEETBUS_OBJECTS").await.unwrap();
    assert!(objects.get_last_raw_message_by_subject(own).await.is_ok());
    assert!(objects
        .get_last_raw_message_by_subject("fleetbus.obj.c2.core.v1.ConfigMap.default.forged")
        .await
        .is_err());
    let rollouts = admin.get_stream("FLEETBUS_ROLLOUTS").await.unwrap();
    assert!(rollouts
        .get_last_raw_message_by_subject("fleetbus.rollout.c2.web.apps.v1.Deployment.default.web")
        .await
        .is_err());
    let registry = admin.get_key_value("fleetbus-registry").await.unwrap();
    assert!(registry.get("cluster.c2.forged").await.unwrap().is_none());
    let rules = admin.get_key_value("fleetbus-rulestatus").await.unwrap();
    assert!(rules.get("status.c1.id1.mine").await.unwrap().is_some());
    assert!(rules.get("status.c2.id2.forged").await.unwrap().is_none());
    let drift = admin.get_key_value("fleetbus-drift").await.unwrap();
    assert!(drift
        .get("c1.core.ConfigMap.default.mine")
        .await
        .unwrap()
        .is_some());
    assert!(drift
        .get("c2.core.ConfigMap.default.forged")
        .await
        .unwrap()
        .is_none());
}

/// `user`'s JetStream context on `url` (its inbox prefix: the only one it may
/// subscribe to, `_INBOX` for the admin).
async fn js_as(url: &str, user: &str, password: &str) -> jetstream::Context {
    let inbox = match user {
        "admin" => "_INBOX".to_owned(),
        cluster => format!("_INBOX_{cluster}"),
    };
    let client = async_nats::ConnectOptions::with_user_and_password(user.into(), password.into())
        .custom_inbox_prefix(inbox)
        .connect(url.trim_start_matches("nats://"))
        .await
        .unwrap();
    jetstream::new(client)
}

/// Publishes `payload` on `subject` with `js` and waits for the stream's ack.
async fn stored_ack(js: &jetstream::Context, subject: &str, payload: &'static str) {
    js.publish(subject.to_owned(), payload.into())
        .await
        .unwrap()
        .await
        .unwrap();
}

/// How many messages of `subject` `stream` holds.
async fn stored(js: &jetstream::Context, stream: &str, subject: &str) -> usize {
    use futures::TryStreamExt;
    let stream = js.get_stream(stream).await.unwrap();
    let counts: Vec<(String, usize)> = stream
        .info_with_subjects(subject)
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    counts.iter().map(|(_, n)| n).sum()
}

/// A site's leaf node joins the hub with the accounts of accounts.conf
/// (hub-accounts.conf, leaf-accounts.conf: one link per account). Agents at
/// the site and at the hub run as their own users and form one fleet, a
/// ConfigMap synced from either side reaches the other, and a command from
/// the hub reaches a site's agent. A member's publish at the site, on a
/// subject no stream source copies, is stored once on each side: it crosses
/// the members link (a follower at the hub sees it) and not the streams link
/// too (with both links carrying it, it was stored twice on each side). Push
/// consumers a hub member steers onto the site's stream delete and purge
/// deliver nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_site_with_accounts_links_both_and_stores_each_publish_once() {
    let env: Vec<(&str, String)> = PASSWORDS
        .iter()
        .map(|(k, v)| (*k, (*v).to_owned()))
        .collect();
    let hub = HubCluster::start_from("hub-accounts.conf", &env)
        .await
        .unwrap();
    let ports = [hub.leaf_ports[0]];
    let mut site_env = env.clone();
    site_env.push((
        "NATS_HUB_LEAF_STREAMS_URLS",
        leaf_urls_as(&ports, "leaf-streams", "pw-leaf"),
    ));
    site_env.push((
        "NATS_HUB_LEAF_MEMBERS_URLS",
        leaf_urls_as(&ports, "leaf-members", "pw-leaf"),
    ));
    let site = start_site_from("leaf-accounts.conf", "site-a", &site_env)
        .await
        .unwrap();
    wait_for("both links of the site", CONVERGE, || async {
        match site.leafnodes()? {
            2 => Ok(()),
            n => Err(format!("{n} leaf connections\n{}", site.log())),
        }
    })
    .await;
    // A leaf link's user is no client's (the admin's is, on the same node).
    let as_client = |user: &str, pw: &str| {
        async_nats::ConnectOptions::with_user_and_password(user.into(), pw.into())
            .connect(format!("127.0.0.1:{}", hub.nodes[0].port()))
    };
    for link in ["leaf-streams", "leaf-members"] {
        let refused = as_client(link, "pw-leaf").await.map(|_| ());
        let refused = refused.unwrap_err().to_string();
        assert!(refused.contains("authorization"), "{link}: {refused}");
    }
    as_client("admin", "pw-admin").await.unwrap();

    let at = |node: &str, user: &str, pw: &str| {
        format!("nats://{user}:{pw}@{}", node.trim_start_matches("nats://"))
    };
    let (site_url, hub_url) = (site.url(), hub.nodes[1].url());
    let c1 = member("c1", &at(&site_url, "c1", "pw-c1"), 1).await;
    let c2 = member("c2", &at(&hub_url, "c2", "pw-c2"), 3).await;
    let hub_js = js_as(&hub_url, "admin", "pw-admin").await;
    let site_js = js_as(&site_url, "admin", "pw-admin").await;
    for js in [&hub_js, &site_js] {
        for stream in [
            "KV_fleetbus-registry",
            "KV_fleetbus-beats",
            "FLEETBUS_OBJECTS",
            "FLEETBUS_CONFLICTS",
        ] {
            wait_stream(js, stream).await.unwrap();
        }
    }
    // The operator's sources (TOPOLOGY.md), made by the admin of the members
    // account: they run in the streams accounts, across the streams link.
    join_domains(&hub_js, &site_js, &["c1"], &["c2"]).await;
    for m in [&c1, &c2] {
        wait_sees(m, ClusterState::Ready, &["c1", "c2"], CONVERGE).await;
    }

    // Sync both ways across the link.
    use crate::common::sync::{apply_yaml, kubectl, resource, wait_copy};
    for m in [&c1, &c2] {
        kubectl(m, &["create", "namespace", "site"]);
    }
    apply_yaml(
        &c1,
        &crate::common::rules::RuleBuilder::new("site-configmaps")
            .namespaces(&["site"])
            .yaml(),
    );
    kubectl(
        &c1,
        &[
            "-n",
            "site",
            "create",
            "configmap",
            "from-site",
            "--from-literal=k=v1",
        ],
    );
    kubectl(
        &c2,
        &[
            "-n",
            "site",
            "create",
            "configmap",
            "from-hub",
            "--from-literal=k=v2",
        ],
    );
    let configmaps = resource("", "v1", "ConfigMap", "configmaps");
    for (m, name, origin) in [(&c2, "from-site", "c1"), (&c1, "from-hub", "c2")] {
        let ns = Some("site");
        wait_copy(m, &configmaps, ns, name, origin, "site-configmaps", |_| {
            Ok(())
        })
        .await;
    }

    // A command from the hub's admin reaches c1's agent at the site.
    let hub_client = hub_js.client();
    let reply = hub_client
        .request("fleetbus.cmd.c1.progress", "".into())
        .await
        .unwrap();
    let progress: serde_json::Value = serde_json::from_slice(&reply.payload).unwrap();
    assert_eq!(progress["cluster"], "c1", "{progress}");

    // c1's user publishes once at the site, on a subject no source copies;
    // a plain follower at the hub gets it, each side stores it once. (The
    // follower is on the node the site's links end at: its subscription is
    // there once flushed, not still crossing a route.)
    let follower_client = js_as(&hub.nodes[0].url(), "admin", "pw-admin")
        .await
        .client();
    let mut follower = follower_client
        .subscribe("fleetbus.conflict.c1.>")
        .await
        .unwrap();
    follower_client.flush().await.unwrap();
    let c1_js = js_as(&site_url, "c1", "pw-c1").await;
    let probe = "fleetbus.conflict.c1.core.v1.ConfigMap.site.probe";
    let marker = "fleetbus.conflict.c1.core.v1.ConfigMap.site.marker";
    for subject in [probe, marker] {
        stored_ack(&c1_js, subject, "{}").await;
    }
    let mut followed = Vec::new();
    while followed.last().map(String::as_str) != Some(marker) {
        let got = tokio::time::timeout(CONVERGE, follower.next()).await;
        let got = got.unwrap_or_else(|_| panic!("no marker; followed {followed:?}"));
        followed.push(got.expect("the subscription goes on").subject.to_string());
    }
    assert_eq!(followed, [probe, marker]);
    for (js, side) in [(&hub_js, "hub"), (&site_js, "site")] {
        wait_for(
            &format!("the marker stored at the {side}"),
            CONVERGE,
            || async {
                match stored(js, "FLEETBUS_CONFLICTS", marker).await {
                    0 => Err("not yet".to_owned()),
                    _ => Ok(()),
                }
            },
        )
        .await;
        assert_eq!(stored(js, "FLEETBUS_CONFLICTS", probe).await, 1, "{side}");
    }

    // c2's user steers deliveries of its own drift subtree across the
    // streams link onto the site's JetStream API. A stream delete or purge
    // is not delivered, and the site's objects are intact; a read (INFO),
    // steered last, is delivered (the hub's end has interest there across the
    // link), so the others had as long to be delivered as it took.
    let site_objects = || async {
        let mut s = site_js.get_stream("FLEETBUS_OBJECTS").await.unwrap();
        s.info().await.unwrap().state.messages
    };
    let before = site_objects().await;
    assert!(before > 0);
    let c2_js = js_as(&hub_url, "c2", "pw-c2").await;
    let steered = "fleetbus.drift.c2.steered";
    stored_ack(&c2_js, steered, "{}").await;
    let drift = c2_js.get_stream("FLEETBUS_DRIFT").await.unwrap();
    let mut consumers = Vec::new();
    for onto in [
        "$JS.site-a.API.STREAM.DELETE.FLEETBUS_OBJECTS",
        "$JS.site-a.API.STREAM.PURGE.FLEETBUS_OBJECTS",
        "$JS.site-a.API.INFO",
    ] {
        let consumer = drift
            .create_consumer(jetstream::consumer::push::Config {
                deliver_subject: onto.into(),
                filter_subject: steered.into(),
                // Kept while nothing listens (5 s by default), to be read below.
                inactive_threshold: Duration::from_secs(600),
                ..Default::default()
            })
            .await
            .unwrap();
        consumers.push((onto, consumer));
    }
    let (_, info_consumer) = consumers.pop().unwrap();
    wait_for("the steered read delivered", CONVERGE, || async {
        let info = info_consumer.get_info().await.map_err(|e| e.to_string())?;
        match info.delivered.consumer_sequence {
            0 => Err(format!("{info:?}")),
            _ => Ok(()),
        }
    })
    .await;
    for (onto, consumer) in consumers {
        let info = consumer.get_info().await.unwrap();
        assert_eq!(info.delivered.consumer_sequence, 0, "{onto}: {info:?}");
    }
    assert_eq!(site_objects().await, before);
}
