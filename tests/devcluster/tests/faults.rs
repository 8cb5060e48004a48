//! `/debug/faults`: off by default (the path is unknown); with
//! `--debug-faults` a test makes the devcluster refuse, delay and expire the
//! requests of one client (by `User-Agent`) as a kube-apiserver under
//! pressure does, and reads back what was injected.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use fleetbus_testsupport::{DevCluster, DevClusterOpts};
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams, WatchEvent, WatchParams};
use serde_json::json;

/// The `User-Agent` of the client the plans select.
const VICTIM: &str = "victim/1.0";
const LIST: &str = "/api/v1/namespaces/default/configmaps";

fn start(name: &str, faults: bool) -> DevCluster {
    let mut opts = DevClusterOpts::new(name);
    if faults {
        opts.extra_args.push("--debug-faults".into());
    }
    DevCluster::start(opts).expect("start devcluster")
}

/// A client sending `User-Agent: victim/1.0` that does not retry by itself,
/// so the test sees every answer.
async fn victim(dc: &DevCluster) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(dc.kubeconfig()).unwrap();
    let mut config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    config.headers.push((
        http::header::USER_AGENT,
        http::HeaderValue::from_static(VICTIM),
    ));
    config.default_retry = false;
    kube::Client::try_from(config).unwrap()
}

/// The raw answer to `GET path` by `client`: status, headers, body.
async fn get(client: &kube::Client, path: &str) -> (u16, http::HeaderMap, String) {
    let req = http::Request::get(path)
        .body(kube::client::Body::empty())
        .unwrap();
    let resp = client.send(req).await.unwrap();
    let (parts, body) = resp.into_parts();
    let bytes = body.collect_bytes().await.unwrap();
    (
        parts.status.as_u16(),
        parts.headers,
        String::from_utf8_lossy(&bytes).into_owned(),
    )
}

async fn create_cm(client: &kube::Client, name: &str) -> String {
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    Api::<ConfigMap>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &cm)
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap()
}

#[tokio::test]
async fn off_by_default_the_path_is_unknown() {
    let dc = start("faults-off", false);
    let e = dc.faults().await.unwrap_err();
    assert!(format!("{e:#}").contains("404"), "{e:#}");

    let dc = start("faults-on", true);
    let report = dc.faults().await.unwrap();
    assert_eq!(report["plan"]["tooManyRequests"], 0.0, "{report}");
    assert_eq!(report["total"]["tooManyRequests"], 0, "{report}");
}

#[tokio::test]
async fn bad_plans_are_refused_naming_the_field() {
    let dc = start("faults-bad", true);
    for (plan, field) in [
        (json!({"tooManyRequests": 2}), "tooManyRequests"),
        (json!({"retryAfterSeconds": 0}), "retryAfterSeconds"),
        (json!({"tooMany": 1}), "unknown field"),
    ] {
        let e = format!("{:#}", dc.set_faults(&plan).await.unwrap_err());
        assert!(e.contains("400") && e.contains(field), "{plan}: {e}");
    }
    assert_eq!(dc.faults().await.unwrap()["plan"]["tooManyRequests"], 0.0);
}

/// APF's rejection: 429, `Retry-After`, a plain-text body (no Status); kube-rs
/// makes a Status of it with the code. Other clients are served.
#[tokio::test]
async fn the_selected_client_gets_429_with_retry_after_others_are_served() {
    let dc = start("faults-429", true);
    let admin = dc.client().await.unwrap();
    let victim = victim(&dc).await;
    dc.set_faults(&json!({"userAgent": "victim", "tooManyRequests": 1.0, "retryAfterSeconds": 3}))
        .await
        .unwrap();

    let (code, headers, body) = get(&victim, LIST).await;
    assert_eq!(code, 429, "{body}");
    assert_eq!(headers[http::header::RETRY_AFTER], "3");
    assert_eq!(
        headers[http::header::CONTENT_TYPE],
        "text/plain; charset=utf-8"
    );
    assert_eq!(body, "Too many requests, please try again later.\n");
    match Api::<ConfigMap>::namespaced(victim, "default")
        .list(&Default::default())
        .await
    {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 429, "{s:?}"),
        other => panic!("want a 429, got {other:?}"),
    }
    Api::<ConfigMap>::namespaced(admin, "default")
        .list(&Default::default())
        .await
        .expect("a client the plan does not select is served");

    let report = dc.faults().await.unwrap();
    assert_eq!(report["clients"][VICTIM]["requests"], 2, "{report}");
    assert_eq!(report["clients"][VICTIM]["tooManyRequests"], 2, "{report}");
    assert_eq!(
        report["clients"]["(none)"]["tooManyRequests"], 0,
        "{report}"
    );
}

#[tokio::test]
async fn internal_errors_are_status_bodies_and_delete_clears_the_plan() {
    let dc = start("faults-500", true);
    let victim = victim(&dc).await;
    dc.set_faults(&json!({"userAgent": "victim", "internalError": 1.0}))
        .await
        .unwrap();
    let cms = Api::<ConfigMap>::namespaced(victim, "default");
    match cms.list(&Default::default()).await {
        Err(kube::Error::Api(s)) => {
            assert_eq!((s.code, s.reason.as_str()), (500, "InternalError"), "{s:?}")
        }
        other => panic!("want a 500, got {other:?}"),
    }
    let admin = dc.client().await.unwrap();
    let req = http::Request::delete("/debug/faults")
        .body(Vec::new())
        .unwrap();
    admin.request_text(req).await.unwrap();
    cms.list(&Default::default()).await.expect("served again");
    let report = dc.faults().await.unwrap();
    assert_eq!(report["clients"][VICTIM]["internalErrors"], 1, "{report}");
    assert_eq!(report["clients"][VICTIM]["requests"], 2, "{report}");
}

