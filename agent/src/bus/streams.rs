//! The fleetbus streams: created from the schemas layout at start-up, checked when they exist.
//!
//! Every agent runs this, in any order and possibly at the same moment, so
//! creation is idempotent: a stream that exists with the same settings is
//! reused, one with different settings stops start-up with every differing
//! field named (a fleet whose agents disagree on the layout would lose data
//! silently, e.g. drift events expiring earlier than some agents expect).

use std::fmt;
use std::time::Duration;

use async_nats::jetstream::context::{CreateStreamErrorKind, GetStreamErrorKind};
use async_nats::jetstream::stream::{self, DiscardPolicy, StorageType};
use async_nats::jetstream::{self, ErrorCode};
use fleetbus_schemas::jetstream::{Discard, Layout, Storage, StreamSpec};

/// Failure to create or check a stream.
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    /// The stream exists with settings that differ from the layout in fields that matter.
    #[error("stream {stream} exists with a different configuration: {}", render(.diffs))]
    Mismatch {
        /// Stream name.
        stream: String,
        /// Each differing field.
        diffs: Vec<FieldDiff>,
    },
    /// Reading the stream's configuration failed.
    #[error("failed to read stream {stream}")]
    Get {
        /// Stream name.
        stream: String,
        /// Cause.
        #[source]
        source: jetstream::context::GetStreamError,
    },
    /// Creating the stream failed (not because it exists).
    #[error("failed to create stream {stream}")]
    Create {
        /// Stream name.
        stream: String,
        /// Cause.
        #[source]
        source: jetstream::context::CreateStreamError,
    },
}

impl StreamError {
    /// Whether trying again later can help: a mismatch needs an operator, the
    /// rest are requests that may time out while NATS is (re)starting.
    pub fn is_transient(&self) -> bool {
        match self {
            StreamError::Mismatch { .. } => false,
            StreamError::Get { source, .. } => !matches!(
                source.kind(),
                GetStreamErrorKind::EmptyName | GetStreamErrorKind::InvalidStreamName
            ),
            // A single server never gains replicas; waiting cannot help.
            StreamError::Create { source, .. } => {
                !matches!(
                    source.kind(),
                    CreateStreamErrorKind::EmptyStreamName
                        | CreateStreamErrorKind::InvalidStreamName
                ) && !is_code(source, ErrorCode::STREAM_REPLICAS_NOT_SUPPORTED)
            }
        }
    }
}

/// One field of an existing stream that differs from the layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldDiff {
    /// Field name as NATS calls it in the stream config (`max_age`, `subjects`, ...).
    pub field: &'static str,
    /// What the layout asks for.
    pub expected: String,
    /// What the server has.
    pub found: String,
}

impl fmt::Display for FieldDiff {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} (expected {}, found {})",
            self.field, self.expected, self.found
        )
    }
}

