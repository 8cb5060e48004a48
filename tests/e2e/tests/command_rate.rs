//! Requests to an agent are bounded: a flood of `correct`
//! requests from a plain NATS client is answered, mostly with refusals for rate
//! that say when to retry, counted in the agent's metrics; other verbs keep
//! their own budget; the operator's `fleetbus drift correct` shows the refusal
//! as a clear error and works again once the bucket has refilled.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::HashMap;
use std::time::Duration;

use common::*;
use fleetbus_schemas::command::CorrectReply;
use fleetbus_schemas::subject::{CommandKey, Prefix};
use fleetbus_testsupport::{wait_for, NatsServer};
use futures::StreamExt;

const FLOOD: usize = 2_000;
/// One token every 5 s, 2 at once: after a flood the bucket stays empty long
/// enough for the CLI to meet the refusal, and refills within a test's patience.
const RATE: &[&str] = &["--command-rate", "0.2", "--command-burst", "2"];
const REFUSED: &str = "fleetbus_commands_rejected_total{verb=\"correct\",reason=\"rate\"}";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_requests_is_answered_refused_for_rate_and_counted() {
    let nats = NatsServer::start().unwrap();
    let mut c1 = Member::start(&nats, "c1", "c1", RATE).await;
    c1.wait_ready().await;
    // The agent answers `correct` (its subscription is up).
    wait_for("c1 answers drift correct", CONVERGE, || async {
        match fleetbus_cli(&nats, &["drift", "correct", "--cluster", "c1"]).await {
            (Some(0), _, _) => Ok(()),
            (code, out, err) => Err(format!("exit {code:?}: {out}{err}")),
        }
    })
    .await;

    let client = async_nats::connect(nats.url()).await.unwrap();
    let inbox = client.new_inbox();
    let mut replies = client.subscribe(format!("{inbox}.*")).await.unwrap();
    let subject = CommandKey::correct("c1").to_subject(&Prefix::default());
    let request = br#"{"schema":"fleetbus.io/correct-request/v1"}"#;
    for i in 0..FLOOD {
        client
            .publish_with_reply(subject.clone(), format!("{inbox}.{i}"), request[..].into())
            .await
            .unwrap();
    }
    client.flush().await.unwrap();
    let mut answers: HashMap<String, CorrectReply> = HashMap::new();
    let collect = async {
        while answers.len() < FLOOD {
            let Some(msg) = replies.next().await else {
                break;
            };
            let reply = CorrectReply::decode(&msg.payload).unwrap();
            answers.insert(msg.subject.to_string(), reply);
        }
    };
    let in_time = tokio::time::timeout(Duration::from_secs(60), collect).await;
    assert!(
        in_time.is_ok(),
        "every request is answered: {} of {FLOOD} within 60 s",
        answers.len()
    );
    let (mut ok, mut refused) = (0, 0);
    for reply in answers.values() {
        match (&reply.error, reply.retry_after_ms) {
            (None, None) => ok += 1,
            (Some(e), Some(ms)) if e.starts_with("rate limited") && ms > 0 => refused += 1,
            other => panic!("neither done nor refused for rate: {other:?} in {reply:?}"),
        }
    }
    assert_eq!(ok + refused, FLOOD);
    assert!(
        refused >= FLOOD - 10,
        "most are refused: {ok} done, {refused} refused"
    );

    // The operator meets the refusal as one clear line, and exit 1.
    let (code, _, err) = fleetbus_cli(&nats, &["drift", "correct", "--cluster", "c1"]).await;
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("cluster c1 refused the request: rate limited") && err.contains("retry in"),
        "{err}"
    );
    // Another verb has its own bucket: a relabel goes through.
    let (code, out, err) = fleetbus_cli(&nats, &["clusters", "label", "c1", "flood=over"]).await;
    assert_eq!(code, Some(0), "{out}{err}");

    wait_for("c1 counts every refusal", CONVERGE, || async {
        // The operator's refused request above is counted too.
        match c1.metric(REFUSED)? {
            n if n >= (refused + 1) as f64 => Ok(()),
            n => Err(format!("{REFUSED} = {n}, want at least {}", refused + 1)),
        }
    })
    .await;
    // Once the bucket has a token again, the operator's request is served.
    wait_for("drift correct works again", CONVERGE, || async {
        match fleetbus_cli(&nats, &["drift", "correct", "--cluster", "c1"]).await {
            (Some(0), out, _) if out.contains("cluster c1: 0 corrected, 0 failed") => Ok(()),
            (code, out, err) => Err(format!("exit {code:?}: {out}{err}")),
        }
    })
    .await;
}

/// Every verb the agent answers, as a plain NATS client asks it: a request of
/// `{}` is answered by that cluster (a reply naming it, refusal or not).
async fn every_verb_answers(client: &async_nats::Client, cluster: &str) -> Result<(), String> {
    for verb in [
        "label",
        "progress",
        "correct",
        "preview",
        "preview-source",
        "rollout",
    ] {
        let subject = CommandKey {
            cluster: cluster.to_owned(),
            verb: verb.to_owned(),
        }
        .to_subject(&Prefix::default());
        let asked = client.request(subject, "{}".into());
        let msg = match tokio::time::timeout(Duration::from_secs(3), asked).await {
            Ok(Ok(msg)) => msg,
            Ok(Err(e)) => return Err(format!("{verb}: {e}")),
            Err(_) => return Err(format!("{verb}: no answer within 3 s")),
        };
        let reply: serde_json::Value =
            serde_json::from_slice(&msg.payload).map_err(|e| format!("{verb}: not JSON ({e})"))?;
        if reply["cluster"] != cluster {
            return Err(format!("{verb}: answered {reply}"));
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_verb_answers_again_after_nats_restarts() {
    let mut nats = NatsServer::start().unwrap();
    let mut c1 = Member::start(&nats, "c1", "c1", &[]).await;
    c1.wait_ready().await;
    let client = async_nats::connect(nats.url()).await.unwrap();
    wait_for("c1 answers every verb", CONVERGE, || {
        every_verb_answers(&client, "c1")
    })
    .await;

    nats.restart().unwrap();
    c1.wait_ready().await;
    // The client of the test reconnects on its own, as the agent's does.
    wait_for("c1 answers every verb after the restart", CONVERGE, || {
        every_verb_answers(&client, "c1")
    })
    .await;
}
