//! What the bridge knows of the fleet, read from the registry and beats
//! buckets every `--fleet-interval` without a consumer (`kv::listed`): each
//! cluster's health (its changes are notifications, [`Health`]), its labels
//! (what targets' `clusterSelector` matches) and, with the fleet root known
//! (`--dir` holding `root.pub`), the signing key of each cluster whose
//! record verifies: an event its cluster did not sign is not sent.

use std::collections::{BTreeMap, BTreeSet};

use chrono::Utc;
use fleetbus_schemas::subject::Prefix;
use tokio::time::{Duration, Instant};

use super::transitions::Health;
use super::Notification;
use crate::fleet::Verdicts;
use crate::kv::ReadError;
use crate::signers::{NotSigned, Signers};

/// How soon an event of a cluster the bridge does not know may read the
/// registry again (a cluster that joined since the last read).
const REREAD: Duration = Duration::from_secs(2);

/// The fleet as the bridge last read it.
pub(super) struct FleetWatch {
    js: async_nats::jetstream::Context,
    prefix: Prefix,
    verdicts: Verdicts,
    /// None without the fleet root: nothing is checked.
    signers: Option<Signers>,
    labels: BTreeMap<String, BTreeMap<String, String>>,
    health: Health,
    read_at: Option<Instant>,
    /// Health changes found by a read an event asked for, not sent yet.
    pending: Vec<Notification>,
    /// The registry keys that did not verify at the last read (each is
    /// warned about once, until it verifies or goes).
    unverified: BTreeSet<String>,
}

impl FleetWatch {
    pub(super) fn new(js: &async_nats::jetstream::Context, prefix: &Prefix) -> Self {
        Self {
            js: js.clone(),
            prefix: prefix.clone(),
            verdicts: Verdicts::default(),
            signers: None,
            labels: BTreeMap::new(),
            health: Health::default(),
            read_at: None,
            pending: Vec::new(),
            unverified: BTreeSet::new(),
        }
    }

    /// Reads the registry and beats again; returns the health changes since
    /// the last read (and those a read for an event found).
    pub(super) async fn refresh(&mut self) -> Result<Vec<Notification>, ReadError> {
        self.read().await?;
        Ok(std::mem::take(&mut self.pending))
    }

    async fn read(&mut self) -> Result<(), ReadError> {
        self.read_at = Some(Instant::now());
        let records =
            crate::fleet::read_records(&self.js, &self.prefix, Some(&mut self.verdicts)).await?;
        for u in &records.unverified {
            if !self.unverified.contains(&u.key) {
                tracing::warn!(key = %u.key, why = %u.why, "a registry record does not verify: left out");
            }
        }
        self.unverified = records.unverified.iter().map(|u| u.key.clone()).collect();
        let beats = crate::fleet::beating(&self.js, &self.prefix).await?;
        self.signers = crate::command::fleet_root().map(|_| records.signers.clone());
        self.labels = records
            .records
            .iter()
            .map(|r| (r.name.clone(), r.labels.clone()))
            .collect();
        let views = crate::fleet::views(records.records, &beats, Utc::now());
        let changes = self.health.update(&views);
        self.pending.extend(changes);
        Ok(())
    }

    /// The labels of `cluster` (empty when unknown).
    pub(super) fn labels(&self, cluster: &str) -> BTreeMap<String, String> {
        self.labels.get(cluster).cloned().unwrap_or_default()
    }

    /// Whether `bytes`, claimed by `cluster` (its subject or key names it), is
    /// signed by it; always with no fleet root. A cluster not known, or a
    /// signature that does not verify (a cluster that joined again or got a
    /// new certificate since), reads the registry again first, at most every
    /// [`REREAD`]. The refusal says whether it is final: judged on a read of
    /// the registry made for it, or unsigned.
    pub(super) async fn check(&mut self, cluster: &str, bytes: &[u8]) -> Result<(), Refusal> {
        if crate::command::fleet_root().is_none() {
            return Ok(());
        }
        let first = self.check_read(cluster, bytes);
        match first {
            Ok(()) => Ok(()),
            Err(why @ NotSigned::Unsigned) => Err(Refusal { why, last: true }),
            Err(why) if self.read_at.is_some_and(|at| at.elapsed() < REREAD) => {
                Err(Refusal { why, last: false })
            }
            Err(why) => match self.read().await {
                Ok(()) => self
                    .check_read(cluster, bytes)
                    .map_err(|why| Refusal { why, last: true }),
                Err(error) => {
                    tracing::warn!(error = %error, "reading the registry to check a message");
                    Err(Refusal { why, last: false })
                }
            },
        }
    }

    /// [`Self::check`] against the registry as last read.
    fn check_read(&self, cluster: &str, bytes: &[u8]) -> Result<(), NotSigned> {
        match &self.signers {
            Some(signers) => signers.check(cluster, bytes),
            None => Err(NotSigned::UnknownCluster(cluster.to_owned())),
        }
    }
}

/// Why a message is not (yet) sent.
#[derive(Debug)]
pub(super) struct Refusal {
    /// What the check found.
    pub(super) why: NotSigned,
    /// Final: the message is not sent. Else it is tried again once the
    /// registry may be read again (it may be from a cluster that joined, or
    /// got a new certificate, since the last read).
    pub(super) last: bool,
}
