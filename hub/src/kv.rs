//! Finding what a command reads on the bus (a stream, a KV bucket) and reading a whole
//! bucket (the registry for `clusters`, drift state for `drift ls`). A stream or bucket
//! that does not exist is its own error, naming the prefix: a wrong `--subject-prefix`
//! must not look like an empty fleet.

use async_nats::jetstream::consumer::{pull::OrderedConfig, DeliverPolicy};
use async_nats::jetstream::context::GetStreamErrorKind;
use async_nats::jetstream::kv::{Operation, Store};
use async_nats::jetstream::{self, ErrorCode};
use bytes::Bytes;
use fleetbus_schemas::subject::Prefix;
use futures::{Stream, StreamExt, TryStreamExt};

/// Any error of the bus calls, kept as the source.
type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Why a command could not read a stream or bucket. Messages are one line.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The stream or bucket does not exist for this prefix.
    #[error(
        "no {what} {name} for subject prefix {prefix:?} on this NATS (has an agent with \
         --subject-prefix {prefix} started?)"
    )]
    Missing {
        /// `stream` or `bucket`.
        what: &'static str,
        /// Its name.
        name: String,
        /// The `--subject-prefix` given.
        prefix: String,
    },
    /// It exists (or could not be looked up) and reading it failed.
    #[error("cannot read {what} {name}")]
    Unreadable {
        /// `stream` or `bucket`.
        what: &'static str,
        /// Its name.
        name: String,
        /// What the server or client reported.
        #[source]
        source: BoxError,
    },
}

/// The stream `name` of the fleet with `prefix`; [`ReadError::Missing`] if there is none.
pub(crate) async fn stream(
    js: &jetstream::Context,
    prefix: &Prefix,
    name: &str,
) -> Result<jetstream::stream::Stream, ReadError> {
    find(js, prefix, "stream", name, name).await
}

async fn find(
    js: &jetstream::Context,
    prefix: &Prefix,
    what: &'static str,
    name: &str,
    stream: &str,
) -> Result<jetstream::stream::Stream, ReadError> {
    match js.get_stream(stream).await {
        Ok(s) => Ok(s),
        Err(e)
            if matches!(e.kind(), GetStreamErrorKind::JetStream(j)
                if j.error_code() == ErrorCode::STREAM_NOT_FOUND) =>
        {
            Err(ReadError::Missing {
                what,
                name: name.to_owned(),
                prefix: prefix.to_string(),
            })
        }
        Err(e) => Err(ReadError::Unreadable {
            what,
            name: name.to_owned(),
            source: Box::new(e),
        }),
    }
}

/// The bucket `bucket` of the fleet with `prefix` and every key in it (live keys:
/// deleted ones are not listed); [`ReadError::Missing`] if there is no such bucket.
pub(crate) async fn keys(
    js: &jetstream::Context,
    prefix: &Prefix,
    bucket: &str,
) -> Result<(jetstream::kv::Store, Vec<String>), ReadError> {
    let (kv, _) = store(js, prefix, bucket).await?;
    let unreadable = |source: BoxError| unreadable_bucket(bucket, source);
    let (pending, changes) = watch(&kv, true).await.map_err(unreadable)?;
    let mut keys = Vec::new();
    if pending > 0 {
        let mut changes = std::pin::pin!(changes);
        while let Some(change) = changes.next().await {
            let change = change.map_err(unreadable)?;
            if change.operation == Operation::Put {
                keys.push(change.key);
            }
            if change.caught_up {
                break;
            }
        }
    }
    Ok((kv, keys))
}

/// One key's value or removal, as [`watch`] reads it.
pub(crate) struct Change {
    /// The key (the subject after the bucket's prefix).
    pub key: String,
    /// A put, or a delete or purge (a removed key).
    pub operation: Operation,
    /// The value of a put (empty with `headers_only`).
    pub value: Bytes,
    /// Nothing was pending after it: the last value of every key is read.
    pub caught_up: bool,
}

