//! Finding what a command reads on the bus (a stream, a KV bucket) and reading a whole
//! bucket (the registry for `clusters`, drift state for `drift ls`). A stream or bucket
//! that does not exist is its own error, naming the prefix: a wrong `--subject-prefix`
//! must not look like an empty fleet.

use async_nats::jetstream::context::GetStreamErrorKind;
use async_nats::jetstream::{self, ErrorCode};
use fleetbus_schemas::subject::Prefix;
use futures::TryStreamExt;

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
    let keys = kv
        .keys()
        .await
        .map_err(|e| unreadable(Box::new(e)))?
        .try_collect()
        .await
        .map_err(|e| unreadable(Box::new(e)))?;
    Ok((kv, keys))
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
