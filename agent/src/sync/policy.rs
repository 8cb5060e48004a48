//! This cluster's SyncPolicy: what it publishes for rules created on other
//! clusters (`export`), and which copies it writes (`import`). Pure: the
//! engine reads the policy object from its watch and asks [`Policy::export`]
//! and [`Policy::import`]; writing the policy's status, counting and Events
//! are the engine's.
//!
//! Why a rule's author matters: rules are replicated to every cluster (the
//! built-in rule `(mesh-wide rules)`), so without a policy whoever may create
//! rules on one cluster makes every cluster publish what the rule selects
//! (SECURITY.md, "Rule authors"). A rule's author is the cluster it was
//! created on: the `fleetbus.io/origin-cluster` of its local copy (stamped by
//! the sink from the subject the rule arrived on, never taken from the
//! source), or this cluster for a rule without it. An original rule with
//! that annotation is never published (PROTOCOL §4.5), so a rule cannot
//! claim another author anywhere but on its own cluster, where claiming one
//! only narrows what the rule may export.
//!
//! `export` is not asked for this cluster's own rules: what its own
//! administrators select is theirs to publish. `import` is asked for every
//! rule, this cluster's own too: what a copy can do once written (a
//! ClusterRoleBinding, a webhook) does not depend on who asked for it, and a
//! local rule author may be someone the cluster's administrator would not
//! let create RBAC. Entries may name `authors` (this cluster's own name
//! included) to let some rules in.

use fleetbus_schemas::crd::{
    PolicyAction, PolicyDirection, PolicyEntry, PolicyKind, SyncPolicySpec, SYNC_POLICY_NAME,
};
use fleetbus_schemas::well_known;
use serde_json::Value;

/// The SyncPolicy kind (watched by every agent, like rules).
pub fn policy_gvk() -> kube::core::GroupVersionKind {
    kube::core::GroupVersionKind::gvk(well_known::GROUP, well_known::VERSION, "SyncPolicy")
}

/// At most this many entries per direction, and items per list of an entry:
/// a policy is read on every decision, and one this large is a mistake.
pub const MAX_ENTRIES: usize = 256;
/// At most this many bytes in one name of an entry (a DNS subdomain is 253).
const MAX_NAME: usize = 253;

/// Which way an object goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Direction {
    /// Published by this cluster (it is the source).
    Export,
    /// Written on this cluster as a copy (it is the sink).
    Import,
}

impl Direction {
    /// The metric label and the word in messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Export => "export",
            Self::Import => "import",
        }
    }
}

/// What a decision is about: the object's group, kind and namespace (None:
/// cluster-scoped). Every version: a policy names kinds, not versions.
#[derive(Debug, Clone, Copy)]
pub struct Subject<'a> {
    /// API group ("" for the core group).
    pub group: &'a str,
    /// Kind.
    pub kind: &'a str,
    /// Namespace, None if cluster-scoped.
    pub namespace: Option<&'a str>,
}

impl Subject<'_> {
    /// `Kind` (core) or `Kind.group`, and where: for status messages.
    pub fn describe(&self) -> String {
        let kind = if self.group.is_empty() {
            self.kind.to_owned()
        } else {
            format!("{}.{}", self.kind, self.group)
        };
        match self.namespace {
            Some(ns) => format!("{kind} in {ns}"),
            None => format!("{kind} (cluster-scoped)"),
        }
    }
}

/// Why a policy refused: which direction, what (`Kind in ns`), and which
/// entry of which policy decided.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Refusal {
    /// Export or import.
    pub direction: Direction,
    /// The kind and where, as [`Subject::describe`] says it.
    pub what: String,
    /// The entry that decided: `SyncPolicy default: export.rules[0]`, or the
    /// built-in default's.
    pub by: String,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} of {} refused by {}",
            self.direction.as_str(),
            self.what,
            self.by
        )
    }
}

