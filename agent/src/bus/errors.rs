//! JetStream failures told apart by their typed kinds and server error codes, never by message text.

use async_nats::jetstream::context::{PublishError, PublishErrorKind};
use async_nats::jetstream::{self, ErrorCode};

/// Whether `error` (or any error in its source chain) says that no stream
/// holds the subject: the registry bucket or a stream was deleted under us.
///
/// A publish to a subject no stream listens on gets "no responders", which
/// async-nats reports as [`PublishErrorKind::StreamNotFound`]; a request to a
/// stream API that names a missing stream gets JetStream error code 10059.
pub fn is_stream_missing(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut current = Some(error);
    while let Some(e) = current {
        if let Some(p) = e.downcast_ref::<PublishError>() {
            if p.kind() == PublishErrorKind::StreamNotFound {
                return true;
            }
        }
        if let Some(j) = e.downcast_ref::<jetstream::Error>() {
            if j.error_code() == ErrorCode::STREAM_NOT_FOUND {
                return true;
            }
        }
        current = e.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use async_nats::jetstream::kv::{PutError, PutErrorKind};

    #[test]
    fn a_put_into_a_deleted_bucket_is_recognised_by_kind() {
        let put = PutError::with_source(
            PutErrorKind::Ack,
            PublishError::new(PublishErrorKind::StreamNotFound),
        );
        assert!(is_stream_missing(&put));
        let timeout = PutError::with_source(
            PutErrorKind::Ack,
            PublishError::new(PublishErrorKind::TimedOut),
        );
        assert!(!is_stream_missing(&timeout));
        assert!(!is_stream_missing(&PutError::new(PutErrorKind::InvalidKey)));
    }
}
