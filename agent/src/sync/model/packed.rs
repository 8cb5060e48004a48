//! An object the agent must remember but rarely reads, kept compact.
//!
//! A parsed `serde_json::Value` of a 1 KiB ConfigMap costs ~4 KiB of heap
//! (a B-tree node of ~0.6 KiB per JSON object, a string per key and value);
//! the sink kept several per copy (docs/design/memory.md). [`Packed`]
//! keeps the envelope's representation instead (MessagePack, in a zstd frame
//! when smaller: a few hundred bytes for that ConfigMap), immutable and
//! shared by clones, and parses it again only where a decision needs the
//! object (a write, a drift to describe). A value that cannot be packed (not
//! a JSON object, or over the envelope codec's 8 MiB, which no Kubernetes
//! object reaches) is kept parsed rather than lost.

use std::fmt;
use std::sync::Arc;

use fleetbus_schemas::envelope::{pack_value, unpack_value};
use fleetbus_schemas::DecodeError;
use serde_json::Value;

/// See the module docs.
#[derive(Clone, PartialEq)]
pub struct Packed(Repr);

#[derive(Clone, PartialEq)]
enum Repr {
    Bytes(Arc<[u8]>),
    Tree(Arc<Value>),
}

/// Packed bytes that do not decode: only a bug or corrupted memory makes
/// them (they are written here from a parsed value), reported rather than a
/// panic.
#[derive(Debug, thiserror::Error)]
#[error("a stored object does not unpack: {0}")]
pub struct Unpack(#[from] DecodeError);

impl Packed {
    /// `value`, packed (kept parsed if it cannot be, see the module docs).
    pub fn new(value: &Value) -> Self {
        match pack_value(value) {
            Ok(bytes) => Packed(Repr::Bytes(bytes.into())),
            Err(_) => Packed(Repr::Tree(Arc::new(value.clone()))),
        }
    }

    /// The object, parsed again.
    pub fn value(&self) -> Result<Value, Unpack> {
        match &self.0 {
            Repr::Bytes(b) => Ok(unpack_value(b)?),
            Repr::Tree(v) => Ok(Value::clone(v)),
        }
    }

    /// `self`, or a clone of `other` (sharing its bytes) when both hold the
    /// same object. The sink keeps a copy twice: the response of the write
    /// that made it (its baseline) and the copy as its watch saw it after,
    /// the same object packed the same way; kept once, ~300 bytes a copy
    /// fewer (docs/design/memory.md).
    pub fn shared_with(self, other: &Packed) -> Packed {
        if self == *other {
            other.clone()
        } else {
            self
        }
    }

    /// Whether `self` and `other` are one buffer (tests: what was shared).
    #[cfg(test)]
    pub fn shares(&self, other: &Packed) -> bool {
        match (&self.0, &other.0) {
            (Repr::Bytes(a), Repr::Bytes(b)) => Arc::ptr_eq(a, b),
            (Repr::Tree(a), Repr::Tree(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }

    /// Packed bytes this holds (0 when kept parsed).
    #[cfg(test)]
    pub fn packed_len(&self) -> usize {
        match &self.0 {
            Repr::Bytes(b) => b.len(),
            Repr::Tree(_) => 0,
        }
    }

    /// A packed value made of arbitrary bytes (tests: what a corrupt buffer does).
    #[cfg(test)]
    pub fn from_bytes(bytes: &[u8]) -> Self {
        Packed(Repr::Bytes(bytes.into()))
    }
}

impl From<Value> for Packed {
    fn from(value: Value) -> Self {
        Packed::new(&value)
    }
}

impl fmt::Debug for Packed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Repr::Bytes(b) => write!(f, "Packed({} bytes)", b.len()),
            Repr::Tree(v) => write!(f, "Packed({v})"),
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use serde_json::json;

    /// A 1 KiB ConfigMap (the bench's object; also `input`'s tests).
    pub(in crate::sync::model) fn configmap() -> Value {
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "namespace": "ns", "uid": "u-1",
                         "resourceVersion": "7", "labels": {"app": "bench"}},
            "data": {"v": "1", "pad": "x".repeat(900)},
        })
    }

    #[test]
    fn round_trips_and_is_small() {
        let v = configmap();
        let p = Packed::new(&v);
        assert_eq!(p.value().unwrap(), v);
        assert!(p.packed_len() > 0 && p.packed_len() < 400, "{p:?}");
        // Clones share the bytes and compare equal; another value does not.
        assert_eq!(p.clone(), p);
        let mut other = v.clone();
        other["data"]["v"] = json!("2");
        assert_ne!(Packed::from(other), p);
        // Anything but an object is kept as it is.
        let scalar = Packed::new(&json!(40));
        assert_eq!(
            (scalar.value().unwrap(), scalar.packed_len()),
            (json!(40), 0)
        );
    }

    #[test]
    fn the_same_object_is_kept_once() {
        let baseline = Packed::new(&configmap());
        // The watch packed its own: equal, not shared, until shared.
        let seen = Packed::new(&configmap());
        assert!(seen == baseline && !seen.shares(&baseline));
        let kept = seen.shared_with(&baseline);
        assert!(kept.shares(&baseline));
        // Another object (another resourceVersion) is kept as it came.
        let mut other = configmap();
        other["metadata"]["resourceVersion"] = json!("8");
        let newer = Packed::new(&other);
        let kept = newer.clone().shared_with(&baseline);
        assert!(kept.shares(&newer) && !kept.shares(&baseline));
        assert_eq!(kept.value().unwrap(), other);
    }

    #[test]
    fn corrupt_or_truncated_bytes_are_an_error() {
        let good = pack_value(&configmap()).unwrap();
        for cut in [0, 1, good.len() / 2, good.len() - 1] {
            let e = Packed::from_bytes(&good[..cut]).value().unwrap_err();
            assert!(e.to_string().contains("does not unpack"), "{e}");
        }
        let mut flipped = good.clone();
        let mid = flipped.len() / 2;
        flipped[mid] ^= 0xff;
        assert!(Packed::from_bytes(&flipped).value().is_err());
    }
}
