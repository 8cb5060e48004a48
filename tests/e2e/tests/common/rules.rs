//! [`RuleBuilder`]: a ResourceSyncRule manifest from only what a test says
//! about its rule.
//!
//! The tests used to spell every rule out as YAML text: sixty near-copies in
//! which the line that mattered hid among the lines that never change, and a
//! slipped indent made another rule instead of an error. The builder writes
//! through the project's own YAML writer ([`fleetbus_schemas::yaml`]), which
//! quotes whatever kubectl's YAML 1.1 reader would take for a bool or a
//! number. A test about the text itself (a hostile or malformed rule) keeps
//! its YAML inline and says so.

use serde_json::{json, Map, Value};

/// A ResourceSyncRule manifest: [`RuleBuilder::yaml`] for `kubectl apply`
/// and rule files, [`RuleBuilder::json`] where a value is wanted.
///
/// Rarer fields go through [`RuleBuilder::spec`] with the API's own names,
/// so that no field needs a method before a test can set it.
#[derive(Clone, Debug)]
pub struct RuleBuilder {
    name: String,
    annotations: Map<String, Value>,
    spec: Map<String, Value>,
}

impl RuleBuilder {
    /// Rule `name` for core ConfigMaps with nothing else set: every
    /// ConfigMap, from every cluster to every cluster.
    pub fn new(name: &str) -> Self {
        let mut spec = Map::new();
        spec.insert(
            "groupVersionKind".into(),
            json!({"group": "", "version": "v1", "kind": "ConfigMap"}),
        );
        RuleBuilder {
            name: name.into(),
            annotations: Map::new(),
            spec,
        }
    }

    /// Renames the rule: tests derive a second rule from a first.
    pub fn name(mut self, name: &str) -> Self {
        self.name = name.into();
        self
    }

    /// The kind the rule syncs; `group` is `""` for the core group.
    pub fn kind(self, group: &str, version: &str, kind: &str) -> Self {
        self.spec(
            "groupVersionKind",
            json!({"group": group, "version": version, "kind": kind}),
        )
    }

    /// A `metadata.annotations` entry (e.g. `fleetbus.io/resource-sync-disabled`).
    pub fn annotation(mut self, key: &str, value: &str) -> Self {
        self.annotations.insert(key.into(), value.into());
        self
    }

    /// Adds an entry to `spec.rules` matching the objects of any of
    /// `namespaces` (the `namespaces` criterion: a set, wildcards allowed).
    pub fn namespaces(self, namespaces: &[&str]) -> Self {
        self.matching(json!({ "namespaces": namespaces }))
    }

    /// Adds an entry to `spec.rules` matching the objects whose key has
    /// namespace `ns` (the `objectKey` criterion, as the placement tests use).
    pub fn object_namespace(self, ns: &str) -> Self {
        self.matching(json!({"objectKey": {"namespace": ns}}))
    }

    /// Adds an entry to `spec.rules` with this one match entry (its criteria
    /// AND'd, e.g. `{"namespaces": [..], "labels": [..]}`).
    pub fn matching(self, entry: Value) -> Self {
        self.entry(json!({ "match": [entry] }))
    }

    /// Adds a whole entry to `spec.rules` (several match entries, OR'd).
    pub fn entry(mut self, entry: Value) -> Self {
        let rules = self
            .spec
            .entry("rules")
            .or_insert_with(|| Value::Array(Vec::new()));
        rules
            .as_array_mut()
            .expect("spec.rules is a list")
            .push(entry);
        self
    }

    /// Sets the `mutations` of the last entry of `spec.rules`, or, with no
    /// entry yet, adds one that matches every object.
    pub fn mutations(mut self, mutations: Value) -> Self {
        let last = self
            .spec
            .get_mut("rules")
            .and_then(Value::as_array_mut)
            .and_then(|rules| rules.last_mut());
        match last {
            Some(entry) => {
                entry["mutations"] = mutations;
                self
            }
            None => self.entry(json!({ "mutations": mutations })),
        }
    }

    /// `spec.clusterSelector` choosing the sinks by these labels.
    pub fn sinks(self, labels: &[(&str, &str)]) -> Self {
        self.spec("clusterSelector", match_labels(labels))
    }

    /// `spec.sourceClusterSelector` choosing the sources by these labels.
    pub fn sources(self, labels: &[(&str, &str)]) -> Self {
        self.spec("sourceClusterSelector", match_labels(labels))
    }

    /// Sets `spec.<key>` as the API spells it (`placement`, `drift`,
    /// `dependsOn`, a selector with expressions, ...), replacing what was there.
    pub fn spec(mut self, key: &str, value: Value) -> Self {
        self.spec.insert(key.into(), value);
        self
    }

    /// The manifest as a value.
    pub fn json(&self) -> Value {
        let mut metadata = json!({ "name": self.name });
        if !self.annotations.is_empty() {
            metadata["annotations"] = Value::Object(self.annotations.clone());
        }
        json!({
            "apiVersion": "fleetbus.io/v1alpha1",
            "kind": "ResourceSyncRule",
            "metadata": metadata,
            "spec": self.spec,
        })
    }

    /// The manifest as one YAML document, as `apply_yaml` and rule files take it.
    pub fn yaml(&self) -> String {
        fleetbus_schemas::yaml::to_string(&self.json()).expect("a rule renders as YAML")
    }
}

/// `rules` as one YAML stream: one `kubectl apply` creates them together.
pub fn stream(rules: &[RuleBuilder]) -> String {
    rules
        .iter()
        .map(RuleBuilder::yaml)
        .collect::<Vec<_>>()
        .join("---\n")
}

/// A label selector `{matchLabels: labels}`.
fn match_labels(labels: &[(&str, &str)]) -> Value {
    let labels: Map<String, Value> = labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), Value::from(*v)))
        .collect();
    json!({ "matchLabels": labels })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a test gets without saying anything, written out by hand: the
    /// defaults are part of every converted rule, so a change here is a
    /// change to sixty tests.
    #[test]
    fn defaults_are_every_configmap_everywhere() {
        let rule = RuleBuilder::new("plain");
        let want = json!({
            "apiVersion": "fleetbus.io/v1alpha1",
            "kind": "ResourceSyncRule",
            "metadata": {"name": "plain"},
            "spec": {"groupVersionKind": {"group": "", "version": "v1", "kind": "ConfigMap"}},
        });
        assert_eq!(rule.json(), want);
        let read: Value = fleetbus_schemas::yaml::from_str(&rule.yaml()).unwrap();
        assert_eq!(read, want);
    }
}
