//! ResourceSyncRules as sync uses them: parsed, checked, and the one built-in
//! rule that replicates the rules themselves.
//!
//! Rules arrive as ordinary objects of the local watch on the
//! ResourceSyncRule kind (the same watch that publishes them), so there is no
//! second watch on rules.

use std::collections::BTreeMap;

use fleetbus_schemas::crd::{GroupVersionKind as RuleGvk, ResourceSyncRule, ResourceSyncRuleSpec};
use fleetbus_schemas::crd::{RuleError, StatusReturn};
use fleetbus_schemas::well_known;
use kube::core::GroupVersionKind;
use serde_json::Value;

use super::template;
use crate::sync::health::CompiledHealth;
use crate::sync::model::meta::has_annotation;

/// The name (`fleetbus.io/rule` annotation) of the built-in rule that
/// replicates ResourceSyncRules mesh-wide. Not a valid object name, so no
/// user rule can collide with it.
pub const RULE_REPLICATION: &str = "(mesh-wide rules)";

/// Where a rule comes from: a ResourceSyncRule object, or built into the
/// agent (no object: no status, no Events).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleOrigin {
    User,
    BuiltIn,
}

impl RuleOrigin {
    /// The origin of the rule named `name` (as copies and reports carry it).
    pub fn of(name: &str) -> RuleOrigin {
        if name == RULE_REPLICATION {
            RuleOrigin::BuiltIn
        } else {
            RuleOrigin::User
        }
    }

    /// Whether the rule has an object to hold its Events and status.
    pub fn has_object(self) -> bool {
        self == RuleOrigin::User
    }
}

/// The ReportedState kind (watched by every agent, like rules).
pub fn reported_state_gvk() -> GroupVersionKind {
    GroupVersionKind::gvk(well_known::GROUP, well_known::VERSION, "ReportedState")
}

/// The kind of ResourceSyncRules.
pub fn rule_gvk() -> GroupVersionKind {
    GroupVersionKind::gvk(well_known::GROUP, well_known::VERSION, "ResourceSyncRule")
}

/// Converts the CRD's GVK into kube's.
pub fn to_gvk(g: &RuleGvk) -> GroupVersionKind {
    GroupVersionKind::gvk(&g.group, &g.version, &g.kind)
}

/// One rule, ready for sync.
#[derive(Debug, Clone, PartialEq)]
pub struct CompiledRule {
    /// Object name of the rule (or [`RULE_REPLICATION`]).
    pub name: String,
    /// The spec.
    pub spec: ResourceSyncRuleSpec,
    /// `metadata.generation`, for `observedGeneration`.
    pub generation: Option<i64>,
    /// The kind whose objects the rule takes.
    pub source: GroupVersionKind,
    /// Every kind a copy can be written as (the source and each GVK mutation).
    pub targets: Vec<GroupVersionKind>,
    /// Why the rule cannot work, if it cannot (the `Invalid` reason).
    pub problem: Option<String>,
    /// The built-in rule replicating rules (has no object and no status).
    pub builtin: bool,
    /// `fleetbus.io/correction-paused` on the rule: drift of its copies is
    /// reported, not corrected (the manual override during an incident).
    pub correction_paused: bool,
    /// `spec.health`, compiled; `None`: kstatus judges the copies.
    pub health: Option<CompiledHealth>,
    /// The cluster the rule was created on, when not this one: the
    /// `fleetbus.io/origin-cluster` of its copy here, or the origin of its
    /// envelope for a rule read from the bus (see `sync::policy`).
    pub author: Option<String>,
    /// The bus holds `author`'s live envelope of this rule: the claim is
    /// what the sink stamped, not an annotation someone wrote on a local
    /// rule (set by the engine; a rule read from the bus is its own proof).
    pub author_verified: bool,
}

impl CompiledRule {
    /// The cluster the rule was created on (`local` for this cluster's own).
    pub fn author<'a>(&'a self, local: &'a str) -> &'a str {
        self.author.as_deref().unwrap_or(local)
    }

    /// Whether the rule may sync anything (valid and its kinds served).
    pub fn is_valid(&self) -> bool {
        self.problem.is_none()
    }

    /// Whether sinks report their copies' status and health to the origin:
    /// the rule returns status, unwraps Bundles, or judges health its own way.
    pub fn reports(&self) -> bool {
        self.spec.status_return != StatusReturn::None
            || self.spec.unwrap
            || self.health.is_some()
            || self.spec.rollout.is_some()
            || self.spec.placement.is_some()
    }
}

/// Every rule on this cluster, by name.
pub type RuleSet = BTreeMap<String, CompiledRule>;

