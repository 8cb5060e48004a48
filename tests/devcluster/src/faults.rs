//! `/debug/faults`, served only with `--debug-faults`: an API server under
//! pressure, on a test's request.
//!
//! A test `PUT`s a [`Plan`]: a share of the API requests it selects (by
//! `User-Agent`) is answered 429 Too Many Requests the way API Priority and
//! Fairness rejects a request, a share 500 InternalError, a share is served
//! late, and every selected watch is ended by a 410 Expired ERROR event the
//! way an etcd compaction ends it, after which resuming from an older
//! resourceVersion gets 410 too (the client must re-list). `GET` returns the
//! plan and what was injected, in total and per client; `DELETE` clears the
//! plan (counters stay). Health, `/version` and the `/debug/*` endpoints are
//! never faulted (kube's probes are exempt from APF too).
//!
//! Decisions are a pure function of the seed and the request's number since
//! the plan was set ([`decide`]): the same seed gives the same sequence of
//! decisions in every run (which request gets number n is up to arrival order).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use axum::body::Body;
use http::{HeaderMap, HeaderValue, Method, Response, StatusCode};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::status::ApiError;

/// The longest `Retry-After` a plan may ask for: kube-apiserver's APF never
/// says more (`maxRetryAfter` of its DroppedRequestsTracker).
pub const MAX_RETRY_AFTER_SECONDS: u64 = 32;
/// The longest added latency a plan may ask for.
pub const MAX_LATENCY_MS: u64 = 60_000;
/// Clients counted apart (by `User-Agent`); any more share one entry, so a
/// caller inventing agents cannot grow the table without bound.
const MAX_CLIENTS: usize = 64;
/// The counters' name of requests without a `User-Agent` (kube-rs sends none).
pub const NO_USER_AGENT: &str = "(none)";
/// The counters' name of clients beyond [`MAX_CLIENTS`].
const OTHER_CLIENTS: &str = "(other)";

/// What a test asks for. Every field's default injects nothing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Plan {
    /// Seeds the decisions (see [`decide`]).
    pub seed: u64,
    /// Only requests whose `User-Agent` contains this; absent: every client.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user_agent: Option<String>,
    /// Only requests whose path contains this (e.g. `/configmaps`); absent:
    /// every path.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Only requests of these HTTP methods (e.g. `["POST", "PUT"]`: writes);
    /// absent: every method. Watches are `GET`s.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub methods: Option<Vec<String>>,
    /// Share of the selected requests answered 429 as APF rejects them.
    pub too_many_requests: f64,
    /// The `Retry-After` of those 429s, whole seconds (1 to 32, as APF's).
    pub retry_after_seconds: u64,
    /// Share of the selected requests answered 500 InternalError.
    pub internal_error: f64,
    /// Share of the selected requests held `latency_ms` before they are
    /// served (or refused).
    pub slow: f64,
    /// How long a slow request is held.
    pub latency_ms: u64,
    /// Every selected watch ends this long after it started with a 410
    /// Expired ERROR event, and the history before it is compacted (absent:
    /// watches are not ended).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expire_watches_after_ms: Option<u64>,
}

impl Default for Plan {
    fn default() -> Self {
        Plan {
            seed: 0,
            user_agent: None,
            path: None,
            methods: None,
            too_many_requests: 0.0,
            retry_after_seconds: 1,
            internal_error: 0.0,
            slow: 0.0,
            latency_ms: 0,
            expire_watches_after_ms: None,
        }
    }
}