#[tokio::test]
async fn slow_requests_are_held() {
    let dc = start("faults-slow", true);
    let victim = victim(&dc).await;
    dc.set_faults(&json!({"userAgent": "victim", "slow": 1.0, "latencyMs": 400}))
        .await
        .unwrap();
    let t = Instant::now();
    let (code, _, _) = get(&victim, LIST).await;
    assert_eq!(code, 200);
    assert!(
        t.elapsed() >= Duration::from_millis(400),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(dc.faults().await.unwrap()["clients"][VICTIM]["delayed"], 1);
}

/// The same seed gives the same answers to the same sequence of requests.
#[tokio::test]
async fn a_seed_repeats_its_decisions() {
    let dc = start("faults-seed", true);
    let victim = victim(&dc).await;
    let plan =
        json!({"seed": 42, "userAgent": "victim", "tooManyRequests": 0.3, "internalError": 0.2});
    let mut runs = Vec::new();
    for _ in 0..2 {
        dc.set_faults(&plan).await.unwrap();
        let mut codes = Vec::new();
        for _ in 0..30 {
            codes.push(get(&victim, LIST).await.0);
        }
        runs.push(codes);
    }
    assert_eq!(runs[0], runs[1]);
    for code in [200, 429, 500] {
        assert!(runs[0].contains(&code), "{code} in {:?}", runs[0]);
    }
}

/// A selected watch ends with a 410 Expired ERROR event after its lifetime;
/// resuming from before the compaction gets 410 at once; an unselected
/// client still resumes from there.
#[tokio::test]
async fn watches_end_with_410_and_cannot_resume_from_before() {
    let dc = start("faults-410", true);
    let admin = dc.client().await.unwrap();
    let victim = victim(&dc).await;
    let rv1 = create_cm(&admin, "a").await;
    dc.set_faults(&json!({"userAgent": "victim", "expireWatchesAfterMs": 1500}))
        .await
        .unwrap();
    let cms = Api::<ConfigMap>::namespaced(victim, "default");
    let mut events = cms
        .watch(&WatchParams::default(), &rv1)
        .await
        .unwrap()
        .boxed();
    let rv2 = create_cm(&admin, "b").await;
    let mut seen = Vec::new();
    let ended = tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(ev) = events.next().await {
            seen.push(ev.unwrap());
        }
    })
    .await;
    assert!(ended.is_ok(), "the watch did not end: {seen:?}");
    assert!(
        matches!(seen.first(), Some(WatchEvent::Added(cm)) if cm.metadata.resource_version.as_deref() == Some(rv2.as_str())),
        "{seen:?}"
    );
    match seen.last() {
        Some(WatchEvent::Error(e)) => assert_eq!((e.code, e.reason.as_str()), (410, "Expired")),
        other => panic!("want a 410 ERROR event last, got {other:?}"),
    }

    // From before the compaction (rv1 < rv2): 410 at once.
    let again: Vec<_> = cms
        .watch(&WatchParams::default(), &rv1)
        .await
        .unwrap()
        .collect()
        .await;
    match again.as_slice() {
        [Ok(WatchEvent::Error(e))] => {
            assert_eq!(e.code, 410);
            assert!(e.message.contains("too old resource version"), "{e:?}");
        }
        other => panic!("want one 410 ERROR event, got {other:?}"),
    }
    // A client the plan does not select resumes as before.
    let mut admin_events = Api::<ConfigMap>::namespaced(admin, "default")
        .watch(&WatchParams::default().timeout(2), &rv1)
        .await
        .unwrap()
        .boxed();
    match admin_events.next().await {
        Some(Ok(WatchEvent::Added(cm))) => assert_eq!(cm.metadata.name.as_deref(), Some("b")),
        other => panic!("want b's ADDED, got {other:?}"),
    }
    let report = dc.faults().await.unwrap();
    assert_eq!(report["clients"][VICTIM]["watchesExpired"], 1, "{report}");
    assert_eq!(report["clients"][VICTIM]["expiredResumes"], 1, "{report}");
}

/// A watch that began before the plan ends too, its lifetime counted from
/// the plan (the agent's watches run long before a test sets one).
#[tokio::test]
async fn a_running_watch_ends_once_a_plan_says_so() {
    let dc = start("faults-410-later", true);
    let victim = victim(&dc).await;
    let cms = Api::<ConfigMap>::namespaced(victim, "default");
    let mut events = cms
        .watch(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();
    dc.set_faults(&json!({"userAgent": "victim", "expireWatchesAfterMs": 300}))
        .await
        .unwrap();
    let last = tokio::time::timeout(Duration::from_secs(20), async {
        let mut last = None;
        while let Some(ev) = events.next().await {
            last = Some(ev.unwrap());
        }
        last
    })
    .await
    .expect("the running watch did not end");
    match last {
        Some(WatchEvent::Error(e)) => assert_eq!((e.code, e.reason.as_str()), (410, "Expired")),
        other => panic!("want a 410 ERROR event last, got {other:?}"),
    }
}