/// The built-in rule: every ResourceSyncRule, from every cluster to every
/// cluster, unchanged. Rules annotated `fleetbus.io/resource-sync-disabled`
/// are not published (true of every object), which is the annotation route.
pub fn builtin() -> CompiledRule {
    let gvk = rule_gvk();
    CompiledRule {
        name: RULE_REPLICATION.to_owned(),
        spec: ResourceSyncRuleSpec {
            group_version_kind: RuleGvk {
                group: gvk.group.clone(),
                version: gvk.version.clone(),
                kind: gvk.kind.clone(),
            },
            ..ResourceSyncRuleSpec::default()
        },
        generation: None,
        source: gvk.clone(),
        targets: vec![gvk],
        problem: None,
        builtin: true,
        correction_paused: false,
        health: None,
        author: None,
        author_verified: false,
    }
}

/// Parses and checks the rule objects of the local watch. A rule that does
/// not parse or validate is kept, with its problem: it is reported on its own
/// status and disturbs no other rule.
pub fn compile(objects: &[&Value]) -> RuleSet {
    let mut set = RuleSet::new();
    let b = builtin();
    set.insert(b.name.clone(), b);
    for obj in objects {
        let name = obj
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        if name.is_empty() {
            continue;
        }
        let generation = obj.pointer("/metadata/generation").and_then(Value::as_i64);
        let correction_paused = has_annotation(obj, well_known::ANNOTATION_CORRECTION_PAUSED);
        let mut rule = match serde_json::from_value::<ResourceSyncRule>((*obj).clone()) {
            Ok(rule) => compile_one(&name, rule.spec, generation),
            Err(e) => CompiledRule {
                name: name.clone(),
                spec: ResourceSyncRuleSpec::default(),
                generation,
                source: GroupVersionKind::gvk("", "", ""),
                targets: Vec::new(),
                problem: Some(format!("spec does not parse: {e}")),
                builtin: false,
                correction_paused: false,
                health: None,
                author: None,
                author_verified: false,
            },
        };
        // A suspended rule corrects no drift either: drift is reported.
        rule.correction_paused = correction_paused || rule.spec.suspend;
        rule.author = crate::sync::model::meta::origin_cluster(obj).map(str::to_owned);
        set.insert(name, rule);
    }
    mark_cycles(&mut set);
    set
}

/// Makes every rule on a `dependsOn` cycle Invalid, naming the cycle: no rule
/// on it could ever be applied. Every cluster compiles the same replicated
/// rules, so every cluster says the same.
fn mark_cycles(set: &mut RuleSet) {
    let edges: BTreeMap<String, Vec<String>> = set
        .values()
        .filter(|r| !r.builtin)
        .map(|r| (r.name.clone(), r.spec.depends_on.clone()))
        .collect();
    for cycle in super::cycles::cycles(&edges) {
        let text = format!("dependsOn cycle: {}", cycle.join(" → "));
        for name in cycle.iter().skip(1) {
            if let Some(rule) = set.get_mut(name) {
                rule.problem = Some(match rule.problem.take() {
                    Some(p) if !p.contains(&text) => format!("{p}; {text}"),
                    Some(p) => p,
                    None => text.clone(),
                });
            }
        }
    }
}

