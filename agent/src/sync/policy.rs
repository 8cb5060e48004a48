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
//!
//! Which policy is in force ([`in_force`]) fails closed: a typo must never
//! widen what leaves or enters. The SyncPolicy `default` absent: the
//! built-in default. Valid: its own. Invalid: the last valid version this
//! agent read stays in force; with none read since the agent started (a
//! restart forgets it: it is not stored, since a stored copy anyone with
//! write access to it could edit would be a second policy to trust), or
//! since the object was last deleted, the policy is *closed*: nothing is
//! exported for rules created elsewhere and no copy is written, while what
//! is already published or written stays (not withdrawn, not collected), so
//! a typo neither leaks nor deletes, until the object is fixed or deleted.

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
    /// The SyncPolicy `default` (a direction it leaves out is the built-in
    /// one), at this generation.
    Object {
        /// `metadata.generation` of the version read.
        generation: Option<i64>,
    },
    /// The SyncPolicy `default` is invalid (`why`): its last valid version
    /// this agent read stays in force.
    LastValid {
        /// Why the current version is refused.
        why: String,
        /// `metadata.generation` of the version in force.
        generation: Option<i64>,
    },
    /// The SyncPolicy `default` is invalid (`why`) and no valid version is
    /// known: nothing out for rules from elsewhere, nothing in, nothing that
    /// is out or in removed.
    Closed {
        /// Why the current version is refused.
        why: String,
    },
}

impl Origin {
    /// Why the SyncPolicy `default` is refused, if it is.
    pub fn invalid(&self) -> Option<&str> {
        match self {
            Self::LastValid { why, .. } | Self::Closed { why } => Some(why),
            Self::Builtin | Self::Object { .. } => None,
        }
    }

    /// What is in force, in the words of the `Valid` condition and the
    /// Warning Event.
    pub fn in_force(&self) -> String {
        let generation = |g: &Option<i64>| match g {
            Some(g) => format!(" (generation {g})"),
            None => String::new(),
        };
        match self {
            Self::Builtin => "the built-in default policy applies".to_owned(),
            Self::Object { generation: g } => {
                format!("SyncPolicy default{} applies", generation(g))
            }
            Self::LastValid { generation: g, .. } => format!(
                "the last valid SyncPolicy default{} stays in force until this one is fixed",
                generation(g)
            ),
            Self::Closed { .. } => CLOSED.to_owned(),
        }
    }
}

/// What a closed policy does, for messages.
const CLOSED: &str = "no valid SyncPolicy default is known to this agent (none read since it \
     started or since the policy was deleted), so none is in force: this cluster publishes \
     nothing for rules created on other clusters and writes no copies, keeping what is \
     already published or written, until the policy is fixed or deleted";

/// Who refused, when the policy is closed.
const CLOSED_BY: &str =
    "the invalid SyncPolicy default (no valid version known: nothing in or out until it is fixed)";

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

    /// Closed: every export for rules from elsewhere and every import
    /// refused, `why` the policy object is invalid.
    fn closed(why: String) -> Self {
        let deny = || PolicyDirection {
            rules: Vec::new(),
            otherwise: PolicyAction::Deny,
        };
        Self {
            export: deny(),
            export_builtin: false,
            import: deny(),
            import_builtin: false,
            origin: Origin::Closed { why },
        }
    }

    /// Whether the policy is closed: what a refusal would withdraw or
    /// collect stays, since the refusal comes from not knowing the policy,
    /// not from the policy.
    pub fn is_closed(&self) -> bool {
        matches!(self.origin, Origin::Closed { .. })
    }

    /// Whether `self` and `other` decide every export and import alike, and
    /// say alike why: only then may a change of policy skip planning
    /// everything again.
    pub fn decides_as(&self, other: &Policy) -> bool {
        fn parts(p: &Policy) -> (&PolicyDirection, bool, &PolicyDirection, bool, bool) {
            (
                &p.export,
                p.export_builtin,
                &p.import,
                p.import_builtin,
                p.is_closed(),
            )
        }
        parts(self) == parts(other)
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
            origin: Origin::Object {
                generation: obj.pointer("/metadata/generation").and_then(Value::as_i64),
            },
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
            self.whose(self.export_builtin),
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
            self.whose(self.import_builtin),
            Direction::Import,
            author,
            what,
        )
    }

    /// Who decides a direction, in refusals: `builtin` when the object
    /// leaves it out.
    fn whose(&self, builtin: bool) -> Whose {
        match self.origin {
            Origin::Closed { .. } => Whose::Closed,
            _ if builtin => Whose::Named("the built-in default policy"),
            _ => Whose::Named("SyncPolicy default"),
        }
    }
}