/// Where the policy in force comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// No SyncPolicy `default` on this cluster.
    Builtin,
    /// The SyncPolicy `default` (a direction it leaves out is the built-in one).
    Object,
    /// The SyncPolicy `default` is invalid: the built-in default, and why.
    Invalid(String),
}

/// The policy in force on this cluster.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    export: PolicyDirection,
    export_builtin: bool,
    import: PolicyDirection,
    import_builtin: bool,
    /// Where it comes from (for the policy object's status).
    pub origin: Origin,
}

impl Default for Policy {
    fn default() -> Self {
        Self::builtin(Origin::Builtin)
    }
}

fn kind(group: &str, kind: &str) -> PolicyKind {
    PolicyKind {
        group: group.to_owned(),
        kind: kind.to_owned(),
    }
}

fn deny(kinds: Vec<PolicyKind>, namespaces: &[&str]) -> PolicyEntry {
    PolicyEntry {
        action: PolicyAction::Deny,
        kinds,
        namespaces: namespaces.iter().map(|n| (*n).to_owned()).collect(),
        authors: Vec::new(),
    }
}

/// The built-in export: no Secret out of `kube-system` (its Secrets are the
/// cluster's own credentials: cloud keys, the bootstrap and controller
/// secrets), everything else as before policies existed.
pub fn builtin_export() -> PolicyDirection {
    PolicyDirection {
        rules: vec![deny(vec![kind("", "Secret")], &["kube-system"])],
        otherwise: PolicyAction::Allow,
    }
}

/// The built-in import: nothing that grants or intercepts cluster-wide in
/// (ClusterRoles and their bindings: cluster-wide RBAC; admission webhook
/// configurations and policies: they see or change every write;
/// CustomResourceDefinitions: a conversion webhook sees every object of the
/// kind, and a replaced schema breaks the kind's controllers), everything
/// else as before policies existed.
pub fn builtin_import() -> PolicyDirection {
    PolicyDirection {
        rules: vec![deny(
            vec![
                kind("rbac.authorization.k8s.io", "ClusterRole"),
                kind("rbac.authorization.k8s.io", "ClusterRoleBinding"),
                kind("admissionregistration.k8s.io", "*"),
                kind("apiextensions.k8s.io", "CustomResourceDefinition"),
            ],
            &[],
        )],
        otherwise: PolicyAction::Allow,
    }
}

/// Why a SyncPolicy object is not used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// Not named `default`: only that one is read.
    #[error("only the SyncPolicy named {SYNC_POLICY_NAME:?} is read; this one is ignored")]
    Ignored,
    /// The spec does not parse (unknown field, wrong type).
    #[error("spec does not parse: {0}")]
    Parse(String),
    /// A value is out of bounds or makes no sense.
    #[error("{path}: {why}")]
    Invalid {
        /// JSON path of the value, e.g. `spec.export.rules[3].kinds`.
        path: String,
        /// What is wrong.
        why: String,
    },
}

fn invalid(path: String, why: impl Into<String>) -> PolicyError {
    PolicyError::Invalid {
        path,
        why: why.into(),
    }
}

fn check_names(path: &str, names: &[String]) -> Result<(), PolicyError> {
    if names.len() > MAX_ENTRIES {
        return Err(invalid(
            path.to_owned(),
            format!("{} items, at most {MAX_ENTRIES}", names.len()),
        ));
    }
    for (i, n) in names.iter().enumerate() {
        if n.is_empty() || n.len() > MAX_NAME {
            return Err(invalid(
                format!("{path}[{i}]"),
                format!("must be 1 to {MAX_NAME} bytes"),
            ));
        }
    }
    Ok(())
}

