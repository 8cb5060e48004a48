//! Envelope wire format: golden v1 bytes, round trips, typed decode errors.
//!
//! The golden files pin the wire format; a change to them must be deliberate.
//! Regenerate (after bumping the protocol docs) with:
//! `FLEETBUS_BLESS=1 cargo test -p fleetbus-schemas --test envelope`

#![allow(clippy::unwrap_used, clippy::expect_used)] // test crate

use std::path::PathBuf;

use chrono::{DateTime, Utc};
use fleetbus_schemas::envelope::{
    content_hash, EncryptionHeader, Envelope, TombstoneReason, COMPRESS_THRESHOLD,
    ENVELOPE_VERSION, MAX_DECOMPRESSED, ZSTD_MAGIC,
};
use fleetbus_schemas::time::parse_rfc3339;
use fleetbus_schemas::DecodeError;
use proptest::prelude::*;
use serde_json::{json, Map, Value};

fn golden_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name)
}

fn check_golden(name: &str, bytes: &[u8]) {
    let path = golden_path(name);
    let hex = hex::encode(bytes);
    if std::env::var_os("FLEETBUS_BLESS").is_some() {
        std::fs::write(&path, format!("{hex}\n")).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path).unwrap_or_default();
    assert_eq!(
        hex,
        want.trim(),
        "v1 envelope bytes changed ({}). The wire format is pinned: if this is deliberate, \
         update docs/PROTOCOL.md and run FLEETBUS_BLESS=1 cargo test -p fleetbus-schemas --test envelope",
        path.display()
    );
}

fn t0() -> DateTime<Utc> {
    parse_rfc3339("2026-11-22T04:30:00.123Z").unwrap()
}

fn config_map() -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "settings",
            "namespace": "team-a",
            "uid": "0b9c1f5e-1d2c-4e3f-8a7b-6c5d4e3f2a1b",
            "resourceVersion": "42",
            "labels": {"app": "web"}
        },
        "data": {"color": "blue", "size": "3"}
    })
}

#[test]
fn golden_v1_snapshot() {
    let env = Envelope::snapshot(
        "east",
        Some("6f1c2d3e-8a9b-4c5d-9e0f-112233445566"),
        config_map(),
        t0(),
    )
    .unwrap();
    assert_eq!(env.uid, "0b9c1f5e-1d2c-4e3f-8a7b-6c5d4e3f2a1b");
    assert_eq!(env.resource_version, "42");
    assert_eq!(env.generation, None);
    assert_eq!(env.content_hash, content_hash(&config_map()));
    assert_eq!(env.msg_id(), "east:0b9c1f5e-1d2c-4e3f-8a7b-6c5d4e3f2a1b:42");
    // The golden file pins the MessagePack map; what `encode` sends (possibly a zstd frame
    // around it, whose bytes depend on the libzstd version) is checked by decoding it.
    let bytes = env.encode_msgpack().unwrap();
    check_golden("envelope_v1_snapshot.hex", &bytes);
    assert_eq!(Envelope::decode(&env.encode().unwrap()).unwrap(), env);
    // And the pinned bytes decode to the same envelope.
    let pinned = hex::decode(
        std::fs::read_to_string(golden_path("envelope_v1_snapshot.hex"))
            .unwrap()
            .trim(),
    )
    .unwrap();
    assert_eq!(Envelope::decode(&pinned).unwrap(), env);
    // First key of the map is schemaVersion = 1 (fixmap of 13, fixstr "schemaVersion", 0x01).
    assert_eq!(bytes[0], 0x8d);
    assert_eq!(&bytes[1..15], b"\xadschemaVersion");
    assert_eq!(bytes[15], 0x01);
}

#[test]
fn golden_v1_tombstone() {
    let env = Envelope::tombstone(
        "east",
        None,
        "0b9c1f5e-1d2c-4e3f-8a7b-6c5d4e3f2a1b",
        "43",
        t0(),
        TombstoneReason::Deleted,
    );
    assert_eq!(
        env.msg_id(),
        "east:0b9c1f5e-1d2c-4e3f-8a7b-6c5d4e3f2a1b:43:deleted"
    );
    let bytes = env.encode().unwrap();
    check_golden("envelope_v1_tombstone.hex", &bytes);
    assert_eq!(Envelope::decode(&bytes).unwrap(), env);
}

