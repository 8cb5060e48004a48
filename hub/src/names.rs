//! Cluster names for a mesh: defaults, DNS-1123 validation, uniqueness.

use fleetbus_schemas::k8s_names::is_dns1123_label;

/// Clusters when neither `--clusters` nor `--names` is given.
pub const DEFAULT_CLUSTERS: u32 = 3;

/// Most clusters one local mesh starts, by `--clusters` or `--names` alike: one
/// devcluster and one agent each on one machine, and a letter each by default.
pub const MAX_CLUSTERS: u32 = 26;

/// Why a set of cluster names was rejected.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum NameError {
    /// A name is not a DNS-1123 label (it becomes a Kubernetes object name and a NATS subject token).
    #[error("cluster name {0:?} is not a DNS-1123 label (1-63 of a-z, 0-9, '-', alphanumeric at both ends)")]
    Invalid(String),
    /// The same name was given twice.
    #[error("cluster name {0:?} is given twice")]
    Duplicate(String),
    /// `--clusters` and the number of `--names` disagree.
    #[error("--clusters {clusters} but {names} names given")]
    CountMismatch {
        /// `--clusters`.
        clusters: u32,
        /// Number of `--names`.
        names: usize,
    },
    /// More clusters than [`MAX_CLUSTERS`], by `--clusters` or `--names`.
    #[error("at most {MAX_CLUSTERS} clusters, {0} asked")]
    TooMany(usize),
}

/// The cluster names to start: `names` if given (validated, and matching
/// `clusters` if that is given too), else `a`, `b`, ... for `clusters` (default 3).
pub fn cluster_names(
    clusters: Option<u32>,
    names: Option<&[String]>,
) -> Result<Vec<String>, NameError> {
    let Some(names) = names else {
        let n = clusters.unwrap_or(DEFAULT_CLUSTERS);
        if n > MAX_CLUSTERS {
            return Err(NameError::TooMany(n as usize));
        }
        return Ok((b'a'..)
            .take(n as usize)
            .map(|c| char::from(c).to_string())
            .collect());
    };
    if let Some(n) = clusters {
        if n as usize != names.len() {
            return Err(NameError::CountMismatch {
                clusters: n,
                names: names.len(),
            });
        }
    }
    if names.len() > MAX_CLUSTERS as usize {
        return Err(NameError::TooMany(names.len()));
    }
    let mut seen = std::collections::HashSet::new();
    for name in names {
        if !is_dns1123_label(name) {
            return Err(NameError::Invalid(name.clone()));
        }
        if !seen.insert(name.as_str()) {
            return Err(NameError::Duplicate(name.clone()));
        }
    }
    Ok(names.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn defaults_are_letters() {
        assert_eq!(cluster_names(None, None).unwrap(), v(&["a", "b", "c"]));
        assert_eq!(cluster_names(Some(2), None).unwrap(), v(&["a", "b"]));
        assert_eq!(cluster_names(Some(26), None).unwrap().last().unwrap(), "z");
        assert_eq!(cluster_names(Some(27), None), Err(NameError::TooMany(27)));
        let many: Vec<String> = (0..27).map(|i| format!("c{i}")).collect();
        assert_eq!(
            cluster_names(None, Some(&many)),
            Err(NameError::TooMany(27))
        );
        assert_eq!(cluster_names(None, Some(&many[..26])).unwrap().len(), 26);
    }

    #[test]
    fn names_are_validated() {
        assert_eq!(
            cluster_names(Some(2), Some(&v(&["east-1", "west"]))).unwrap(),
            v(&["east-1", "west"])
        );
        assert_eq!(cluster_names(None, Some(&v(&["x"]))).unwrap(), v(&["x"]));
        for bad in ["A", "-a", "a-", "", "a.b", "a_b", &"x".repeat(64)] {
            assert_eq!(
                cluster_names(None, Some(&v(&[bad]))),
                Err(NameError::Invalid(bad.to_string()))
            );
        }
    }

    #[test]
    fn duplicates_and_count_mismatch_are_rejected() {
        assert_eq!(
            cluster_names(None, Some(&v(&["a", "b", "a"]))),
            Err(NameError::Duplicate("a".into()))
        );
        assert_eq!(
            cluster_names(Some(3), Some(&v(&["a", "b"]))),
            Err(NameError::CountMismatch {
                clusters: 3,
                names: 2
            })
        );
    }
}