fn render(diffs: &[FieldDiff]) -> String {
    diffs
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The async-nats form of a schemas stream spec. Limits the spec leaves open
/// (messages, consumers) stay at the NATS default: unlimited.
pub fn stream_config(spec: &StreamSpec) -> stream::Config {
    stream::Config {
        name: spec.name.clone(),
        description: Some(spec.description.clone()),
        subjects: spec.subjects.clone(),
        max_messages_per_subject: spec.max_msgs_per_subject,
        max_bytes: spec.max_bytes,
        // Zero is how NATS spells "no age limit".
        max_age: spec.max_age.unwrap_or(Duration::ZERO),
        duplicate_window: spec.duplicate_window,
        allow_rollup: spec.allow_rollup,
        allow_direct: spec.allow_direct,
        deny_delete: spec.deny_delete,
        deny_purge: spec.deny_purge,
        discard: match spec.discard {
            Discard::Old => DiscardPolicy::Old,
            Discard::New => DiscardPolicy::New,
        },
        num_replicas: spec.replicas,
        storage: match spec.storage {
            Storage::File => StorageType::File,
            Storage::Memory => StorageType::Memory,
        },
        retention: stream::RetentionPolicy::Limits,
        ..stream::Config::default()
    }
}

/// `found` with the size limits of `expected` where `found` has none: a
/// stream created before the layout bounded it (the drift stream before it
/// had byte and per-subject limits) gets them on the next agent start. A limit
/// an operator set (any other value) is left alone: the byte limit is theirs
/// to tune, and a per-subject limit that differs is reported by [`compare`].
pub fn with_layout_limits(expected: &stream::Config, found: &stream::Config) -> stream::Config {
    let mut upgraded = found.clone();
    let unlimited = |v: i64| v <= 0;
    if unlimited(found.max_bytes) && !unlimited(expected.max_bytes) {
        upgraded.max_bytes = expected.max_bytes;
    }
    if unlimited(found.max_messages_per_subject) && !unlimited(expected.max_messages_per_subject) {
        upgraded.max_messages_per_subject = expected.max_messages_per_subject;
    }
    upgraded
}

/// The fields that matter: those that change what is kept, for how long, or
/// what clients may do. Description, the byte limit (see
/// [`with_layout_limits`]) and server-filled fields (metadata, compression
/// defaults) are not compared, so an operator may tune them.
pub fn compare(expected: &stream::Config, found: &stream::Config) -> Vec<FieldDiff> {
    let mut diffs = Vec::new();
    let mut check = |field: &'static str, e: String, f: String| {
        if e != f {
            diffs.push(FieldDiff {
                field,
                expected: e,
                found: f,
            });
        }
    };
    let sorted = |s: &[String]| {
        let mut v = s.to_vec();
        v.sort();
        format!("{v:?}")
    };
    check(
        "subjects",
        sorted(&expected.subjects),
        sorted(&found.subjects),
    );
    // A per-subject limit where this revision's layout sets none is a later
    // revision's, applied in place by its `with_layout_limits`: refusing it
    // would stop every older agent that restarts during a rolling upgrade
    // (PROTOCOL §7.1), as the drift stream's limits once did.
    if !(expected.max_messages_per_subject <= 0 && found.max_messages_per_subject > 0) {
        check(
            "max_msgs_per_subject",
            expected.max_messages_per_subject.to_string(),
            found.max_messages_per_subject.to_string(),
        );
    }
    check("max_age", age(expected.max_age), age(found.max_age));
    check(
        "duplicate_window",
        humantime::format_duration(expected.duplicate_window).to_string(),
        humantime::format_duration(found.duplicate_window).to_string(),
    );
    check(
        "storage",
        format!("{:?}", expected.storage),
        format!("{:?}", found.storage),
    );
    check(
        "replicas",
        expected.num_replicas.max(1).to_string(),
        found.num_replicas.max(1).to_string(),
    );
    check(
        "allow_rollup",
        expected.allow_rollup.to_string(),
        found.allow_rollup.to_string(),
    );
    check(
        "allow_direct",
        expected.allow_direct.to_string(),
        found.allow_direct.to_string(),
    );
    check(
        "deny_delete",
        expected.deny_delete.to_string(),
        found.deny_delete.to_string(),
    );
    check(
        "discard",
        format!("{:?}", expected.discard),
        format!("{:?}", found.discard),
    );
    diffs
}

fn age(d: Duration) -> String {
    if d.is_zero() {
        "unlimited".to_owned()
    } else {
        humantime::format_duration(d).to_string()
    }
}

/// Creates every stream of `layout` that is missing and checks the others.
pub async fn ensure_streams(
    js: &jetstream::Context,
    layout: &Layout,
) -> Result<usize, StreamError> {
    let mut created = 0;
    for spec in layout.streams() {
        if ensure_stream(js, stream_config(&spec)).await? {
            created += 1;
        }
    }
    Ok(created)
}

/// Creates `config` if missing (returns true then); an existing stream is
/// compared field by field, and given the layout's limits it lacks.
#[tracing::instrument(skip_all, fields(stream = %config.name))]
pub async fn ensure_stream(
    js: &jetstream::Context,
    config: stream::Config,
) -> Result<bool, StreamError> {
    let name = config.name.clone();
    match existing(js, &name).await? {
        Some(found) => upgrade(js, &config, &found).await.map(|()| false),
        None => match js.create_stream(config.clone()).await {
            Ok(_) => {
                tracing::info!(replicas = config.num_replicas, "created stream");
                Ok(true)
            }
            // Another agent created it between our read and our create (NATS
            // accepts an identical create, so this means the configs differ or
            // the server is older): judge what is there now.
            Err(e) if is_code(&e, ErrorCode::STREAM_NAME_EXIST) => {
                tracing::debug!("stream created concurrently; checking it");
                match existing(js, &name).await? {
                    Some(found) => check(&config, &found).map(|()| false),
                    None => Err(StreamError::Create {
                        stream: name,
                        source: e,
                    }),
                }
            }
            Err(source) => Err(StreamError::Create {
                stream: name,
                source,
            }),
        },
    }
}