impl Plan {
    /// Why the plan cannot be used, if it cannot.
    pub fn check(&self) -> Result<(), String> {
        for (field, share) in [
            ("tooManyRequests", self.too_many_requests),
            ("internalError", self.internal_error),
            ("slow", self.slow),
        ] {
            if !(0.0..=1.0).contains(&share) {
                return Err(format!("{field}: must be between 0 and 1, got {share}"));
            }
        }
        if self.too_many_requests + self.internal_error > 1.0 {
            return Err("tooManyRequests + internalError: must not exceed 1".into());
        }
        if !(1..=MAX_RETRY_AFTER_SECONDS).contains(&self.retry_after_seconds) {
            return Err(format!(
                "retryAfterSeconds: must be between 1 and {MAX_RETRY_AFTER_SECONDS}, got {}",
                self.retry_after_seconds
            ));
        }
        if self.latency_ms > MAX_LATENCY_MS {
            return Err(format!(
                "latencyMs: must be at most {MAX_LATENCY_MS}, got {}",
                self.latency_ms
            ));
        }
        for m in self.methods.iter().flatten() {
            if Method::from_bytes(m.as_bytes()).is_err() || m.to_ascii_uppercase() != *m {
                return Err(format!(
                    "methods: {m:?} is no HTTP method (upper case, e.g. PUT)"
                ));
            }
        }
        if self.expire_watches_after_ms == Some(0) {
            return Err("expireWatchesAfterMs: must be positive".into());
        }
        Ok(())
    }

    fn selects(&self, user_agent: &str, method: &str, path: &str) -> bool {
        self.user_agent
            .as_deref()
            .is_none_or(|want| user_agent.contains(want))
            && self.path.as_deref().is_none_or(|want| path.contains(want))
            && self
                .methods
                .as_ref()
                .is_none_or(|want| want.iter().any(|m| m == method))
    }
}

/// How a request is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// 429 with `Retry-After`, as APF rejects a request.
    TooManyRequests {
        /// Seconds.
        retry_after: u64,
    },
    /// 500 InternalError.
    InternalError,
}

/// What happens to one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Decision {
    /// Refused instead of served (None: served).
    pub refuse: Option<Refusal>,
    /// Held this long first.
    pub delay: Duration,
}

/// The decision for the `n`-th selected request (0-based) since `plan` was
/// set: two independent draws from (seed, n), one for the refusal and one
/// for the delay. Pure.
pub fn decide(plan: &Plan, n: u64) -> Decision {
    let refusal = unit(plan.seed, n.wrapping_mul(2));
    let slow = unit(plan.seed, n.wrapping_mul(2).wrapping_add(1));
    let refuse = if refusal < plan.too_many_requests {
        Some(Refusal::TooManyRequests {
            retry_after: plan.retry_after_seconds,
        })
    } else if refusal < plan.too_many_requests + plan.internal_error {
        Some(Refusal::InternalError)
    } else {
        None
    };
    let delay = if slow < plan.slow {
        Duration::from_millis(plan.latency_ms)
    } else {
        Duration::ZERO
    };
    Decision { refuse, delay }
}

/// A number in [0, 1) drawn from (seed, i) by splitmix64: uniform enough for
/// shares, the same on every platform and run.
fn unit(seed: u64, i: u64) -> f64 {
    let mut z = seed.wrapping_add(i.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}

/// What one client sent and what it got instead of its answers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Counts {
    /// API requests that reached the fault layer, selected or not.
    pub requests: u64,
    /// Of those, the requests the plan selected.
    pub selected: u64,
    /// Answered 429.
    pub too_many_requests: u64,
    /// Answered 500.
    pub internal_errors: u64,
    /// Held [`Plan::latency_ms`].
    pub delayed: u64,
    /// Watches ended with a 410 ERROR event.
    pub watches_expired: u64,
    /// Watches refused (410 ERROR event) because they resumed from a
    /// resourceVersion older than the last compaction.
    pub expired_resumes: u64,
}

impl Counts {
    fn add(&mut self, o: &Counts) {
        self.requests += o.requests;
        self.selected += o.selected;
        self.too_many_requests += o.too_many_requests;
        self.internal_errors += o.internal_errors;
        self.delayed += o.delayed;
        self.watches_expired += o.watches_expired;
        self.expired_resumes += o.expired_resumes;
    }
}

/// The fault layer's state: the plan, the number of the next selected
/// request, the compaction point and the counters.
#[derive(Debug)]
pub struct Faults {
    // A std Mutex: every critical section is a few field updates, never
    // held across an await.
    inner: Mutex<Inner>,
    /// Bumped when the plan changes: running watches look at it again.
    changes: tokio::sync::watch::Sender<u64>,
}

