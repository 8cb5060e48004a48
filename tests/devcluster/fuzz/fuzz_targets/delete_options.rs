//! DELETE bodies (DeleteOptions as JSON or protobuf; first byte picks the content type).
#![no_main]

use fleetbus_devcluster::decoders;
use libfuzzer_sys::fuzz_target;

const TYPES: &[&str] = &["application/json", "application/vnd.kubernetes.protobuf", ""];

fuzz_target!(|data: &[u8]| {
    let Some((&pick, body)) = data.split_first() else {
        return;
    };
    let ct = TYPES[usize::from(pick) % TYPES.len()];
    if let Err(r) = decoders::delete_options(body, ct, "propagationPolicy=Background") {
        assert!((400..500).contains(&r.code), "{r:?}");
    }
});