/// Checks an existing stream and, when nothing but missing limits differs,
/// applies them (an update NATS performs in place, keeping every message
/// within the new limits). A stream that differs otherwise is not touched.
/// A refused update (the per-cluster NATS users of `deploy/nats` may not
/// update streams) is a warning, not a stop: the stream works unbounded as
/// before until an operator applies the limits.
async fn upgrade(
    js: &jetstream::Context,
    expected: &stream::Config,
    found: &stream::Config,
) -> Result<(), StreamError> {
    let upgraded = with_layout_limits(expected, found);
    check(expected, &upgraded)?;
    if upgraded.max_bytes == found.max_bytes
        && upgraded.max_messages_per_subject == found.max_messages_per_subject
    {
        return Ok(());
    }
    match js.update_stream(&upgraded).await {
        Ok(_) => tracing::info!(
            max_bytes = upgraded.max_bytes,
            max_msgs_per_subject = upgraded.max_messages_per_subject,
            "applied the layout's limits to an existing stream"
        ),
        Err(error) => tracing::warn!(
            %error,
            max_bytes = upgraded.max_bytes,
            max_msgs_per_subject = upgraded.max_messages_per_subject,
            "could not apply the layout's limits to an existing stream; it stays unbounded \
             until an operator does (nats stream edit)"
        ),
    }
    Ok(())
}

fn check(expected: &stream::Config, found: &stream::Config) -> Result<(), StreamError> {
    let diffs = compare(expected, found);
    if diffs.is_empty() {
        tracing::debug!("stream exists with the expected configuration");
        Ok(())
    } else {
        Err(StreamError::Mismatch {
            stream: expected.name.clone(),
            diffs,
        })
    }
}

/// The stream's current configuration, `None` if there is no such stream.
async fn existing(
    js: &jetstream::Context,
    name: &str,
) -> Result<Option<stream::Config>, StreamError> {
    match js.get_stream(name).await {
        Ok(s) => Ok(Some(s.cached_info().config.clone())),
        Err(e) if matches!(e.kind(), GetStreamErrorKind::JetStream(j) if j.error_code() == ErrorCode::STREAM_NOT_FOUND) => {
            Ok(None)
        }
        Err(source) => Err(StreamError::Get {
            stream: name.to_owned(),
            source,
        }),
    }
}