fn check_direction(path: &str, d: &PolicyDirection) -> Result<(), PolicyError> {
    if d.rules.len() > MAX_ENTRIES {
        return Err(invalid(
            format!("{path}.rules"),
            format!("{} entries, at most {MAX_ENTRIES}", d.rules.len()),
        ));
    }
    for (i, e) in d.rules.iter().enumerate() {
        let at = format!("{path}.rules[{i}]");
        if e.kinds.len() > MAX_ENTRIES {
            return Err(invalid(
                format!("{at}.kinds"),
                format!("{} items, at most {MAX_ENTRIES}", e.kinds.len()),
            ));
        }
        for (j, k) in e.kinds.iter().enumerate() {
            if k.kind.is_empty() || k.kind.len() > MAX_NAME || k.group.len() > MAX_NAME {
                return Err(invalid(
                    format!("{at}.kinds[{j}]"),
                    format!("kind must be 1 to {MAX_NAME} bytes (`*`: every kind of the group), group at most {MAX_NAME}"),
                ));
            }
        }
        check_names(&format!("{at}.namespaces"), &e.namespaces)?;
        check_names(&format!("{at}.authors"), &e.authors)?;
    }
    Ok(())
}

impl Policy {
    fn builtin(origin: Origin) -> Self {
        Self {
            export: builtin_export(),
            export_builtin: true,
            import: builtin_import(),
            import_builtin: true,
            origin,
        }
    }

    /// The policy a SyncPolicy object gives: its own, or the built-in
    /// default when it is invalid (never "allow all").
    pub fn from_object(obj: &Value) -> Self {
        match Self::parse(obj) {
            Ok(p) => p,
            Err(e) => Self::builtin(Origin::Invalid(e.to_string())),
        }
    }

    /// Parses and checks a SyncPolicy object.
    pub fn parse(obj: &Value) -> Result<Self, PolicyError> {
        if obj.pointer("/metadata/name").and_then(Value::as_str) != Some(SYNC_POLICY_NAME) {
            return Err(PolicyError::Ignored);
        }
        let spec: SyncPolicySpec = match obj.get("spec") {
            None | Some(Value::Null) => SyncPolicySpec::default(),
            Some(v) => {
                serde_json::from_value(v.clone()).map_err(|e| PolicyError::Parse(e.to_string()))?
            }
        };
        if let Some(d) = &spec.export {
            check_direction("spec.export", d)?;
        }
        if let Some(d) = &spec.import {
            check_direction("spec.import", d)?;
        }
        Ok(Self {
            export_builtin: spec.export.is_none(),
            export: spec.export.unwrap_or_else(builtin_export),
            import_builtin: spec.import.is_none(),
            import: spec.import.unwrap_or_else(builtin_import),
            origin: Origin::Object,
        })
    }

    /// May this cluster (`local`) publish an object like `what` for a rule
    /// created on `author`? Always, for its own rules.
    pub fn export(&self, local: &str, author: &str, what: &Subject<'_>) -> Result<(), Refusal> {
        if author == local {
            return Ok(());
        }
        decide(
            &self.export,
            self.export_builtin,
            Direction::Export,
            author,
            what,
        )
    }

    /// May this cluster write a copy like `what` for a rule created on
    /// `author` (this cluster's name for its own rules)?
    pub fn import(&self, author: &str, what: &Subject<'_>) -> Result<(), Refusal> {
        decide(
            &self.import,
            self.import_builtin,
            Direction::Import,
            author,
            what,
        )
    }
}

impl Policy {
    /// [`Policy::import`] for a rule whose author is `author` by a claim
    /// (its object's `fleetbus.io/origin-cluster`), `verified` when the bus
    /// holds that author's envelope of the rule. A claim the bus does not
    /// back may be a local rule someone annotated as another cluster's, to
    /// pass an entry that names that cluster: it must pass as this
    /// cluster's own too.
    pub fn import_claimed(
        &self,
        local: &str,
        author: &str,
        verified: bool,
        what: &Subject<'_>,
    ) -> Result<(), Refusal> {
        self.import(author, what)?;
        if author != local && !verified {
            self.import(local, what)?;
        }
        Ok(())
    }
}