impl Default for Faults {
    fn default() -> Self {
        Faults {
            inner: Mutex::default(),
            changes: tokio::sync::watch::Sender::new(0),
        }
    }
}

#[derive(Debug, Default)]
struct Inner {
    plan: Plan,
    next: u64,
    /// Watches of selected clients from a resourceVersion below this get 410.
    compacted: u64,
    clients: BTreeMap<String, Counts>,
}

impl Inner {
    fn counts(&mut self, client: &str) -> &mut Counts {
        let key = if self.clients.contains_key(client) || self.clients.len() < MAX_CLIENTS {
            client
        } else {
            OTHER_CLIENTS
        };
        self.clients.entry(key.to_owned()).or_default()
    }
}

/// The request's `User-Agent` as the counters name it.
pub fn client_of(headers: &HeaderMap) -> String {
    let ua = headers
        .get(http::header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .trim();
    if ua.is_empty() {
        NO_USER_AGENT.to_owned()
    } else {
        ua.chars().take(200).collect()
    }
}

impl Faults {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Nothing a panicking holder leaves half-done matters to a test fault.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Counts one API request of `client` (`method` on `path`) and decides
    /// what it gets.
    pub fn admit(&self, client: &str, method: &str, path: &str) -> Decision {
        let mut inner = self.lock();
        inner.counts(client).requests += 1;
        if !inner.plan.selects(client, method, path) {
            return Decision::default();
        }
        let n = inner.next;
        inner.next = n.wrapping_add(1);
        let d = decide(&inner.plan, n);
        let c = inner.counts(client);
        c.selected += 1;
        match d.refuse {
            Some(Refusal::TooManyRequests { .. }) => c.too_many_requests += 1,
            Some(Refusal::InternalError) => c.internal_errors += 1,
            None => {}
        }
        if !d.delay.is_zero() {
            c.delayed += 1;
        }
        d
    }

    /// How long a watch of `client` on `path` may run before it is expired
    /// (None: no limit).
    pub fn watch_lifetime(&self, client: &str, path: &str) -> Option<Duration> {
        let inner = self.lock();
        let plan = &inner.plan;
        plan.expire_watches_after_ms
            .filter(|_| plan.selects(client, "GET", path))
            .map(Duration::from_millis)
    }

    /// A watch of `client` was ended at resourceVersion `rv`: the history up
    /// to it counts as compacted.
    pub fn expired(&self, client: &str, rv: u64) {
        let mut inner = self.lock();
        inner.compacted = inner.compacted.max(rv);
        inner.counts(client).watches_expired += 1;
    }

    /// The compaction point when a watch of `client` on `path` from `from`
    /// resumes before it (and is to be refused with 410); counted. Only while
    /// the plan ends that client's watches: a cleared plan refuses no resume.
    pub fn compacted_since(&self, client: &str, path: &str, from: u64) -> Option<u64> {
        let mut inner = self.lock();
        let plan = &inner.plan;
        if plan.expire_watches_after_ms.is_none()
            || !plan.selects(client, "GET", path)
            || from >= inner.compacted
        {
            return None;
        }
        let compacted = inner.compacted;
        inner.counts(client).expired_resumes += 1;
        Some(compacted)
    }

    /// The plan, what was injected in total and per client.
    pub fn report(&self) -> serde_json::Value {
        let inner = self.lock();
        let mut total = Counts::default();
        for c in inner.clients.values() {
            total.add(c);
        }
        json!({
            "plan": inner.plan,
            "compactedResourceVersion": inner.compacted.to_string(),
            "total": total,
            "clients": inner.clients,
        })
    }

    /// Sets `plan`; decisions start again from request number 0, and
    /// running watches take its expiry from now.
    pub fn set(&self, plan: Plan) {
        {
            let mut inner = self.lock();
            inner.plan = plan;
            inner.next = 0;
        }
        self.changes.send_modify(|g| *g = g.wrapping_add(1));
    }

    /// Wakes when the plan changes.
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Serves `/debug/faults`: GET the report, PUT/POST a plan, DELETE it.
    pub async fn endpoint(
        &self,
        method: &Method,
        body: Body,
        headers: &HeaderMap,
    ) -> Response<Body> {
        let result = match *method {
            Method::GET => Ok(()),
            Method::PUT | Method::POST => match crate::body::read_body(body, headers).await {
                Ok(bytes) => serde_json::from_slice::<Plan>(&bytes)
                    .map_err(|e| ApiError::bad_request(format!("invalid fault plan: {e}")))
                    .and_then(|plan| {
                        plan.check()
                            .map_err(|e| ApiError::bad_request(format!("invalid fault plan: {e}")))
                            .map(|()| plan)
                    })
                    .map(|plan| {
                        tracing::info!(?plan, "fault plan set");
                        self.set(plan);
                    }),
                Err(e) => Err(e),
            },
            Method::DELETE => {
                tracing::info!("fault plan cleared");
                self.set(Plan::default());
                Ok(())
            }
            _ => Err(ApiError::method_not_allowed(method.as_str())),
        };
        match result {
            Ok(()) => crate::body::json_response(200, &self.report()),
            Err(e) => crate::body::error_response(&e),
        }
    }
}

/// What a watch asks the fault layer: when to end with a 410 (see
/// [`Plan::expire_watches_after_ms`]), and whom to tell.
#[derive(Debug, Clone)]
pub struct Expiry {
    /// Told the resourceVersion the watch ended at.
    pub faults: Arc<Faults>,
    /// The watch's client.
    pub client: String,
    /// The watch's path.
    pub path: String,
}

impl Expiry {
    /// The watch's lifetime under the current plan (None: unlimited).
    pub fn lifetime(&self) -> Option<Duration> {
        self.faults.watch_lifetime(&self.client, &self.path)
    }

    /// The watch ended at resourceVersion `rv`.
    pub fn expired(&self, rv: u64) {
        self.faults.expired(&self.client, rv);
    }
}

/// The ERROR a compaction sends into a running watch: kube-apiserver's
/// `interpretWatchError` for etcd's ErrCompacted.
pub fn compacted_in_watch() -> ApiError {
    ApiError::expired("The resourceVersion for the provided watch is too old.")
}

/// The ERROR a watch from before the compaction gets (the watch cache's
/// "too old resource version: <asked> (<oldest kept>)").
pub fn compacted_before_watch(from: u64, compacted: u64) -> ApiError {
    ApiError::expired(format!("too old resource version: {from} ({compacted})"))
}

/// The response to a refused request, as kube-apiserver writes it.
pub fn refusal(r: Refusal) -> Response<Body> {
    match r {
        // APF's `tooManyRequests` (apiserver/pkg/server/filters): Go's
        // `http.Error`, so plain text and no Status body, with `Retry-After`
        // and the UIDs of the matched FlowSchema and PriorityLevel (fixed
        // here: the devcluster serves no flow-control objects).
        Refusal::TooManyRequests { retry_after } => {
            let mut resp =
                Response::new(Body::from("Too many requests, please try again later.\n"));
            *resp.status_mut() = StatusCode::TOO_MANY_REQUESTS;
            let h = resp.headers_mut();
            h.insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            );
            h.insert(
                http::header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            );
            h.insert(http::header::RETRY_AFTER, HeaderValue::from(retry_after));
            h.insert(
                "X-Kubernetes-PF-FlowSchema-UID",
                HeaderValue::from_static("7f4ae9c1-5b2e-4b9a-9d3c-2f0c6a1e8b01"),
            );
            h.insert(
                "X-Kubernetes-PF-PriorityLevel-UID",
                HeaderValue::from_static("0c9d3f2a-8e71-4f5b-a6d4-93b1e7c2f502"),
            );
            resp
        }
        Refusal::InternalError => crate::body::error_response(&ApiError::internal(
            "injected by the devcluster's /debug/faults",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(tmr: f64, ie: f64, slow: f64) -> Plan {
        Plan {
            seed: 7,
            too_many_requests: tmr,
            internal_error: ie,
            slow,
            latency_ms: 250,
            ..Plan::default()
        }
    }

    #[test]
    fn the_default_plan_injects_nothing() {
        let p = Plan::default();
        assert_eq!(p.check(), Ok(()));
        for n in 0..1000 {
            assert_eq!(decide(&p, n), Decision::default());
        }
        // And it is what an empty body means.
        assert_eq!(serde_json::from_str::<Plan>("{}").unwrap(), p);
    }

    #[test]
    fn shares_are_kept_and_decisions_repeat_for_a_seed() {
        let p = plan(0.2, 0.1, 0.5);
        let decisions: Vec<Decision> = (0..10_000).map(|n| decide(&p, n)).collect();
        let count = |f: &dyn Fn(&Decision) -> bool| decisions.iter().filter(|d| f(d)).count();
        let tmr = count(&|d| matches!(d.refuse, Some(Refusal::TooManyRequests { retry_after: 1 })));
        let ie = count(&|d| d.refuse == Some(Refusal::InternalError));
        let slow = count(&|d| d.delay == Duration::from_millis(250));
        assert!((1800..2200).contains(&tmr), "{tmr}");
        assert!((850..1150).contains(&ie), "{ie}");
        assert!((4800..5200).contains(&slow), "{slow}");
        let again: Vec<Decision> = (0..10_000).map(|n| decide(&p, n)).collect();
        assert_eq!(decisions, again);
        let other = Plan {
            seed: 8,
            ..p.clone()
        };
        let differ = (0..1000)
            .filter(|&n| decide(&other, n) != decide(&p, n))
            .count();
        assert!(differ > 100, "another seed, another sequence: {differ}");
    }

    #[test]
    fn bad_plans_say_which_field() {
        let bad = [
            (plan(1.5, 0.0, 0.0), "tooManyRequests"),
            (plan(0.0, -0.1, 0.0), "internalError"),
            (plan(0.0, 0.0, 2.0), "slow"),
            (plan(0.7, 0.7, 0.0), "must not exceed 1"),
            (
                Plan {
                    retry_after_seconds: 0,
                    ..Plan::default()
                },
                "retryAfterSeconds",
            ),
            (
                Plan {
                    retry_after_seconds: 33,
                    ..Plan::default()
                },
                "retryAfterSeconds",
            ),
            (
                Plan {
                    latency_ms: MAX_LATENCY_MS + 1,
                    ..Plan::default()
                },
                "latencyMs",
            ),
            (
                Plan {
                    expire_watches_after_ms: Some(0),
                    ..Plan::default()
                },
                "expireWatchesAfterMs",
            ),
        ];
        for (p, field) in bad {
            let e = p.check().unwrap_err();
            assert!(e.contains(field), "{e}");
        }
        assert!(serde_json::from_str::<Plan>(r#"{"tooMany": 1}"#).is_err());
    }

    #[test]
    fn only_the_selected_client_is_faulted_and_every_client_is_counted() {
        let f = Faults::default();
        f.set(Plan {
            user_agent: Some("fleetbus-agent".into()),
            too_many_requests: 1.0,
            ..Plan::default()
        });
        assert_eq!(
            f.admit(NO_USER_AGENT, "GET", "/api/v1/pods"),
            Decision::default()
        );
        assert_eq!(
            f.admit("fleetbus-agent/0.1.0 (c1)", "GET", "/api/v1/pods")
                .refuse,
            Some(Refusal::TooManyRequests { retry_after: 1 })
        );
        let r = f.report();
        assert_eq!(r["clients"][NO_USER_AGENT]["requests"], 1);
        assert_eq!(r["clients"][NO_USER_AGENT]["selected"], 0);
        assert_eq!(r["clients"][NO_USER_AGENT]["tooManyRequests"], 0);
        assert_eq!(
            r["clients"]["fleetbus-agent/0.1.0 (c1)"]["tooManyRequests"],
            1
        );
        assert_eq!(r["total"]["requests"], 2);
    }

    #[test]
    fn a_path_narrows_the_selection() {
        let f = Faults::default();
        f.set(Plan {
            path: Some("/configmaps".into()),
            internal_error: 1.0,
            ..Plan::default()
        });
        assert_eq!(
            f.admit("a", "GET", "/api/v1/namespaces/x/secrets").refuse,
            None
        );
        assert_eq!(
            f.admit("a", "GET", "/api/v1/namespaces/x/configmaps/y")
                .refuse,
            Some(Refusal::InternalError)
        );
        assert_eq!(f.report()["clients"]["a"]["selected"], 1);
    }

    #[test]
    fn methods_narrow_the_selection_to_writes() {
        let f = Faults::default();
        f.set(Plan {
            methods: Some(vec!["PUT".into(), "POST".into()]),
            too_many_requests: 1.0,
            ..Plan::default()
        });
        let cm = "/api/v1/namespaces/x/configmaps/y";
        assert_eq!(f.admit("a", "GET", cm).refuse, None, "reads pass");
        assert_eq!(f.admit("a", "PATCH", cm).refuse, None, "PATCH is not named");
        assert!(matches!(
            f.admit("a", "PUT", cm).refuse,
            Some(Refusal::TooManyRequests { .. })
        ));
        assert_eq!(f.report()["clients"]["a"]["selected"], 1);
        for bad in ["put", "P UT", ""] {
            let p = Plan {
                methods: Some(vec![bad.into()]),
                ..Plan::default()
            };
            assert!(p.check().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn setting_a_plan_restarts_its_sequence() {
        let f = Faults::default();
        let p = plan(0.5, 0.0, 0.0);
        f.set(p.clone());
        let first: Vec<Decision> = (0..50).map(|_| f.admit("x", "GET", "/api")).collect();
        f.set(p.clone());
        let second: Vec<Decision> = (0..50).map(|_| f.admit("x", "GET", "/api")).collect();
        assert_eq!(first, second);
        assert_eq!(first, (0..50).map(|n| decide(&p, n)).collect::<Vec<_>>());
    }

    #[test]
    fn a_compaction_refuses_older_resumes_of_selected_clients() {
        let f = Faults::default();
        f.set(Plan {
            user_agent: Some("agent".into()),
            expire_watches_after_ms: Some(500),
            ..Plan::default()
        });
        let p = "/api/v1/configmaps";
        assert_eq!(
            f.watch_lifetime("agent", p),
            Some(Duration::from_millis(500))
        );
        assert_eq!(f.watch_lifetime("kubectl", p), None);
        assert_eq!(f.compacted_since("agent", p, 5), None);
        f.expired("agent", 40);
        assert_eq!(f.compacted_since("agent", p, 39), Some(40));
        assert_eq!(f.compacted_since("agent", p, 40), None);
        assert_eq!(f.compacted_since("kubectl", p, 1), None);
        // A cleared plan refuses no resume, though the point is remembered.
        f.set(Plan::default());
        assert_eq!(f.compacted_since("agent", p, 39), None);
        let r = f.report();
        assert_eq!(r["clients"]["agent"]["watchesExpired"], 1);
        assert_eq!(r["clients"]["agent"]["expiredResumes"], 1);
        assert_eq!(r["compactedResourceVersion"], "40");
    }

    #[test]
    fn clients_beyond_the_cap_share_one_entry() {
        let f = Faults::default();
        for i in 0..(MAX_CLIENTS + 10) {
            f.admit(&format!("ua-{i}"), "GET", "/api");
        }
        let r = f.report();
        let clients = r["clients"].as_object().unwrap();
        assert_eq!(clients.len(), MAX_CLIENTS + 1);
        assert_eq!(clients[OTHER_CLIENTS]["requests"], 10);
    }

    #[test]
    fn a_429_is_plain_text_with_retry_after_as_apf_sends_it() {
        let resp = refusal(Refusal::TooManyRequests { retry_after: 3 });
        assert_eq!(resp.status(), 429);
        let h = resp.headers();
        assert_eq!(h[http::header::RETRY_AFTER], "3");
        assert_eq!(h[http::header::CONTENT_TYPE], "text/plain; charset=utf-8");
        assert_eq!(h[http::header::X_CONTENT_TYPE_OPTIONS], "nosniff");
        assert!(h.contains_key("X-Kubernetes-PF-FlowSchema-UID"));
        let resp = refusal(Refusal::InternalError);
        assert_eq!(resp.status(), 500);
    }
}