/// The encoded tombstone of `golden_v1_tombstone` with `tombstoneReason` set to `value`
/// (a str) or dropped (`None`), re-encoded as a 12- or 13-entry map.
fn tombstone_with_reason(value: Option<Value>) -> Vec<u8> {
    let env = Envelope::tombstone("east", None, "u-1", "43", t0(), TombstoneReason::Deleted);
    let mut map: Value = rmp_serde::from_slice(&env.encode().unwrap()).unwrap();
    let entries = map.as_object_mut().unwrap();
    entries.remove("tombstoneReason");
    if let Some(v) = value {
        entries.insert("tombstoneReason".into(), v);
    }
    rmp_serde::to_vec_named(&map).unwrap()
}

#[test]
fn tombstone_reasons() {
    // Unpublished round-trips and has its own message id.
    let env = Envelope::tombstone(
        "east",
        None,
        "u-1",
        "43",
        t0(),
        TombstoneReason::Unpublished,
    );
    assert_eq!(env.msg_id(), "east:u-1:43:unpublished");
    let bytes = env.encode().unwrap();
    assert_eq!(bytes[0], 0x8d);
    assert!(bytes.ends_with(b"\xaftombstoneReason\xabUnpublished"));
    assert_eq!(Envelope::decode(&bytes).unwrap(), env);
    // A snapshot writes nil; re-published after an Unpublished tombstone of the same
    // version, it gets an id that is neither the first snapshot's nor the tombstone's.
    let snap = Envelope::snapshot("east", None, config_map(), t0()).unwrap();
    let again = snap.republish_msg_id();
    assert_eq!(
        again,
        format!("{}:republished:{}", snap.msg_id(), t0().timestamp_millis())
    );
    assert_ne!(again, env.msg_id());
    assert!(snap
        .encode_msgpack()
        .unwrap()
        .ends_with(b"\xaftombstoneReason\xc0"));
    assert_eq!(snap.tombstone_reason, None);
    // A tombstone written before the key existed (12 entries) reads as Deleted.
    let old = tombstone_with_reason(None);
    assert_eq!(old[0], 0x8c);
    assert_eq!(
        Envelope::decode(&old).unwrap().tombstone_reason,
        Some(TombstoneReason::Deleted)
    );
    // Explicit nil on a tombstone: also Deleted.
    assert_eq!(
        Envelope::decode(&tombstone_with_reason(Some(Value::Null)))
            .unwrap()
            .tombstone_reason,
        Some(TombstoneReason::Deleted)
    );
    // An unknown reason, or one of the wrong type, is malformed.
    for bad in [json!("Vanished"), json!("deleted"), json!(1), json!(true)] {
        assert!(
            matches!(
                Envelope::decode(&tombstone_with_reason(Some(bad.clone()))),
                Err(DecodeError::Malformed { .. })
            ),
            "{bad}"
        );
    }
    // A reason on a snapshot is malformed.
    let mut snap = Envelope::snapshot("east", None, config_map(), t0()).unwrap();
    snap.tombstone_reason = Some(TombstoneReason::Deleted);
    assert!(matches!(
        Envelope::decode(&snap.encode().unwrap()),
        Err(DecodeError::Malformed { .. })
    ));
}

#[test]
fn unknown_versions_and_garbage_are_typed_errors() {
    // A future v2 writer: still a map with schemaVersion first.
    let v2 = rmp_serde::to_vec_named(&json!({"schemaVersion": 2, "whatever": [1, 2]})).unwrap();
    match Envelope::decode(&v2) {
        Err(DecodeError::UnsupportedVersion { found }) => assert_eq!(found, "2"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        Envelope::decode(b"\xc1garbage"),
        Err(DecodeError::Malformed { .. })
    ));
    assert!(matches!(
        Envelope::decode(b""),
        Err(DecodeError::Malformed { .. })
    ));
    // v1 with a required field missing.
    let partial = rmp_serde::to_vec_named(&json!({"schemaVersion": 1, "origin": "east"})).unwrap();
    assert!(matches!(
        Envelope::decode(&partial),
        Err(DecodeError::Malformed { .. })
    ));
    // A tombstone flag that contradicts the object.
    let mut env = Envelope::snapshot("east", None, config_map(), t0()).unwrap();
    env.tombstone = true;
    assert!(matches!(
        Envelope::decode(&env.encode().unwrap()),
        Err(DecodeError::Malformed { .. })
    ));
    // An encryption other than sealing (§4.8) cannot be read: skipped like a newer
    // version, with or without an object.
    let env = Envelope::snapshot("east", None, config_map(), t0()).unwrap();
    let mut wire: Value = rmp_serde::from_slice(&env.encode_msgpack().unwrap()).unwrap();
    let header = EncryptionHeader {
        algorithm: "xchacha20poly1305".into(),
        key_id: "k1".into(),
        nonce: "AAAA".into(),
        ..Default::default()
    };
    wire["encryption"] = serde_json::to_value(&header).unwrap();
    assert!(matches!(
        Envelope::decode(&rmp_serde::to_vec_named(&wire).unwrap()),
        Err(DecodeError::UnsupportedVersion { .. })
    ));
    wire["object"] = Value::Null;
    assert!(matches!(
        Envelope::decode(&rmp_serde::to_vec_named(&wire).unwrap()),
        Err(DecodeError::UnsupportedVersion { .. })
    ));
    // The header as the first release of v1 reserved it (three entries).
    wire["encryption"] = json!({"algorithm": "aes", "keyId": "k", "nonce": "n"});
    assert!(matches!(
        Envelope::decode(&rmp_serde::to_vec_named(&wire).unwrap()),
        Err(DecodeError::UnsupportedVersion { .. })
    ));
    assert_eq!(ENVELOPE_VERSION, 1);
}

