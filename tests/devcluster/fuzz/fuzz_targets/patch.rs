//! JSON patch, merge patch and strategic merge patch bodies against a ConfigMap
//! (first byte picks the patch type).
#![no_main]

use fleetbus_devcluster::decoders;
use fleetbus_devcluster::patch::PatchType;
use libfuzzer_sys::fuzz_target;

const TYPES: &[PatchType] = &[PatchType::Json, PatchType::Merge, PatchType::Strategic];

fuzz_target!(|data: &[u8]| {
    let Some((&pick, body)) = data.split_first() else {
        return;
    };
    let Some(def) = decoders::configmaps() else {
        return;
    };
    let live = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "x", "labels": {"a": "b"}}, "data": {"k": "v"}});
    let pt = TYPES[usize::from(pick) % TYPES.len()];
    if let Err(r) = decoders::patch(pt, &live, body, &def) {
        assert!((400..500).contains(&r.code), "{r:?}");
    }
});
