//! What the bus says about the fleet's clusters, read once: the records of the
//! registry bucket, the beats of the beats bucket, and each cluster's state in
//! the one vocabulary every view uses ([`fleetbus_schemas::registry::peer_state`]).
//! Shared by `clusters ls`, `clusters progress` and every later view (`status`,
//! the dashboard), so they cannot disagree.
//!
//! Liveness needs no clock for an agent that beats: the server deletes a beat
//! its TTL after it was put, so a beat key present means alive. Only the
//! record of an older agent (without `beats`) is judged by comparing its
//! `heartbeatAt` with the reader's clock, as before.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};
use fleetbus_schemas::crd::ClusterState;
use fleetbus_schemas::registry::{
    beats_bucket, parse_revoked_key, peer_state, registry_bucket, ClusterRecord, MemberState,
    PeerFacts, RegistryKey, RevokedRecord,
};
use fleetbus_schemas::subject::Prefix;
use fleetbus_schemas::trust::{
    verify_record, CertError, RecordRefusal, SignedCertificate, VerifyingKey,
};

use crate::kv::ReadError;

/// One cluster as a reader of the bus sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterView {
    /// The cluster's latest record.
    pub record: ClusterRecord,
    /// Its state. Never `Disabled`: that is one agent's local decision about a
    /// peer, not a fact on the bus.
    pub state: ClusterState,
    /// Time since the last heartbeat by the reader's clock: since the server
    /// stored the beat, for an agent that beats (its record's `heartbeatAt` is
    /// when the record last changed), else since the record's `heartbeatAt`.
    /// None when there is no beat or the time is in the future.
    pub heartbeat_age: Option<std::time::Duration>,
}

/// When each cluster's beat now in the beats bucket was stored, by the
/// server's clock, keyed by (name, clusterID). A fleet without the bucket
/// (agents before beats) has none.
pub type Beats = BTreeMap<(String, String), DateTime<Utc>>;

/// The beats in the beats bucket now (see [`Beats`]).
pub async fn beating(
    js: &async_nats::jetstream::Context,
    prefix: &Prefix,
) -> Result<Beats, ReadError> {
    let bucket = beats_bucket(prefix);
    let (kv, keys) = match crate::kv::listed(js, prefix, &bucket).await {
        Ok(found) => found,
        Err(ReadError::Missing { .. }) => return Ok(Beats::new()),
        Err(e) => return Err(e),
    };
    let mut beats = Beats::new();
    for key in keys {
        let Ok(RegistryKey::Beat { name, cluster_id }) = RegistryKey::parse(&key) else {
            continue;
        };
        // The key may expire between the listing and this read: then it is gone.
        let Some(entry) = kv
            .entry(&key)
            .await
            .map_err(|e| crate::kv::unreadable_bucket(&bucket, e))?
        else {
            continue;
        };
        if entry.operation != async_nats::jetstream::kv::Operation::Put {
            continue;
        }
        let stored = DateTime::<Utc>::from_timestamp(
            entry.created.unix_timestamp(),
            entry.created.nanosecond(),
        );
        beats.insert((name, cluster_id), stored.unwrap_or_default());
    }
    Ok(beats)
}

/// A registry record left out of the views: it does not verify against the
/// fleet root, so no secure agent believes it either.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unverified {
    /// Its key in the registry bucket.
    pub key: String,
    /// Why (the refusal, as agents count it).
    pub why: String,
}

/// The registry's cluster records as a view shows them.
#[derive(Debug, Clone, Default)]
pub struct Records {
    /// Sorted by name then ID.
    pub records: Vec<ClusterRecord>,
    /// Left out (only with the fleet root known: `--dir` holds `root.pub`).
    pub unverified: Vec<Unverified>,
    /// The keys of the records that verified and are not revoked (empty
    /// without the fleet root): what the views check drift events with.
    pub signers: crate::signers::Signers,
}

