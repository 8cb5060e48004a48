//! This cluster's ownership-mark key (what it is for: `sync::model::mark`):
//! the Secret `fleetbus-copy-mark` in the agent's namespace, made at the
//! agent's first start and read at every start after.
//!
//! Its `creationTimestamp` is the moment marks began on this cluster: an
//! unmarked object with an earlier agent's whole stamp, created before it,
//! is an earlier agent's copy. Deleting the Secret makes a new key at the
//! next start: marked copies then verify no longer, and only those created
//! before the new key and carrying the whole earlier stamp are taken up
//! again (the rest are reported as conflicts, never deleted); SECURITY.md
//! says what an operator does then.

use fleetbus_schemas::well_known;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::ByteString;
use kube::api::{Api, ObjectMeta, PostParams};
use rand::RngCore;

use crate::mark::CopyMark;

/// The Secret's name, in the agent's namespace.
pub const SECRET_NAME: &str = "fleetbus-copy-mark";

/// The data key holding the 32-byte key.
const DATA_KEY: &str = "key";

/// Why the key could not be had.
#[derive(Debug, thiserror::Error)]
pub enum CopyMarkError {
    /// Reading or creating the Secret failed.
    #[error("failed to read or create the Secret {namespace}/{SECRET_NAME}")]
    Kube {
        /// The agent's namespace.
        namespace: String,
        /// Cause.
        #[source]
        source: kube::Error,
    },
    /// The Secret exists but holds no usable key: never replaced silently,
    /// since a new key unmarks every copy made under the old one.
    #[error("the Secret {0}/{SECRET_NAME} holds no 32-byte `{DATA_KEY}`: restore it, or delete it to make a new key (see SECURITY.md, the ownership mark)")]
    Malformed(String),
}

impl CopyMarkError {
    /// Whether trying again later can help.
    pub fn is_transient(&self) -> bool {
        match self {
            CopyMarkError::Kube { source, .. } => crate::kube::client::is_transient(source),
            CopyMarkError::Malformed(_) => false,
        }
    }
}

/// Reads this cluster's key, making it if there is none yet.
#[tracing::instrument(skip(client))]
pub async fn load(client: &kube::Client, namespace: &str) -> Result<CopyMark, CopyMarkError> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let kube_err = |source| CopyMarkError::Kube {
        namespace: namespace.to_owned(),
        source,
    };
    // Twice at most: another start of this agent may create it between our
    // read and our create (409), and then we read what it made.
    for _ in 0..2 {
        if let Some(secret) = api.get_opt(SECRET_NAME).await.map_err(kube_err)? {
            return parse(&secret).ok_or_else(|| CopyMarkError::Malformed(namespace.to_owned()));
        }
        let mut key = [0u8; 32];
        rand::rng().fill_bytes(&mut key);
        match api
            .create(&PostParams::default(), &secret(namespace, &key))
            .await
        {
            Ok(made) => {
                tracing::info!(namespace, "made this cluster's copy-mark key");
                // The server's creation time, not ours: it is what copies'
                // creationTimestamps are compared with.
                return parse(&made).ok_or_else(|| CopyMarkError::Malformed(namespace.to_owned()));
            }
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(e) => return Err(kube_err(e)),
        }
    }
    Err(CopyMarkError::Malformed(namespace.to_owned()))
}

/// A key for this run only, when none can be read or stored (the agent's
/// namespace is being deleted, or RBAC refuses the Secret): sync goes on.
/// Its time is now, so copies older than it with the whole earlier stamp
/// are still taken up; copies marked under it are, after the next start
/// with a stored key, older than that key and taken up the same way.
pub fn ephemeral() -> CopyMark {
    let mut key = [0u8; 32];
    rand::rng().fill_bytes(&mut key);
    // Whole seconds, as a stored key's creationTimestamp: an object of this
    // very second is not taken for older.
    use chrono::SubsecRound as _;
    CopyMark::new(key, Some(chrono::Utc::now().trunc_subsecs(0)))
}

fn secret(namespace: &str, key: &[u8; 32]) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(SECRET_NAME.to_owned()),
            namespace: Some(namespace.to_owned()),
            labels: Some(
                [(
                    well_known::LABEL_MANAGED_BY.to_owned(),
                    well_known::MANAGED_BY_AGENT.to_owned(),
                )]
                .into(),
            ),
            ..ObjectMeta::default()
        },
        // Its own type (immutable once created): never published by a rule
        // that selects Secrets here (`sync::withheld`).
        type_: Some(well_known::SECRET_TYPE_COPY_MARK_KEY.to_owned()),
        data: Some([(DATA_KEY.to_owned(), ByteString(key.to_vec()))].into()),
        ..Secret::default()
    }
}

fn parse(secret: &Secret) -> Option<CopyMark> {
    let bytes = secret.data.as_ref()?.get(DATA_KEY)?;
    let key: [u8; 32] = bytes.0.as_slice().try_into().ok()?;
    let since = secret
        .metadata
        .creation_timestamp
        .as_ref()
        .and_then(|t| chrono::DateTime::from_timestamp(t.0.as_second(), 0));
    Some(CopyMark::new(key, since))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_read_back_from_the_secret_it_is_stored_in() {
        let s = secret("fleetbus-system", &[3; 32]);
        assert!(parse(&s).is_some());
        assert_eq!(
            s.type_.as_deref(),
            Some(well_known::SECRET_TYPE_COPY_MARK_KEY)
        );
        let mut short = s.clone();
        short.data = Some([(DATA_KEY.to_owned(), ByteString(vec![1; 16]))].into());
        assert!(parse(&short).is_none(), "a short key is refused");
        let mut empty = s;
        empty.data = None;
        assert!(parse(&empty).is_none());
    }
}