/// Who decides, as a refusal names it.
#[derive(Debug, Clone, Copy)]
enum Whose {
    /// A policy, and its entry (`export.rules[0]`) after it.
    Named(&'static str),
    /// No policy: closed, whatever the entry.
    Closed,
}

/// The policy in force once the SyncPolicy `default` is read as `object`
/// (None: there is none), `previous` the one in force until now (the
/// built-in default before the first read). See the module docs.
pub fn in_force(previous: &Policy, object: Option<&Value>) -> Policy {
    let Some(object) = object else {
        return Policy::default();
    };
    let why = match Policy::parse(object) {
        Ok(p) => return p,
        Err(e) => e.to_string(),
    };
    match &previous.origin {
        Origin::Object { generation } | Origin::LastValid { generation, .. } => Policy {
            origin: Origin::LastValid {
                why,
                generation: *generation,
            },
            ..previous.clone()
        },
        // The built-in default is not a version of this object: whoever
        // wrote the object meant something else, and what is not known.
        Origin::Builtin | Origin::Closed { .. } => Policy::closed(why),
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
    whose: Whose,
    direction: Direction,
    author: &str,
    what: &Subject<'_>,
) -> Result<(), Refusal> {
    let whose = match whose {
        Whose::Named(whose) => whose,
        Whose::Closed => {
            return Err(Refusal {
                direction,
                what: what.describe(),
                by: CLOSED_BY.to_owned(),
            })
        }
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
        assert_eq!(p.origin, Origin::Object { generation: None });
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

    /// Invalid SyncPolicy objects the API server accepts, and what the
    /// agent says of each.
    fn garbage() -> Vec<(Value, &'static str)> {
        let allow_all = json!({"export": {"otherwise": "Allow"}, "import": {"otherwise": "Allow"}});
        vec![
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
            (policy(json!([allow_all])), "spec does not parse"),
        ]
    }

    /// The probe's policy: no ConfigMap of `secretns` out, at `generation`.
    fn deny_secretns(generation: i64) -> Value {
        let mut p = policy(json!({"export": {"rules": [
            {"action": "Deny", "kinds": [{"kind": "ConfigMap"}], "namespaces": ["secretns"]}
        ]}}));
        p["metadata"]["generation"] = json!(generation);
        p
    }

    const CM_SECRETNS: Subject<'static> = Subject {
        group: "",
        kind: "ConfigMap",
        namespace: Some("secretns"),
    };

    #[test]
    fn garbage_is_refused_with_why_and_another_name_is_ignored() {
        for (obj, want) in garbage() {
            let err = Policy::parse(&obj).unwrap_err().to_string();
            assert!(err.contains(want), "{err} lacks {want}");
        }
        let mut other = policy(json!({"export": {"otherwise": "Allow"}}));
        other["metadata"]["name"] = json!("mine");
        assert_eq!(Policy::parse(&other), Err(PolicyError::Ignored));
    }

    #[test]
    fn absent_policy_is_the_builtin_default_and_valid_policy_its_own() {
        let previous = Policy::parse(&deny_secretns(3)).unwrap();
        // Deleted: the built-in default, whatever was in force.
        for previous in [Policy::default(), previous.clone(), {
            in_force(&Policy::default(), Some(&garbage()[0].0))
        }] {
            let p = in_force(&previous, None);
            assert_eq!(p, Policy::default());
            assert_eq!(p.origin.invalid(), None);
        }
        // Valid: its own, whatever was in force (closed too).
        let closed = in_force(&Policy::default(), Some(&garbage()[0].0));
        let p = in_force(&closed, Some(&deny_secretns(4)));
        assert_eq!(
            p.origin,
            Origin::Object {
                generation: Some(4)
            }
        );
        assert!(p.export("c2", "c1", &CM_SECRETNS).is_err());
        assert_eq!(p.export("c2", "c1", &CM_KS), Ok(()));
    }

    #[test]
    fn an_invalid_policy_keeps_the_last_valid_policy_in_force() {
        let valid = in_force(&Policy::default(), Some(&deny_secretns(1)));
        for (obj, want) in garbage() {
            let p = in_force(&valid, Some(&obj));
            let Origin::LastValid { why, generation } = &p.origin else {
                panic!("{obj}: {:?}", p.origin)
            };
            assert!(why.contains(want), "{why} lacks {want}");
            assert_eq!(*generation, Some(1));
            // It decides as the last valid one did, in the same words: the
            // typo widens nothing and nothing is planned again.
            assert!(p.decides_as(&valid), "{obj}");
            let r = p.export("c2", "c1", &CM_SECRETNS).unwrap_err();
            assert_eq!(r.by, "SyncPolicy default (export.rules[0])");
            assert!(p.import("c1", &CLUSTER_ROLE).is_err(), "{obj}");
            assert_eq!(p.export("c2", "c1", &CM_KS), Ok(()));
            assert!(!p.is_closed());
            assert_eq!(
                p.origin.in_force(),
                "the last valid SyncPolicy default (generation 1) stays in force until this one is fixed"
            );
            // Another typo after it: still the last valid one.
            let again = in_force(&p, Some(&garbage()[1].0));
            assert!(matches!(
                again.origin,
                Origin::LastValid {
                    generation: Some(1),
                    ..
                }
            ));
            assert!(again.decides_as(&valid));
        }
    }

    #[test]
    fn an_invalid_policy_with_no_valid_one_known_closes() {
        // Since the agent started (the built-in default before the first
        // read), or since the object was deleted: nothing known to keep.
        let deleted = in_force(&Policy::parse(&deny_secretns(1)).unwrap(), None);
        for previous in [Policy::default(), deleted] {
            for (obj, want) in garbage() {
                let p = in_force(&previous, Some(&obj));
                let Origin::Closed { why } = &p.origin else {
                    panic!("{obj}: {:?}", p.origin)
                };
                assert!(why.contains(want), "{why} lacks {want}");
                assert!(p.is_closed());
                assert!(!p.decides_as(&previous));
                // Nothing out for rules from elsewhere, nothing in: never
                // the built-in default, never "allow all".
                for what in [SECRET_TEAM, SECRET_KS, CM_KS, CM_SECRETNS, ROLE] {
                    let r = p.export("c2", "c1", &what).unwrap_err();
                    assert_eq!(r.direction, Direction::Export);
                    assert!(
                        r.by.starts_with("the invalid SyncPolicy default"),
                        "{}",
                        r.by
                    );
                    assert!(p.import("c1", &what).is_err());
                    assert!(p.import("c2", &what).is_err());
                    assert!(p.import_claimed("c2", "c1", true, &what).is_err());
                }
                // This cluster's own rules are still not asked.
                assert_eq!(p.export("c2", "c2", &CM_SECRETNS), Ok(()));
                // Closed stays closed through another typo.
                assert!(in_force(&p, Some(&garbage()[1].0)).is_closed());
            }
        }
        let closed = in_force(&Policy::default(), Some(&garbage()[0].0));
        assert!(closed
            .origin
            .in_force()
            .contains("publishes nothing for rules created on other clusters"));
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