/// Every cluster record of the registry bucket as stored, sorted by name
/// then ID (unreadable ones are skipped, as agents skip them), verified or
/// not: what the commands that change the registry (`forget`, `leave`) and
/// address clusters act on, so a forged or expired record can be removed.
pub async fn cluster_records(
    js: &async_nats::jetstream::Context,
    prefix: &Prefix,
) -> Result<Vec<ClusterRecord>, ReadError> {
    Ok(read_records(js, prefix, None).await?.records)
}

/// [`cluster_records`]; with `verify` (the views that show clusters:
/// `clusters ls`, the dashboard) checked as secure agents check them when
/// the fleet root is known (`crate::command::fleet_root`): a record whose
/// certificate or signature does not verify, or stored under another
/// cluster's key, is left out and named, and one signed under a certificate
/// the root revoked (`revoked.<name>`, root-signed) counts as `Left`, as it
/// did when the revocation came. Freshness (an older record put back) needs
/// what was read before: agents refuse it, a view cannot.
pub async fn read_records(
    js: &async_nats::jetstream::Context,
    prefix: &Prefix,
    verify: Option<&mut Verdicts>,
) -> Result<Records, ReadError> {
    let bucket = registry_bucket(prefix);
    let (kv, keys) = crate::kv::listed(js, prefix, &bucket).await?;
    let mut raw = Vec::new();
    let mut revocations = Vec::new();
    for key in keys {
        let is_record = matches!(RegistryKey::parse(&key), Ok(RegistryKey::Cluster { .. }));
        let is_revocation = matches!(parse_revoked_key(&key), Some(Ok(_)));
        if !is_record && !is_revocation {
            continue;
        }
        let Some(bytes) = kv
            .get(&key)
            .await
            .map_err(|e| crate::kv::unreadable_bucket(&bucket, e))?
        else {
            continue;
        };
        if is_revocation {
            revocations.push(bytes.to_vec());
        } else {
            raw.push((key, bytes.to_vec()));
        }
    }
    let mut out = match (verify, crate::command::fleet_root()) {
        (Some(memo), Some(root)) => checked(raw, &revocations, Some(root), Utc::now(), memo),
        _ => checked(raw, &[], None, Utc::now(), &mut Verdicts::default()),
    };
    out.records
        .sort_by(|a, b| (&a.name, &a.cluster_id).cmp(&(&b.name, &b.cluster_id)));
    Ok(out)
}

/// The signers of the fleet when the fleet root is known (`--dir` holds
/// `root.pub`), else None: without it the views verify nothing.
pub async fn signers(
    js: &async_nats::jetstream::Context,
    prefix: &fleetbus_schemas::subject::Prefix,
) -> Result<Option<crate::signers::Signers>, ReadError> {
    if crate::command::fleet_root().is_none() {
        return Ok(None);
    }
    let read = read_records(js, prefix, Some(&mut Default::default())).await?;
    Ok(Some(read.signers))
}

/// Verdicts on records already checked, by registry key, with the bytes
/// they were given for: the signatures of unchanged bytes are not checked
/// again (two ed25519 verifications a record: the dashboard reads the
/// registry every second). What can change under the same bytes, the
/// certificate's period and the revocations, is checked on every use.
#[derive(Debug, Default)]
pub struct Verdicts(BTreeMap<String, (Vec<u8>, Result<SignedCertificate, RecordRefusal>)>);

