//! Keys of the cluster registry KV bucket.

use thiserror::Error;

use crate::subject::{decode_token, encode_token, Prefix, TokenError};

/// Suffix of the registry bucket name: `<prefix>-registry`, e.g. `fleetbus-registry`.
pub const REGISTRY_BUCKET_SUFFIX: &str = "registry";

/// Name of the registry KV bucket for a prefix (`fleetbus` -> `fleetbus-registry`).
pub fn registry_bucket(prefix: &Prefix) -> String {
    prefix.bucket_name(REGISTRY_BUCKET_SUFFIX)
}

/// Key filter matching every cluster record.
pub const ALL_CLUSTER_KEYS: &str = "cluster.>";
/// Key filter matching every published kubeconfig.
pub const ALL_KUBECONFIG_KEYS: &str = "kubeconfig.>";

/// A key of the registry bucket. Keyed by name AND cluster ID so that two agents claiming
/// one name with different IDs write different keys: neither overwrites the other, and
/// every member sees both records (a NameConflict).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RegistryKey {
    /// `cluster.<name>.<clusterID>`: a [`super::ClusterRecord`].
    Cluster {
        /// Cluster name.
        name: String,
        /// kube-system UID.
        cluster_id: String,
    },
    /// `kubeconfig.<name>.<clusterID>`: a [`super::KubeconfigRecord`].
    Kubeconfig {
        /// Cluster name.
        name: String,
        /// kube-system UID.
        cluster_id: String,
    },
    /// `beat.<name>.<clusterID>`: a [`super::BeatRecord`], in the beats
    /// bucket (never in the registry bucket).
    Beat {
        /// Cluster name.
        name: String,
        /// kube-system UID.
        cluster_id: String,
    },
}

/// A registry key that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RegistryKeyError {
    /// Not `cluster.<name>.<id>`, `kubeconfig.<name>.<id>` or `beat.<name>.<id>`.
    #[error(
        "registry key {0:?} is not cluster.<name>.<id>, kubeconfig.<name>.<id> or beat.<name>.<id>"
    )]
    Shape(String),
    /// A token does not decode.
    #[error("invalid token in registry key")]
    Token(#[source] TokenError),
}

impl RegistryKey {
    /// The key of a cluster record.
    pub fn cluster(name: &str, cluster_id: &str) -> Self {
        Self::Cluster {
            name: name.to_owned(),
            cluster_id: cluster_id.to_owned(),
        }
    }

    /// The key of a published kubeconfig.
    pub fn kubeconfig(name: &str, cluster_id: &str) -> Self {
        Self::Kubeconfig {
            name: name.to_owned(),
            cluster_id: cluster_id.to_owned(),
        }
    }

    /// The key of a beat (beats bucket).
    pub fn beat(name: &str, cluster_id: &str) -> Self {
        Self::Beat {
            name: name.to_owned(),
            cluster_id: cluster_id.to_owned(),
        }
    }

    /// The KV key, tokens escaped as in subjects (valid KV key and subject).
    pub fn to_key(&self) -> String {
        let (kind, name, id) = match self {
            Self::Cluster { name, cluster_id } => ("cluster", name, cluster_id),
            Self::Kubeconfig { name, cluster_id } => ("kubeconfig", name, cluster_id),
            Self::Beat { name, cluster_id } => ("beat", name, cluster_id),
        };
        format!("{kind}.{}.{}", encode_token(name), encode_token(id))
    }

    /// Inverse of [`RegistryKey::to_key`].
    pub fn parse(key: &str) -> Result<Self, RegistryKeyError> {
        let shape = || RegistryKeyError::Shape(key.to_owned());
        let mut parts = key.split('.');
        let (Some(kind), Some(name), Some(id), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(shape());
        };
        let name = decode_token(name).map_err(RegistryKeyError::Token)?;
        let cluster_id = decode_token(id).map_err(RegistryKeyError::Token)?;
        match kind {
            "cluster" => Ok(Self::Cluster { name, cluster_id }),
            "kubeconfig" => Ok(Self::Kubeconfig { name, cluster_id }),
            "beat" => Ok(Self::Beat { name, cluster_id }),
            _ => Err(shape()),
        }
    }

    /// Cluster name in the key.
    pub fn name(&self) -> &str {
        match self {
            Self::Cluster { name, .. }
            | Self::Kubeconfig { name, .. }
            | Self::Beat { name, .. } => name,
        }
    }

    /// Cluster ID in the key.
    pub fn cluster_id(&self) -> &str {
        match self {
            Self::Cluster { cluster_id, .. }
            | Self::Kubeconfig { cluster_id, .. }
            | Self::Beat { cluster_id, .. } => cluster_id,
        }
    }
}

/// Key filter for every cluster record claiming `name` (any cluster ID).
pub fn cluster_keys_for_name(name: &str) -> String {
    format!("cluster.{}.*", encode_token(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys() {
        let k = RegistryKey::cluster("east", "6f1c2d3e-0000-4a5b-9c8d-112233445566");
        assert_eq!(
            k.to_key(),
            "cluster.east.6f1c2d3e-0000-4a5b-9c8d-112233445566"
        );
        assert_eq!(RegistryKey::parse(&k.to_key()).unwrap(), k);
        let k = RegistryKey::kubeconfig("prod.eu", "x");
        assert_eq!(k.to_key(), "kubeconfig.=cHJvZC5ldQ.x");
        assert_eq!(RegistryKey::parse(&k.to_key()).unwrap(), k);
        assert_eq!(registry_bucket(&Prefix::default()), "fleetbus-registry");
        let k = RegistryKey::beat("east", "id-1");
        assert_eq!(k.to_key(), "beat.east.id-1");
        assert_eq!(RegistryKey::parse(&k.to_key()).unwrap(), k);
        assert_eq!(cluster_keys_for_name("east"), "cluster.east.*");
        assert!(matches!(
            RegistryKey::parse("cluster.a"),
            Err(RegistryKeyError::Shape(_))
        ));
        assert!(matches!(
            RegistryKey::parse("node.a.b"),
            Err(RegistryKeyError::Shape(_))
        ));
        assert!(matches!(
            RegistryKey::parse("cluster.a.b.c"),
            Err(RegistryKeyError::Shape(_))
        ));
        assert!(matches!(
            RegistryKey::parse("cluster.a:b.c"),
            Err(RegistryKeyError::Token(_))
        ));
    }
}
