//! Does a rule match an object or a cluster: label selectors, feature gates, match entries.

use std::collections::BTreeMap;

use fleetbus_schemas::crd::{
    AnnotationSelector, ClusterFeatureMatch, ContentMatch, MatchEntry, ObjectKeyMatch,
    ResourceSyncRuleSpec, SyncRule,
};
use fleetbus_schemas::pointer::parse_field_pointer;
use fleetbus_schemas::registry::FeatureRecord;
pub use fleetbus_schemas::selector::{map_selector_matches, selector_matches};
use serde_json::Value;

/// Every entry of `required` is satisfied by some advertised feature with that
/// `featureName` whose labels satisfy the entry's selector. An invalid selector
/// satisfies nothing (the rule is reported Invalid by validation anyway).
pub fn features_satisfy(required: &[ClusterFeatureMatch], features: &[FeatureRecord]) -> bool {
    required.iter().all(|m| {
        features.iter().any(|f| {
            f.feature_name == m.feature_name
                && map_selector_matches(&m.match_labels, &m.match_expressions, &f.labels, true)
                    == Ok(true)
        })
    })
}

/// `metadata.<field>` of an object as a string map (labels, annotations); absent or
/// malformed entries are left out.
pub fn string_map(obj: &Value, field: &str) -> BTreeMap<String, String> {
    obj.get("metadata")
        .and_then(|m| m.get(field))
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

/// `metadata.<field>` as a string, if set.
fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    obj.get("metadata")?.get(field)?.as_str()
}

/// Every criterion the entry sets holds for `obj` (unset criteria are not checked).
/// Selectors that Kubernetes would reject match nothing.
pub fn entry_matches(entry: &MatchEntry, obj: &Value) -> bool {
    let namespace = meta_str(obj, "namespace").unwrap_or_default();
    entry
        .object_key
        .as_ref()
        .is_none_or(|k| object_key_matches(k, obj))
        && (entry.namespaces.is_empty() || entry.namespaces.iter().any(|n| n == namespace))
        && (entry.labels.is_empty() || {
            let labels = string_map(obj, "labels");
            entry
                .labels
                .iter()
                .any(|s| selector_matches(Some(s), &labels) == Ok(true))
        })
        && (entry.annotations.is_empty() || {
            let annotations = string_map(obj, "annotations");
            entry
                .annotations
                .iter()
                .any(|s| annotation_selector_matches(s, &annotations))
        })
        && entry.content.iter().all(|c| content_matches(c, obj))
}

fn object_key_matches(key: &ObjectKeyMatch, obj: &Value) -> bool {
    key.name
        .as_deref()
        .is_none_or(|n| meta_str(obj, "name") == Some(n))
        && key
            .namespace
            .as_deref()
            .is_none_or(|n| meta_str(obj, "namespace").unwrap_or_default() == n)
}

fn annotation_selector_matches(
    sel: &AnnotationSelector,
    annotations: &BTreeMap<String, String>,
) -> bool {
    map_selector_matches(
        &sel.match_annotations,
        &sel.match_expressions,
        annotations,
        false,
    ) == Ok(true)
}

/// The value at the pointer equals the expected one; an absent field reads as `null`.
/// A pointer that does not parse matches nothing.
fn content_matches(c: &ContentMatch, obj: &Value) -> bool {
    let Ok(tokens) = parse_field_pointer(&c.key) else {
        return false;
    };
    let found = tokens
        .iter()
        .try_fold(obj, |v, t| match v {
            Value::Object(m) => m.get(t),
            Value::Array(a) => array_index(t).and_then(|i| a.get(i)),
            _ => None,
        })
        .unwrap_or(&Value::Null);
    json_eq(found, &c.value)
}

/// An RFC 6901 array index: decimal digits without leading zeros.
pub(crate) fn array_index(token: &str) -> Option<usize> {
    let digits = !token.is_empty() && token.bytes().all(|b| b.is_ascii_digit());
    if !digits || (token.len() > 1 && token.starts_with('0')) {
        return None;
    }
    token.parse().ok()
}

