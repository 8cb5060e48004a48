//! What the source side publishes of one original, and how it tells cheaply
//! whether that differs from what the bus holds.
//!
//! `.status` is left out of the published object unless a rule that matches
//! the object syncs it (`mutations.syncStatus`) or matches on it (a content
//! match under `/status`): status is in the content hash, so otherwise every
//! status write on the origin (a rollout, a controller's heartbeat) would
//! republish the object to every sink for nothing (PROTOCOL §4).
//!
//! Hashing (serialise + sha256) every original on every pass is the source
//! side's main cost. The content of a published object is fixed by the
//! object's uid and resourceVersion and by whether status is included, so
//! [`HashMemo`] remembers the hash per object for those three and a pass
//! hashes only what changed since.

use std::collections::BTreeMap;

use fleetbus_schemas::crd::SyncRule;
use fleetbus_schemas::envelope::content_hash;
use fleetbus_schemas::subject::ObjectKey;
use serde_json::Value;

use crate::sync::rules::compile::CompiledRule;
use crate::sync::sink::mutate;

/// Whether the object published for `obj` carries its `.status`: some
/// `matched` entry list (one per rule matching `obj`) syncs status, or some
/// of `rules` matches on status (a sink matches the published object again
/// and must find what the origin found).
pub fn keeps_status(rules: &[&CompiledRule], matched: &[Vec<&SyncRule>]) -> bool {
    matched.iter().any(|entries| mutate::syncs_status(entries))
        || rules.iter().copied().any(matches_on_status)
}

/// A rule with a content match under `/status`.
fn matches_on_status(rule: &CompiledRule) -> bool {
    rule.spec
        .rules
        .iter()
        .flat_map(|r| &r.match_)
        .flat_map(|m| &m.content)
        .any(|c| c.key == "/status" || c.key.starts_with("/status/"))
}

/// The object as published: `obj`, without `.status` unless `with_status`.
pub fn published_object(obj: &Value, with_status: bool) -> Value {
    let mut out = obj.clone();
    if !with_status {
        if let Some(top) = out.as_object_mut() {
            top.remove("status");
        }
    }
    out
}

/// Whether `received`, the last value of our own subject for `local` (its
/// hash checked on receipt, so it covers what is hashed), agrees with what we
/// publish in the metadata the content hash leaves out and sinks still read:
/// `uid` (the copy's origin-uid) and `creationTimestamp` (the oldest source
/// wins a conflict). `resourceVersion` and `managedFields` may differ: a
/// status write changes them and is not published.
pub fn same_identity(received: &Value, local: &Value) -> bool {
    ["/metadata/uid", "/metadata/creationTimestamp"]
        .iter()
        .all(|p| received.pointer(p) == local.pointer(p))
}

/// The version of one object a hash was computed for.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Version {
    uid: String,
    resource_version: String,
    with_status: bool,
}

/// Content hashes of our originals' published form, by object, for the
/// version each was computed for.
#[derive(Debug, Default)]
pub struct HashMemo {
    hashes: BTreeMap<ObjectKey, (Version, String)>,
}

impl HashMemo {
    /// The content hash of `obj` published with or without status: from the
    /// memo when this version was hashed before, else computed (and then the
    /// published object is returned too, so it is not built twice).
    pub fn hash(
        &mut self,
        key: &ObjectKey,
        obj: &Value,
        with_status: bool,
    ) -> (String, Option<Value>) {
        let s = |p: &str| obj.pointer(p).and_then(Value::as_str).unwrap_or_default();
        let version = Version {
            uid: s("/metadata/uid").to_owned(),
            resource_version: s("/metadata/resourceVersion").to_owned(),
            with_status,
        };
        // Without a resourceVersion there is nothing to tell versions apart.
        if !version.resource_version.is_empty() {
            if let Some((v, h)) = self.hashes.get(key) {
                if *v == version {
                    return (h.clone(), None);
                }
            }
        }
        let published = published_object(obj, with_status);
        let hash = content_hash(&published);
        self.hashes.insert(key.clone(), (version, hash.clone()));
        (hash, Some(published))
    }

    /// Forgets the objects `keep` says no.
    pub fn retain(&mut self, mut keep: impl FnMut(&ObjectKey) -> bool) {
        self.hashes.retain(|k, _| keep(k));
    }

    /// Forgets the hash of the object at `key` (gone, or no longer ours).
    pub fn forget(&mut self, key: &ObjectKey) {
        self.hashes.remove(key);
    }

    /// Whether nothing is remembered.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.hashes.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sync::rules::compile as rules;
    use serde_json::json;