impl Verdicts {
    /// The verdict on `bytes` at `key` (record `r`), from the memo when
    /// the bytes are the same, against `root` at `now`, revocations aside.
    fn of(
        &mut self,
        root: &VerifyingKey,
        key: &str,
        r: &ClusterRecord,
        bytes: &[u8],
        now: DateTime<Utc>,
    ) -> Result<SignedCertificate, RecordRefusal> {
        let verdict = match self.0.get(key) {
            Some((seen, verdict)) if seen == bytes => verdict.clone(),
            _ => {
                let cert = r.certificate.as_deref();
                let verdict = verify_record(root, &r.name, cert, bytes, now, |_| false);
                // A certificate not valid *now* may be later (or was a
                // moment ago, by another clock): not remembered.
                let timed = matches!(
                    verdict,
                    Err(RecordRefusal::Certificate(
                        CertError::Expired { .. } | CertError::NotYetValid { .. }
                    ))
                );
                if !timed {
                    self.0
                        .insert(key.to_owned(), (bytes.to_vec(), verdict.clone()));
                }
                verdict
            }
        };
        let c = verdict?;
        if now > c.cert.not_after {
            return Err(CertError::Expired {
                cluster: c.cert.cluster.clone(),
                not_after: c.cert.not_after,
            }
            .into());
        }
        if now < c.cert.not_before {
            return Err(CertError::NotYetValid {
                cluster: c.cert.cluster.clone(),
                not_before: c.cert.not_before,
            }
            .into());
        }
        Ok(c)
    }
}

/// The pure half of [`read_records`]: the records of `raw` (key, bytes),
/// checked against `root` when there is one (through `memo`), with the
/// serials of the root-signed `revocations` revoked.
pub fn checked(
    raw: Vec<(String, Vec<u8>)>,
    revocations: &[Vec<u8>],
    root: Option<&VerifyingKey>,
    now: DateTime<Utc>,
    memo: &mut Verdicts,
) -> Records {
    let revoked: BTreeSet<String> = root
        .map(|root| {
            revocations
                .iter()
                .filter(|b| RevokedRecord::verify(b, root).is_ok())
                .filter_map(|b| RevokedRecord::decode(b).ok())
                .flat_map(|r| r.serials)
                .collect()
        })
        .unwrap_or_default();
    // Keys no longer in the registry are forgotten.
    memo.0.retain(|k, _| raw.iter().any(|(key, _)| key == k));
    let mut out = Records::default();
    for (key, bytes) in raw {
        let Ok(mut r) = ClusterRecord::decode(&bytes) else {
            continue;
        };
        if let Some(root) = root {
            // Agents refuse a record stored under another cluster's key.
            let claimed = RegistryKey::parse(&key).ok();
            if !matches!(claimed, Some(RegistryKey::Cluster { name, cluster_id })
                if name == r.name && cluster_id == r.cluster_id)
            {
                out.unverified.push(Unverified {
                    key,
                    why: format!(
                        "it names cluster {} ({}), not its key's",
                        r.name, r.cluster_id
                    ),
                });
                continue;
            }
            match memo.of(root, &key, &r, &bytes, now) {
                Ok(c) if revoked.contains(&c.cert.serial_hex()) => r.state = MemberState::Left,
                Ok(c) => {
                    if let Ok(k) = c.verifying_key() {
                        out.signers.insert(&r.name, k, c.cert.serial_hex());
                    }
                }
                Err(e) => {
                    out.unverified.push(Unverified {
                        key,
                        why: e.to_string(),
                    });
                    continue;
                }
            }
        }
        out.records.push(r);
    }
    out
}

/// Every cluster with its state at `now`.
pub async fn clusters(
    js: &async_nats::jetstream::Context,
    prefix: &Prefix,
    now: DateTime<Utc>,
) -> Result<Vec<ClusterView>, ReadError> {
    let records = cluster_records(js, prefix).await?;
    let beats = beating(js, prefix).await?;
    Ok(views(records, &beats, now))
}

/// Whether the cluster of `r` is alive: its beat is in the bucket, or, for an
/// agent that does not beat, its record's `heartbeatAt` is recent at `now`.
fn alive(r: &ClusterRecord, beating: &Beats, now: DateTime<Utc>) -> bool {
    if r.beats {
        r.state == MemberState::Active
            && beating.contains_key(&(r.name.clone(), r.cluster_id.clone()))
    } else {
        r.is_alive(now)
    }
}

