//! Which of our objects are sealed, and to whom (PROTOCOL §4.8). Pure.
//!
//! A Secret, or an object a rule with `spec.seal: true` selects, is sealed to the
//! clusters the rules that select it place it on (each rule's `clusterSelector` over the
//! members' labels: what the sinks themselves decide) that have a sealing key, and to
//! this cluster (the origin reads its own subtree back and must open it). The set is
//! part of what the plan compares: when it changes (a relabel, a join, a leave, a rule
//! change) the object is sealed again and published.

use std::collections::BTreeMap;

use fleetbus_schemas::envelope::Envelope;
use fleetbus_schemas::seal::SealingPublicKey;
use serde_json::Value;

use crate::registry::view::PeerView;
use crate::sync::rules::compile::CompiledRule;
use crate::sync::rules::matching;

/// What the plan needs to seal: present only when this cluster holds a sealing key
/// (without one it publishes in clear: insecure mode).
#[derive(Debug, Clone, Copy)]
pub struct SealView<'a> {
    /// This cluster's name.
    pub local: &'a str,
    /// This cluster's public sealing key.
    pub own: &'a SealingPublicKey,
    /// The members as the registry shows them.
    pub peers: &'a BTreeMap<String, PeerView>,
}

/// Recipients by name, each with the id of its key ([`SealingPublicKey::key_id`]):
/// a new key (a rotation) is a new set.
pub type Recipients = BTreeMap<String, String>;

/// Whether `obj` is sealed when published under `rules` (the rules that select it): a
/// core `v1` Secret always, any other object when one of them says `seal: true`.
pub fn must_seal(obj: &Value, rules: &[&CompiledRule]) -> bool {
    let is_secret = obj.get("apiVersion").and_then(Value::as_str) == Some("v1")
        && obj.get("kind").and_then(Value::as_str) == Some("Secret");
    is_secret || rules.iter().any(|r| r.spec.seal)
}

/// The clusters `obj` is sealed to under `rules`: every member with a sealing key that
/// has not left, whose name is not claimed twice, and that some rule's
/// `clusterSelector` matches; and this cluster.
pub fn recipients(view: &SealView<'_>, rules: &[&CompiledRule]) -> Recipients {
    let mut out = BTreeMap::from([(view.local.to_owned(), view.own.key_id())]);
    for peer in view.peers.values() {
        let Some(key) = &peer.sealing_key else {
            continue;
        };
        if peer.left || peer.name_conflict {
            continue;
        }
        let placed = rules.iter().any(|r| {
            matching::selector_matches(r.spec.cluster_selector.as_ref(), &peer.labels)
                .unwrap_or(false)
        });
        if placed {
            out.insert(peer.name.clone(), key.key_id());
        }
    }
    out
}

/// To whom the envelope `env` is sealed, or `None` when it is in clear.
pub fn sealed_to(env: &Envelope) -> Option<Recipients> {
    let header = env.encryption.as_ref().filter(|_| env.is_sealed())?;
    Some(
        header
            .recipients
            .iter()
            .map(|r| (r.cluster.clone(), r.key_id.clone()))
            .collect(),
    )
}

