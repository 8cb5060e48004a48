//! Query strings: label and field selectors, fieldValidation, dryRun, force.
#![no_main]

use fleetbus_devcluster::decoders;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(q) = std::str::from_utf8(data) else {
        return;
    };
    let Some(def) = decoders::configmaps() else {
        return;
    };
    if let Err(r) = decoders::query(q, &def) {
        assert_eq!(r.code, 400, "{r:?}");
    }
});