/// The last value of every key of `kv`, then every change, through a **pull**
/// ordered consumer, and how many were pending when it started (0: nothing will
/// say `caught_up` until a change). Not async-nats' `watch_with_history` or
/// `keys`: those create push consumers, which deliver nothing where the fleet's
/// streams live in an account of their own (SECURITY.md, "Deliveries a member
/// steers"); a pull's messages are replies to our own requests.
pub(crate) async fn watch(
    kv: &Store,
    headers_only: bool,
) -> Result<(u64, impl Stream<Item = Result<Change, BoxError>> + use<>), BoxError> {
    let consumer = kv
        .stream
        .create_consumer(OrderedConfig {
            filter_subject: format!("{}>", kv.prefix),
            deliver_policy: DeliverPolicy::LastPerSubject,
            headers_only,
            ..OrderedConfig::default()
        })
        .await?;
    let pending = consumer.cached_info().num_pending;
    let prefix = kv.prefix.clone();
    let changes = consumer.messages().await?.map(move |message| {
        let message = message?;
        let info = message.info()?;
        let key = message.subject.strip_prefix(prefix.as_str());
        let key = key.ok_or_else(|| format!("{} is not a key of the bucket", message.subject))?;
        let header = |name| message.headers.as_ref()?.get(name).map(|v| v.as_str());
        // What async-nats' watch reads: the KV header, else a server marker's reason.
        let operation = match (header("KV-Operation"), header("Nats-Marker-Reason")) {
            (Some(op), _) => op.parse().unwrap_or(Operation::Put),
            (None, Some("MaxAge" | "Purge")) => Operation::Purge,
            (None, Some("Remove")) => Operation::Delete,
            (None, _) => Operation::Put,
        };
        Ok(Change {
            key: key.to_owned(),
            operation,
            value: message.payload.clone(),
            caught_up: info.pending == 0,
        })
    });
    Ok((pending, changes))
}

/// [`keys`] without a consumer: the subjects the bucket's stream holds, from
/// its info (`STREAM.INFO` with a subjects filter), so that a reader that
/// polls (the dashboard every second, `fleetbus notify`) creates no consumer
/// and needs no consumer permission. Deleted and purged keys are listed too
/// (their marker is a message): a `get` of one answers None, as it does for
/// a key deleted after any listing. Used for the small buckets (registry,
/// beats), whose deleted keys are few.
pub(crate) async fn listed(
    js: &jetstream::Context,
    prefix: &Prefix,
    bucket: &str,
) -> Result<(jetstream::kv::Store, Vec<String>), ReadError> {
    let (kv, stream) = store(js, prefix, bucket).await?;
    let unreadable = |source: BoxError| unreadable_bucket(bucket, source);
    let head = format!("$KV.{bucket}.");
    let subjects: Vec<(String, usize)> = stream
        .info_with_subjects(format!("{head}>"))
        .await
        .map_err(|e| unreadable(Box::new(e)))?
        .try_collect()
        .await
        .map_err(|e| unreadable(Box::new(e)))?;
    let mut keys: Vec<String> = subjects
        .into_iter()
        .filter_map(|(subject, _)| subject.strip_prefix(&head).map(str::to_owned))
        .collect();
    keys.sort();
    Ok((kv, keys))
}

/// The bucket `bucket` of the fleet with `prefix` and its stream as it was looked up
/// (its cached info says how many messages it held then); [`ReadError::Missing`] if
/// there is no such bucket.
pub(crate) async fn store(
    js: &jetstream::Context,
    prefix: &Prefix,
    bucket: &str,
) -> Result<(jetstream::kv::Store, jetstream::stream::Stream), ReadError> {
    // A bucket is the stream KV_<bucket>: looking it up tells "missing" from "failed".
    let stream = find(js, prefix, "bucket", bucket, &format!("KV_{bucket}")).await?;
    let kv = js
        .get_key_value(bucket)
        .await
        .map_err(|e| unreadable_bucket(bucket, e))?;
    Ok((kv, stream))
}

/// The error for a read of one value of `bucket` that failed.
pub(crate) fn unreadable_bucket(bucket: &str, source: impl Into<BoxError>) -> ReadError {
    ReadError::Unreadable {
        what: "bucket",
        name: bucket.to_owned(),
        source: source.into(),
    }
}