fn matches(e: &PolicyEntry, author: &str, what: &Subject<'_>) -> bool {
    let kind_ok = e.kinds.is_empty()
        || e.kinds
            .iter()
            .any(|k| k.group == what.group && (k.kind == "*" || k.kind == what.kind));
    let ns_ok = e.namespaces.is_empty()
        || what
            .namespace
            .is_some_and(|ns| e.namespaces.iter().any(|n| n == ns));
    let author_ok = e.authors.is_empty() || e.authors.iter().any(|a| a == author);
    kind_ok && ns_ok && author_ok
}

/// The first entry that matches decides; `otherwise` when none does.
fn decide(
    d: &PolicyDirection,
    builtin: bool,
    direction: Direction,
    author: &str,
    what: &Subject<'_>,
) -> Result<(), Refusal> {
    let whose = if builtin {
        "the built-in default policy"
    } else {
        "SyncPolicy default"
    };
    let (action, by) = match d.rules.iter().position(|e| matches(e, author, what)) {
        Some(i) => (
            d.rules[i].action,
            format!("{whose} ({}.rules[{i}])", direction.as_str()),
        ),
        None => (
            d.otherwise,
            format!("{whose} ({}.otherwise)", direction.as_str()),
        ),
    };
    match action {
        PolicyAction::Allow => Ok(()),
        PolicyAction::Deny => Err(Refusal {
            direction,
            what: what.describe(),
            by,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const SECRET_TEAM: Subject<'static> = Subject {
        group: "",
        kind: "Secret",
        namespace: Some("team"),
    };
    const SECRET_KS: Subject<'static> = Subject {
        group: "",
        kind: "Secret",
        namespace: Some("kube-system"),
    };
    const CM_KS: Subject<'static> = Subject {
        group: "",
        kind: "ConfigMap",
        namespace: Some("kube-system"),
    };
    const CLUSTER_ROLE: Subject<'static> = Subject {
        group: "rbac.authorization.k8s.io",
        kind: "ClusterRole",
        namespace: None,
    };
    const ROLE: Subject<'static> = Subject {
        group: "rbac.authorization.k8s.io",
        kind: "Role",
        namespace: Some("team"),
    };
    const WEBHOOK: Subject<'static> = Subject {
        group: "admissionregistration.k8s.io",
        kind: "MutatingWebhookConfiguration",
        namespace: None,
    };

    fn policy(spec: Value) -> Value {
        json!({"apiVersion": "fleetbus.io/v1alpha1", "kind": "SyncPolicy",
               "metadata": {"name": "default"}, "spec": spec})
    }

    #[test]
    fn the_builtin_default_keeps_kube_system_secrets_and_cluster_rbac_home() {
        let p = Policy::default();
        // Export: foreign rules get no Secret of kube-system, all the rest.
        let r = p.export("c2", "c1", &SECRET_KS).unwrap_err();
        assert_eq!(r.direction, Direction::Export);
        assert_eq!(r.what, "Secret in kube-system");
        assert_eq!(r.by, "the built-in default policy (export.rules[0])");
        assert_eq!(p.export("c2", "c1", &SECRET_TEAM), Ok(()));
        assert_eq!(p.export("c2", "c1", &CM_KS), Ok(()));
        // This cluster's own rules are never asked.
        assert_eq!(p.export("c2", "c2", &SECRET_KS), Ok(()));
        // Import: cluster-wide RBAC, webhooks and CRDs stay out, whoever
        // authored the rule (this cluster too); namespaced RBAC comes in.
        for s in [CLUSTER_ROLE, WEBHOOK] {
            assert!(p.import("c1", &s).is_err(), "{s:?}");
            assert!(p.import("c2", &s).is_err(), "{s:?}");
        }
        let crd = Subject {
            group: "apiextensions.k8s.io",
            kind: "CustomResourceDefinition",
            namespace: None,
        };
        assert!(p.import("c1", &crd).is_err());
        assert_eq!(
            p.import("c1", &CLUSTER_ROLE).unwrap_err().to_string(),
            "import of ClusterRole.rbac.authorization.k8s.io (cluster-scoped) refused by the built-in default policy (import.rules[0])"
        );
        assert_eq!(p.import("c1", &ROLE), Ok(()));
        assert_eq!(p.import("c1", &SECRET_KS), Ok(()));
    }

    #[test]
    fn the_first_matching_entry_decides_then_otherwise() {
        let p = Policy::parse(&policy(json!({
            "export": {"rules": [
                {"action": "Allow", "kinds": [{"kind": "Secret"}], "namespaces": ["team"], "authors": ["hub"]},
                {"action": "Deny", "kinds": [{"kind": "Secret"}]}
            ]},
            "import": {"rules": [
                {"action": "Allow", "kinds": [{"group": "rbac.authorization.k8s.io", "kind": "*"}], "authors": ["hub"]}
            ], "otherwise": "Deny"}
        })))
        .unwrap();
        assert_eq!(p.origin, Origin::Object);
        // Export: Secrets of team only for rules authored on the hub.
        assert_eq!(p.export("c2", "hub", &SECRET_TEAM), Ok(()));
        let r = p.export("c2", "c1", &SECRET_TEAM).unwrap_err();
        assert_eq!(r.by, "SyncPolicy default (export.rules[1])");
        // The hub's rule gets no Secret of another namespace: entry 0 does
        // not match (namespace), entry 1 does.
        assert!(p.export("c2", "hub", &SECRET_KS).is_err());
        // Not a Secret: no entry, otherwise Allow (the default of the field).
        assert_eq!(p.export("c2", "c1", &CM_KS), Ok(()));
        // Import: RBAC from the hub's rules only; the rest refused by otherwise.
        assert_eq!(p.import("hub", &CLUSTER_ROLE), Ok(()));
        assert_eq!(p.import("hub", &ROLE), Ok(()));
        let r = p.import("c1", &CLUSTER_ROLE).unwrap_err();
        assert_eq!(r.by, "SyncPolicy default (import.otherwise)");
        assert!(p.import("c1", &CM_KS).is_err());
    }

    #[test]
    fn an_author_the_bus_does_not_back_must_pass_as_this_cluster_too() {
        let p = Policy::parse(&policy(json!({"import": {"rules": [
            {"action": "Allow", "kinds": [{"group": "rbac.authorization.k8s.io", "kind": "ClusterRole"}], "authors": ["hub"]},
            {"action": "Deny", "kinds": [{"group": "rbac.authorization.k8s.io", "kind": "ClusterRole"}]}
        ]}})))
        .unwrap();
        // The hub's rule, its envelope on the bus: in.
        assert_eq!(p.import_claimed("c2", "hub", true, &CLUSTER_ROLE), Ok(()));
        // A local rule annotated as the hub's: judged as c2's own too.
        let r = p
            .import_claimed("c2", "hub", false, &CLUSTER_ROLE)
            .unwrap_err();
        assert_eq!(r.by, "SyncPolicy default (import.rules[1])");
        // What c2's own rules may import, an unbacked claim may too.
        assert_eq!(p.import_claimed("c2", "hub", false, &ROLE), Ok(()));
        assert_eq!(p.import_claimed("c2", "c2", false, &ROLE), Ok(()));
        // A claim never widens: refused for the claimed author is refused.
        assert!(p.import_claimed("c2", "c1", true, &CLUSTER_ROLE).is_err());
    }

    #[test]
    fn namespaces_never_match_a_cluster_scoped_object() {
        let p = Policy::parse(&policy(json!({
            "import": {"rules": [{"action": "Deny", "namespaces": ["team"]}]}
        })))
        .unwrap();
        assert_eq!(p.import("c1", &CLUSTER_ROLE), Ok(()));
        assert!(p.import("c1", &ROLE).is_err());
    }

    #[test]
    fn a_direction_left_out_keeps_the_builtin_one() {
        let p = Policy::parse(&policy(json!({"export": {"otherwise": "Allow"}}))).unwrap();
        // Export: the object's own (allow everything, kube-system too).
        assert_eq!(p.export("c2", "c1", &SECRET_KS), Ok(()));
        // Import: the built-in one, and it says so.
        let r = p.import("c1", &CLUSTER_ROLE).unwrap_err();
        assert!(r.by.starts_with("the built-in default"), "{}", r.by);
        // No spec at all: both built-in.
        let bare = json!({"metadata": {"name": "default"}});
        let p = Policy::parse(&bare).unwrap();
        assert!(p.export("c2", "c1", &SECRET_KS).is_err());
    }

    #[test]
    fn an_invalid_policy_falls_back_to_the_default_not_to_allow_all() {
        let allow_all = json!({"export": {"otherwise": "Allow"}, "import": {"otherwise": "Allow"}});
        let cases = [
            // A typo: read as absent it would silently mean "default".
            (
                policy(json!({"export": {"otherwise": "Allow"}, "imports": {}})),
                "unknown field `imports`",
            ),
            (
                policy(
                    json!({"export": {"otherwise": "Allow", "rules": [{"action": "Allow", "kind": "Secret"}]}}),
                ),
                "unknown field `kind`",
            ),
            // Wrong types and values.
            (
                policy(json!({"export": {"rules": "all"}, "import": {"otherwise": "Allow"}})),
                "invalid type",
            ),
            (
                policy(json!({"export": {"otherwise": "Yes"}})),
                "unknown variant `Yes`",
            ),
            (
                policy(
                    json!({"export": {"rules": [{"action": "Allow", "kinds": [{"kind": ""}]}]}}),
                ),
                "spec.export.rules[0].kinds[0]",
            ),
            (
                policy(json!({"import": {"rules": [{"action": "Allow", "namespaces": [""]}]}})),
                "spec.import.rules[0].namespaces[0]",
            ),
            (policy(json!("everything")), "invalid type"),
            (policy(json!([allow_all.clone()])), "spec does not parse"),
        ];
        for (obj, want) in cases {
            let err = Policy::parse(&obj).unwrap_err().to_string();
            assert!(err.contains(want), "{err} lacks {want}");
            let p = Policy::from_object(&obj);
            assert!(matches!(p.origin, Origin::Invalid(_)), "{obj}");
            assert!(p.export("c2", "c1", &SECRET_KS).is_err(), "{obj}");
            assert!(p.import("c1", &CLUSTER_ROLE).is_err(), "{obj}");
            assert_eq!(p.export("c2", "c1", &SECRET_TEAM), Ok(()));
        }
        // Another name: ignored, whatever it says.
        let mut other = policy(allow_all);
        other["metadata"]["name"] = json!("mine");
        assert_eq!(Policy::parse(&other), Err(PolicyError::Ignored));
    }

    #[test]
    fn huge_lists_are_refused_whole_without_panic() {
        let many: Vec<Value> = (0..=MAX_ENTRIES)
            .map(|i| json!({"action": "Allow", "namespaces": [format!("ns{i}")]}))
            .collect();
        let err = Policy::parse(&policy(json!({"export": {"rules": many}}))).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "spec.export.rules: {} entries, at most {MAX_ENTRIES}",
                MAX_ENTRIES + 1
            )
        );
        let names: Vec<String> = (0..=MAX_ENTRIES).map(|i| format!("ns{i}")).collect();
        let err = Policy::parse(&policy(
            json!({"import": {"rules": [{"action": "Deny", "authors": names}]}}),
        ))
        .unwrap_err();
        assert!(err.to_string().starts_with("spec.import.rules[0].authors:"));
        let long = "x".repeat(10_000);
        let err = Policy::parse(&policy(
            json!({"import": {"rules": [{"action": "Deny", "kinds": [{"group": long, "kind": "K"}]}]}}),
        ))
        .unwrap_err();
        assert!(err.to_string().starts_with("spec.import.rules[0].kinds[0]"));
    }
}
