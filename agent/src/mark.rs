//! The ownership mark: how a sink knows that an object is a copy it wrote,
//! and so may overwrite or delete it (pure).
//!
//! Annotations alone cannot say it: anyone who can write an object can write
//! `fleetbus.io/origin-cluster`, by accident (a restored backup, a `kubectl
//! get -o yaml` re-applied) or on purpose, and an object that merely looks
//! like a copy would then be overwritten with another cluster's data or
//! collected. So every copy carries `fleetbus.io/copy-mark`: an HMAC-SHA256,
//! under a key only this cluster's agent holds (the Secret
//! `fleetbus-copy-mark` in the agent's namespace, see `copy_mark`), of
//! what the copy is — its group, kind, namespace, name and origin cluster.
//!
//! What follows:
//! - **Nobody without the key can claim an object for fleetbus.** A user
//!   who can read the key Secret can already do anything in the agent's
//!   namespace.
//! - **A mark does not travel.** Moved to another name, namespace or
//!   cluster, or with its origin annotation edited, it no longer verifies.
//! - **A copy needs its `fleetbus.io/managed=true` label too.** A copy whose
//!   labels were stripped (re-applied from `kubectl get -o yaml` by someone
//!   who took it over) is the user's object.
//! - **A restored copy is adopted.** Restored from a backup with its labels,
//!   annotations and the key Secret, its mark still verifies (no uid or
//!   resourceVersion is bound), and sync takes it up as its own copy again.
//! - **Copies written before marks existed** (by an earlier agent) carry the
//!   whole earlier stamp — the managed label and the origin, origin-uid, rule
//!   and source-hash annotations — and were created before this cluster's
//!   key (in an earlier second: both times are whole seconds) (`creationTimestamp`, which the API server sets and no client can
//!   backdate). Those are copies; the next write adds their mark.
//! - Anything else that carries an origin annotation is a **look-alike**:
//!   never overwritten nor deleted, reported as a conflict.

use base64::Engine as _;
use chrono::{DateTime, Utc};
use fleetbus_schemas::well_known::{
    ANNOTATION_COPY_MARK, ANNOTATION_ORIGIN_CLUSTER, ANNOTATION_ORIGIN_UID, ANNOTATION_RULE,
    ANNOTATION_SOURCE_HASH, LABEL_MANAGED, LABEL_MANAGED_VALUE,
};
use hmac::{Hmac, Mac};
use serde_json::{Map, Value};
use sha2::Sha256;

/// The version prefix of a mark: a later scheme can tell its own marks apart.
const VERSION: &str = "v1.";

/// Bytes of the HMAC kept: 128 bits, as a forgery must guess them.
const MARK_BYTES: usize = 16;

/// This cluster's marking key and since when it exists.
#[derive(Clone)]
pub struct CopyMark {
    key: [u8; 32],
    /// When the key was made: an unmarked copy with the full earlier stamp
    /// created before it was written by an earlier agent (module docs).
    since: Option<DateTime<Utc>>,
}

impl std::fmt::Debug for CopyMark {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("CopyMark")
            .field("since", &self.since)
            .finish_non_exhaustive()
    }
}

/// Whose an object is, as the sink sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ownership<'a> {
    /// No origin annotation: someone's own object.
    Original,
    /// A copy this cluster's agent wrote, from `origin`.
    Copy {
        /// The cluster it is a copy from.
        origin: &'a str,
        /// Written before marks existed (the next write marks it).
        legacy: bool,
    },
    /// It carries an origin annotation but is no copy of ours: never
    /// overwritten nor deleted.
    LookAlike {
        /// The origin it claims.
        origin: &'a str,
        /// Why it is not taken for a copy.
        why: LookAlike,
    },
}

/// Why an object that names an origin is not taken for a copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LookAlike {
    /// Without the `fleetbus.io/managed=true` label.
    Unlabelled,
    /// Without a mark, and not an earlier agent's copy.
    Unmarked,
    /// A mark that does not verify for this object here.
    BadMark,
}

impl LookAlike {
    /// For messages.
    pub fn as_str(self) -> &'static str {
        match self {
            LookAlike::Unlabelled => "it carries no fleetbus.io/managed=true label",
            LookAlike::Unmarked => "it carries no fleetbus.io/copy-mark of this cluster",
            LookAlike::BadMark => {
                "its fleetbus.io/copy-mark does not verify (written elsewhere, or for another name, namespace or origin)"
            }
        }
    }
}

