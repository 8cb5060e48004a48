//! The targets file: where notifications go, in which format, and which ones.
//!
//! ```yaml
//! targets:
//! - name: ops
//!   format: slack              # slack | teams | json
//!   urlFile: /etc/fleetbus-notify/ops   # the webhook URL, e.g. a mounted Secret
//!   kinds: [drift, rollout]    # optional filters: empty lets everything through
//!   rules: [web]               # (kinds: drift conflict rollout placement policy cluster)
//!   clusters: [b, c]
//!   clusterSelector:           # the cluster's labels, as the registry says
//!     matchLabels: {env: prod}
//!   minSeverity: warning       # info (default) | warning | critical
//!   template: "{severity} {kind} on {cluster}: {summary}"   # optional: the text line
//! ```
//!
//! A webhook URL is a credential (whoever has it can post to the channel): it is
//! read from its own file, never from the targets file, and never printed, logged
//! or put in an error message.

use std::path::{Path, PathBuf};

use fleetbus_schemas::selector::selector_matches;
use fleetbus_schemas::selector::LabelSelector;
use serde::Deserialize;
use thiserror::Error;

/// The kinds of event a target may filter on.
pub const KINDS: [&str; 6] = [
    "drift",
    "conflict",
    "rollout",
    "placement",
    "policy",
    "cluster",
];

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
    /// A target's `clusterSelector` is not a valid label selector.
    #[error("the clusterSelector of target {target:?} is invalid")]
    Selector {
        /// The target.
        target: String,
        /// What is wrong with it.
        #[source]
        source: fleetbus_schemas::selector::SelectorError,
    },
    /// A target's `template` does not parse.
    #[error("the template of target {target:?} is invalid")]
    Template {
        /// The target.
        target: String,
        /// What is wrong with it.
        #[source]
        source: super::template::TemplateError,
    },
    /// A target names a kind of event there is none of.
    #[error("target {target:?} names kind {kind:?}; the kinds are {}", KINDS.join(", "))]
    Kind {
        /// The target.
        target: String,
        /// The kind as written.
        kind: String,
    },
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
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Filter {
    /// Kinds of event (`drift`).
    pub kinds: Vec<String>,
    /// Rule names.
    pub rules: Vec<String>,
    /// Cluster names.
    pub clusters: Vec<String>,
    /// The cluster's labels (`Notification::labels`) must match.
    pub cluster_selector: Option<LabelSelector>,
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
            // Validated when loaded: an error cannot happen here.
            && selector_matches(self.cluster_selector.as_ref(), &n.labels).unwrap_or(false)
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
    /// Its own text line, if any.
    pub template: Option<super::template::Template>,
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
    cluster_selector: Option<LabelSelector>,
    #[serde(default)]
    min_severity: Option<Severity>,
    #[serde(default)]
    template: Option<String>,
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
        if let Some(kind) = t.kinds.iter().find(|k| !KINDS.contains(&k.as_str())) {
            return Err(TargetError::Kind {
                target: t.name,
                kind: kind.clone(),
            });
        }
        if let Err(source) = selector_matches(t.cluster_selector.as_ref(), &Default::default()) {
            return Err(TargetError::Selector {
                target: t.name,
                source,
            });
        }
        let template = match t.template.as_deref().map(super::template::Template::parse) {
            None => None,
            Some(Ok(template)) => Some(template),
            Some(Err(source)) => {
                return Err(TargetError::Template {
                    target: t.name,
                    source,
                })
            }
        };
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
                cluster_selector: t.cluster_selector,
                min_severity: t.min_severity,
            },
            template,
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

        // A cluster selector matches the labels the bridge gave the notification.
        std::fs::write(
            dir.path().join("sel.yaml"),
            "targets:\n- name: prod\n  format: json\n  urlFile: ops\n  clusterSelector:\n    matchExpressions: [{key: env, operator: In, values: [prod]}]\n",
        )
        .unwrap();
        let f = &load_targets(&dir.path().join("sel.yaml")).unwrap()[0].filter;
        let mut n = Notification::from_drift(&drift("b", "web", "x", DriftPhase::Fight));
        assert!(!f.matches(&n), "no labels known");
        n.labels.insert("env".into(), "prod".into());
        assert!(f.matches(&n));
        n.labels.insert("env".into(), "dev".into());
        assert!(!f.matches(&n));
        for (bad, what) in [
            (
                "  clusterSelector: {matchExpressions: [{key: env, operator: Is}]}",
                "clusterSelector",
            ),
            ("  kinds: [drfit]", "drfit"),
            ("  template: \"{sumary}\"", "template"),
        ] {
            std::fs::write(
                dir.path().join("bad.yaml"),
                format!("targets:\n- name: bad\n  format: json\n  urlFile: ops\n{bad}\n"),
            )
            .unwrap();
            let e = load_targets(&dir.path().join("bad.yaml")).unwrap_err();
            assert!(e.to_string().contains(what), "{e}");
        }

        std::fs::write(dir.path().join("ops"), "not a url secret-token").unwrap();
        let e = load_targets(&dir.path().join("targets.yaml")).unwrap_err();
        assert!(matches!(e, TargetError::Url(_)));
        assert!(!e.to_string().contains("secret-token"));
    }
}
