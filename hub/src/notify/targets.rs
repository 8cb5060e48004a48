//! The targets file: where notifications go, in which format, and which ones.
//!
//! ```yaml
//! targets:
//! - name: ops
//!   format: slack              # slack | teams | json
//!   urlFile: /etc/fleetbus-notify/ops   # the webhook URL, e.g. a mounted Secret
//!   kinds: [drift]             # optional filters: empty lets everything through
//!   rules: [web]
//!   clusters: [b, c]
//!   minSeverity: warning       # info (default) | warning | critical
//! ```
//!
//! A webhook URL is a credential (whoever has it can post to the channel): it is
//! read from its own file, never from the targets file, and never printed, logged
//! or put in an error message.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use thiserror::Error;

use super::message::{Format, Notification, Severity};

/// The targets file could not be used.
#[derive(Debug, Error)]
pub enum TargetError {
    /// A file could not be read.
    #[error("cannot read {path}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The targets file is not valid.
    #[error("invalid targets file {path}")]
    Invalid {
        /// The file.
        path: String,
        /// What the reader said.
        #[source]
        source: fleetbus_schemas::yaml::YamlError,
    },
    /// Two targets have the same name (metrics and logs name targets).
    #[error("two targets are named {0:?}")]
    Duplicate(String),
    /// A target's URL file does not hold an http(s) URL (its content is not repeated).
    #[error("the URL file of target {0:?} does not hold an http:// or https:// URL")]
    Url(String),
}

/// A webhook URL: printed as `<redacted>`, so a log line or an error cannot leak it.
#[derive(Clone, PartialEq, Eq)]
pub struct WebhookUrl(http::Uri);

impl WebhookUrl {
    /// The URL, for the request only.
    pub fn uri(&self) -> &http::Uri {
        &self.0
    }
}

impl std::fmt::Debug for WebhookUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

/// Which notifications a target takes; an empty list does not filter.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    /// Kinds of event (`drift`).
    pub kinds: Vec<String>,
    /// Rule names.
    pub rules: Vec<String>,
    /// Cluster names.
    pub clusters: Vec<String>,
    /// The least severity sent.
    pub min_severity: Option<Severity>,
}

impl Filter {
    /// Whether `n` goes to the target.
    pub fn matches(&self, n: &Notification) -> bool {
        let takes = |list: &[String], v: &str| list.is_empty() || list.iter().any(|x| x == v);
        takes(&self.kinds, n.kind)
            && takes(&self.rules, &n.rule)
            && takes(&self.clusters, &n.cluster)
            && self.min_severity.is_none_or(|min| n.severity >= min)
    }
}

/// One webhook.
#[derive(Debug, Clone)]
pub struct Target {
    /// Its name, in logs and metrics.
    pub name: String,
    /// The message shape it expects.
    pub format: Format,
    /// Where to post.
    pub url: WebhookUrl,
    /// What it takes.
    pub filter: Filter,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    targets: Vec<FileTarget>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FileTarget {
    name: String,
    format: Format,
    url_file: PathBuf,
    #[serde(default)]
    kinds: Vec<String>,
    #[serde(default)]
    rules: Vec<String>,
    #[serde(default)]
    clusters: Vec<String>,
    #[serde(default)]
    min_severity: Option<Severity>,
}

fn read(path: &Path) -> Result<String, TargetError> {
    std::fs::read_to_string(path).map_err(|source| TargetError::Read {
        path: path.display().to_string(),
        source,
    })
}

/// Reads the targets file at `path` and each target's URL file (relative paths
/// are taken from the targets file's directory).
pub fn load_targets(path: &Path) -> Result<Vec<Target>, TargetError> {
    let file: File =
        fleetbus_schemas::yaml::from_str(&read(path)?).map_err(|source| TargetError::Invalid {
            path: path.display().to_string(),
            source,
        })?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut targets: Vec<Target> = Vec::new();
    for t in file.targets {
        if targets.iter().any(|o| o.name == t.name) {
            return Err(TargetError::Duplicate(t.name));
        }
        let text = read(&dir.join(&t.url_file))?;
        let uri: http::Uri = text
            .trim()
            .parse()
            .map_err(|_| TargetError::Url(t.name.clone()))?;
        if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
            return Err(TargetError::Url(t.name));
        }
        targets.push(Target {
            name: t.name,
            format: t.format,
            url: WebhookUrl(uri),
            filter: Filter {
                kinds: t.kinds,
                rules: t.rules,
                clusters: t.clusters,
                min_severity: t.min_severity,
            },
        });
    }
    Ok(targets)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::notify::message::tests::drift;
    use fleetbus_schemas::drift::DriftPhase;

    #[test]
    fn targets_read_their_url_from_a_file_and_never_show_it() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("ops"),
            "https://hooks.example/T0/secret-token\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("targets.yaml"),
            "targets:\n- name: ops\n  format: slack\n  urlFile: ops\n  rules: [web]\n  minSeverity: warning\n",
        )
        .unwrap();
        let targets = load_targets(&dir.path().join("targets.yaml")).unwrap();
        assert_eq!(targets[0].url.uri().path(), "/T0/secret-token");
        assert!(!format!("{targets:?}").contains("secret-token"));

        let f = &targets[0].filter;
        assert!(f.matches(&Notification::from_drift(&drift(
            "b",
            "web",
            "x",
            DriftPhase::Fight
        ))));
        assert!(!f.matches(&Notification::from_drift(&drift(
            "b",
            "web",
            "x",
            DriftPhase::Resolved
        ))));
        assert!(!f.matches(&Notification::from_drift(&drift(
            "b",
            "db",
            "x",
            DriftPhase::Fight
        ))));

        std::fs::write(dir.path().join("ops"), "not a url secret-token").unwrap();
        let e = load_targets(&dir.path().join("targets.yaml")).unwrap_err();
        assert!(matches!(e, TargetError::Url(_)));
        assert!(!e.to_string().contains("secret-token"));
    }
}
