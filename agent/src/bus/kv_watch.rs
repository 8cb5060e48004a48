//! A KV bucket's last value of every key, then live changes, read through a
//! **pull** ordered consumer.
//!
//! async-nats' `Store::watch_with_history` creates a *push* consumer, whose
//! deliver subject the server takes from the request body and never checks
//! against the creator's publish permissions (nats-io/nats-server#8274). A
//! fleet whose streams live in an account of their own (SECURITY.md,
//! "Deliveries a member steers") delivers push consumers inside that
//! account, where no client is: a push watch would see nothing there. A pull
//! consumer's messages are the replies to the agent's own requests, which
//! come back to the agent's inbox in any layout, so every read of the agent
//! is a pull (the objects and status consumers already were).
//!
//! The entries are async-nats' own [`Entry`], built as its push watch builds
//! them: the key is the subject after the bucket's prefix, the revision the
//! stream sequence, the operation from the `KV-Operation` header (or the
//! server's marker reason for an expired key), `seen_current` from when
//! nothing was pending after a message.

use async_nats::jetstream::consumer::{pull::OrderedConfig, DeliverPolicy};
use async_nats::jetstream::kv::{Entry, Operation, Store};
use async_nats::HeaderMap;
use futures::{Stream, StreamExt};

/// What ended or refused a watch.
pub type WatchError = Box<dyn std::error::Error + Send + Sync>;

/// Every key's last value (`>`), then every change, in order.
pub async fn watch_all(
    store: &Store,
) -> Result<impl Stream<Item = Result<Entry, WatchError>> + Send + use<>, WatchError> {
    let consumer = store
        .stream
        .create_consumer(OrderedConfig {
            description: Some("fleetbus kv watch".to_owned()),
            filter_subject: format!("{}>", store.prefix),
            deliver_policy: DeliverPolicy::LastPerSubject,
            ..OrderedConfig::default()
        })
        .await?;
    let mut seen_current = consumer.cached_info().num_pending == 0;
    let (prefix, bucket) = (store.prefix.clone(), store.name.clone());
    let messages = consumer.messages().await?;
    Ok(messages.map(move |message| {
        let message = message?;
        let info = message.info()?;
        let key = message
            .subject
            .strip_prefix(prefix.as_str())
            .ok_or_else(|| format!("subject {} is not in bucket {bucket}", message.subject))?
            .to_owned();
        seen_current |= info.pending == 0;
        Ok(Entry {
            bucket: bucket.clone(),
            key,
            value: message.payload.clone(),
            revision: info.stream_sequence,
            delta: info.pending,
            created: info.published,
            operation: operation(message.headers.as_ref()),
            seen_current,
        })
    }))
}

/// A KV message's operation: its `KV-Operation` header, else the reason of a
/// server's marker (a key that expired or was removed), else a put (what
/// async-nats' own watch reads, an unknown value included).
fn operation(headers: Option<&HeaderMap>) -> Operation {
    let header = |name: &str| headers.and_then(|h| h.get(name)).map(|v| v.as_str());
    if let Some(op) = header("KV-Operation") {
        return op.parse().unwrap_or(Operation::Put);
    }
    match header("Nats-Marker-Reason") {
        Some("MaxAge" | "Purge") => Operation::Purge,
        Some("Remove") => Operation::Delete,
        _ => Operation::Put,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, *v);
        }
        h
    }

    #[test]
    fn operations_come_from_the_kv_header_or_the_servers_marker() {
        assert_eq!(operation(None), Operation::Put);
        let op = |pairs: &[(&str, &str)]| operation(Some(&headers(pairs)));
        assert_eq!(op(&[("KV-Operation", "DEL")]), Operation::Delete);
        assert_eq!(op(&[("KV-Operation", "PURGE")]), Operation::Purge);
        assert_eq!(op(&[("KV-Operation", "PUT")]), Operation::Put);
        assert_eq!(op(&[("Nats-Marker-Reason", "MaxAge")]), Operation::Purge);
        assert_eq!(op(&[("Nats-Marker-Reason", "Remove")]), Operation::Delete);
        assert_eq!(op(&[("Nats-TTL", "5s")]), Operation::Put);
    }
}
