//! Semantic validation of a ResourceSyncRule spec (what the OpenAPI schema cannot express).

use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

use super::resource_sync_rule::{
    ClusterFeatureMatch, DriftExclusion, GroupVersionKind, MatchEntry, MaxUnavailable, Mutations,
    OverrideType, ResourceSyncRule, ResourceSyncRuleSpec, Rollout, StatusReturn, UpdatePolicy,
};
use crate::k8s_names::{is_dns1123_label, is_dns1123_subdomain, is_label_value, is_qualified_name};
use crate::pointer::{parse_field_pointer, to_pointer, PointerError};
use crate::well_known::is_reserved_key;

/// One problem found in a ResourceSyncRule spec, at a field path like
/// `spec.rules[0].mutations.overrides[1].path`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleError {
    /// Path of the offending field.
    pub field: String,
    /// What is wrong with it.
    pub kind: RuleErrorKind,
}

impl fmt::Display for RuleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.kind)
    }
}

impl std::error::Error for RuleError {}

/// What is wrong with a field of a ResourceSyncRule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuleErrorKind {
    /// A required string is empty.
    #[error("must not be empty")]
    Empty,
    /// An API group is not a DNS-1123 subdomain.
    #[error("invalid API group {0:?}: must be empty or a DNS-1123 subdomain")]
    InvalidGroup(String),
    /// A kind is not CamelCase alphanumeric.
    #[error("invalid kind {0:?}: must start with an uppercase letter and be alphanumeric")]
    InvalidKind(String),
    /// A version is not lowercase alphanumeric.
    #[error("invalid version {0:?}: must be a DNS-1123 label")]
    InvalidVersion(String),
    /// A namespace is not a DNS-1123 label.
    #[error("invalid namespace {0:?}: must be a DNS-1123 label")]
    InvalidNamespace(String),
    /// A JSON Pointer does not parse.
    #[error("invalid JSON pointer {pointer:?}: {error}")]
    InvalidPointer {
        /// The pointer as written.
        pointer: String,
        /// Why it does not parse.
        error: PointerError,
    },
    /// A `*` token where wildcards are not allowed.
    #[error("wildcard '*' not allowed in {0:?}")]
    WildcardNotAllowed(String),
    /// A selector operator other than In, NotIn, Exists, DoesNotExist.
    #[error("invalid selector operator {0:?}: must be In, NotIn, Exists or DoesNotExist")]
    InvalidOperator(String),
    /// `In`/`NotIn` without values.
    #[error("operator {0} requires at least one value")]
    ValuesRequired(String),
    /// `Exists`/`DoesNotExist` with values.
    #[error("operator {0} must not have values")]
    ValuesForbidden(String),
    /// A label or annotation key is not a qualified name.
    #[error("invalid key {0:?}: must be a qualified name ([prefix/]name)")]
    InvalidKey(String),
    /// A label value is not a valid label value.
    #[error("invalid label value {0:?}")]
    InvalidLabelValue(String),
    /// An objectKey with neither name nor namespace.
    #[error("objectKey needs a name or a namespace")]
    EmptyObjectKey,
    /// A `replace` override without a value.
    #[error("a replace override needs a value")]
    ValueRequired,
    /// A `remove` override with a value.
    #[error("a remove override must not have a value")]
    ValueForbidden,
    /// A template with unbalanced `{{`/`}}`.
    #[error("unbalanced template delimiters in {0:?}")]
    UnbalancedTemplate(String),
    /// A `remove` override of a field every object needs (`/metadata/name`, `/kind`, ...).
    #[error("cannot remove {0:?}: every object needs it")]
    RequiredFieldRemoved(String),
    /// `unwrap: true` on a rule whose kind is not `fleetbus.io/v1alpha1 Bundle`.
    #[error("unwrap is only valid for the kind fleetbus.io/v1alpha1 Bundle, not {0}")]
    UnwrapNeedsBundle(String),
    /// A `groupVersionKind` mutation on an unwrap rule: a Bundle's manifests keep their kinds.
    #[error("a groupVersionKind mutation cannot apply to a Bundle's manifests (unwrap: true)")]
    UnwrapKindMutation,
    /// `syncStatus: true` with `statusReturn` other than None: the copy's status would be
    /// overwritten from the source while the source's status is written from the copy,
    /// so the two could chase each other forever.
    #[error(
        "syncStatus cannot be combined with statusReturn {0}: status would be copied to the \
         copies and returned from them, and could oscillate; use one direction only"
    )]
    SyncStatusWithStatusReturn(String),
    /// A mutation that would add, change or remove a `fleetbus.io/*` label or annotation
    /// (the stamp, the managed label, fleetbus's instructions) or a map holding them.
    #[error(
        "mutations cannot write fleetbus's own metadata: {0:?} is or holds a fleetbus.io/ \
         label or annotation (the stamp)"
    )]
    ForgesStamp(String),
    /// A name (a `dependsOn` rule, a `valuesFrom` ConfigMap) that is no object name.
    #[error("invalid name {0:?}: must be a DNS-1123 subdomain")]
    InvalidName(String),
    /// A `dependsOn` entry listed twice.
    #[error("{0:?} is listed twice")]
    Duplicate(String),
    /// A rollout's `maxUnavailable` that is neither a count nor a percent.
    #[error("invalid maxUnavailable {0}")]
    InvalidMaxUnavailable(String),
    /// A rollout group name that is no DNS-1123 label.
    #[error("invalid group name {0:?}: must be a DNS-1123 label")]
    InvalidGroupName(String),
    /// A progress deadline that a copy could not meet: it must be healthy for
    /// `minReadySeconds` before the deadline.
    #[error(
        "progressDeadlineSeconds ({deadline}) must be greater than minReadySeconds ({min_ready})"
    )]
    DeadlineNotAfterMinReady {
        /// `progressDeadlineSeconds`.
        deadline: u32,
        /// `minReadySeconds`.
        min_ready: u32,
    },
    /// `rollout` with `updatePolicy: CreateOnly`: copies are never updated, so
    /// there is no new version to roll.
    #[error("a rollout needs updatePolicy Update: with CreateOnly no copy is ever updated")]
    RolloutWithCreateOnly,
    /// `rollout` with `unwrap: true`: a Bundle's manifests are not staged yet
    /// (sinks would apply them at once while the origin waited for reports
    /// that never name a version).
    #[error("a rollout of unwrapped Bundles is not supported yet: roll the Bundle's objects with rules of their own")]
    RolloutWithUnwrap,
    /// A placement field whose value cannot be used (a count of 0, a weight
    /// out of range, a preference with neither or both of its kinds).
    #[error("{0}")]
    InvalidPlacement(String),
    /// A string longer than its bound (a health expression's cost is bounded by its length).
    #[error("{len} bytes, at most {max} allowed")]
    TooLong {
        /// Its length in bytes.
        len: usize,
        /// The bound.
        max: usize,
    },
}

impl RuleError {
    /// All errors as one line, for the message of the `Invalid` condition.
    pub fn summarize(errors: &[RuleError]) -> String {
        errors
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ")
    }
}