/// What a mark binds: one object's identity and origin.
#[derive(Debug, Clone, Copy)]
pub struct Marked<'a> {
    /// API group (`""` for the core group); the version is not bound, so a
    /// rule that rewrites the version keeps its copies.
    pub group: &'a str,
    /// Kind.
    pub kind: &'a str,
    /// Namespace, None for a cluster-scoped object.
    pub namespace: Option<&'a str>,
    /// Name.
    pub name: &'a str,
    /// The cluster it is a copy from.
    pub origin: &'a str,
}

/// The metadata an ownership check reads.
#[derive(Debug, Clone, Copy)]
pub struct Meta<'a> {
    /// API group.
    pub group: &'a str,
    /// Kind.
    pub kind: &'a str,
    /// Namespace.
    pub namespace: Option<&'a str>,
    /// Name.
    pub name: &'a str,
    /// Label value lookup.
    pub labels: Option<&'a Map<String, Value>>,
    /// Annotations.
    pub annotations: Option<&'a Map<String, Value>>,
    /// `metadata.creationTimestamp`, when the object has one.
    pub created: Option<DateTime<Utc>>,
}

impl<'a> Meta<'a> {
    /// The metadata of a whole object (`apiVersion` and `kind` set).
    pub fn of(obj: &'a Value) -> Option<Meta<'a>> {
        let s = |p: &str| obj.pointer(p).and_then(Value::as_str);
        let (group, _) = fleetbus_schemas::subject::split_api_version(s("/apiVersion")?);
        Some(Meta {
            group,
            kind: s("/kind")?,
            namespace: s("/metadata/namespace").filter(|n| !n.is_empty()),
            name: s("/metadata/name")?,
            labels: obj.pointer("/metadata/labels").and_then(Value::as_object),
            annotations: obj
                .pointer("/metadata/annotations")
                .and_then(Value::as_object),
            created: s("/metadata/creationTimestamp")
                .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
                .map(|t| t.with_timezone(&Utc)),
        })
    }

    fn annotation(&self, key: &str) -> Option<&'a str> {
        self.annotations?.get(key)?.as_str()
    }
}

impl CopyMark {
    /// A marker with `key`, made at `since` (None: not known, and no
    /// unmarked object is taken for an earlier agent's copy).
    pub fn new(key: [u8; 32], since: Option<DateTime<Utc>>) -> Self {
        CopyMark { key, since }
    }

