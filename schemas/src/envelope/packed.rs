//! One JSON value in the envelope's own representation (MessagePack, in a zstd
//! frame when that is smaller), for a reader that keeps objects in memory
//! rather than sends them: the agent keeps what it must remember of an object
//! this way (docs/design/memory.md) and parses it again only when a
//! decision needs it. Decoding has the bounds of an envelope's
//! ([`MAX_DECOMPRESSED`](super::MAX_DECOMPRESSED),
//! [`MAX_MSGPACK_DEPTH`](crate::codec::MAX_MSGPACK_DEPTH)), so bytes of any
//! origin are refused with an error, never a panic.

use serde_json::Value;

use super::compress;
use crate::codec::{decode_msgpack, DecodeError, EncodeError};

/// `value`, a JSON object (a map: what the bytes start with tells a frame
/// from plain MessagePack, and no prefix of a map is a whole value, so a
/// truncated buffer is an error rather than another value), as MessagePack
/// compressed like an envelope (see the module docs). An error for any other
/// value, and for one above `MAX_DECOMPRESSED` bytes before compression.
pub fn pack_value(value: &Value) -> Result<Vec<u8>, EncodeError> {
    if !value.is_object() {
        return Err(EncodeError::new("only a JSON object is packed"));
    }
    let msgpack = rmp_serde::to_vec(value).map_err(EncodeError::new)?;
    compress::maybe_compress(msgpack)
}

/// The value [`pack_value`] packed into `bytes`. Corrupt or truncated bytes, a
/// frame inflating past the limit, or trailing bytes are
/// [`DecodeError::Malformed`].
pub fn unpack_value(bytes: &[u8]) -> Result<Value, DecodeError> {
    let value: Value = if compress::is_compressed(bytes) {
        decode_msgpack(&compress::decompress(bytes)?)?
    } else {
        decode_msgpack(bytes)?
    };
    if !value.is_object() {
        return Err(DecodeError::malformed("a packed value is a JSON object"));
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object() -> Value {
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "namespace": "ns", "labels": {"app": "x"},
                         "resourceVersion": "12", "generation": 3},
            "data": {"v": "1", "pad": "x".repeat(900)},
            "numbers": [0, -1, 1.5, u64::MAX, i64::MIN, null, true],
        })
    }

    #[test]
    fn round_trips_compressed_and_plain() {
        let big = object();
        let packed = pack_value(&big).unwrap();
        assert!(
            compress::is_compressed(&packed),
            "1 KiB of padding compresses"
        );
        assert!(packed.len() < 400, "{} bytes", packed.len());
        assert_eq!(unpack_value(&packed).unwrap(), big);
        assert!(pack_value(&json!(40)).is_err(), "not an object");
        let small = json!({"a": 1});
        let packed = pack_value(&small).unwrap();
        assert!(!compress::is_compressed(&packed));
        assert_eq!(unpack_value(&packed).unwrap(), small);
    }

    #[test]
    fn corrupt_or_truncated_bytes_are_errors() {
        for v in [object(), json!({"a": "b"})] {
            let packed = pack_value(&v).unwrap();
            for cut in 0..packed.len() {
                assert!(unpack_value(&packed[..cut]).is_err(), "cut at {cut}");
            }
            let mut longer = packed.clone();
            longer.push(0);
            assert!(unpack_value(&longer).is_err());
            // Every single flipped byte is an error or another value, never a panic
            // (the frame's checksum catches most).
            for i in 0..packed.len() {
                let mut bad = packed.clone();
                bad[i] ^= 0x5a;
                let _ = unpack_value(&bad);
            }
        }
        assert!(unpack_value(&[0xff; 64]).is_err());
    }

    /// Nested `depth` objects deep.
    fn nested(depth: usize) -> Value {
        (1..depth).fold(json!({"leaf": 1}), |v, _| json!({ "a": v }))
    }

    #[test]
    fn the_deepest_object_an_envelope_or_a_watch_brings_round_trips() {
        // serde_json parses at most 128 levels (a watch); an envelope's
        // object is at most MAX_MSGPACK_DEPTH - 1 deep.
        for depth in [128, crate::codec::MAX_MSGPACK_DEPTH - 1] {
            let v = nested(depth);
            assert_eq!(
                unpack_value(&pack_value(&v).unwrap()).unwrap(),
                v,
                "{depth}"
            );
        }
        // Deeper is refused on the way back, without a panic.
        let deep = pack_value(&nested(200)).unwrap();
        assert!(unpack_value(&deep).is_err());
    }
}
