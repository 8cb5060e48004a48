//! Kubernetes label selectors (`metav1.LabelSelector`) over a label map, as
//! the API machinery validates and matches them: the agent's rule and
//! cluster selectors and `fleetbus notify`'s target filters use this one.

use std::collections::BTreeMap;

pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

use crate::k8s_names::{is_label_value, is_qualified_name};

/// A selector Kubernetes would refuse to convert (`metav1.LabelSelectorAsSelector`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    /// An operator other than `In`, `NotIn`, `Exists`, `DoesNotExist`.
    #[error("{operator:?} is not a valid label selector operator")]
    InvalidOperator {
        /// The operator as written.
        operator: String,
    },
    /// `In`/`NotIn` without values.
    #[error("operator {operator} on key {key:?} requires at least one value")]
    ValuesRequired {
        /// The requirement's key.
        key: String,
        /// `In` or `NotIn`.
        operator: String,
    },
    /// `Exists`/`DoesNotExist` with values.
    #[error("operator {operator} on key {key:?} must not have values")]
    ValuesForbidden {
        /// The requirement's key.
        key: String,
        /// `Exists` or `DoesNotExist`.
        operator: String,
    },
    /// A key that is not a qualified name (`[prefix/]name`).
    #[error("invalid selector key {key:?}")]
    InvalidKey {
        /// The key as written.
        key: String,
    },
    /// A value that is not a valid label value.
    #[error("invalid value {value:?} for selector key {key:?}")]
    InvalidValue {
        /// The requirement's key.
        key: String,
        /// The offending value.
        value: String,
    },
}

/// One requirement after validation: what `labels.NewRequirement` builds.
enum Requirement<'a> {
    In(&'a str, &'a [String]),
    NotIn(&'a str, &'a [String]),
    Exists(&'a str),
    DoesNotExist(&'a str),
}

impl Requirement<'_> {
    /// `labels.Requirement.Matches`: `NotIn` and `DoesNotExist` hold when the key is absent.
    fn matches(&self, map: &BTreeMap<String, String>) -> bool {
        match self {
            Requirement::In(k, vs) => map.get(*k).is_some_and(|v| vs.contains(v)),
            Requirement::NotIn(k, vs) => !map.get(*k).is_some_and(|v| vs.contains(v)),
            Requirement::Exists(k) => map.contains_key(*k),
            Requirement::DoesNotExist(k) => !map.contains_key(*k),
        }
    }
}

/// Validates one `matchExpressions` entry the way the API machinery does.
/// `label_values`: values must be label values (false for annotation selectors,
/// whose values are free text).
fn requirement(
    r: &LabelSelectorRequirement,
    label_values: bool,
) -> Result<Requirement<'_>, SelectorError> {
    let values = r.values.as_deref().unwrap_or_default();
    let needs_values = match r.operator.as_str() {
        "In" | "NotIn" => true,
        "Exists" | "DoesNotExist" => false,
        other => {
            return Err(SelectorError::InvalidOperator {
                operator: other.to_owned(),
            })
        }
    };
    if !is_qualified_name(&r.key) {
        return Err(SelectorError::InvalidKey { key: r.key.clone() });
    }
    match (needs_values, values.is_empty()) {
        (true, true) => {
            return Err(SelectorError::ValuesRequired {
                key: r.key.clone(),
                operator: r.operator.clone(),
            })
        }
        (false, false) => {
            return Err(SelectorError::ValuesForbidden {
                key: r.key.clone(),
                operator: r.operator.clone(),
            })
        }
        _ => {}
    }
    if label_values {
        if let Some(bad) = values.iter().find(|v| !is_label_value(v)) {
            return Err(SelectorError::InvalidValue {
                key: r.key.clone(),
                value: bad.clone(),
            });
        }
    }
    Ok(match r.operator.as_str() {
        "In" => Requirement::In(&r.key, values),
        "NotIn" => Requirement::NotIn(&r.key, values),
        "Exists" => Requirement::Exists(&r.key),
        _ => Requirement::DoesNotExist(&r.key),
    })
}

/// `matchLabels`-style equalities AND `matchExpressions` over `map`. Like Kubernetes,
/// the whole selector is validated before anything is matched, so a bad requirement
/// is an error even when an earlier one already fails.
pub fn map_selector_matches<'a>(
    equal: impl IntoIterator<Item = (&'a String, &'a String)>,
    expressions: &[LabelSelectorRequirement],
    map: &BTreeMap<String, String>,
    label_values: bool,
) -> Result<bool, SelectorError> {
    let mut equalities = Vec::new();
    for (k, v) in equal {
        if !is_qualified_name(k) {
            return Err(SelectorError::InvalidKey { key: k.clone() });
        }
        if label_values && !is_label_value(v) {
            return Err(SelectorError::InvalidValue {
                key: k.clone(),
                value: v.clone(),
            });
        }
        equalities.push((k, v));
    }
    let requirements = expressions
        .iter()
        .map(|r| requirement(r, label_values))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(equalities.iter().all(|(k, v)| map.get(*k) == Some(*v))
        && requirements.iter().all(|r| r.matches(map)))
}

/// Kubernetes label selector semantics over `labels`. `None` selects everything (an
/// absent cluster selector means "all clusters"); so does an empty selector `{}`.
pub fn selector_matches(
    sel: Option<&LabelSelector>,
    labels: &BTreeMap<String, String>,
) -> Result<bool, SelectorError> {
    let Some(sel) = sel else { return Ok(true) };
    map_selector_matches(
        sel.match_labels.iter().flatten(),
        sel.match_expressions.as_deref().unwrap_or_default(),
        labels,
        true,
    )
}