    fn obj(rv: &str, status: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"namespace": "apps", "name": "a", "uid": "u1", "resourceVersion": rv},
               "data": {"k": "v"}, "status": status})
    }

    fn key() -> ObjectKey {
        ObjectKey::from_object("c1", &obj("1", json!({}))).unwrap()
    }

    fn rule(entries: Value) -> CompiledRule {
        let o = json!({"apiVersion": "fleetbus.io/v1alpha1", "kind": "ResourceSyncRule",
                       "metadata": {"name": "r"},
                       "spec": {"groupVersionKind": {"version": "v1", "kind": "Secret"},
                                "rules": entries}});
        rules::compile(&[&o])["r"].clone()
    }

    fn keeps(rule: &CompiledRule, o: &Value) -> bool {
        let matched: Vec<_> = crate::sync::rules::matching::matching_rules(&rule.spec, o)
            .into_iter()
            .collect();
        keeps_status(&[rule], &matched)
    }

    #[test]
    fn status_is_kept_only_when_a_matching_entry_syncs_it_or_a_rule_matches_on_it() {
        let o = obj("1", json!({"phase": "Up"}));
        assert!(!keeps(&rule(json!([{}])), &o));
        assert!(keeps(
            &rule(json!([{"mutations": {"syncStatus": true}}])),
            &o
        ));
        // The entry that syncs status does not match this object.
        assert!(!keeps(
            &rule(
                json!([{"match": [{"namespaces": ["other"]}], "mutations": {"syncStatus": true}},
                         {"match": [{"namespaces": ["apps"]}]}])
            ),
            &o
        ));
        assert!(keeps(
            &rule(json!([{"match": [{"content": [{"key": "/status/phase", "value": "Up"}]}]}])),
            &o
        ));
        assert!(!keeps(
            &rule(json!([{"match": [{"content": [{"key": "/statusx", "value": 1}]}]}])),
            &o
        ));
    }

    #[test]
    fn identity_is_uid_and_creation_time_not_the_version() {
        let local = obj("2", json!({}));
        let mut received = obj("1", json!({"other": 1}));
        received["metadata"]["managedFields"] = json!([{"manager": "x"}]);
        assert!(same_identity(&received, &local));
        for (field, forged) in [("uid", "u2"), ("creationTimestamp", "1999-01-01T00:00:00Z")] {
            let mut r = received.clone();
            r["metadata"][field] = json!(forged);
            assert!(!same_identity(&r, &local), "{field}");
        }
    }

    #[test]
    fn the_published_object_has_status_only_when_kept() {
        let o = obj("1", json!({"phase": "Up"}));
        assert_eq!(published_object(&o, true), o);
        let without = published_object(&o, false);
        assert!(without.get("status").is_none());
        assert_eq!(without["data"], o["data"]);
    }

    #[test]
    fn a_status_only_change_keeps_the_hash_unless_status_is_kept() {
        let mut memo = HashMemo::default();
        let (a, _) = memo.hash(&key(), &obj("1", json!({"n": 1})), false);
        let (b, _) = memo.hash(&key(), &obj("2", json!({"n": 2})), false);
        assert_eq!(a, b);
        let (c, _) = memo.hash(&key(), &obj("2", json!({"n": 2})), true);
        assert_ne!(b, c, "status included: another hash");
    }

    #[test]
    fn the_memo_answers_for_the_same_version_and_recomputes_for_another() {
        let mut memo = HashMemo::default();
        let first = obj("1", json!({}));
        let (h, published) = memo.hash(&key(), &first, false);
        assert_eq!(h, content_hash(&published_object(&first, false)));
        assert!(published.is_some());
        // Same uid and resourceVersion: the memo answers (it does not look
        // at the content, which cannot differ for the same version).
        let mut same_version = first.clone();
        same_version["data"]["k"] = json!("other");
        assert_eq!(memo.hash(&key(), &same_version, false), (h.clone(), None));
        // Another resourceVersion, uid, or status choice: hashed again.
        let (h2, p2) = memo.hash(&key(), &same_version, true);
        assert!(p2.is_some());
        assert_ne!(h2, h);
        let newer = obj("2", json!({}));
        assert!(memo.hash(&key(), &newer, true).1.is_some());
        let mut other_uid = newer.clone();
        other_uid["metadata"]["uid"] = json!("u2");
        assert!(memo.hash(&key(), &other_uid, true).1.is_some());
        memo.retain(|_| false);
        assert!(memo.is_empty());
    }
}
