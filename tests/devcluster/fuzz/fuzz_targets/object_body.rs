//! Create/update bodies: JSON, YAML, protobuf (first byte picks the content type).
#![no_main]

use fleetbus_devcluster::decoders;
use libfuzzer_sys::fuzz_target;

const TYPES: &[&str] = &[
    "application/json",
    "application/yaml",
    "application/vnd.kubernetes.protobuf",
    "",
];

fuzz_target!(|data: &[u8]| {
    let Some((&pick, body)) = data.split_first() else {
        return;
    };
    let ct = TYPES[usize::from(pick) % TYPES.len()];
    match decoders::object_body(body, ct) {
        Ok(v) => assert!(v.is_object() && decoders::within_limits(&v)),
        Err(r) => assert!((400..500).contains(&r.code), "{r:?}"),
    }
});