fn compile_one(name: &str, spec: ResourceSyncRuleSpec, generation: Option<i64>) -> CompiledRule {
    let source = to_gvk(&spec.group_version_kind);
    let mut targets = vec![source.clone()];
    let mut problems = Vec::new();
    if let Err(errors) = spec.validate() {
        problems.push(RuleError::summarize(&errors));
    }
    for (i, entry) in spec.rules.iter().enumerate() {
        let Some(m) = &entry.mutations else { continue };
        if let Some(g) = &m.group_version_kind {
            let t = to_gvk(g);
            if !targets.contains(&t) {
                targets.push(t);
            }
        }
        for (j, o) in m.overrides.iter().enumerate() {
            if let Some(value) = &o.value {
                if let Err(e) = template::check(value) {
                    problems.push(format!(
                        "spec.rules[{i}].mutations.overrides[{j}].value: bad template: {}",
                        crate::report(&e)
                    ));
                }
            }
        }
    }
    // Compiled only once the spec validated: validation bounds the length.
    let health = match &spec.health {
        Some(check) if problems.is_empty() => match CompiledHealth::compile(check) {
            Ok(h) => Some(h),
            Err(e) => {
                problems.push(crate::report(&e));
                None
            }
        },
        _ => None,
    };
    CompiledRule {
        name: name.to_owned(),
        spec,
        generation,
        source,
        targets,
        problem: (!problems.is_empty()).then(|| problems.join("; ")),
        builtin: false,
        correction_paused: false,
        health,
        author: None,
        author_verified: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rule(name: &str, spec: Value) -> Value {
        json!({"apiVersion": "fleetbus.io/v1alpha1", "kind": "ResourceSyncRule",
               "metadata": {"name": name, "generation": 2}, "spec": spec})
    }

    #[test]
    fn a_bad_rule_is_kept_with_its_problem_and_does_not_hide_others() {
        let good = rule(
            "good",
            json!({"groupVersionKind": {"version": "v1", "kind": "Secret"}}),
        );
        let bad_gvk = rule(
            "bad",
            json!({"groupVersionKind": {"version": "v1", "kind": "not a kind"}}),
        );
        let bad_template = rule(
            "tpl",
            json!({"groupVersionKind": {"version": "v1", "kind": "Secret"},
                   "rules": [{"mutations": {"overrides": [
                       {"type": "replace", "path": "/metadata/name", "value": "{{ .Object.metadata.name "}]}}]}),
        );
        let unparsable = rule("junk", json!({"groupVersionKind": "Secret"}));
        let set = compile(&[&good, &bad_gvk, &bad_template, &unparsable]);
        assert!(set["good"].is_valid());
        assert_eq!(set["good"].generation, Some(2));
        assert!(set["bad"].problem.as_deref().unwrap_or("").contains("kind"));
        assert!(set["tpl"]
            .problem
            .as_deref()
            .unwrap_or("")
            .contains("template"));
        assert!(set["junk"]
            .problem
            .as_deref()
            .unwrap_or("")
            .contains("parse"));
        assert!(set[RULE_REPLICATION].builtin);
        assert_eq!(RuleOrigin::of(RULE_REPLICATION), RuleOrigin::BuiltIn);
        assert_eq!(RuleOrigin::of("(not built in)"), RuleOrigin::User);
        assert!(RuleOrigin::of("team-a").has_object());
    }

    #[test]
    fn every_rule_on_a_depends_on_cycle_is_invalid_and_names_it() {
        let with = |name: &str, deps: Value| {
            rule(
                name,
                json!({"groupVersionKind": {"version": "v1", "kind": "ConfigMap"}, "dependsOn": deps}),
            )
        };
        let (a, b, c, d) = (
            with("a", json!(["b"])),
            with("b", json!(["a"])),
            with("c", json!(["a", "missing"])),
            with("d", json!(["d"])),
        );
        let set = compile(&[&a, &b, &c, &d]);
        for name in ["a", "b"] {
            assert_eq!(
                set[name].problem.as_deref(),
                Some("dependsOn cycle: a → b → a"),
                "{name}"
            );
        }
        assert!(
            set["c"].is_valid(),
            "depending on a cycle or a missing rule is no cycle"
        );
        assert_eq!(set["d"].problem.as_deref(), Some("dependsOn cycle: d → d"));
    }

    #[test]
    fn a_health_expression_that_does_not_compile_makes_the_rule_invalid() {
        let with = |name: &str, current: &str| {
            rule(
                name,
                json!({"groupVersionKind": {"group": "apps", "version": "v1", "kind": "Deployment"},
                       "health": {"current": current}}),
            )
        };
        let good = with(
            "good",
            "object.status.readyReplicas == object.spec.replicas",
        );
        let bad = with("bad", "object.status.readyReplicas ==");
        let set = compile(&[&good, &bad]);
        assert!(set["good"].is_valid());
        assert!(set["good"].health.is_some());
        let problem = set["bad"].problem.as_deref().unwrap_or("");
        assert!(
            problem.starts_with("spec.health.current: does not compile: "),
            "{problem}"
        );
        assert!(set["bad"].health.is_none());
    }

    #[test]
    fn a_bad_template_problem_says_why() {
        let r = rule(
            "tpl",
            json!({"groupVersionKind": {"version": "v1", "kind": "Secret"},
                   "rules": [{"mutations": {"overrides": [
                       {"type": "replace", "path": "/data/x", "value": "ok"},
                       {"type": "replace", "path": "/data/y", "value": "{% if %}x{% endif %}"}]}}]}),
        );
        let set = compile(&[&r]);
        let problem = set["tpl"].problem.as_deref().unwrap_or("");
        assert!(
            problem.starts_with("spec.rules[0].mutations.overrides[1].value: bad template: template does not compile: syntax error"),
            "{problem}"
        );
    }

    #[test]
    fn gvk_mutations_are_targets() {
        let r = rule(
            "m",
            json!({"groupVersionKind": {"group": "example.com", "version": "v1", "kind": "Widget"},
                   "rules": [{"mutations": {"groupVersionKind": {"group": "example.com", "version": "v1", "kind": "Gadget"}}}]}),
        );
        let set = compile(&[&r]);
        let kinds: Vec<&str> = set["m"].targets.iter().map(|g| g.kind.as_str()).collect();
        assert_eq!(kinds, vec!["Widget", "Gadget"]);
    }
}