/// The public keys of `names` (this cluster's from `own`): a name without a key now is
/// left out (its key went between plan and publish; the next plan sees it).
pub fn keys<'a>(
    names: &'a Recipients,
    local: &str,
    own: &'a SealingPublicKey,
    peers: &'a BTreeMap<String, PeerView>,
) -> Vec<(&'a str, &'a SealingPublicKey)> {
    names
        .keys()
        .filter_map(|n| {
            let key = if n == local {
                Some(own)
            } else {
                peers.get(n).and_then(|p| p.sealing_key.as_ref())
            };
            key.map(|k| (n.as_str(), k))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sync::rules::compile as rules;
    use fleetbus_schemas::seal::SealingSecretKey;
    use serde_json::json;

    fn peer(name: &str, env: &str, key: bool) -> PeerView {
        PeerView {
            fitness: false,
            unserved_kinds: Vec::new(),
            name: name.into(),
            labels: BTreeMap::from([("env".into(), env.into())]),
            features: vec![],
            left: false,
            disabled: false,
            name_conflict: false,
            taints: Vec::new(),
            record: json!({}),
            sealing_key: key.then(|| SealingSecretKey::generate(&mut rand::rng()).public_key()),
        }
    }

    fn rule(spec: Value) -> CompiledRule {
        let obj = json!({"apiVersion": "fleetbus.io/v1alpha1", "kind": "ResourceSyncRule",
            "metadata": {"name": "r", "uid": "ru", "resourceVersion": "1"}, "spec": spec});
        rules::compile(&[&obj])["r"].clone()
    }

    fn cm_rule(extra: Value) -> CompiledRule {
        let mut spec = json!({"groupVersionKind": {"version": "v1", "kind": "ConfigMap"}});
        if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
            s.extend(e.clone());
        }
        rule(spec)
    }

    #[test]
    fn secrets_always_and_other_kinds_when_a_rule_says_so() {
        let secret = json!({"apiVersion": "v1", "kind": "Secret"});
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap"});
        let other_secret = json!({"apiVersion": "example.com/v1", "kind": "Secret"});
        let plain = cm_rule(json!({}));
        let sealed = cm_rule(json!({"seal": true}));
        assert!(must_seal(&secret, &[]));
        assert!(must_seal(&secret, &[&plain]));
        assert!(!must_seal(&cm, &[&plain]));
        assert!(must_seal(&cm, &[&plain, &sealed]));
        assert!(!must_seal(&other_secret, &[&plain]));
    }

    #[test]
    fn sealed_to_the_placed_members_with_keys_and_to_ourselves() {
        let mut peers = BTreeMap::new();
        for p in [
            peer("c2", "prod", true),
            peer("c3", "dev", true),
            peer("c4", "prod", false),
            PeerView {
                left: true,
                ..peer("c5", "prod", true)
            },
            PeerView {
                name_conflict: true,
                ..peer("c6", "prod", true)
            },
        ] {
            peers.insert(p.name.clone(), p);
        }
        let own = SealingSecretKey::generate(&mut rand::rng()).public_key();
        let view = |peers| SealView {
            local: "c1",
            own: &own,
            peers,
        };
        let prod = cm_rule(json!({"clusterSelector": {"matchLabels": {"env": "prod"}}}));
        let everyone = cm_rule(json!({}));
        let names = |peers, rules: &[&CompiledRule]| -> Vec<String> {
            recipients(&view(peers), rules).into_keys().collect()
        };
        assert_eq!(names(&peers, &[&prod]), ["c1", "c2"]);
        assert_eq!(names(&peers, &[&everyone]), ["c1", "c2", "c3"]);
        assert_eq!(names(&peers, &[]), ["c1"]);
        let before = recipients(&view(&peers), &[&prod]);
        assert_eq!(before.get("c1"), Some(&own.key_id()));
        // Relabelled into the selector: now a recipient.
        let mut relabelled = peers.clone();
        if let Some(c3) = relabelled.get_mut("c3") {
            c3.labels.insert("env".into(), "prod".into());
        }
        assert_eq!(names(&relabelled, &[&prod]), ["c1", "c2", "c3"]);
        // c2's key rotated: the same names, another set.
        let mut rotated = peers.clone();
        rotated.insert("c2".into(), peer("c2", "prod", true));
        let after = recipients(&view(&rotated), &[&prod]);
        assert!(before.keys().eq(after.keys()));
        assert_ne!(before, after);
        let set: Recipients = ["c1", "c2", "c4"]
            .map(|n| (n.to_owned(), String::new()))
            .into();
        let ks = keys(&set, "c1", &own, &peers);
        assert_eq!(ks.iter().map(|(n, _)| *n).collect::<Vec<_>>(), ["c1", "c2"]);
    }
}