#[test]
fn missing_metadata_is_an_error() {
    let err =
        Envelope::snapshot("east", None, json!({"metadata": {"uid": "u"}}), t0()).unwrap_err();
    assert_eq!(err.to_string(), "object has no metadata.resourceVersion");
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        any::<String>().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            proptest::collection::btree_map(any::<String>(), inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

fn ms_time() -> impl Strategy<Value = DateTime<Utc>> {
    (0i64..4_102_444_800_000).prop_map(|ms| DateTime::from_timestamp_millis(ms).unwrap())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn snapshot_round_trips(body in json_value(), origin in any::<String>(), cid in proptest::option::of(any::<String>()),
                            uid in any::<String>(), rv in any::<String>(), generation in proptest::option::of(any::<i64>()),
                            time in ms_time()) {
        let mut metadata = Map::new();
        metadata.insert("uid".into(), Value::String(uid));
        metadata.insert("resourceVersion".into(), Value::String(rv));
        if let Some(g) = generation {
            metadata.insert("generation".into(), Value::from(g));
        }
        let mut object = Map::new();
        object.insert("metadata".into(), Value::Object(metadata));
        object.insert("body".into(), body);
        let env = Envelope::snapshot(&origin, cid.as_deref(), Value::Object(object), time).unwrap();
        prop_assert_eq!(env.generation, generation);
        let bytes = env.encode().unwrap();
        prop_assert_eq!(Envelope::decode(&bytes).unwrap(), env);
    }

    #[test]
    fn tombstone_round_trips(origin in any::<String>(), uid in any::<String>(), rv in any::<String>(), time in ms_time(),
                             unpublished in any::<bool>()) {
        let reason = if unpublished { TombstoneReason::Unpublished } else { TombstoneReason::Deleted };
        let env = Envelope::tombstone(&origin, Some("id"), &uid, &rv, time, reason);
        prop_assert_eq!(Envelope::decode(&env.encode().unwrap()).unwrap(), env);
    }

    #[test]
    fn hash_is_independent_of_member_order(entries in proptest::collection::vec((any::<String>(), json_value()), 0..8)) {
        let forward: Map<String, Value> = entries.iter().cloned().collect();
        let backward: Map<String, Value> = entries.iter().rev().cloned().collect();
        // With duplicate keys the last insert wins, so only compare when keys are distinct.
        prop_assume!(forward.len() == entries.len());
        prop_assert_eq!(content_hash(&Value::Object(forward)), content_hash(&Value::Object(backward)));
    }

    #[test]
    fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..128)) {
        let _ = Envelope::decode(&bytes);
    }
}

/// A v1 map whose `object` is `depth` nested one-element arrays.
fn deeply_nested(depth: usize) -> Vec<u8> {
    let mut bytes = rmp_serde::to_vec_named(&json!({"schemaVersion": 1})).unwrap();
    // Rewrite the map header to two entries and append `"object": [[[...]]]`.
    bytes[0] = 0x82;
    bytes.extend_from_slice(&rmp_serde::to_vec(&"object").unwrap());
    bytes.extend(std::iter::repeat_n(0x91, depth));
    bytes.push(0xc0);
    bytes
}