    /// The mark of `m`: what the sink writes in `fleetbus.io/copy-mark`.
    pub fn mark(&self, m: &Marked<'_>) -> String {
        let bytes = self.mac(m);
        format!(
            "{VERSION}{}",
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&bytes[..MARK_BYTES])
        )
    }

    fn mac(&self, m: &Marked<'_>) -> Vec<u8> {
        // The key is any 32 bytes: new_from_slice accepts every length.
        let mut mac = match Hmac::<Sha256>::new_from_slice(&self.key) {
            Ok(mac) => mac,
            Err(_) => return Vec::new(),
        };
        // Each field length-prefixed, so no two identities share a message.
        for part in [
            "fleetbus-copy-mark",
            m.group,
            m.kind,
            m.namespace.unwrap_or(""),
            m.name,
            m.origin,
        ] {
            mac.update(&(part.len() as u64).to_be_bytes());
            mac.update(part.as_bytes());
        }
        mac.update(&[u8::from(m.namespace.is_some())]);
        mac.finalize().into_bytes().to_vec()
    }

    /// Whether `mark` is the mark of `m` (compared in constant time).
    fn verifies(&self, mark: &str, m: &Marked<'_>) -> bool {
        let Some(encoded) = mark.strip_prefix(VERSION) else {
            return false;
        };
        let Ok(given) = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(encoded) else {
            return false;
        };
        if given.len() != MARK_BYTES {
            return false;
        }
        let want = self.mac(m);
        // Constant time: a timing difference must not reveal a prefix.
        want.len() >= MARK_BYTES
            && want[..MARK_BYTES]
                .iter()
                .zip(&given)
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0
    }

    /// Whose `m` is (see the module docs).
    pub fn judge<'a>(&self, m: &Meta<'a>) -> Ownership<'a> {
        let Some(origin) = m.annotation(ANNOTATION_ORIGIN_CLUSTER) else {
            return Ownership::Original;
        };
        let labelled = m
            .labels
            .and_then(|l| l.get(LABEL_MANAGED))
            .and_then(Value::as_str)
            == Some(LABEL_MANAGED_VALUE);
        if !labelled {
            return Ownership::LookAlike {
                origin,
                why: LookAlike::Unlabelled,
            };
        }
        let marked = Marked {
            group: m.group,
            kind: m.kind,
            namespace: m.namespace,
            name: m.name,
            origin,
        };
        let mark = m.annotation(ANNOTATION_COPY_MARK);
        if mark.is_some_and(|mark| self.verifies(mark, &marked)) {
            return Ownership::Copy {
                origin,
                legacy: false,
            };
        }
        let earlier_stamp = [
            ANNOTATION_ORIGIN_UID,
            ANNOTATION_RULE,
            ANNOTATION_SOURCE_HASH,
        ]
        .iter()
        .all(|k| m.annotation(k).is_some());
        // Strictly before: both times are whole seconds, and an object made
        // in the key's own second may have been made after it (the e2e test
        // of look-alikes made right after an agent's first start found it).
        // A copy written in the second a lost key was made anew is reported
        // as a conflict, not taken up: deleted, it is written again.
        let before_key = matches!((m.created, self.since), (Some(c), Some(s)) if c < s);
        if earlier_stamp && before_key {
            return Ownership::Copy {
                origin,
                legacy: true,
            };
        }
        Ownership::LookAlike {
            origin,
            why: if mark.is_some() {
                LookAlike::BadMark
            } else {
                LookAlike::Unmarked
            },
        }
    }

    /// The origin of `obj` when it is a copy of ours, else None.
    pub fn copy_origin<'a>(&self, obj: &'a Value) -> Option<&'a str> {
        match Meta::of(obj).map(|m| self.judge(&m)) {
            Some(Ownership::Copy { origin, .. }) => Some(origin),
            _ => None,
        }
    }

    /// Whose `obj` is.
    pub fn judge_object<'a>(&self, obj: &'a Value) -> Ownership<'a> {
        match Meta::of(obj) {
            Some(m) => self.judge(&m),
            // No apiVersion, kind or name: nothing a copy could be.
            None => match obj
                .pointer("/metadata/annotations")
                .and_then(|a| a.get(ANNOTATION_ORIGIN_CLUSTER))
                .and_then(Value::as_str)
            {
                Some(origin) => Ownership::LookAlike {
                    origin,
                    why: LookAlike::Unmarked,
                },
                None => Ownership::Original,
            },
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::json;

    pub(crate) fn marker() -> CopyMark {
        CopyMark::new([7; 32], Some("2026-12-01T00:00:00Z".parse().unwrap()))
    }

    /// [`marker`], for what borrows one.
    pub(crate) fn marker_ref() -> &'static CopyMark {
        static MARKER: std::sync::OnceLock<CopyMark> = std::sync::OnceLock::new();
        MARKER.get_or_init(marker)
    }

    /// `obj` as this test cluster's agent would have marked it (its origin
    /// annotation and the managed label set).
    pub(crate) fn marked(mut obj: Value) -> Value {
        let m = Meta::of(&obj).expect("an object with apiVersion, kind and name");
        let origin = m.annotation(ANNOTATION_ORIGIN_CLUSTER).expect("an origin");
        let mark = marker().mark(&Marked {
            group: m.group,
            kind: m.kind,
            namespace: m.namespace,
            name: m.name,
            origin,
        });
        obj["metadata"]["annotations"][ANNOTATION_COPY_MARK] = json!(mark);
        obj["metadata"]["labels"][LABEL_MANAGED] = json!(LABEL_MANAGED_VALUE);
        obj
    }

    fn copy(m: &CopyMark, created: &str) -> Value {
        let mark = m.mark(&Marked {
            group: "",
            kind: "ConfigMap",
            namespace: Some("ns"),
            name: "cm",
            origin: "c1",
        });
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "cm", "namespace": "ns", "creationTimestamp": created,
                            "labels": {LABEL_MANAGED: "true"},
                            "annotations": {ANNOTATION_ORIGIN_CLUSTER: "c1", ANNOTATION_COPY_MARK: mark,
                                            ANNOTATION_ORIGIN_UID: "u", ANNOTATION_RULE: "r",
                                            ANNOTATION_SOURCE_HASH: "h"}}})
    }

    #[test]
    fn a_marked_copy_is_ours_and_an_annotation_alone_is_not() {
        let m = marker();
        let c = copy(&m, "2026-12-02T00:00:00Z");
        assert_eq!(
            m.judge_object(&c),
            Ownership::Copy {
                origin: "c1",
                legacy: false
            }
        );
        assert_eq!(m.copy_origin(&c), Some("c1"));
        // What the probe did: the origin annotation, nothing else.
        let claimed = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "user-owned", "namespace": "plain",
                         "annotations": {ANNOTATION_ORIGIN_CLUSTER: "c"}}});
        assert_eq!(
            m.judge_object(&claimed),
            Ownership::LookAlike {
                origin: "c",
                why: LookAlike::Unlabelled
            }
        );
        assert_eq!(m.copy_origin(&claimed), None);
        let plain = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}});
        assert_eq!(m.judge_object(&plain), Ownership::Original);
    }

    #[test]
    fn a_mark_does_not_travel_to_another_name_namespace_origin_cluster_or_label_set() {
        let m = marker();
        let c = copy(&m, "2026-12-02T00:00:00Z");
        // What the edited copy is judged, as text (the verdict borrows it).
        let bad = |f: &dyn Fn(&mut Value)| {
            let mut o = c.clone();
            f(&mut o);
            format!("{:?}", m.judge_object(&o))
        };
        type Edit = fn(&mut Value);
        let edits: [(&str, Edit); 7] = [
            ("name", |o| o["metadata"]["name"] = json!("other")),
            ("namespace", |o| o["metadata"]["namespace"] = json!("other")),
            ("kind", |o| o["kind"] = json!("Secret")),
            ("group", |o| o["apiVersion"] = json!("example.com/v1")),
            ("origin", |o| {
                o["metadata"]["annotations"][ANNOTATION_ORIGIN_CLUSTER] = json!("c2")
            }),
            ("mark", |o| {
                o["metadata"]["annotations"][ANNOTATION_COPY_MARK] =
                    json!("v1.AAAAAAAAAAAAAAAAAAAAAA")
            }),
            ("garbage", |o| {
                o["metadata"]["annotations"][ANNOTATION_COPY_MARK] = json!("v1.!!")
            }),
        ];
        for (what, edit) in edits {
            let got = bad(&edit);
            assert!(got.contains("why: BadMark"), "{what}: {got}");
        }
        let unlabelled = bad(&|o| {
            o["metadata"]["labels"] = json!({});
        });
        assert!(unlabelled.contains("why: Unlabelled"), "{unlabelled}");
        // Another cluster's key: the same object does not verify.
        let other = CopyMark::new([8; 32], None);
        assert!(matches!(
            other.judge_object(&c),
            Ownership::LookAlike {
                why: LookAlike::BadMark,
                ..
            }
        ));
        // The version is not bound: a rule rewriting it keeps its copies.
        let mut v2 = c.clone();
        v2["apiVersion"] = json!("v2");
        assert_eq!(m.copy_origin(&v2), Some("c1"));
    }

    #[test]
    fn an_earlier_agents_copy_is_ours_only_with_its_whole_stamp_and_older_than_the_key() {
        let m = marker();
        let mut old = copy(&m, "2026-11-30T00:00:00Z");
        old["metadata"]["annotations"]
            .as_object_mut()
            .unwrap()
            .remove(ANNOTATION_COPY_MARK);
        assert_eq!(
            m.judge_object(&old),
            Ownership::Copy {
                origin: "c1",
                legacy: true
            }
        );
        // In the key's own second: it may be newer, so not taken up.
        let mut same = old.clone();
        same["metadata"]["creationTimestamp"] = json!("2026-12-01T00:00:00Z");
        assert_eq!(m.copy_origin(&same), None);
        // Made after the key: a look-alike.
        let mut new = old.clone();
        new["metadata"]["creationTimestamp"] = json!("2026-12-01T00:00:01Z");
        assert!(matches!(
            m.judge_object(&new),
            Ownership::LookAlike {
                why: LookAlike::Unmarked,
                ..
            }
        ));
        // Missing any part of the earlier stamp: a look-alike.
        for k in [
            ANNOTATION_ORIGIN_UID,
            ANNOTATION_RULE,
            ANNOTATION_SOURCE_HASH,
        ] {
            let mut partial = old.clone();
            partial["metadata"]["annotations"]
                .as_object_mut()
                .unwrap()
                .remove(k);
            assert!(m.copy_origin(&partial).is_none(), "{k}");
        }
        // No creation time, or no key time: not taken for an earlier copy.
        let mut undated = old.clone();
        undated["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("creationTimestamp");
        assert!(m.copy_origin(&undated).is_none());
        assert!(CopyMark::new([7; 32], None).copy_origin(&old).is_none());
    }

    #[test]
    fn cluster_scoped_and_namespaced_marks_differ_and_the_key_is_not_printed() {
        let m = marker();
        let at = |namespace| {
            m.mark(&Marked {
                group: "",
                kind: "Namespace",
                namespace,
                name: "x",
                origin: "c1",
            })
        };
        assert_ne!(at(None), at(Some("")));
        assert!(at(None).starts_with("v1.") && at(None).len() == 3 + 22);
        assert!(!format!("{m:?}").contains('7'));
    }
}