impl ResourceSyncRule {
    /// Validates the spec; see [`ResourceSyncRuleSpec::validate`].
    pub fn validate(&self) -> Result<(), Vec<RuleError>> {
        self.spec.validate()
    }
}

impl ResourceSyncRuleSpec {
    /// Checks what the CRD schema cannot: names, selectors, JSON pointers, override shape.
    /// Returns every problem found, so the Invalid condition can list them all.
    pub fn validate(&self) -> Result<(), Vec<RuleError>> {
        let mut v = Validator::default();
        v.gvk("spec.groupVersionKind", &self.group_version_kind);
        for (i, m) in self.cluster_feature_match.iter().enumerate() {
            v.feature_match(&format!("spec.clusterFeatureMatch[{i}]"), m);
        }
        for (i, rule) in self.rules.iter().enumerate() {
            for (j, entry) in rule.match_.iter().enumerate() {
                v.match_entry(&format!("spec.rules[{i}].match[{j}]"), entry);
            }
            if let Some(m) = &rule.mutations {
                v.mutations(&format!("spec.rules[{i}].mutations"), m);
            }
        }
        if let Some(s) = &self.cluster_selector {
            v.label_selector("spec.clusterSelector", s);
        }
        if let Some(s) = &self.source_cluster_selector {
            v.label_selector("spec.sourceClusterSelector", s);
        }
        for (i, e) in self.drift.exclusions.iter().enumerate() {
            v.drift_exclusion(&format!("spec.drift.exclusions[{i}]"), e);
        }
        if self.unwrap {
            v.unwrap(self);
        }
        v.status_direction(self);
        let mut seen = std::collections::BTreeSet::new();
        for (i, dep) in self.depends_on.iter().enumerate() {
            let field = format!("spec.dependsOn[{i}]");
            if !is_dns1123_subdomain(dep) {
                v.push(&field, RuleErrorKind::InvalidName(dep.clone()));
            } else if !seen.insert(dep.as_str()) {
                v.push(&field, RuleErrorKind::Duplicate(dep.clone()));
            }
        }
        for (i, vf) in self.values_from.iter().enumerate() {
            let r = &vf.config_map_ref;
            if !is_dns1123_subdomain(&r.name) {
                v.push(
                    format!("spec.valuesFrom[{i}].configMapRef.name"),
                    RuleErrorKind::InvalidName(r.name.clone()),
                );
            }
            if let Some(ns) = r.namespace.as_deref().filter(|ns| !is_dns1123_label(ns)) {
                v.push(
                    format!("spec.valuesFrom[{i}].configMapRef.namespace"),
                    RuleErrorKind::InvalidNamespace(ns.to_owned()),
                );
            }
        }
        if let Some(h) = &self.health {
            v.health_expression("spec.health.current", &h.current);
            if let Some(failed) = &h.failed {
                v.health_expression("spec.health.failed", failed);
            }
        }
        if let Some(r) = &self.rollout {
            v.rollout("spec.rollout", r, self.update_policy, self.unwrap);
        }
        if let Some(p) = &self.placement {
            v.placement("spec.placement", p, self.unwrap);
        }
        if v.errors.is_empty() {
            Ok(())
        } else {
            Err(v.errors)
        }
    }
}

#[derive(Default)]
struct Validator {
    errors: Vec<RuleError>,
}

impl Validator {
    /// A health expression is compiled by the agent (the CEL crate is not a
    /// dependency of schemas); here only what bounds its cost: present and short.
    fn health_expression(&mut self, field: &str, expr: &str) {
        if expr.trim().is_empty() {
            self.push(field, RuleErrorKind::Empty);
        } else if expr.len() > crate::health::MAX_HEALTH_EXPRESSION {
            self.push(
                field,
                RuleErrorKind::TooLong {
                    len: expr.len(),
                    max: crate::health::MAX_HEALTH_EXPRESSION,
                },
            );
        }
    }

    /// A placement must read: a count of at least one cluster, spread keys
    /// and taint keys that are label keys, weights from 1 to 100, each
    /// preference one kind, a replica path that parses.
    fn placement(&mut self, field: &str, p: &super::placement::Placement, unwrap: bool) {
        let bad = |s: &str| RuleErrorKind::InvalidPlacement(s.to_owned());
        if unwrap {
            self.push(field, bad("placement of unwrapped Bundles is not supported: place the Bundle's objects with rules of their own"));
        }
        if let Some(c) = &p.clusters {
            if let Err(e) = super::placement::ClusterCount::parse(c) {
                self.push(
                    format!("{field}.clusters"),
                    bad(&format!("invalid count {e}")),
                );
            }
        }
        for (i, s) in p.spread.iter().enumerate() {
            if !is_qualified_name(&s.topology_key) {
                self.push(
                    format!("{field}.spread[{i}].topologyKey"),
                    RuleErrorKind::InvalidKey(s.topology_key.clone()),
                );
            }
            if s.max_skew == 0 {
                self.push(
                    format!("{field}.spread[{i}].maxSkew"),
                    bad("must be at least 1"),
                );
            }
        }
        for (i, pref) in p.prefer.iter().enumerate() {
            let f = format!("{field}.prefer[{i}]");
            if !(1..=100).contains(&pref.weight) {
                self.push(
                    format!("{f}.weight"),
                    bad(&format!("{}: must be 1 to 100", pref.weight)),
                );
            }
            match (&pref.cluster_selector, &pref.capacity) {
                (Some(s), None) => self.label_selector(&format!("{f}.clusterSelector"), s),
                (None, Some(_)) => {}
                _ => self.push(&f, bad("exactly one of clusterSelector or capacity")),
            }
        }
        for (i, t) in p.tolerations.iter().enumerate() {
            let f = format!("{field}.tolerations[{i}]");
            let exists = t.operator == super::placement::TolerationOperator::Exists;
            if !(is_qualified_name(&t.key) || t.key.is_empty() && exists) {
                self.push(format!("{f}.key"), RuleErrorKind::InvalidKey(t.key.clone()));
            }
            if exists && !t.value.is_empty() {
                self.push(format!("{f}.value"), bad("operator Exists takes no value"));
            }
        }
        if let Some(r) = &p.replicas {
            if let Err(error) = parse_field_pointer(&r.path) {
                self.push(
                    format!("{field}.replicas.path"),
                    RuleErrorKind::InvalidPointer {
                        pointer: r.path.clone(),
                        error,
                    },
                );
            }
        }
        if let Some(g) = &p.group {
            if !is_dns1123_label(g) {
                self.push(
                    format!("{field}.group"),
                    RuleErrorKind::InvalidGroupName(g.clone()),
                );
            }
        }
    }

