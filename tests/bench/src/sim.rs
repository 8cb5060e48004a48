//! Simulated fleet members: what an agent puts on the bus about itself,
//! without the agent. Each simulated peer has a record in the registry
//! bucket (with the members list a real record carries, put again at every
//! growth step as a join makes real agents do) and beats in the beats
//! bucket at the interval the fleet's size calls for, with their TTL
//! (PROTOCOL §5.1, §5.4). Used by the scenarios that put one real agent
//! among many clusters (registry, placement).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream;
use async_nats::HeaderMap;
use fleetbus_schemas::registry::{
    beat_interval, beat_ttl, BeatRecord, ClusterRecord, MemberSet, MemberState, RegistryKey,
};

/// The agents' default `--heartbeat-interval` (the base of the beat interval).
pub const BASE: Duration = Duration::from_secs(2);
/// Beats of the simulator awaiting their publish-ack at once.
const BEATS_IN_FLIGHT: usize = 64;
/// The registry bucket (default prefix).
pub const REGISTRY_BUCKET: &str = "fleetbus-registry";
/// The beats bucket (default prefix).
pub const BEATS_BUCKET: &str = "fleetbus-beats";

/// The simulated peers: names, whether each still beats, the run they belong to.
pub struct Sim {
    js: jetstream::Context,
    /// The real agents of the fleet (in every record's members list).
    real: Vec<String>,
    /// The labels of the i-th simulated peer.
    labels: fn(usize) -> BTreeMap<String, String>,
    peers: Mutex<Vec<(String, bool)>>,
    interval: Mutex<Duration>,
    started_at: chrono::DateTime<chrono::Utc>,
    seq: AtomicU64,
    /// Bytes of the last beat on the wire (subject, header, payload).
    beat_bytes: AtomicUsize,
}

impl Sim {
    /// No peers yet; `real` are the real agents' names, `labels` gives the
    /// i-th peer's Cluster labels.
    pub fn new(
        js: jetstream::Context,
        real: &[&str],
        labels: fn(usize) -> BTreeMap<String, String>,
    ) -> Self {
        Self {
            js,
            real: real.iter().map(|s| (*s).to_owned()).collect(),
            labels,
            peers: Mutex::new(Vec::new()),
            interval: Mutex::new(BASE),
            started_at: chrono::Utc::now(),
            seq: AtomicU64::new(0),
            beat_bytes: AtomicUsize::new(0),
        }
    }

    /// The name of the i-th simulated peer.
    pub fn name(i: usize) -> String {
        format!("sim-{i:04}")
    }

    /// The cluster id of peer `name`.
    pub fn id(name: &str) -> String {
        format!("{name}-id")
    }

    /// The key of `name`'s beat in the beats bucket.
    pub fn beat_key(name: &str) -> String {
        RegistryKey::beat(name, &Self::id(name)).to_key()
    }

