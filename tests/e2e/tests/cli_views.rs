//! `fleetbus status`, `rules ls|describe`, `clusters ls|describe` against real agents:
//! the JSON of each command, parsed, says what the agents' rule status says (a rule
//! with a conflict, a rule NotSelected everywhere), and records forged on the bus by a
//! plain NATS client are skipped and counted without hiding the good ones.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::process::Output;

use common::rules::RuleBuilder;
use common::sync::*;
use common::*;
use fleetbus_testsupport::{repo_root, wait_for, NatsServer};
use serde_json::Value;

/// A rule no cluster is a source or a sink of.
fn nowhere() -> RuleBuilder {
    let env = [("env", "nowhere")];
    RuleBuilder::new("nowhere").sources(&env).sinks(&env)
}

async fn fleetbus(nats: &NatsServer, args: &[&str]) -> Output {
    tokio::process::Command::new(repo_root().join("target/debug/fleetbus"))
        .args(args)
        .env("FLEETBUS_NATS_URL", nats.url())
        .env_remove("FLEETBUS_SUBJECT_PREFIX")
        .env_remove("FLEETBUS_OUTPUT")
        .kill_on_drop(true)
        .output()
        .await
        .unwrap()
}

/// Runs a command with `-o json`; the exit code and the parsed output.
async fn json(nats: &NatsServer, args: &[&str]) -> Result<(i32, Value), String> {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    let out = fleetbus(nats, &all).await;
    let code = out.status.code().unwrap_or(-1);
    serde_json::from_slice(&out.stdout)
        .map(|v| (code, v))
        .map_err(|e| {
            format!(
                "{args:?}: exit {code}, {e}: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        })
}

fn rule<'a>(ls: &'a Value, name: &str) -> Option<&'a Value> {
    ls["rules"].as_array()?.iter().find(|r| r["name"] == name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_view_reads_the_bus() {
    let nats = NatsServer::start().unwrap();
    let m = fleet(&nats, &["c1", "c2"]).await;
    let (c1, c2) = (&m[0], &m[1]);
    for x in &m {
        create_ns(x, "shared").await;
    }
    // The same name on both before the rule: each holds the other's as a conflict.
    create_secret(c1, "shared", "db", &[("owner", "c1")]).await;
    create_secret(c2, "shared", "db", &[("owner", "c2")]).await;
    apply_yaml(c1, &shared_secrets_rule().yaml());
    apply_yaml(c1, &nowhere().yaml());

    let ls = wait_for(
        "rules ls: a conflict and a NotSelected rule",
        CONVERGE,
        || async {
            let (code, ls) = json(&nats, &["rules", "ls"]).await?;
            let conflicted = rule(&ls, "shared-secrets").ok_or(format!("{ls}"))?;
            let nowhere = rule(&ls, "nowhere").ok_or(format!("{ls}"))?;
            if code == 0
                && conflicted["state"] == "Conflict"
                && conflicted["conflicts"].as_u64() >= Some(2)
                && conflicted["clusters"]["c2"] == "Conflict"
                && nowhere["state"] == "NotSelected"
                && nowhere["clusters"]["c1"] == "NotSelected"
                && nowhere["clusters"]["c2"] == "NotSelected"
            {
                Ok(ls)
            } else {
                Err(format!("exit {code}: {ls}"))
            }
        },
    )
    .await;
    assert_eq!(ls["unreadableRecords"], 0, "{ls}");
    let nowhere = rule(&ls, "nowhere").unwrap();
    assert_eq!(nowhere["sinksSelected"], 0, "{nowhere}");
    assert_eq!(nowhere["sources"], serde_json::json!([]), "{nowhere}");

    // describe: per cluster, the object each conflict concerns.
    let (code, d) = json(&nats, &["rules", "describe", "shared-secrets"])
        .await
        .unwrap();
    assert_eq!(code, 0, "{d}");
    let cells = d["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 2, "{d}");
    for cell in cells {
        assert_eq!(cell["state"], "Conflict", "{cell}");
        assert_eq!(cell["clusterState"], "Ready", "{cell}");
        assert!(cell["sink"].as_bool().unwrap() && cell["source"].as_bool().unwrap());
        let problems = cell["problems"].as_array().unwrap();
        assert!(
            problems
                .iter()
                .any(|p| p["kind"] == "Conflict" && p["object"] == "Secret shared/db"),
            "{cell}"
        );
    }
    let (code, d) = json(&nats, &["rules", "describe", "nowhere"])
        .await
        .unwrap();
    assert_eq!(code, 0);
    for cell in d["cells"].as_array().unwrap() {
        assert_eq!(cell["reason"], "NotSelected", "{cell}");
        assert!(!cell["sink"].as_bool().unwrap() && !cell["source"].as_bool().unwrap());
    }
    let missing = fleetbus(&nats, &["rules", "describe", "no-such-rule"]).await;
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no-such-rule"));

    // A drift on c2, corrected by its agent: the last drift events show it.
    create_secret(c1, "shared", "other", &[("k", "v")]).await;
    wait_copy(
        c2,
        &secrets(),
        Some("shared"),
        "other",
        "c1",
        "shared-secrets",
        |_| Ok(()),
    )
    .await;
    kubectl(
        c2,
        &[
            "-n",
            "shared",
            "patch",
            "secret",
            "other",
            "-p",
            r#"{"data":{"k":"eA=="}}"#,
        ],
    );
    wait_for("the drift among the last events", CONVERGE, || async {
        let (_, s) = json(&nats, &["status", "--events", "3"]).await?;
        let last = s["lastDriftEvents"].as_array().cloned().unwrap_or_default();
        if last.len() <= 3
            && last
                .iter()
                .any(|e| e["object"]["name"] == "other" && e["cluster"] == "c2")
        {
            Ok(())
        } else {
            Err(format!("{s}"))
        }
    })
    .await;

    // status: the conflicts need attention (exit 1), both clusters Ready.
    let (code, s) = json(&nats, &["status"]).await.unwrap();
    assert_eq!(code, 1, "{s}");
    assert_eq!(s["ok"], false);
    assert_eq!(s["clusters"], serde_json::json!({"Ready": 2}), "{s}");
    let attention = s["needsAttention"].as_array().unwrap();
    assert!(
        attention.iter().any(|a| a["kind"] == "rule"
            && a["name"] == "shared-secrets"
            && a["state"] == "Conflict"),
        "{s}"
    );
    assert!(!attention.iter().any(|a| a["name"] == "nowhere"), "{s}");
    let table = fleetbus(&nats, &["status"]).await;
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(
        text.starts_with("NEEDS ATTENTION (") && text.contains("CLUSTERS: 2 (2 Ready)"),
        "{text}"
    );

    // clusters ls and describe.
    let (code, cl) = json(&nats, &["clusters", "ls"]).await.unwrap();
    assert_eq!(code, 0);
    let names: Vec<&str> = cl
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["c1", "c2"]);
    assert!(cl
        .as_array()
        .unwrap()
        .iter()
        .all(|c| c["state"] == "Ready" && c["agentVersion"].is_string()));
    let (code, d) = json(&nats, &["clusters", "describe", "c2"]).await.unwrap();
    assert_eq!(code, 0, "{d}");
    let rules: Vec<&str> = d["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["rule"].as_str().unwrap())
        .collect();
    assert_eq!(rules, ["nowhere", "shared-secrets"], "{d}");
    assert_eq!(
        fleetbus(&nats, &["clusters", "describe", "c9"])
            .await
            .status
            .code(),
        Some(1)
    );
    let yaml = fleetbus(&nats, &["clusters", "ls", "-o", "yaml"]).await;
    let back: Value = fleetbus_schemas::yaml::from_slice(&yaml.stdout).unwrap();
    assert_eq!(back, cl);

    // Forged and garbage records, written by a plain client: skipped and counted.
    let client = async_nats::connect(nats.url()).await.unwrap();
    let kv = async_nats::jetstream::new(client)
        .get_key_value("fleetbus-rulestatus")
        .await
        .unwrap();
    let (_, desc) = json(&nats, &["rules", "describe", "shared-secrets"])
        .await
        .unwrap();
    let mut real: Value = desc["cells"][0].clone();
    real.as_object_mut().unwrap().remove("clusterState");
    real["schema"] = "fleetbus.io/rulestatus/v1".into();
    let key_of = |v: &Value| {
        fleetbus_schemas::rule_status::RuleStatusKey {
            cluster: v["cluster"].as_str().unwrap().into(),
            cluster_id: v["clusterID"].as_str().unwrap().into(),
            rule: v["rule"].as_str().unwrap().into(),
        }
        .to_key()
    };
    // A record claiming c2, under c1's key (a key no agent writes: no race).
    let mut under_c1 = real.clone();
    under_c1["cluster"] = "c1".into();
    under_c1["rule"] = "forged".into();
    let mut forged = under_c1.clone();
    forged["cluster"] = "c2".into();
    let mut huge = real.clone();
    huge["rule"] = "huge".into();
    let small = serde_json::json!({"kind": "Error", "object": "Secret a/b", "message": "x"});
    huge["problems"] = Value::Array(vec![small; 10_000]);
    let mut other = real.clone();
    other["schema"] = "fleetbus.io/rulestatus/v9".into();
    other["rule"] = "other".into();
    for (key, bytes) in [
        ("not-a-status-key".to_owned(), b"{}".to_vec()),
        ("status.c1.x.bad-json".to_owned(), b"{not json".to_vec()),
        (key_of(&other), other.to_string().into_bytes()),
        (key_of(&huge), huge.to_string().into_bytes()),
        (key_of(&under_c1), forged.to_string().into_bytes()),
    ] {
        kv.put(key, bytes.into()).await.unwrap();
    }
    // Five skipped and counted; every good record still shown.
    let (code, ls) = json(&nats, &["rules", "ls"]).await.unwrap();
    assert_eq!(code, 0, "{ls}");
    assert_eq!(ls["unreadableRecords"], 5, "{ls}");
    assert!(
        rule(&ls, "nowhere").is_some() && rule(&ls, "shared-secrets").is_some(),
        "{ls}"
    );
    for bad in ["huge", "other", "forged"] {
        assert!(rule(&ls, bad).is_none(), "{bad}: {ls}");
    }
    let table = fleetbus(&nats, &["rules", "ls"]).await;
    assert!(
        String::from_utf8_lossy(&table.stdout)
            .contains("5 unreadable rule status record(s) skipped"),
        "{}",
        String::from_utf8_lossy(&table.stdout)
    );
    let (code, _) = json(&nats, &["status"]).await.unwrap();
    assert_eq!(code, 1);
}