    /// A rollout must be able to move: budgets that read, named groups, a
    /// deadline a copy can meet, and updates to roll.
    fn rollout(&mut self, field: &str, r: &Rollout, update: UpdatePolicy, unwrap: bool) {
        if let Err(e) = MaxUnavailable::parse(&r.max_unavailable) {
            self.push(
                format!("{field}.maxUnavailable"),
                RuleErrorKind::InvalidMaxUnavailable(e),
            );
        }
        let mut names = std::collections::BTreeSet::new();
        for (i, g) in r.groups.iter().enumerate() {
            let f = format!("{field}.groups[{i}]");
            if !is_dns1123_label(&g.name) {
                self.push(
                    format!("{f}.name"),
                    RuleErrorKind::InvalidGroupName(g.name.clone()),
                );
            } else if !names.insert(g.name.as_str()) {
                self.push(
                    format!("{f}.name"),
                    RuleErrorKind::Duplicate(g.name.clone()),
                );
            }
            self.label_selector(&format!("{f}.clusterSelector"), &g.cluster_selector);
            if let Some(Err(e)) = g.max_unavailable.as_ref().map(MaxUnavailable::parse) {
                self.push(
                    format!("{f}.maxUnavailable"),
                    RuleErrorKind::InvalidMaxUnavailable(e),
                );
            }
        }
        if r.progress_deadline_seconds <= r.min_ready_seconds {
            self.push(
                format!("{field}.progressDeadlineSeconds"),
                RuleErrorKind::DeadlineNotAfterMinReady {
                    deadline: r.progress_deadline_seconds,
                    min_ready: r.min_ready_seconds,
                },
            );
        }
        if update == UpdatePolicy::CreateOnly {
            self.push(field, RuleErrorKind::RolloutWithCreateOnly);
        }
        if unwrap {
            self.push(field, RuleErrorKind::RolloutWithUnwrap);
        }
    }

    /// `unwrap` takes a Bundle's manifests apart, so the rule must be on Bundles and
    /// must not rewrite every manifest's kind.
    fn unwrap(&mut self, spec: &ResourceSyncRuleSpec) {
        let g = &spec.group_version_kind;
        if (g.group.as_str(), g.version.as_str(), g.kind.as_str())
            != (
                crate::well_known::GROUP,
                crate::well_known::VERSION,
                crate::well_known::BUNDLE_KIND,
            )
        {
            let api_version = if g.group.is_empty() {
                g.version.clone()
            } else {
                format!("{}/{}", g.group, g.version)
            };
            self.push(
                "spec.unwrap",
                RuleErrorKind::UnwrapNeedsBundle(format!("{api_version} {}", g.kind)),
            );
        }
        for (i, rule) in spec.rules.iter().enumerate() {
            if rule
                .mutations
                .as_ref()
                .is_some_and(|m| m.group_version_kind.is_some())
            {
                self.push(
                    format!("spec.rules[{i}].mutations.groupVersionKind"),
                    RuleErrorKind::UnwrapKindMutation,
                );
            }
        }
    }

    /// Status flows one way: to the copies (`syncStatus`) or back from them
    /// (`statusReturn`), never both.
    fn status_direction(&mut self, spec: &ResourceSyncRuleSpec) {
        if spec.status_return == StatusReturn::None {
            return;
        }
        for (i, rule) in spec.rules.iter().enumerate() {
            if rule.mutations.as_ref().is_some_and(|m| m.sync_status) {
                self.push(
                    format!("spec.rules[{i}].mutations.syncStatus"),
                    RuleErrorKind::SyncStatusWithStatusReturn(format!("{:?}", spec.status_return)),
                );
            }
        }
    }

    fn push(&mut self, field: impl Into<String>, kind: RuleErrorKind) {
        self.errors.push(RuleError {
            field: field.into(),
            kind,
        });
    }

    fn gvk(&mut self, field: &str, gvk: &GroupVersionKind) {
        if !gvk.group.is_empty() && !is_dns1123_subdomain(&gvk.group) {
            self.push(
                format!("{field}.group"),
                RuleErrorKind::InvalidGroup(gvk.group.clone()),
            );
        }
        if gvk.version.is_empty() {
            self.push(format!("{field}.version"), RuleErrorKind::Empty);
        } else if !is_dns1123_label(&gvk.version) {
            self.push(
                format!("{field}.version"),
                RuleErrorKind::InvalidVersion(gvk.version.clone()),
            );
        }
        if gvk.kind.is_empty() {
            self.push(format!("{field}.kind"), RuleErrorKind::Empty);
        } else if !is_kind(&gvk.kind) {
            self.push(
                format!("{field}.kind"),
                RuleErrorKind::InvalidKind(gvk.kind.clone()),
            );
        }
    }

    fn feature_match(&mut self, field: &str, m: &ClusterFeatureMatch) {
        if m.feature_name.is_empty() {
            self.push(format!("{field}.featureName"), RuleErrorKind::Empty);
        }
        self.match_labels(&format!("{field}.matchLabels"), m.match_labels.iter(), true);
        self.requirements(
            &format!("{field}.matchExpressions"),
            &m.match_expressions,
            true,
        );
    }

    fn match_entry(&mut self, field: &str, e: &MatchEntry) {
        if let Some(key) = &e.object_key {
            match (&key.name, &key.namespace) {
                (None, None) => {
                    self.push(format!("{field}.objectKey"), RuleErrorKind::EmptyObjectKey)
                }
                (_, Some(ns)) => self.namespace(&format!("{field}.objectKey.namespace"), ns),
                _ => {}
            }
            if key.name.as_deref() == Some("") {
                self.push(format!("{field}.objectKey.name"), RuleErrorKind::Empty);
            }
        }
        for (i, ns) in e.namespaces.iter().enumerate() {
            self.namespace(&format!("{field}.namespaces[{i}]"), ns);
        }
        for (i, s) in e.labels.iter().enumerate() {
            self.label_selector(&format!("{field}.labels[{i}]"), s);
        }
        for (i, a) in e.annotations.iter().enumerate() {
            let f = format!("{field}.annotations[{i}]");
            // Annotation values are free text; only keys are constrained.
            self.match_labels(
                &format!("{f}.matchAnnotations"),
                a.match_annotations.iter(),
                false,
            );
            self.requirements(
                &format!("{f}.matchExpressions"),
                &a.match_expressions,
                false,
            );
        }
        for (i, c) in e.content.iter().enumerate() {
            self.pointer(&format!("{field}.content[{i}].key"), &c.key, false);
        }
    }