#[test]
fn hostile_inputs_are_errors_not_crashes() {
    // A far-future version number that does not fit the v1 field type is still
    // "unsupported", not "malformed".
    let big = rmp_serde::to_vec_named(&json!({"schemaVersion": 70_000u64})).unwrap();
    match Envelope::decode(&big) {
        Err(DecodeError::UnsupportedVersion { found }) => assert_eq!(found, "70000"),
        other => panic!("{other:?}"),
    }
    // schemaVersion of the wrong type, or absent, or the envelope not a map at all.
    for bad in [
        rmp_serde::to_vec_named(&json!({"schemaVersion": "1"})).unwrap(),
        rmp_serde::to_vec_named(&json!({"origin": "east"})).unwrap(),
        rmp_serde::to_vec_named(&json!({"schemaVersion": -1})).unwrap(),
        rmp_serde::to_vec(&json!([1, "east"])).unwrap(),
        rmp_serde::to_vec(&json!("just a string")).unwrap(),
    ] {
        assert!(
            matches!(Envelope::decode(&bad), Err(DecodeError::Malformed { .. })),
            "{bad:02x?}"
        );
    }
    // A JSON snapshot sent to the MessagePack subject by mistake.
    assert!(matches!(
        Envelope::decode(br#"{"schemaVersion":1}"#),
        Err(DecodeError::Malformed { .. })
    ));
    // Nesting far beyond what objects use is refused without overflowing the stack,
    // both inside `object` and at the top level; a truncated valid message is malformed.
    for depth in [2_000, 100_000] {
        assert!(matches!(
            Envelope::decode(&deeply_nested(depth)),
            Err(DecodeError::Malformed { .. })
        ));
        assert!(matches!(
            Envelope::decode(&vec![0x91; depth]),
            Err(DecodeError::Malformed { .. })
        ));
    }
    // Anything a Kubernetes object can be (serde_json reads at most 128 levels) still decodes.
    let mut deep = json!("leaf");
    for _ in 0..120 {
        deep = json!([deep]);
    }
    let mut obj = config_map();
    obj["data"] = deep;
    let env = Envelope::snapshot("east", None, obj, t0()).unwrap();
    assert_eq!(Envelope::decode(&env.encode().unwrap()).unwrap(), env);
    // Trailing bytes after a valid envelope: not the message that was hashed and signed.
    let mut trailing = env.encode().unwrap();
    trailing.push(0xc0);
    assert!(matches!(
        Envelope::decode(&trailing),
        Err(DecodeError::Malformed { .. })
    ));
    let good = Envelope::snapshot("east", None, config_map(), t0())
        .unwrap()
        .encode()
        .unwrap();
    for cut in 0..good.len() {
        assert!(
            Envelope::decode(&good[..cut]).is_err(),
            "prefix of {cut} bytes"
        );
    }
    // A length prefix promising far more bytes than the message has.
    let mut huge_len = rmp_serde::to_vec_named(&json!({"schemaVersion": 1})).unwrap();
    huge_len[0] = 0x82;
    huge_len.extend_from_slice(&rmp_serde::to_vec(&"object").unwrap());
    huge_len.extend_from_slice(&[0xdf, 0xff, 0xff, 0xff, 0xff]);
    assert!(matches!(
        Envelope::decode(&huge_len),
        Err(DecodeError::Malformed { .. })
    ));
}

#[test]
fn oversized_objects_are_rejected_before_publishing() {
    use fleetbus_schemas::envelope::{check_size, TooLarge, DEFAULT_MAX_PAYLOAD, HEADER_ALLOWANCE};
    let limit = DEFAULT_MAX_PAYLOAD - HEADER_ALLOWANCE;
    let mut small = config_map();
    small["data"]["blob"] = json!("x".repeat(1000));
    let bytes = Envelope::snapshot("east", None, small, t0())
        .unwrap()
        .encode()
        .unwrap();
    assert_eq!(check_size(bytes.len(), DEFAULT_MAX_PAYLOAD), Ok(()));
    // The check is on the bytes sent: a compressible ConfigMap near the API server's own
    // 1 MiB limit fits once compressed.
    let mut squeezable = config_map();
    squeezable["data"]["blob"] = json!("x".repeat(DEFAULT_MAX_PAYLOAD - 200));
    let bytes = Envelope::snapshot("east", None, squeezable, t0())
        .unwrap()
        .encode()
        .unwrap();
    assert!(bytes.starts_with(&ZSTD_MAGIC));
    assert_eq!(check_size(bytes.len(), DEFAULT_MAX_PAYLOAD), Ok(()));
    // One that compresses too little does not fit (random base64 shrinks only to ~3/4).
    let mut big = config_map();
    big["data"]["blob"] = json!(incompressible(DEFAULT_MAX_PAYLOAD * 3 / 2));
    let bytes = Envelope::snapshot("east", None, big, t0())
        .unwrap()
        .encode()
        .unwrap();
    assert_eq!(
        check_size(bytes.len(), DEFAULT_MAX_PAYLOAD),
        Err(TooLarge {
            encoded_len: bytes.len(),
            limit
        })
    );
    // A server configured with a larger max_payload accepts it.
    assert_eq!(check_size(bytes.len(), 8 * DEFAULT_MAX_PAYLOAD), Ok(()));
}

/// `len` random base64 characters (a xorshift stream): zstd only saves the 2 bits per byte
/// the alphabet leaves unused.
fn incompressible(len: usize) -> String {
    const SYMBOLS: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            char::from(SYMBOLS[(x % 64) as usize])
        })
        .collect()
}