    fn next_seq(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// How many peers were added so far.
    pub fn len(&self) -> usize {
        self.peers.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Whether no peer was added yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes of the last beat on the wire.
    pub fn beat_bytes(&self) -> usize {
        self.beat_bytes.load(Ordering::Relaxed)
    }

    /// Adds peers up to `n` and puts every record again (a join changes
    /// every agent's members list, so every agent puts its record).
    pub async fn grow_to(&self, n: usize) -> anyhow::Result<()> {
        let names: Vec<String> = {
            let mut peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
            while peers.len() < n {
                let name = Self::name(peers.len());
                peers.push((name, true));
            }
            peers.iter().map(|(n, _)| n.clone()).collect()
        };
        *self.interval.lock().unwrap_or_else(|p| p.into_inner()) =
            beat_interval(BASE, n + self.real.len());
        let members = MemberSet::new(
            names
                .iter()
                .map(String::as_str)
                .chain(self.real.iter().map(String::as_str)),
        );
        let kv = self.js.get_key_value(REGISTRY_BUCKET).await?;
        for (i, name) in names.iter().enumerate() {
            let r = self.record(name, (self.labels)(i), &members);
            kv.put(
                RegistryKey::cluster(name, &Self::id(name)).to_key(),
                r.encode()?.into(),
            )
            .await?;
        }
        Ok(())
    }

    fn record(
        &self,
        name: &str,
        labels: BTreeMap<String, String>,
        members: &MemberSet,
    ) -> ClusterRecord {
        let now = chrono::Utc::now();
        let mut r = ClusterRecord {
            fitness: false,
            unserved_kinds: Vec::new(),
            certificate: None,
            name: name.to_owned(),
            cluster_id: Self::id(name),
            state: MemberState::Active,
            labels,
            kubernetes_api_endpoints: vec![],
            metadata: Default::default(),
            features: vec![],
            agent_version: "bench".into(),
            protocol: fleetbus_schemas::registry::PROTOCOL_VERSION,
            started_at: self.started_at,
            heartbeat_at: now,
            heartbeat_interval_seconds: 2,
            seq: self.next_seq(),
            members: Vec::new(),
            members_digest: None,
            api: Default::default(),
            beats: true,
        };
        // As an agent announces them (PROTOCOL §5.1).
        r.set_members(members);
        r
    }

    /// Puts one beat of `name`, as an agent does (a KV put with `Nats-TTL`).
    async fn beat(&self, name: &str, interval: Duration) -> anyhow::Result<()> {
        let body = BeatRecord {
            seq: self.next_seq(),
            started_at: self.started_at,
            interval_ms: u64::try_from(interval.as_millis())?,
        }
        .encode()?;
        let subject = format!("$KV.{BEATS_BUCKET}.{}", Self::beat_key(name));
        let ttl = beat_ttl(interval).as_secs().to_string();
        let mut headers = HeaderMap::new();
        headers.insert("Nats-TTL", ttl.as_str());
        // NATS/1.0\r\n + "Nats-TTL: <ttl>\r\n" + \r\n, subject, payload.
        let wire = 10 + 12 + ttl.len() + 2 + subject.len() + body.len();
        self.beat_bytes.store(wire, Ordering::Relaxed);
        self.js
            .publish_with_headers(subject, headers, body.into())
            .await?
            .await?;
        Ok(())
    }

    /// Beats every live peer once per interval, spread evenly over it. Each
    /// beat is its own task (at most [`BEATS_IN_FLIGHT`] at once), so a slow
    /// publish-ack does not hold back the next peer's beat: N agents beat
    /// independently. The schedule is absolute, so pacing does not drift.
    pub async fn run(self: Arc<Self>) {
        let in_flight = Arc::new(tokio::sync::Semaphore::new(BEATS_IN_FLIGHT));
        let mut next = 0usize;
        let mut at = tokio::time::Instant::now();
        loop {
            let (target, count, interval) = {
                let peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
                let interval = *self.interval.lock().unwrap_or_else(|p| p.into_inner());
                let count = peers.len().max(1);
                let i = next % count;
                next = next.wrapping_add(1);
                (
                    peers.get(i).filter(|p| p.1).map(|p| p.0.clone()),
                    count,
                    interval,
                )
            };
            if let Some(name) = target {
                let Ok(permit) = in_flight.clone().acquire_owned().await else {
                    return;
                };
                let sim = self.clone();
                tokio::spawn(async move {
                    if let Err(e) = sim.beat(&name, interval).await {
                        eprintln!("fleetbus-bench: beat of {name} failed: {e:#}");
                    }
                    drop(permit);
                });
            }
            // Pacing, not waiting: N peers' beats spread evenly over one interval,
            // as N real agents would send them.
            // Behind by more than an interval (a stalled machine): skip, as a
            // late agent would, rather than burst to catch up.
            at += interval / u32::try_from(count).unwrap_or(u32::MAX);
            if let Some(floor) = tokio::time::Instant::now().checked_sub(interval) {
                at = at.max(floor);
            }
            tokio::time::sleep_until(at).await;
        }
    }

    /// Stops the beats of the first live peer; returns its name.
    pub fn kill_one(&self) -> Option<String> {
        let mut peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        let p = peers.iter_mut().find(|p| p.1)?;
        p.1 = false;
        Some(p.0.clone())
    }

    /// Stops the beats of peer `name`; false if it is unknown or silent already.
    pub fn kill(&self, name: &str) -> bool {
        let mut peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        match peers.iter_mut().find(|p| p.0 == name && p.1) {
            Some(p) => {
                p.1 = false;
                true
            }
            None => false,
        }
    }
}
