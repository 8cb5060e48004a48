//! Server-side apply bodies (JSON or YAML).
#![no_main]

use fleetbus_devcluster::decoders;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match decoders::apply_body(data) {
        Ok(v) => assert!(decoders::within_limits(&v)),
        Err(r) => assert_eq!(r.code, 400, "{r:?}"),
    }
});