/// A ConfigMap snapshot whose `data.blob` is `blob`.
fn snapshot_with_blob(blob: String) -> Envelope {
    let mut obj = config_map();
    obj["data"]["blob"] = json!(blob);
    Envelope::snapshot("east", None, obj, t0()).unwrap()
}

/// `bytes` compressed as a zstd frame (level 3), the way `encode` frames an envelope.
fn zstd_frame(bytes: &[u8]) -> Vec<u8> {
    zstd::bulk::compress(bytes, 3).unwrap()
}

#[test]
fn small_envelopes_stay_plain_large_ones_are_compressed() {
    // Tombstones and small snapshots: plain MessagePack, a map marker first.
    let tomb = Envelope::tombstone(
        "east",
        Some("id"),
        "u-1",
        "43",
        t0(),
        TombstoneReason::Deleted,
    );
    let bytes = tomb.encode().unwrap();
    assert!(bytes.len() <= COMPRESS_THRESHOLD, "{} bytes", bytes.len());
    assert_eq!(bytes, tomb.encode_msgpack().unwrap());
    // A large, repetitive object: a zstd frame, much smaller, decoding to the same envelope.
    let big = snapshot_with_blob("key: value\n".repeat(10_000));
    let plain = big.encode_msgpack().unwrap();
    let sent = big.encode().unwrap();
    assert!(sent.starts_with(&ZSTD_MAGIC));
    assert!(
        sent.len() * 10 < plain.len(),
        "{} vs {}",
        sent.len(),
        plain.len()
    );
    assert_eq!(Envelope::decode(&sent).unwrap(), big);
    // The plain bytes of the same envelope still decode (a reader takes both).
    assert_eq!(Envelope::decode(&plain).unwrap(), big);
    // Deterministic: the same envelope gives the same bytes (retries keep their meaning).
    assert_eq!(big.encode().unwrap(), big.encode().unwrap());
}

#[test]
fn hostile_zstd_frames_are_malformed() {
    let malformed =
        |bytes: &[u8]| matches!(Envelope::decode(bytes), Err(DecodeError::Malformed { .. }));
    let good = snapshot_with_blob("abc ".repeat(1_000)).encode().unwrap();
    assert!(good.starts_with(&ZSTD_MAGIC));
    // Trailing bytes after the frame, and a second frame.
    let mut trailing = good.clone();
    trailing.push(0);
    assert!(malformed(&trailing));
    let mut two = good.clone();
    two.extend_from_slice(&good);
    assert!(malformed(&two));
    // Every truncation, and a flipped byte in the body (the frame carries a checksum).
    for cut in 0..good.len() {
        assert!(
            Envelope::decode(&good[..cut]).is_err(),
            "prefix of {cut} bytes"
        );
    }
    let mut flipped = good.clone();
    let mid = flipped.len() / 2;
    flipped[mid] ^= 0x55;
    assert!(malformed(&flipped));
    // A valid frame around something that is not an envelope, or around another frame.
    assert!(malformed(&zstd_frame(b"not messagepack")));
    assert!(malformed(&zstd_frame(&good)));
    assert!(malformed(&zstd_frame(&[])));
    // The magic alone.
    assert!(malformed(&ZSTD_MAGIC));
}

