//! `fleetbus drift history KIND/NAMESPACE/NAME`: every stored event of one object, in order.

use std::io::Write;

use chrono::{DateTime, Utc};
use fleetbus_schemas::drift::DriftEvent;

use fleetbus_schemas::subject::{encode_namespace, encode_token, DRIFT};

use super::events::EventReader;
use super::render::{event_json, event_line};
use super::{connect, DriftError};
use crate::cli::{DriftHistoryArgs, OutputFormat};

/// The object named on the command line. The group is not part of it: a kind name is
/// enough for an operator, and `*` matches any group in the subject filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectArg {
    /// Kind (`Deployment`).
    pub kind: String,
    /// Namespace, `None` for cluster-scoped objects (`KIND/NAME`).
    pub namespace: Option<String>,
    /// Name.
    pub name: String,
}

impl std::str::FromStr for ObjectArg {
    type Err = DriftError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || DriftError::ObjectArg(s.to_owned());
        let parts: Vec<&str> = s.split('/').collect();
        if parts.iter().any(|p| p.is_empty()) {
            return Err(bad());
        }
        match parts[..] {
            [kind, name] => Ok(Self {
                kind: kind.to_owned(),
                namespace: None,
                name: name.to_owned(),
            }),
            [kind, namespace, name] => Ok(Self {
                kind: kind.to_owned(),
                namespace: Some(namespace.to_owned()),
                name: name.to_owned(),
            }),
            _ => Err(bad()),
        }
    }
}

impl ObjectArg {
    /// `<p>.drift.<cluster or *>.*.<kind>.<namespace>.<name>`.
    pub fn filter(
        &self,
        prefix: &fleetbus_schemas::subject::Prefix,
        cluster: Option<&str>,
    ) -> String {
        format!(
            "{prefix}.{DRIFT}.{}.*.{}.{}.{}",
            cluster.map_or_else(|| "*".into(), encode_token),
            encode_token(&self.kind),
            encode_namespace(self.namespace.as_deref()),
            encode_token(&self.name),
        )
    }
}

/// Prints the object's events oldest first and returns once it has read every event that
/// was stored when it started.
pub async fn history(args: &DriftHistoryArgs, out: &mut impl Write) -> Result<(), DriftError> {
    let object: ObjectArg = args.object.parse()?;
    let (_client, js) = connect(&args.bus).await?;
    let events = read_history(
        &js,
        &args.bus.subject_prefix,
        &object,
        args.cluster.as_deref(),
    )
    .await?;
    match args.out.output {
        format @ (OutputFormat::Json | OutputFormat::Yaml) => {
            let all: Vec<serde_json::Value> = events.iter().map(|(e, _)| event_json(e)).collect();
            crate::output::data(out, format, &all)?;
        }
        OutputFormat::Table => {
            for (e, published) in &events {
                writeln!(out, "{}", event_line(e, *published))?;
            }
        }
    }
    Ok(())
}

/// Every stored event of `object` (on `cluster`, or on any), oldest first, with when the
/// server stored it; returns once it has read what was stored when it started. Shared
/// with the dashboard's `/api/drift/history`.
pub(crate) async fn read_history(
    js: &async_nats::jetstream::Context,
    prefix: &fleetbus_schemas::subject::Prefix,
    object: &ObjectArg,
    cluster: Option<&str>,
) -> Result<Vec<(DriftEvent, Option<DateTime<Utc>>)>, DriftError> {
    let filter = object.filter(prefix, cluster);
    let mut reader = EventReader::open(js, prefix, filter, true).await?;
    let mut events = Vec::new();
    if reader.initial_pending > 0 {
        while let Some(read) = reader.next().await? {
            if let Some(event) = read.event {
                events.push((event, read.published));
            }
            if read.pending == 0 {
                break;
            }
        }
    }
    Ok(events)
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleetbus_schemas::subject::Prefix;

    #[test]
    fn object_args_parse_and_filter() {
        let p = Prefix::default();
        let o: ObjectArg = "Deployment/team-a/web".parse().unwrap();
        assert_eq!(
            o.filter(&p, Some("c2")),
            "fleetbus.drift.c2.*.Deployment.team-a.web"
        );
        let c: ObjectArg = "ClusterRole/system:foo".parse().unwrap();
        assert_eq!(c.namespace, None);
        assert_eq!(
            c.filter(&p, None),
            "fleetbus.drift.*.*.ClusterRole._.=c3lzdGVtOmZvbw"
        );
        for bad in ["web", "a/b/c/d", "Deployment//web", ""] {
            assert!(
                matches!(bad.parse::<ObjectArg>(), Err(DriftError::ObjectArg(_))),
                "{bad}"
            );
        }
    }
}