    fn mutations(&mut self, field: &str, m: &Mutations) {
        for (name, ar) in [("labels", &m.labels), ("annotations", &m.annotations)] {
            let Some(ar) = ar else { continue };
            let labels = name == "labels";
            self.match_labels(&format!("{field}.{name}.add"), ar.add.iter(), labels);
            for (i, k) in ar.remove.iter().enumerate() {
                if !is_qualified_name(k) {
                    self.push(
                        format!("{field}.{name}.remove[{i}]"),
                        RuleErrorKind::InvalidKey(k.clone()),
                    );
                }
            }
            let added = ar
                .add
                .keys()
                .map(|k| (format!("{field}.{name}.add[{k}]"), k));
            let removed = (ar.remove.iter().enumerate())
                .map(|(i, k)| (format!("{field}.{name}.remove[{i}]"), k));
            for (f, k) in added.chain(removed) {
                if is_reserved_key(k) {
                    let pointer = to_pointer(["metadata", name, k.as_str()]);
                    self.push(f, RuleErrorKind::ForgesStamp(pointer));
                }
            }
        }
        for (i, o) in m.overrides.iter().enumerate() {
            let f = format!("{field}.overrides[{i}]");
            self.pointer(&format!("{f}.path"), &o.path, false);
            // Removing `/metadata` is reported as a required field (below).
            let required =
                o.type_ == OverrideType::Remove && REQUIRED_PATHS.contains(&o.path.as_str());
            if !required && parse_field_pointer(&o.path).is_ok_and(|t| reaches_stamp(&t)) {
                self.push(
                    format!("{f}.path"),
                    RuleErrorKind::ForgesStamp(o.path.clone()),
                );
                continue;
            }
            match (o.type_, &o.value) {
                (OverrideType::Replace, None) => {
                    self.push(format!("{f}.value"), RuleErrorKind::ValueRequired)
                }
                (OverrideType::Remove, Some(_)) => {
                    self.push(format!("{f}.value"), RuleErrorKind::ValueForbidden)
                }
                (OverrideType::Replace, Some(value)) if !balanced_template(value) => self.push(
                    format!("{f}.value"),
                    RuleErrorKind::UnbalancedTemplate(value.clone()),
                ),
                (OverrideType::Replace, Some(value)) => self.identity_override(&f, &o.path, value),
                (OverrideType::Remove, None) => {
                    if REQUIRED_PATHS.contains(&o.path.as_str()) {
                        self.push(
                            format!("{f}.path"),
                            RuleErrorKind::RequiredFieldRemoved(o.path.clone()),
                        );
                    }
                }
            }
        }
        if let Some(gvk) = &m.group_version_kind {
            self.gvk(&format!("{field}.groupVersionKind"), gvk);
        }
    }

    /// A replace of the copy's name or namespace: the value may be a template (checked once
    /// rendered, per object), but a value that is empty, or a literal namespace that is not
    /// a DNS-1123 label, can never give a valid object.
    fn identity_override(&mut self, field: &str, path: &str, value: &str) {
        let is_template = value.contains("{{");
        match path {
            "/metadata/name" | "/metadata/namespace" if value.trim().is_empty() => {
                self.push(format!("{field}.value"), RuleErrorKind::Empty)
            }
            // A copy's identity must not follow the placement: a new choice
            // elsewhere would rename every other copy (and a held copy is
            // computed before placement said anything of it).
            "/metadata/name" | "/metadata/namespace"
                if is_template && value.contains("Placement") =>
            {
                self.push(
                    format!("{field}.value"),
                    RuleErrorKind::InvalidPlacement(
                        ".Placement cannot name a copy or its namespace".to_owned(),
                    ),
                )
            }
            "/metadata/namespace" if !is_template => {
                self.namespace(&format!("{field}.value"), value)
            }
            _ => {}
        }
    }

    fn drift_exclusion(&mut self, field: &str, e: &DriftExclusion) {
        if e.paths.is_empty() {
            self.push(format!("{field}.paths"), RuleErrorKind::Empty);
        }
        for (i, p) in e.paths.iter().enumerate() {
            self.pointer(&format!("{field}.paths[{i}]"), p, true);
        }
        if let Some(t) = &e.target {
            match t.kind.as_deref() {
                Some("") => self.push(format!("{field}.target.kind"), RuleErrorKind::Empty),
                Some(kind) if !is_kind(kind) => self.push(
                    format!("{field}.target.kind"),
                    RuleErrorKind::InvalidKind(kind.to_owned()),
                ),
                _ => {}
            }
            if t.name.as_deref() == Some("") {
                self.push(format!("{field}.target.name"), RuleErrorKind::Empty);
            }
            if let Some(ns) = &t.namespace {
                self.namespace(&format!("{field}.target.namespace"), ns);
            }
            if let Some(s) = &t.label_selector {
                self.label_selector(&format!("{field}.target.labelSelector"), s);
            }
        }
    }

    fn namespace(&mut self, field: &str, ns: &str) {
        if !is_dns1123_label(ns) {
            self.push(field, RuleErrorKind::InvalidNamespace(ns.to_owned()));
        }
    }

    fn pointer(&mut self, field: &str, pointer: &str, allow_wildcard: bool) {
        match parse_field_pointer(pointer) {
            Err(error) => self.push(
                field,
                RuleErrorKind::InvalidPointer {
                    pointer: pointer.to_owned(),
                    error,
                },
            ),
            Ok(tokens) if !allow_wildcard && tokens.iter().any(|t| t == "*") => {
                self.push(field, RuleErrorKind::WildcardNotAllowed(pointer.to_owned()))
            }
            Ok(_) => {}
        }
    }

    fn label_selector(&mut self, field: &str, s: &LabelSelector) {
        if let Some(labels) = &s.match_labels {
            self.match_labels(&format!("{field}.matchLabels"), labels.iter(), true);
        }
        if let Some(reqs) = &s.match_expressions {
            self.requirements(&format!("{field}.matchExpressions"), reqs, true);
        }
    }

    fn match_labels<'a>(
        &mut self,
        field: &str,
        entries: impl Iterator<Item = (&'a String, &'a String)>,
        check_values: bool,
    ) {
        for (k, val) in entries {
            if !is_qualified_name(k) {
                self.push(
                    format!("{field}[{k}]"),
                    RuleErrorKind::InvalidKey(k.clone()),
                );
            }
            if check_values && !is_label_value(val) {
                self.push(
                    format!("{field}[{k}]"),
                    RuleErrorKind::InvalidLabelValue(val.clone()),
                );
            }
        }
    }

    fn requirements(&mut self, field: &str, reqs: &[LabelSelectorRequirement], check_values: bool) {
        for (i, r) in reqs.iter().enumerate() {
            let f = format!("{field}[{i}]");
            if !is_qualified_name(&r.key) {
                self.push(format!("{f}.key"), RuleErrorKind::InvalidKey(r.key.clone()));
            }
            let values = r.values.as_deref().unwrap_or_default();
            match r.operator.as_str() {
                "In" | "NotIn" if values.is_empty() => self.push(
                    format!("{f}.values"),
                    RuleErrorKind::ValuesRequired(r.operator.clone()),
                ),
                "Exists" | "DoesNotExist" if !values.is_empty() => self.push(
                    format!("{f}.values"),
                    RuleErrorKind::ValuesForbidden(r.operator.clone()),
                ),
                "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
                other => self.push(
                    format!("{f}.operator"),
                    RuleErrorKind::InvalidOperator(other.to_owned()),
                ),
            }
            if check_values {
                for (j, val) in values.iter().enumerate() {
                    if !is_label_value(val) {
                        self.push(
                            format!("{f}.values[{j}]"),
                            RuleErrorKind::InvalidLabelValue(val.clone()),
                        );
                    }
                }
            }
        }
    }
}