fn is_code(e: &jetstream::context::CreateStreamError, code: ErrorCode) -> bool {
    matches!(e.kind(), CreateStreamErrorKind::JetStream(j) if j.error_code() == code)
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleetbus_schemas::jetstream::REPLICAS_CLUSTERED;

    #[test]
    fn conversion_carries_every_spec_field() {
        let layout = Layout::new(Default::default(), REPLICAS_CLUSTERED);
        for spec in layout.streams() {
            let c = stream_config(&spec);
            assert_eq!(c.name, spec.name);
            assert_eq!(c.description.as_deref(), Some(spec.description.as_str()));
            assert_eq!(c.subjects, spec.subjects);
            assert_eq!(c.max_messages_per_subject, spec.max_msgs_per_subject);
            assert_eq!(c.max_age, spec.max_age.unwrap_or_default());
            assert_eq!(c.duplicate_window, spec.duplicate_window);
            assert_eq!(c.allow_rollup, spec.allow_rollup);
            assert_eq!(c.allow_direct, spec.allow_direct);
            assert_eq!(c.deny_delete, spec.deny_delete);
            assert_eq!(c.deny_purge, spec.deny_purge);
            assert_eq!(c.num_replicas, 3);
            assert_eq!(c.storage, StorageType::File);
            assert_eq!(c.discard, DiscardPolicy::Old);
            assert_eq!(c.retention, stream::RetentionPolicy::Limits);
        }
        let drift = stream_config(&layout.drift_stream());
        assert_eq!(drift.name, "FLEETBUS_DRIFT");
        assert_eq!(drift.max_age, Duration::from_secs(7 * 24 * 3600));
        assert_eq!(drift.max_messages_per_subject, 1_000);
        assert_eq!(drift.max_bytes, 256 * 1024 * 1024);
        assert!(!drift.allow_direct);
        let objects = stream_config(&layout.objects_stream());
        assert_eq!(objects.max_age, Duration::ZERO);
        assert_eq!(objects.max_messages_per_subject, 1);
        assert_eq!(objects.max_bytes, -1);
    }

    #[test]
    fn missing_limits_are_added_and_an_operators_are_kept() {
        let expected = stream_config(&Layout::default().drift_stream());
        // The drift stream as agents before the limits created it.
        let mut old = expected.clone();
        old.max_bytes = -1;
        old.max_messages_per_subject = -1;
        assert!(!compare(&expected, &old).is_empty());
        let up = with_layout_limits(&expected, &old);
        assert_eq!(up.max_bytes, expected.max_bytes);
        assert_eq!(up.max_messages_per_subject, 1_000);
        assert!(compare(&expected, &up).is_empty());
        // An operator's byte limit stays; another per-subject limit is reported.
        let mut tuned = expected.clone();
        tuned.max_bytes = 1 << 30;
        tuned.max_messages_per_subject = 50;
        let up = with_layout_limits(&expected, &tuned);
        assert_eq!(up.max_bytes, 1 << 30);
        assert_eq!(compare(&expected, &up)[0].field, "max_msgs_per_subject");
        // Streams the layout leaves unbounded are not given limits.
        let objects = stream_config(&Layout::default().objects_stream());
        assert_eq!(with_layout_limits(&objects, &objects), objects);
    }

    #[test]
    fn a_per_subject_limit_a_later_revision_added_does_not_stop_an_older_agent() {
        // The drift stream as an agent before its limits expected it, and
        // as an agent with them left it.
        let mut older = stream_config(&Layout::default().drift_stream());
        older.max_bytes = -1;
        older.max_messages_per_subject = -1;
        let newer = stream_config(&Layout::default().drift_stream());
        assert!(compare(&older, &newer).is_empty());
        // Another limit than the layout's own is still reported.
        let mut tuned = newer.clone();
        tuned.max_messages_per_subject = 50;
        assert_eq!(compare(&newer, &tuned)[0].field, "max_msgs_per_subject");
    }

    #[test]
    fn memory_and_discard_new_convert() {
        let spec = StreamSpec {
            storage: Storage::Memory,
            discard: Discard::New,
            ..Layout::default().status_stream()
        };
        let c = stream_config(&spec);
        assert_eq!(c.storage, StorageType::Memory);
        assert_eq!(c.discard, DiscardPolicy::New);
    }

    #[test]
    fn identical_and_benign_differences_pass() {
        let expected = stream_config(&Layout::default().drift_stream());
        assert!(compare(&expected, &expected).is_empty());
        let mut found = expected.clone();
        found.description = Some("edited by an operator".into());
        found.max_bytes = 1 << 30;
        found.deny_purge = true;
        found.subjects.reverse();
        assert!(compare(&expected, &found).is_empty());
    }

    #[test]
    fn every_differing_field_is_named() {
        let expected = stream_config(&Layout::default().drift_stream());
        let mut found = expected.clone();
        found.max_age = Duration::from_secs(3600);
        found.subjects = vec!["other.>".into()];
        found.num_replicas = 3;
        found.storage = StorageType::Memory;
        found.allow_rollup = true;
        found.allow_direct = true;
        found.deny_delete = false;
        found.discard = DiscardPolicy::New;
        found.max_messages_per_subject = 5;
        found.duplicate_window = Duration::from_secs(1);
        let diffs = compare(&expected, &found);
        let fields: Vec<_> = diffs.iter().map(|d| d.field).collect();
        assert_eq!(
            fields,
            [
                "subjects",
                "max_msgs_per_subject",
                "max_age",
                "duplicate_window",
                "storage",
                "replicas",
                "allow_rollup",
                "allow_direct",
                "deny_delete",
                "discard"
            ]
        );
        let age = &diffs[2];
        assert_eq!((age.expected.as_str(), age.found.as_str()), ("7days", "1h"));
        let err = StreamError::Mismatch {
            stream: expected.name.clone(),
            diffs,
        };
        assert!(!err.is_transient());
        let text = err.to_string();
        assert!(text.starts_with("stream FLEETBUS_DRIFT exists"), "{text}");
        assert!(
            text.contains("max_age (expected 7days, found 1h)"),
            "{text}"
        );
    }

    #[test]
    fn unlimited_age_reads_as_such() {
        let expected = stream_config(&Layout::default().objects_stream());
        let mut found = expected.clone();
        found.max_age = Duration::from_secs(60);
        let d = compare(&expected, &found);
        assert_eq!(d[0].expected, "unlimited");
        assert_eq!(d[0].found, "1m");
    }
}