/// How long ago the cluster's last heartbeat was: its beat's store time for an
/// agent that beats, its record's `heartbeatAt` otherwise. For display only:
/// it compares another clock (the server's, or the agent's) with ours, which
/// is why the state never depends on it.
fn heartbeat_age(
    r: &ClusterRecord,
    beating: &Beats,
    now: DateTime<Utc>,
) -> Option<std::time::Duration> {
    let last = if r.beats {
        *beating.get(&(r.name.clone(), r.cluster_id.clone()))?
    } else {
        r.heartbeat_at
    };
    now.signed_duration_since(last).to_std().ok()
}

/// The pure half of [`clusters`]: states from records and the beats present
/// (`beating`). Two live records claiming one name are both `Conflict`.
pub fn views(records: Vec<ClusterRecord>, beating: &Beats, now: DateTime<Utc>) -> Vec<ClusterView> {
    let mut claims: BTreeMap<&str, usize> = BTreeMap::new();
    for r in &records {
        if r.state == MemberState::Active && alive(r, beating, now) {
            *claims.entry(r.name.as_str()).or_default() += 1;
        }
    }
    let conflicted: Vec<String> = claims
        .into_iter()
        .filter(|(_, n)| *n > 1)
        .map(|(name, _)| name.to_owned())
        .collect();
    records
        .into_iter()
        .map(|record| {
            let facts = PeerFacts {
                left: record.state == MemberState::Left,
                alive: alive(&record, beating, now),
                disabled: false,
                name_conflict: conflicted.contains(&record.name),
                api_unreachable: !record.api.is_reachable(),
            };
            ClusterView {
                state: peer_state(facts),
                heartbeat_age: heartbeat_age(&record, beating, now),
                record,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleetbus_schemas::registry::ApiHealth;

    fn record(name: &str, id: &str, beat_secs_ago: i64, now: DateTime<Utc>) -> ClusterRecord {
        let json = serde_json::json!({
            "schema": "fleetbus.io/cluster/v1", "name": name, "clusterID": id,
            "state": "Active", "agentVersion": "0.1.0",
            "startedAt": "2026-11-27T00:00:00Z",
            "heartbeatAt": (now - chrono::Duration::seconds(beat_secs_ago)).to_rfc3339(),
            "heartbeatIntervalSeconds": 10, "seq": 1, "members": [],
        });
        ClusterRecord::decode(json.to_string().as_bytes()).unwrap()
    }

    #[test]
    fn one_vocabulary_from_records() {
        let now: DateTime<Utc> = "2026-11-27T01:00:00Z".parse().unwrap();
        let mut api_down = record("c", "3", 1, now);
        api_down.api = ApiHealth::unreachable("GET /readyz did not answer");
        let mut left = record("d", "4", 100, now);
        left.state = MemberState::Left;
        let records = vec![
            record("a", "1", 5, now),
            record("b", "2", 31, now),
            api_down,
            left,
            record("e", "5", 1, now),
            record("e", "6", 2, now),
            // A silent rival does not make the live claimant a Conflict.
            record("f", "7", 1, now),
            record("f", "8", 300, now),
        ];
        let states: Vec<(String, ClusterState)> = views(records, &Beats::new(), now)
            .into_iter()
            .map(|v| (v.record.name, v.state))
            .collect();
        use ClusterState::*;
        let want = [
            ("a", Ready),
            ("b", Disconnected),
            ("c", ApiUnreachable),
            ("d", Left),
            ("e", Conflict),
            ("e", Conflict),
            ("f", Ready),
            ("f", Disconnected),
        ];
        let want: Vec<(String, ClusterState)> =
            want.iter().map(|(n, s)| ((*n).to_owned(), *s)).collect();
        assert_eq!(states, want);
    }

    #[test]
    fn an_agent_that_beats_is_alive_while_its_beat_is_in_the_bucket() {
        let now: DateTime<Utc> = "2026-11-27T01:00:00Z".parse().unwrap();
        // Records of agents that beat are put on change only: old heartbeatAt.
        let beating_record = |name: &str, id: &str| ClusterRecord {
            certificate: None,
            beats: true,
            ..record(name, id, 3600, now)
        };
        let mut left = beating_record("d", "4");
        left.state = MemberState::Left;
        let records = vec![
            beating_record("a", "1"),
            beating_record("b", "2"),
            // An older agent (no beats) mixed in, during an upgrade.
            record("c", "3", 1, now),
            left,
            beating_record("e", "5"),
            beating_record("e", "6"),
        ];
        let stored = now - chrono::Duration::seconds(2);
        let beats: Beats = [("a", "1"), ("d", "4"), ("e", "5"), ("e", "6")]
            .iter()
            .map(|(n, i)| (((*n).to_owned(), (*i).to_owned()), stored))
            .collect();
        let views = views(records, &beats, now);
        let states: Vec<(&str, ClusterState)> = views
            .iter()
            .map(|v| (v.record.name.as_str(), v.state))
            .collect();
        use ClusterState::*;
        assert_eq!(
            states,
            [
                ("a", Ready),
                ("b", Disconnected),
                ("c", Ready),
                ("d", Left),
                ("e", Conflict),
                ("e", Conflict)
            ],
            "a present beat is alive whatever the record's age; an expired one is not; \
             a beat does not make a Left cluster alive"
        );
        assert_eq!(
            views[0].heartbeat_age,
            Some(std::time::Duration::from_secs(2)),
            "since the server stored the beat, not since the record changed"
        );
        assert_eq!(views[1].heartbeat_age, None, "no beat, no age");
        assert_eq!(
            views[2].heartbeat_age,
            Some(std::time::Duration::from_secs(1))
        );
    }

    /// With the fleet root known, a view shows what secure agents believe:
    /// a record signed under a certificate of the root, for its cluster;
    /// one unsigned, signed by another cluster's key or under a certificate
    /// of another root is left out and named; one under a revoked
    /// certificate counts as Left. Without the root, all are shown.
    #[test]
    fn records_are_checked_against_the_fleet_root() {
        use fleetbus_schemas::trust::{ClusterCertificate, ClusterKeys, SigningKey};
        let now: DateTime<Utc> = "2026-11-27T01:00:00Z".parse().unwrap();
        let root = SigningKey::from_bytes(&[7; 32]);
        let other_root = SigningKey::from_bytes(&[8; 32]);
        let keys = |n: u8| ClusterKeys::from_random([n; 32], [n + 100; 32]);
        let cert = |name: &str, k: &ClusterKeys, serial: u8, by: &SigningKey| {
            ClusterCertificate {
                cluster: name.to_owned(),
                signing_key: k.signing_public(),
                sealing_key: k.sealing_public(),
                not_before: now - chrono::Duration::days(1),
                not_after: now + chrono::Duration::days(365),
                serial: [serial; 16],
            }
            .sign(by)
        };
        let signed =
            |name: &str, k: &ClusterKeys, c: &fleetbus_schemas::trust::SignedCertificate| {
                let mut r = record(name, &format!("id-{name}"), 1, now);
                r.certificate = Some(c.encode());
                r.encode_signed(k.signing(), &c.cert.serial_hex()).unwrap()
            };
        let (ka, kb, kc, kd) = (keys(1), keys(2), keys(3), keys(4));
        let ca = cert("a", &ka, 1, &root);
        let cb = cert("b", &kb, 2, &root);
        let cd = cert("d", &kd, 4, &root);
        let raw = vec![
            ("cluster.a.id-a".to_owned(), signed("a", &ka, &ca)),
            // Unsigned.
            (
                "cluster.u.id-u".to_owned(),
                record("u", "id-u", 1, now).encode().unwrap(),
            ),
            // b's record signed with a's key under b's certificate.
            ("cluster.b.id-b".to_owned(), {
                let mut r = record("b", "id-b", 1, now);
                r.certificate = Some(cb.encode());
                r.encode_signed(ka.signing(), &cb.cert.serial_hex())
                    .unwrap()
            }),
            // A certificate of another root.
            (
                "cluster.c.id-c".to_owned(),
                signed("c", &kc, &cert("c", &kc, 3, &other_root)),
            ),
            // Revoked by the root.
            ("cluster.d.id-d".to_owned(), signed("d", &kd, &cd)),
        ];
        let revocation = |by: &SigningKey| {
            fleetbus_schemas::registry::RevokedRecord {
                name: "d".into(),
                serials: vec![cd.cert.serial_hex()],
                revoked_at: now,
            }
            .encode_signed(by)
            .unwrap()
        };
        let mut memo = Verdicts::default();
        let out = checked(
            raw.clone(),
            &[revocation(&root)],
            Some(&root.verifying_key()),
            now,
            &mut memo,
        );
        let shown: Vec<(&str, MemberState)> = out
            .records
            .iter()
            .map(|r| (r.name.as_str(), r.state))
            .collect();
        assert_eq!(
            shown,
            [("a", MemberState::Active), ("d", MemberState::Left)]
        );
        let left_out: Vec<&str> = out.unverified.iter().map(|u| u.key.as_str()).collect();
        assert_eq!(
            left_out,
            ["cluster.u.id-u", "cluster.b.id-b", "cluster.c.id-c"]
        );
        assert!(
            out.unverified[0].why.contains("unsigned"),
            "{:?}",
            out.unverified
        );
        // A revocation the root did not sign revokes nothing.
        let forged = checked(
            raw.clone(),
            &[revocation(&other_root)],
            Some(&root.verifying_key()),
            now,
            &mut memo,
        );
        assert!(forged
            .records
            .iter()
            .any(|r| r.name == "d" && r.state == MemberState::Active));
        // Without the root (an open fleet), every record is shown.
        assert_eq!(
            checked(raw.clone(), &[], None, now, &mut memo)
                .records
                .len(),
            5
        );
        // The memo: other bytes under a key are checked again (a's record
        // replaced by an unsigned one is left out), and a remembered
        // verdict still expires with its certificate.
        let root_key = root.verifying_key();
        let mut replaced = raw.clone();
        replaced[0].1 = record("a", "id-a", 1, now).encode().unwrap();
        let out = checked(replaced, &[], Some(&root_key), now, &mut memo);
        assert!(out.records.iter().all(|r| r.name != "a"), "{out:?}");
        let later = now + chrono::Duration::days(400);
        let out = checked(raw.clone(), &[], Some(&root_key), later, &mut memo);
        assert!(out.records.is_empty(), "{out:?}");
        assert!(out.unverified[0].why.contains("expired"), "{out:?}");
        // Not valid yet by this clock is not remembered: valid a moment on.
        let mut fresh = Verdicts::default();
        let early = now - chrono::Duration::days(2);
        let a = vec![raw[0].clone()];
        let out = checked(a.clone(), &[], Some(&root_key), early, &mut fresh);
        assert!(out.records.is_empty(), "{out:?}");
        let out = checked(a, &[], Some(&root_key), now, &mut fresh);
        assert_eq!(out.records.len(), 1, "{out:?}");
        // A's valid record stored under b's key: agents refuse it, so does the view.
        let moved = vec![("cluster.b.id-b".to_owned(), raw[0].1.clone())];
        let out = checked(moved, &[], Some(&root_key), now, &mut fresh);
        assert!(out.records.is_empty(), "{out:?}");
        assert!(out.unverified[0].why.contains("not its key's"), "{out:?}");
    }
}