/// Whether an override at these pointer tokens would write a `fleetbus.io/*` label or
/// annotation: the key itself (or inside it), or a map above it (`/metadata`,
/// `/metadata/labels`, `/metadata/annotations`), whose replace or removal would take
/// the stamp with it. The whole object (`""`) is refused as a pointer already.
fn reaches_stamp(tokens: &[String]) -> bool {
    match tokens {
        [meta] => meta == "metadata",
        [meta, map, rest @ ..]
            if meta == "metadata" && (map == "labels" || map == "annotations") =>
        {
            rest.first().is_none_or(|key| is_reserved_key(key))
        }
        _ => false,
    }
}

/// Paths a `remove` override must not name: without them the copy is not an object.
const REQUIRED_PATHS: [&str; 4] = ["/metadata", "/metadata/name", "/apiVersion", "/kind"];

/// Kinds are CamelCase identifiers (`ConfigMap`), as the API server requires of CRD kinds.
fn is_kind(kind: &str) -> bool {
    kind.starts_with(|c: char| c.is_ascii_uppercase())
        && kind.chars().all(|c| c.is_ascii_alphanumeric())
}

/// Every `{{` is closed by a `}}` before the next `{{`.
fn balanced_template(s: &str) -> bool {
    let mut rest = s;
    while let Some(open) = rest.find("{{") {
        let after = &rest[open + 2..];
        let Some(close) = after.find("}}") else {
            return false;
        };
        if after[..close].contains("{{") {
            return false;
        }
        rest = &after[close + 2..];
    }
    !rest.contains("}}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{
        AddRemove, AnnotationSelector, ContentMatch, DriftExclusion, ObjectKeyMatch, Override,
        SyncRule,
    };
    use std::collections::BTreeMap;

    fn valid_spec() -> ResourceSyncRuleSpec {
        ResourceSyncRuleSpec {
            group_version_kind: GroupVersionKind {
                group: String::new(),
                version: "v1".into(),
                kind: "ConfigMap".into(),
            },
            ..Default::default()
        }
    }

    #[test]
    fn values_from_names_config_maps() {
        let with = |name: &str, ns: Option<&str>| ResourceSyncRuleSpec {
            values_from: vec![crate::crd::ValuesFrom {
                config_map_ref: crate::crd::ConfigMapRef {
                    name: name.into(),
                    namespace: ns.map(Into::into),
                },
                optional: false,
            }],
            ..valid_spec()
        };
        assert_eq!(with("region", None).validate(), Ok(()));
        assert_eq!(with("region", Some("fleetbus-system")).validate(), Ok(()));
        assert_eq!(
            kinds(&with("Bad Name", Some("Bad NS"))),
            vec![
                (
                    "spec.valuesFrom[0].configMapRef.name".to_owned(),
                    RuleErrorKind::InvalidName("Bad Name".into())
                ),
                (
                    "spec.valuesFrom[0].configMapRef.namespace".to_owned(),
                    RuleErrorKind::InvalidNamespace("Bad NS".into())
                ),
            ]
        );
    }

    #[test]
    fn rollouts_that_cannot_move_are_invalid() {
        use crate::crd::{MaxUnavailable, Rollout, RolloutGroup, UpdatePolicy};
        use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
        let with = |r: Rollout| ResourceSyncRuleSpec {
            rollout: Some(r),
            ..valid_spec()
        };
        let group = |name: &str| RolloutGroup {
            name: name.into(),
            ..Default::default()
        };
        assert_eq!(with(Rollout::default()).validate(), Ok(()));
        let good = Rollout {
            max_unavailable: IntOrString::String("25%".into()),
            groups: vec![
                group("canary"),
                RolloutGroup {
                    max_unavailable: Some(IntOrString::Int(3)),
                    ..group("eu")
                },
            ],
            min_ready_seconds: 30,
            progress_deadline_seconds: 31,
            ..Default::default()
        };
        assert_eq!(with(good.clone()).validate(), Ok(()));
        for bad in [
            IntOrString::Int(0),
            IntOrString::Int(-2),
            IntOrString::String("0%".into()),
            IntOrString::String("101%".into()),
            IntOrString::String("25".into()),
            IntOrString::String("%".into()),
            IntOrString::String("-5%".into()),
        ] {
            let errs = kinds(&with(Rollout {
                max_unavailable: bad.clone(),
                ..Default::default()
            }));
            assert!(
                matches!(&errs[..], [(f, RuleErrorKind::InvalidMaxUnavailable(_))] if f == "spec.rollout.maxUnavailable"),
                "{bad:?}: {errs:?}"
            );
        }
        let bad = Rollout {
            groups: vec![
                group("canary"),
                group("Not A Label"),
                RolloutGroup {
                    max_unavailable: Some(IntOrString::String("x".into())),
                    ..group("canary")
                },
            ],
            min_ready_seconds: 10,
            progress_deadline_seconds: 10,
            ..Default::default()
        };
        let errs = kinds(&ResourceSyncRuleSpec {
            update_policy: UpdatePolicy::CreateOnly,
            ..with(bad)
        });
        let fields: Vec<&str> = errs.iter().map(|(f, _)| f.as_str()).collect();
        assert_eq!(
            fields,
            [
                "spec.rollout.groups[1].name",
                "spec.rollout.groups[2].name",
                "spec.rollout.groups[2].maxUnavailable",
                "spec.rollout.progressDeadlineSeconds",
                "spec.rollout",
            ]
        );
        assert_eq!(errs[1].1, RuleErrorKind::Duplicate("canary".into()));
        assert_eq!(
            errs[3].1.to_string(),
            "progressDeadlineSeconds (10) must be greater than minReadySeconds (10)"
        );
        assert_eq!(errs[4].1, RuleErrorKind::RolloutWithCreateOnly);
        let bundles = ResourceSyncRuleSpec {
            group_version_kind: GroupVersionKind {
                group: "fleetbus.io".into(),
                version: "v1alpha1".into(),
                kind: "Bundle".into(),
            },
            unwrap: true,
            rollout: Some(Rollout::default()),
            ..valid_spec()
        };
        assert_eq!(
            kinds(&bundles),
            vec![("spec.rollout".to_owned(), RuleErrorKind::RolloutWithUnwrap)]
        );
        // Budgets: a percent of few clusters still lets one move.
        let pct = MaxUnavailable::parse(&IntOrString::String("25%".into())).unwrap();
        assert_eq!((pct.of(3), pct.of(8), pct.of(0)), (1, 2, 1));
        assert_eq!(MaxUnavailable::Count(2).of(1), 2);
        assert_eq!(
            MaxUnavailable::parse(&IntOrString::String("100%".into())),
            Ok(MaxUnavailable::Percent(100))
        );
    }

    #[test]
    fn placement_cannot_name_a_copy() {
        let spec = |path: &str, value: &str| {
            let mut s = valid_spec();
            s.rules = vec![SyncRule {
                mutations: Some(Mutations {
                    overrides: vec![Override {
                        type_: OverrideType::Replace,
                        path: path.to_owned(),
                        value: Some(value.to_owned()),
                    }],
                    ..Mutations::default()
                }),
                ..SyncRule::default()
            }];
            s
        };
        let bad = spec("/metadata/name", "web-{{ .Placement.index }}");
        let errs = bad.validate().unwrap_err();
        assert!(
            errs.iter()
                .any(|e| e.to_string().contains(".Placement cannot name a copy")),
            "{errs:?}"
        );
        assert!(spec("/metadata/namespace", "{{ Placement.count }}")
            .validate()
            .is_err());
        assert!(spec("/metadata/labels/shard", "{{ .Placement.index }}")
            .validate()
            .is_ok());
    }

    #[test]
    fn depends_on_names_rules_once() {
        let with = |deps: &[&str]| ResourceSyncRuleSpec {
            depends_on: deps.iter().map(|d| d.to_string()).collect(),
            ..valid_spec()
        };
        assert_eq!(with(&["crds", "base.quota"]).validate(), Ok(()));
        assert_eq!(
            kinds(&with(&["crds", "Not A Rule", "crds"])),
            vec![
                (
                    "spec.dependsOn[1]".to_owned(),
                    RuleErrorKind::InvalidName("Not A Rule".into())
                ),
                (
                    "spec.dependsOn[2]".to_owned(),
                    RuleErrorKind::Duplicate("crds".into())
                ),
            ]
        );
    }

    #[test]
    fn health_expressions_present_and_bounded() {
        let with = |current: &str, failed: Option<String>| ResourceSyncRuleSpec {
            health: Some(crate::crd::HealthCheck {
                current: current.into(),
                failed,
            }),
            ..valid_spec()
        };
        assert_eq!(with("object.status.ready", None).validate(), Ok(()));
        assert_eq!(
            kinds(&with(" ", None)),
            vec![("spec.health.current".to_owned(), RuleErrorKind::Empty)]
        );
        let long = "a".repeat(crate::health::MAX_HEALTH_EXPRESSION + 1);
        assert_eq!(
            kinds(&with("true", Some(long))),
            vec![(
                "spec.health.failed".to_owned(),
                RuleErrorKind::TooLong {
                    len: crate::health::MAX_HEALTH_EXPRESSION + 1,
                    max: crate::health::MAX_HEALTH_EXPRESSION
                }
            )]
        );
    }

    #[test]
    fn unwrap_only_on_bundles_and_without_kind_mutations() {
        let bundle = GroupVersionKind {
            group: "fleetbus.io".into(),
            version: "v1alpha1".into(),
            kind: "Bundle".into(),
        };
        let ok = ResourceSyncRuleSpec {
            group_version_kind: bundle.clone(),
            unwrap: true,
            ..Default::default()
        };
        assert_eq!(ok.validate(), Ok(()));
        let on_config_maps = ResourceSyncRuleSpec {
            unwrap: true,
            ..valid_spec()
        };
        assert_eq!(
            kinds(&on_config_maps),
            vec![(
                "spec.unwrap".to_owned(),
                RuleErrorKind::UnwrapNeedsBundle("v1 ConfigMap".into())
            )]
        );
        let other_version = ResourceSyncRuleSpec {
            group_version_kind: GroupVersionKind {
                version: "v1beta1".into(),
                ..bundle.clone()
            },
            unwrap: true,
            ..Default::default()
        };
        assert_eq!(
            kinds(&other_version),
            vec![(
                "spec.unwrap".to_owned(),
                RuleErrorKind::UnwrapNeedsBundle("fleetbus.io/v1beta1 Bundle".into())
            )]
        );
        let retyped = ResourceSyncRuleSpec {
            rules: vec![SyncRule {
                mutations: Some(Mutations {
                    group_version_kind: Some(valid_spec().group_version_kind),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..ok.clone()
        };
        assert_eq!(
            kinds(&retyped),
            vec![(
                "spec.rules[0].mutations.groupVersionKind".to_owned(),
                RuleErrorKind::UnwrapKindMutation
            )]
        );
        // Without unwrap, a Bundle rule may do what any rule does.
        let plain = ResourceSyncRuleSpec {
            unwrap: false,
            ..retyped
        };
        assert_eq!(plain.validate(), Ok(()));
    }

    fn kinds(spec: &ResourceSyncRuleSpec) -> Vec<(String, RuleErrorKind)> {
        spec.validate()
            .unwrap_err()
            .into_iter()
            .map(|e| (e.field, e.kind))
            .collect()
    }

    fn req(key: &str, op: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: (!values.is_empty()).then(|| values.iter().map(|v| v.to_string()).collect()),
        }
    }

    #[test]
    fn minimal_rule_is_valid() {
        assert_eq!(valid_spec().validate(), Ok(()));
    }

    #[test]
    fn full_valid_rule_is_valid() {
        let mut spec = valid_spec();
        spec.group_version_kind.group = "networking.k8s.io".into();
        spec.group_version_kind.kind = "NetworkPolicy".into();
        spec.rules = vec![SyncRule {
            match_: vec![MatchEntry {
                object_key: Some(ObjectKeyMatch {
                    name: Some("system:controller:foo".into()),
                    namespace: None,
                }),
                namespaces: vec!["team-a".into()],
                labels: vec![LabelSelector {
                    match_expressions: Some(vec![req("app", "In", &["web"])]),
                    match_labels: Some(BTreeMap::from([("tier".into(), "fe".into())])),
                }],
                annotations: vec![AnnotationSelector {
                    match_annotations: BTreeMap::from([(
                        "example.com/note".into(),
                        "free text, any value".into(),
                    )]),
                    match_expressions: vec![req("example.com/x", "Exists", &[])],
                }],
                content: vec![ContentMatch {
                    key: "/spec/type".into(),
                    value: serde_json::json!("ClusterIP"),
                }],
            }],
            mutations: Some(Mutations {
                labels: Some(AddRemove {
                    add: BTreeMap::from([("copied".into(), "yes".into())]),
                    remove: vec!["app".into()],
                }),
                overrides: vec![
                    Override {
                        type_: OverrideType::Replace,
                        path: "/metadata/namespace".into(),
                        value: Some("{{ .Cluster.metadata.name }}-ns".into()),
                    },
                    Override {
                        type_: OverrideType::Remove,
                        path: "/spec/clusterIP".into(),
                        value: None,
                    },
                ],
                ..Default::default()
            }),
        }];
        spec.drift.exclusions = vec![DriftExclusion {
            paths: vec!["/spec/containers/*/image".into()],
            target: None,
        }];
        assert_eq!(spec.validate(), Ok(()));
    }

    #[test]
    fn empty_kind_and_version() {
        let mut spec = valid_spec();
        spec.group_version_kind.kind.clear();
        spec.group_version_kind.version.clear();
        assert_eq!(
            kinds(&spec),
            vec![
                ("spec.groupVersionKind.version".into(), RuleErrorKind::Empty),
                ("spec.groupVersionKind.kind".into(), RuleErrorKind::Empty),
            ]
        );
    }

    #[test]
    fn bad_group_and_kind() {
        let mut spec = valid_spec();
        spec.group_version_kind.group = "Not_A.Group".into();
        spec.group_version_kind.kind = "configMap".into();
        let k = kinds(&spec);
        assert!(matches!(k[0].1, RuleErrorKind::InvalidGroup(_)));
        assert!(matches!(k[1].1, RuleErrorKind::InvalidKind(_)));
    }

    #[test]
    fn bad_json_pointers() {
        let mut spec = valid_spec();
        spec.rules = vec![SyncRule {
            match_: vec![MatchEntry {
                content: vec![ContentMatch {
                    key: "spec.type".into(),
                    value: serde_json::Value::Null,
                }],
                ..Default::default()
            }],
            mutations: Some(Mutations {
                overrides: vec![Override {
                    type_: OverrideType::Remove,
                    path: "/a~2b".into(),
                    value: None,
                }],
                ..Default::default()
            }),
        }];
        spec.drift.exclusions = vec![DriftExclusion {
            paths: vec![String::new()],
            target: None,
        }];
        let k = kinds(&spec);
        assert_eq!(k.len(), 3, "{k:?}");
        assert_eq!(k[0].0, "spec.rules[0].match[0].content[0].key");
        assert!(matches!(
            k[0].1,
            RuleErrorKind::InvalidPointer {
                error: PointerError::MissingLeadingSlash,
                ..
            }
        ));
        assert!(matches!(
            k[1].1,
            RuleErrorKind::InvalidPointer {
                error: PointerError::InvalidEscape { .. },
                ..
            }
        ));
        assert!(matches!(
            k[2].1,
            RuleErrorKind::InvalidPointer {
                error: PointerError::Empty,
                ..
            }
        ));
    }

    #[test]
    fn wildcard_only_in_drift_exclusions() {
        let mut spec = valid_spec();
        spec.rules = vec![SyncRule {
            match_: vec![],
            mutations: Some(Mutations {
                overrides: vec![Override {
                    type_: OverrideType::Remove,
                    path: "/spec/*/x".into(),
                    value: None,
                }],
                ..Default::default()
            }),
        }];
        assert!(matches!(
            kinds(&spec)[0].1,
            RuleErrorKind::WildcardNotAllowed(_)
        ));
    }

    #[test]
    fn bad_selector_operators_and_values() {
        let mut spec = valid_spec();
        spec.cluster_selector = Some(LabelSelector {
            match_expressions: Some(vec![
                req("env", "Equals", &["x"]),
                req("env", "In", &[]),
                req("env", "Exists", &["x"]),
                req("bad key!", "Exists", &[]),
            ]),
            match_labels: None,
        });
        let k: Vec<_> = kinds(&spec).into_iter().map(|(_, k)| k).collect();
        assert_eq!(
            k,
            vec![
                RuleErrorKind::InvalidOperator("Equals".into()),
                RuleErrorKind::ValuesRequired("In".into()),
                RuleErrorKind::ValuesForbidden("Exists".into()),
                RuleErrorKind::InvalidKey("bad key!".into()),
            ]
        );
    }

    #[test]
    fn override_value_shape() {
        let mut spec = valid_spec();
        spec.rules = vec![SyncRule {
            match_: vec![],
            mutations: Some(Mutations {
                overrides: vec![
                    Override {
                        type_: OverrideType::Replace,
                        path: "/a".into(),
                        value: None,
                    },
                    Override {
                        type_: OverrideType::Remove,
                        path: "/a".into(),
                        value: Some("x".into()),
                    },
                    Override {
                        type_: OverrideType::Replace,
                        path: "/a".into(),
                        value: Some("{{ .Object.metadata.name".into()),
                    },
                ],
                ..Default::default()
            }),
        }];
        let k: Vec<_> = kinds(&spec).into_iter().map(|(_, k)| k).collect();
        assert_eq!(k[0], RuleErrorKind::ValueRequired);
        assert_eq!(k[1], RuleErrorKind::ValueForbidden);
        assert!(matches!(k[2], RuleErrorKind::UnbalancedTemplate(_)));
    }

    #[test]
    fn empty_object_key_and_bad_namespace() {
        let mut spec = valid_spec();
        spec.rules = vec![SyncRule {
            match_: vec![MatchEntry {
                object_key: Some(ObjectKeyMatch::default()),
                namespaces: vec!["Team_A".into()],
                ..Default::default()
            }],
            mutations: None,
        }];
        let k: Vec<_> = kinds(&spec).into_iter().map(|(_, k)| k).collect();
        assert_eq!(
            k,
            vec![
                RuleErrorKind::EmptyObjectKey,
                RuleErrorKind::InvalidNamespace("Team_A".into())
            ]
        );
    }

    #[test]
    fn error_display_names_field() {
        let mut spec = valid_spec();
        spec.group_version_kind.kind.clear();
        let errs = spec.validate().unwrap_err();
        assert_eq!(
            errs[0].to_string(),
            "spec.groupVersionKind.kind: must not be empty"
        );
    }

    fn with_overrides(overrides: Vec<Override>) -> ResourceSyncRuleSpec {
        ResourceSyncRuleSpec {
            rules: vec![SyncRule {
                match_: vec![],
                mutations: Some(Mutations {
                    overrides,
                    ..Default::default()
                }),
            }],
            ..valid_spec()
        }
    }

    fn replace(path: &str, value: &str) -> Override {
        Override::replace(path, value)
    }

    fn remove(path: &str) -> Override {
        Override::remove(path)
    }

    #[test]
    fn mutations_cannot_touch_the_stamp() {
        let forged = "/metadata/annotations/fleetbus.io~1origin-cluster";
        let mut spec = with_overrides(vec![
            replace(forged, "zzz"),
            replace(forged, ""),
            replace(forged, "{{ .LocalCluster.name }}"),
            remove("/metadata/labels/fleetbus.io~1managed"),
            replace("/metadata", "{}"),
            replace("/metadata/annotations", "{}"),
            remove("/metadata/labels"),
            replace("/metadata/labels/x.fleetbus.io~1y", "v"),
            // Allowed: other keys, other maps.
            replace("/metadata/annotations/example.com~1a", "v"),
            replace("/metadata/labels/app", "v"),
            replace("/spec/fleetbus.io~1x", "v"),
        ]);
        spec.rules[0].mutations.as_mut().unwrap().labels = Some(AddRemove {
            add: BTreeMap::from([("fleetbus.io/managed".into(), "false".into())]),
            remove: vec!["app".into()],
        });
        spec.rules[0].mutations.as_mut().unwrap().annotations = Some(AddRemove {
            add: BTreeMap::new(),
            remove: vec!["fleetbus.io/rule".into()],
        });
        let m = "spec.rules[0].mutations";
        let stamp = |f: &str, p: &str| (format!("{m}.{f}"), RuleErrorKind::ForgesStamp(p.into()));
        assert_eq!(
            kinds(&spec),
            vec![
                stamp(
                    "labels.add[fleetbus.io/managed]",
                    "/metadata/labels/fleetbus.io~1managed"
                ),
                stamp(
                    "annotations.remove[0]",
                    "/metadata/annotations/fleetbus.io~1rule"
                ),
                stamp("overrides[0].path", forged),
                stamp("overrides[1].path", forged),
                stamp("overrides[2].path", forged),
                stamp("overrides[3].path", "/metadata/labels/fleetbus.io~1managed"),
                stamp("overrides[4].path", "/metadata"),
                stamp("overrides[5].path", "/metadata/annotations"),
                stamp("overrides[6].path", "/metadata/labels"),
                stamp("overrides[7].path", "/metadata/labels/x.fleetbus.io~1y"),
            ]
        );
        let message = RuleError::summarize(&spec.validate().unwrap_err());
        assert!(message.contains(forged), "{message}");
    }

    #[test]
    fn name_and_namespace_overrides_that_cannot_give_an_object() {
        let spec = with_overrides(vec![
            replace("/metadata/name", ""),
            replace("/metadata/namespace", "  "),
            replace("/metadata/namespace", "Team_A"),
            remove("/metadata/name"),
            remove("/kind"),
            remove("/metadata"),
        ]);
        assert_eq!(
            kinds(&spec),
            vec![
                (
                    "spec.rules[0].mutations.overrides[0].value".into(),
                    RuleErrorKind::Empty
                ),
                (
                    "spec.rules[0].mutations.overrides[1].value".into(),
                    RuleErrorKind::Empty
                ),
                (
                    "spec.rules[0].mutations.overrides[2].value".into(),
                    RuleErrorKind::InvalidNamespace("Team_A".into())
                ),
                (
                    "spec.rules[0].mutations.overrides[3].path".into(),
                    RuleErrorKind::RequiredFieldRemoved("/metadata/name".into())
                ),
                (
                    "spec.rules[0].mutations.overrides[4].path".into(),
                    RuleErrorKind::RequiredFieldRemoved("/kind".into())
                ),
                (
                    "spec.rules[0].mutations.overrides[5].path".into(),
                    RuleErrorKind::RequiredFieldRemoved("/metadata".into())
                ),
            ]
        );
        // Templates are checked once rendered; literal good values and other removes pass.
        let ok = with_overrides(vec![
            replace("/metadata/name", "{{ .Object.metadata.name }}-copy"),
            replace("/metadata/namespace", "{{ .Cluster.metadata.name }}"),
            replace("/metadata/namespace", "team-b"),
            replace("/metadata/name", "fixed"),
            // Not `/metadata/labels`: the managed label is in it (see below).
            remove("/metadata/labels/app"),
        ]);
        assert_eq!(ok.validate(), Ok(()));
    }

    #[test]
    fn gvk_mutation_is_checked_like_the_rule_gvk() {
        let mut spec = valid_spec();
        spec.rules = vec![SyncRule {
            match_: vec![],
            mutations: Some(Mutations {
                group_version_kind: Some(GroupVersionKind {
                    group: "Bad_Group".into(),
                    version: "V1".into(),
                    kind: "lower".into(),
                }),
                ..Default::default()
            }),
        }];
        let f = "spec.rules[0].mutations.groupVersionKind";
        assert_eq!(
            kinds(&spec),
            vec![
                (
                    format!("{f}.group"),
                    RuleErrorKind::InvalidGroup("Bad_Group".into())
                ),
                (
                    format!("{f}.version"),
                    RuleErrorKind::InvalidVersion("V1".into())
                ),
                (
                    format!("{f}.kind"),
                    RuleErrorKind::InvalidKind("lower".into())
                ),
            ]
        );
    }

    #[test]
    fn drift_exclusion_targets() {
        use crate::crd::DriftTarget;
        let mut spec = valid_spec();
        spec.drift.exclusions = vec![DriftExclusion {
            paths: vec!["/spec/x".into(), "no-slash".into()],
            target: Some(DriftTarget {
                kind: Some("deployment".into()),
                namespace: Some("Bad NS".into()),
                name: Some(String::new()),
                label_selector: Some(LabelSelector {
                    match_expressions: Some(vec![req("app", "Like", &["x"])]),
                    match_labels: None,
                }),
            }),
        }];
        let f = "spec.drift.exclusions[0]";
        let k = kinds(&spec);
        assert_eq!(k.len(), 5, "{k:?}");
        assert_eq!(k[0].0, format!("{f}.paths[1]"));
        assert!(matches!(k[0].1, RuleErrorKind::InvalidPointer { .. }));
        assert_eq!(
            k[1],
            (
                format!("{f}.target.kind"),
                RuleErrorKind::InvalidKind("deployment".into())
            )
        );
        assert_eq!(k[2], (format!("{f}.target.name"), RuleErrorKind::Empty));
        assert_eq!(
            k[3],
            (
                format!("{f}.target.namespace"),
                RuleErrorKind::InvalidNamespace("Bad NS".into())
            )
        );
        assert_eq!(
            k[4],
            (
                format!("{f}.target.labelSelector.matchExpressions[0].operator"),
                RuleErrorKind::InvalidOperator("Like".into())
            )
        );
    }

    #[test]
    fn bad_label_values_in_every_selector() {
        let mut spec = valid_spec();
        let bad = LabelSelector {
            match_labels: Some(BTreeMap::from([("env".into(), "not ok!".into())])),
            match_expressions: Some(vec![req("env", "In", &["also bad!"])]),
        };
        spec.cluster_selector = Some(bad.clone());
        spec.source_cluster_selector = Some(bad.clone());
        spec.rules = vec![SyncRule {
            match_: vec![MatchEntry {
                labels: vec![bad],
                ..Default::default()
            }],
            mutations: None,
        }];
        let k = kinds(&spec);
        assert_eq!(k.len(), 6, "{k:?}");
        assert!(k
            .iter()
            .all(|(_, e)| matches!(e, RuleErrorKind::InvalidLabelValue(_))));
    }

    #[test]
    fn sync_status_with_status_return_is_rejected() {
        let with_sync_status = |status_return| ResourceSyncRuleSpec {
            status_return,
            rules: vec![SyncRule {
                match_: vec![],
                mutations: Some(Mutations {
                    sync_status: true,
                    ..Default::default()
                }),
            }],
            ..valid_spec()
        };
        assert_eq!(with_sync_status(StatusReturn::None).validate(), Ok(()));
        for sr in [StatusReturn::Singleton, StatusReturn::PerCluster] {
            assert_eq!(
                kinds(&with_sync_status(sr)),
                vec![(
                    "spec.rules[0].mutations.syncStatus".to_owned(),
                    RuleErrorKind::SyncStatusWithStatusReturn(format!("{sr:?}"))
                )]
            );
        }
        let msg = RuleError::summarize(
            &with_sync_status(StatusReturn::Singleton)
                .validate()
                .unwrap_err(),
        );
        assert!(msg.contains("oscillate"), "{msg}");
    }

    #[test]
    fn templates() {
        assert!(balanced_template("plain"));
        assert!(balanced_template("{{ a }}-{{ b }}"));
        assert!(!balanced_template("{{ a"));
        assert!(!balanced_template("a }}"));
        assert!(!balanced_template("{{ {{ a }}"));
    }
}