#[test]
fn decompression_bombs_are_refused() {
    // 100 MiB of zeros compresses to a few KiB; the reader stops at its limit instead of
    // inflating it (the frame declares its content size, which the reader ignores).
    let bomb = zstd::bulk::compress(&vec![0u8; 100 * 1024 * 1024], 3).unwrap();
    assert!(bomb.len() < 64 * 1024, "{} bytes", bomb.len());
    assert!(matches!(
        Envelope::decode(&bomb),
        Err(DecodeError::Malformed { .. })
    ));
    // A valid envelope just above the limit (its plain bytes decode): refused compressed.
    let huge = snapshot_with_blob("y".repeat(MAX_DECOMPRESSED));
    let plain = huge.encode_msgpack().unwrap();
    assert!(plain.len() > MAX_DECOMPRESSED);
    assert_eq!(Envelope::decode(&plain).unwrap(), huge);
    assert!(matches!(
        Envelope::decode(&zstd_frame(&plain)),
        Err(DecodeError::Malformed { .. })
    ));
    // A writer refuses to produce what readers would refuse.
    assert!(huge.encode().is_err());
    // A frame header asking for a 64 MiB window (within zstd's own default of 128 MiB,
    // above the reader's 8 MiB) is refused before any window is allocated.
    let mut wide = ZSTD_MAGIC.to_vec();
    // Frame header descriptor: no checksum, no content size, not single-segment; then
    // the window descriptor: exponent 16 -> window 2^(10+16) = 64 MiB.
    wide.extend_from_slice(&[0x00, 16 << 3]);
    // One raw, last block of 4 bytes.
    wide.extend_from_slice(&[0x21, 0x00, 0x00]);
    wide.extend_from_slice(b"abcd");
    assert!(matches!(
        Envelope::decode(&wide),
        Err(DecodeError::Malformed { .. })
    ));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn large_snapshots_round_trip_compressed(body in json_value(), pad in 0usize..4_000, time in ms_time()) {
        let mut obj = config_map();
        obj["body"] = body;
        obj["data"]["pad"] = json!("p".repeat(pad));
        let env = Envelope::snapshot("east", Some("id"), obj, time).unwrap();
        let bytes = env.encode().unwrap();
        prop_assert_eq!(bytes.starts_with(&ZSTD_MAGIC), bytes != env.encode_msgpack().unwrap());
        prop_assert_eq!(Envelope::decode(&bytes).unwrap(), env);
    }

    #[test]
    fn garbage_after_the_magic_never_panics(tail in proptest::collection::vec(any::<u8>(), 0..512)) {
        let mut bytes = ZSTD_MAGIC.to_vec();
        bytes.extend_from_slice(&tail);
        prop_assert!(Envelope::decode(&bytes).is_err());
    }

    #[test]
    fn corrupted_frames_never_panic(at in any::<prop::sample::Index>(), xor in 1u8..=255) {
        let mut bytes = snapshot_with_blob("abc ".repeat(300)).encode().unwrap();
        let i = at.index(bytes.len());
        bytes[i] ^= xor;
        let _ = Envelope::decode(&bytes);
    }
}

/// What an agent of the release before sealing does with a sealed envelope (PROTOCOL
/// §4.8, §7): its reader requires `encryption` to be a map with the string entries
/// `algorithm`, `keyId` and `nonce` (ignoring others) and skips any such message as of an
/// unsupported version. A sealed envelope keeps exactly that shape, so old agents skip and
/// count it rather than take it as malformed or, worse, as a snapshot without an object.
#[test]
fn a_sealed_envelope_keeps_the_header_shape_older_readers_skip() {
    use fleetbus_schemas::seal::SealingSecretKey;
    let sk = SealingSecretKey::generate(&mut rand::rng());
    let env = Envelope::snapshot("east", None, config_map(), t0()).unwrap();
    let sealed = env
        .seal(&[("east", &sk.public_key())], &mut rand::rng())
        .unwrap();
    let wire: Value = rmp_serde::from_slice(&sealed.encode_msgpack().unwrap()).unwrap();
    let enc = wire["encryption"].as_object().unwrap();
    for field in ["algorithm", "keyId", "nonce"] {
        assert!(enc[field].is_string(), "{field}");
    }
    assert_eq!(enc["algorithm"], "fleetbus-seal-v1");
    assert_eq!(wire["object"], Value::Null);
    assert_eq!(wire["tombstone"], false);
    assert_eq!(wire["schemaVersion"], 1);
}
