//! What the sink knows of a copy beyond the live object.

use serde_json::Value;

use super::Packed;
use crate::sync::digest::Digest;

/// What the sink knows of a copy beyond the live object.
#[derive(Debug, Clone)]
pub struct Baseline {
    /// The digest of the desired object (before carrying over live fields)
    /// last written: only "did it change" is asked of it.
    pub desired: Digest,
    /// What the API server made of it (the write's response, or a dry
    /// run's), packed: a copy found in sync by resourceVersion (`verified`)
    /// never reads it; a changed live copy is compared with it, and a drift
    /// is described from it. Not a digest: what is compared depends on the
    /// exclusions the live copy's annotations select at that moment.
    pub server: Packed,
    /// The live copy's resourceVersion (and whether status was compared)
    /// when it was last found equal to `server`: while both are the same,
    /// it still is, without comparing again. Cleared when rules recompile
    /// (exclusions, drift modes).
    pub verified: Option<(String, bool)>,
}

impl Baseline {
    /// A write's response as a baseline keeps it: managedFields compacted
    /// (see `meta::compact_managed_fields`), packed. Done as soon as a write
    /// returns: a wave of thousands of writes holding their parsed
    /// responses until the wave ends was the sink's peak (~5 KiB per copy,
    /// measured with heaptrack, docs/design/memory.md).
    pub fn pack_server(mut server: Value) -> Packed {
        super::meta::compact_managed_fields(&mut server);
        Packed::new(&server)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_write_response_is_kept_packed_without_fields_v1() {
        let entry = json!({"manager": "fleetbus", "operation": "Update",
                           "time": "2026-11-27T05:00:00Z", "fieldsType": "FieldsV1",
                           "fieldsV1": {"f:data": {"f:k": {}}}});
        let server = json!({"apiVersion": "v1", "kind": "ConfigMap",
                            "metadata": {"name": "c", "resourceVersion": "9",
                                         "managedFields": [entry]},
                            "data": {"k": "v"}});
        let packed = Baseline::pack_server(server.clone());
        let mut kept = server;
        kept["metadata"]["managedFields"][0] = json!({"manager": "fleetbus",
            "operation": "Update", "time": "2026-11-27T05:00:00Z"});
        assert_eq!(packed.value().unwrap(), kept);
        assert!(packed.packed_len() > 0, "{packed:?}");
    }
}