/// JSON equality where `1` equals `1.0` (a rule written in YAML may say `2.0` for a
/// field the API server returns as `2`); integers still compare exactly.
fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            match (x.as_i64(), y.as_i64(), x.as_u64(), y.as_u64()) {
                (Some(x), Some(y), _, _) => x == y,
                (_, _, Some(x), Some(y)) => x == y,
                _ => x.as_f64() == y.as_f64(),
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_eq(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_eq(v, w)))
        }
        _ => a == b,
    }
}

/// The rule entries matching `obj`, in order: `None` when the object is not synced by
/// this rule; `Some(vec![])` when the spec has no `rules` (sync everything unchanged).
/// An entry with an empty `match` list matches every object.
pub fn matching_rules<'a>(
    spec: &'a ResourceSyncRuleSpec,
    obj: &Value,
) -> Option<Vec<&'a SyncRule>> {
    if spec.rules.is_empty() {
        return Some(Vec::new());
    }
    let matched: Vec<&SyncRule> = spec
        .rules
        .iter()
        .filter(|r| r.match_.is_empty() || r.match_.iter().any(|e| entry_matches(e, obj)))
        .collect();
    (!matched.is_empty()).then_some(matched)
}

/// Whether `cluster` (labels and features) is a source of `rule`.
pub fn qualifies(
    rule: &super::compile::CompiledRule,
    labels: &BTreeMap<String, String>,
    features: &[fleetbus_schemas::registry::FeatureRecord],
) -> bool {
    selector_matches(rule.spec.source_cluster_selector.as_ref(), labels).unwrap_or(false)
        && features_satisfy(&rule.spec.cluster_feature_match, features)
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleetbus_schemas::selector::SelectorError;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
    use proptest::prelude::*;
    use serde_json::json;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn req(key: &str, op: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: (!values.is_empty()).then(|| values.iter().map(|v| v.to_string()).collect()),
        }
    }

    fn sel(ml: &[(&str, &str)], exprs: Vec<LabelSelectorRequirement>) -> LabelSelector {
        LabelSelector {
            match_labels: (!ml.is_empty()).then(|| labels(ml)),
            match_expressions: (!exprs.is_empty()).then_some(exprs),
        }
    }

    fn matches(s: &LabelSelector, l: &[(&str, &str)]) -> bool {
        selector_matches(Some(s), &labels(l)).unwrap()
    }

    #[test]
    fn absent_and_empty_selectors_select_everything() {
        assert!(selector_matches(None, &labels(&[])).unwrap());
        assert!(selector_matches(None, &labels(&[("a", "b")])).unwrap());
        let empty = LabelSelector::default();
        assert!(matches(&empty, &[]));
        assert!(matches(&empty, &[("a", "b")]));
        let explicit_empty = LabelSelector {
            match_labels: Some(BTreeMap::new()),
            match_expressions: Some(vec![]),
        };
        assert!(matches(&explicit_empty, &[("x", "y")]));
    }

    #[test]
    fn match_labels_are_anded() {
        let s = sel(&[("env", "prod"), ("tier", "fe")], vec![]);
        assert!(matches(&s, &[("env", "prod"), ("tier", "fe"), ("x", "y")]));
        assert!(!matches(&s, &[("env", "prod")]));
        assert!(!matches(&s, &[("env", "prod"), ("tier", "be")]));
        assert!(!matches(&s, &[]));
    }

    #[test]
    fn operators_follow_kubernetes() {
        let in_ = sel(&[], vec![req("env", "In", &["prod", "stage"])]);
        assert!(matches(&in_, &[("env", "prod")]));
        assert!(matches(&in_, &[("env", "stage")]));
        assert!(!matches(&in_, &[("env", "dev")]));
        assert!(!matches(&in_, &[]), "In needs the key");

        let not_in = sel(&[], vec![req("env", "NotIn", &["prod"])]);
        assert!(!matches(&not_in, &[("env", "prod")]));
        assert!(matches(&not_in, &[("env", "dev")]));
        assert!(
            matches(&not_in, &[]),
            "NotIn matches when the key is absent"
        );

        let exists = sel(&[], vec![req("gpu", "Exists", &[])]);
        assert!(matches(&exists, &[("gpu", "")]));
        assert!(!matches(&exists, &[("cpu", "x")]));

        let absent = sel(&[], vec![req("gpu", "DoesNotExist", &[])]);
        assert!(!matches(&absent, &[("gpu", "a100")]));
        assert!(matches(&absent, &[]));
    }

    #[test]
    fn labels_and_expressions_are_anded() {
        let s = sel(&[("env", "prod")], vec![req("gpu", "Exists", &[])]);
        assert!(matches(&s, &[("env", "prod"), ("gpu", "x")]));
        assert!(!matches(&s, &[("env", "prod")]));
        assert!(!matches(&s, &[("gpu", "x")]));
    }

    #[test]
    fn bad_selectors_are_errors() {
        let err = |s: LabelSelector| selector_matches(Some(&s), &labels(&[])).unwrap_err();
        assert!(matches!(
            err(sel(&[], vec![req("a", "Equals", &["x"])])),
            SelectorError::InvalidOperator { .. }
        ));
        assert!(matches!(
            err(sel(&[], vec![req("a", "in", &["x"])])),
            SelectorError::InvalidOperator { .. }
        ));
        assert!(matches!(
            err(sel(&[], vec![req("a", "In", &[])])),
            SelectorError::ValuesRequired { .. }
        ));
        assert!(matches!(
            err(sel(&[], vec![req("a", "NotIn", &[])])),
            SelectorError::ValuesRequired { .. }
        ));
        assert!(matches!(
            err(sel(&[], vec![req("a", "Exists", &["x"])])),
            SelectorError::ValuesForbidden { .. }
        ));
        assert!(matches!(
            err(sel(&[], vec![req("a", "DoesNotExist", &["x"])])),
            SelectorError::ValuesForbidden { .. }
        ));
        assert!(matches!(
            err(sel(&[], vec![req("bad key", "Exists", &[])])),
            SelectorError::InvalidKey { .. }
        ));
        assert!(matches!(
            err(sel(&[], vec![req("a", "In", &["not a value!"])])),
            SelectorError::InvalidValue { .. }
        ));
        assert!(matches!(
            err(sel(&[("a", "bad value!")], vec![])),
            SelectorError::InvalidValue { .. }
        ));
        // Validated before matching: a failing first requirement does not hide a bad second one.
        assert!(matches!(
            err(sel(&[("missing", "x")], vec![req("a", "Bogus", &[])])),
            SelectorError::InvalidOperator { .. }
        ));
    }

    fn feature(name: &str, l: &[(&str, &str)]) -> FeatureRecord {
        FeatureRecord {
            feature_name: name.into(),
            labels: labels(l),
        }
    }

    fn need(
        name: &str,
        ml: &[(&str, &str)],
        exprs: Vec<LabelSelectorRequirement>,
    ) -> ClusterFeatureMatch {
        ClusterFeatureMatch {
            feature_name: name.into(),
            match_labels: labels(ml),
            match_expressions: exprs,
        }
    }

    #[test]
    fn feature_gate() {
        let features = vec![
            feature("gpu", &[("vendor", "nvidia"), ("model", "a100")]),
            feature("ingress", &[("class", "nginx")]),
        ];
        assert!(features_satisfy(&[], &[]), "no requirement: no gate");
        assert!(features_satisfy(&[need("gpu", &[], vec![])], &features));
        assert!(!features_satisfy(&[need("gpu", &[], vec![])], &[]));
        assert!(features_satisfy(
            &[
                need(
                    "gpu",
                    &[("vendor", "nvidia")],
                    vec![req("model", "In", &["a100", "h100"])]
                ),
                need("ingress", &[], vec![req("class", "Exists", &[])]),
            ],
            &features
        ));
        // Every entry must be satisfied.
        assert!(!features_satisfy(
            &[need("gpu", &[], vec![]), need("storage", &[], vec![])],
            &features
        ));
        // Labels must match on the feature with that name, not on another one.
        assert!(!features_satisfy(
            &[need("gpu", &[("class", "nginx")], vec![])],
            &features
        ));
        assert!(!features_satisfy(
            &[need("gpu", &[], vec![req("model", "NotIn", &["a100"])])],
            &features
        ));
        // Two features with the same name: one satisfying is enough.
        let two = vec![
            feature("gpu", &[("model", "t4")]),
            feature("gpu", &[("model", "a100")]),
        ];
        assert!(features_satisfy(
            &[need("gpu", &[("model", "a100")], vec![])],
            &two
        ));
        // A bad selector satisfies nothing.
        assert!(!features_satisfy(
            &[need("gpu", &[], vec![req("model", "Has", &[])])],
            &features
        ));
    }

    fn cm(ns: Option<&str>, name: &str) -> Value {
        let mut meta = json!({"name": name, "labels": {"app": "web", "tier": "fe"},
            "annotations": {"example.com/owner": "team a, with spaces"}});
        if let Some(ns) = ns {
            meta["namespace"] = json!(ns);
        }
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta,
            "data": {"k": "v", "n": "1"}, "spec": {"replicas": 2, "list": [{"a": 1}]}})
    }

    #[test]
    fn empty_entry_matches_everything() {
        assert!(entry_matches(&MatchEntry::default(), &cm(Some("a"), "x")));
        assert!(entry_matches(&MatchEntry::default(), &json!({})));
    }

    #[test]
    fn object_key() {
        let o = cm(Some("team-a"), "conf");
        let key = |name: Option<&str>, namespace: Option<&str>| MatchEntry {
            object_key: Some(ObjectKeyMatch {
                name: name.map(Into::into),
                namespace: namespace.map(Into::into),
            }),
            ..Default::default()
        };
        assert!(entry_matches(&key(Some("conf"), None), &o));
        assert!(entry_matches(&key(Some("conf"), Some("team-a")), &o));
        assert!(entry_matches(&key(None, Some("team-a")), &o));
        assert!(!entry_matches(&key(Some("other"), None), &o));
        assert!(!entry_matches(&key(Some("conf"), Some("team-b")), &o));
        // A cluster-scoped object has no namespace.
        assert!(!entry_matches(
            &key(Some("conf"), Some("team-a")),
            &cm(None, "conf")
        ));
        assert!(entry_matches(&key(Some("conf"), None), &cm(None, "conf")));
    }

    #[test]
    fn namespaces_list() {
        let e = MatchEntry {
            namespaces: vec!["a".into(), "b".into()],
            ..Default::default()
        };
        assert!(entry_matches(&e, &cm(Some("a"), "x")));
        assert!(entry_matches(&e, &cm(Some("b"), "x")));
        assert!(!entry_matches(&e, &cm(Some("c"), "x")));
        assert!(!entry_matches(&e, &cm(None, "x")));
    }

    #[test]
    fn label_selectors_are_ored() {
        let e = MatchEntry {
            labels: vec![
                sel(&[("app", "db")], vec![]),
                sel(&[("tier", "fe")], vec![]),
            ],
            ..Default::default()
        };
        assert!(entry_matches(&e, &cm(Some("a"), "x")));
        let e = MatchEntry {
            labels: vec![
                sel(&[("app", "db")], vec![]),
                sel(&[("tier", "be")], vec![]),
            ],
            ..Default::default()
        };
        assert!(!entry_matches(&e, &cm(Some("a"), "x")));
        // A broken selector matches nothing but does not stop the others.
        let e = MatchEntry {
            labels: vec![
                sel(&[], vec![req("app", "Is", &[])]),
                sel(&[("app", "web")], vec![]),
            ],
            ..Default::default()
        };
        assert!(entry_matches(&e, &cm(Some("a"), "x")));
    }

    #[test]
    fn annotation_selectors_are_ored_and_take_free_text_values() {
        let a = |ma: &[(&str, &str)], exprs| AnnotationSelector {
            match_annotations: labels(ma),
            match_expressions: exprs,
        };
        let o = cm(Some("a"), "x");
        let e = MatchEntry {
            annotations: vec![a(&[("example.com/owner", "team a, with spaces")], vec![])],
            ..Default::default()
        };
        assert!(entry_matches(&e, &o));
        let e = MatchEntry {
            annotations: vec![
                a(&[("example.com/owner", "someone else")], vec![]),
                a(
                    &[],
                    vec![req("example.com/owner", "In", &["team a, with spaces"])],
                ),
            ],
            ..Default::default()
        };
        assert!(entry_matches(&e, &o));
        let e = MatchEntry {
            annotations: vec![a(&[], vec![req("example.com/owner", "DoesNotExist", &[])])],
            ..Default::default()
        };
        assert!(!entry_matches(&e, &o));
    }

    #[test]
    fn content_matches_are_anded_and_absent_is_null() {
        let o = cm(Some("a"), "x");
        let content = |pairs: Vec<(&str, Value)>| MatchEntry {
            content: pairs
                .into_iter()
                .map(|(k, v)| ContentMatch {
                    key: k.into(),
                    value: v,
                })
                .collect(),
            ..Default::default()
        };
        assert!(entry_matches(&content(vec![("/data/k", json!("v"))]), &o));
        assert!(entry_matches(
            &content(vec![("/spec/replicas", json!(2))]),
            &o
        ));
        assert!(entry_matches(
            &content(vec![("/spec/replicas", json!(2.0))]),
            &o
        ));
        assert!(entry_matches(
            &content(vec![("/spec/list/0/a", json!(1))]),
            &o
        ));
        assert!(entry_matches(
            &content(vec![("/spec/list", json!([{"a": 1}]))]),
            &o
        ));
        assert!(
            !entry_matches(&content(vec![("/data/n", json!(1))]), &o),
            "\"1\" is not 1"
        );
        assert!(entry_matches(
            &content(vec![("/data/absent", Value::Null)]),
            &o
        ));
        assert!(entry_matches(
            &content(vec![("/spec/list/7", Value::Null)]),
            &o
        ));
        assert!(!entry_matches(
            &content(vec![("/data/absent", json!(""))]),
            &o
        ));
        assert!(!entry_matches(
            &content(vec![("/data/k", json!("v")), ("/spec/replicas", json!(3))]),
            &o
        ));
        assert!(
            !entry_matches(&content(vec![("data/k", json!("v"))]), &o),
            "bad pointer"
        );
        assert!(!entry_matches(
            &content(vec![("/spec/list/00/a", json!(1))]),
            &o
        ));
    }

    #[test]
    fn every_set_criterion_must_hold() {
        let o = cm(Some("a"), "x");
        let mut e = MatchEntry {
            namespaces: vec!["a".into()],
            labels: vec![sel(&[("app", "web")], vec![])],
            content: vec![ContentMatch {
                key: "/data/k".into(),
                value: json!("v"),
            }],
            ..Default::default()
        };
        assert!(entry_matches(&e, &o));
        e.namespaces = vec!["b".into()];
        assert!(!entry_matches(&e, &o));
    }

    fn rule(entries: Vec<MatchEntry>) -> SyncRule {
        SyncRule {
            match_: entries,
            mutations: None,
        }
    }

    #[test]
    fn matching_rules_in_order() {
        let mut spec = ResourceSyncRuleSpec::default();
        let o = cm(Some("a"), "x");
        assert_eq!(
            matching_rules(&spec, &o),
            Some(vec![]),
            "no rules: sync all"
        );

        let in_ns = |ns: &str| MatchEntry {
            namespaces: vec![ns.into()],
            ..Default::default()
        };
        spec.rules = vec![
            rule(vec![in_ns("b")]),
            rule(vec![]),
            rule(vec![in_ns("c"), in_ns("a")]),
        ];
        let got = matching_rules(&spec, &o).unwrap();
        assert_eq!(got.len(), 2);
        assert!(std::ptr::eq(got[0], &spec.rules[1]));
        assert!(std::ptr::eq(got[1], &spec.rules[2]));

        spec.rules = vec![rule(vec![in_ns("b")])];
        assert_eq!(matching_rules(&spec, &o), None);
    }

    proptest! {
        #[test]
        fn not_in_is_the_negation_of_in(
            value in proptest::option::of("[a-c]"),
            set in proptest::collection::vec("[a-c]", 1..3),
        ) {
            let l: BTreeMap<String, String> = value.iter().map(|v| ("k".to_string(), v.clone())).collect();
            let vals: Vec<&str> = set.iter().map(String::as_str).collect();
            let i = selector_matches(Some(&sel(&[], vec![req("k", "In", &vals)])), &l).unwrap();
            let n = selector_matches(Some(&sel(&[], vec![req("k", "NotIn", &vals)])), &l).unwrap();
            prop_assert_ne!(i, n);
            let e = selector_matches(Some(&sel(&[], vec![req("k", "Exists", &[])])), &l).unwrap();
            let d = selector_matches(Some(&sel(&[], vec![req("k", "DoesNotExist", &[])])), &l).unwrap();
            prop_assert_ne!(e, d);
        }

        /// The rule compiler relies on it: a selector that passes
        /// `ResourceSyncRuleSpec::validate` never fails to evaluate, and one that
        /// fails to evaluate is rejected by validation.
        #[test]
        fn evaluation_errors_agree_with_rule_validation(
            reqs in proptest::collection::vec(
                (
                    prop_oneof![Just("app"), Just("example.com/x"), Just("bad key"), Just("")],
                    prop_oneof![Just("In"), Just("NotIn"), Just("Exists"), Just("DoesNotExist"), Just("Equals")],
                    proptest::collection::vec(prop_oneof![Just("a"), Just("b-1"), Just("bad value!")], 0..3),
                ),
                0..3,
            ),
            ml in proptest::collection::btree_map(
                prop_oneof![Just("app"), Just("bad key")],
                prop_oneof![Just("a"), Just("bad value!")],
                0..2,
            ),
        ) {
            let s = LabelSelector {
                match_labels: Some(ml.into_iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
                match_expressions: Some(reqs.iter().map(|(k, op, vs)| req(k, op, vs)).collect()),
            };
            let spec = ResourceSyncRuleSpec {
                group_version_kind: fleetbus_schemas::crd::GroupVersionKind {
                    group: String::new(),
                    version: "v1".into(),
                    kind: "ConfigMap".into(),
                },
                cluster_selector: Some(s.clone()),
                ..Default::default()
            };
            let evaluates = selector_matches(Some(&s), &labels(&[("app", "a")])).is_ok();
            prop_assert_eq!(evaluates, spec.validate().is_ok(), "{:?}", s);
        }

        #[test]
        fn match_labels_equal_to_the_labels_always_match(
            l in proptest::collection::btree_map("[a-z]{1,5}", "[a-z0-9]{0,5}", 0..5),
            extra in proptest::collection::btree_map("[A-Z]{1,5}", "[a-z]{0,5}", 0..3),
        ) {
            let s = LabelSelector { match_labels: Some(l.clone()), match_expressions: None };
            let mut all = l.clone();
            all.extend(extra);
            prop_assert!(selector_matches(Some(&s), &all).unwrap());
        }
    }
}
