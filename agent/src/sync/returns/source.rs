//! The source object a status report is about: its key on the origin, and
//! the live object there (both the return pass and `per_cluster` ask).

use fleetbus_schemas::reported::ReportedStatus;
use fleetbus_schemas::subject::ObjectKey;
use kube::core::GroupVersionKind;
use serde_json::Value;

use crate::sync::world::World;

/// The source object a report is about (on its origin).
pub fn source_key(r: &ReportedStatus) -> ObjectKey {
    ObjectKey::from_api_version(
        &r.origin,
        &r.source.api_version,
        &r.source.kind,
        r.source.namespace.as_deref(),
        &r.source.name,
    )
}

/// The live source object a report is about, if it exists with the uid
/// the report names.
pub(in crate::sync) fn source_object(world: &World, r: &ReportedStatus) -> Option<Value> {
    let key = source_key(r);
    let gvk = GroupVersionKind::gvk(&key.group, &key.version, &key.kind);
    let obj = world
        .kinds
        .get(&gvk)?
        .objects
        .get(&(key.namespace.clone(), key.name.clone()))?;
    let uid = obj.pointer("/metadata/uid").and_then(Value::as_str);
    match &r.source.uid {
        Some(want) if uid != Some(want.as_str()) => None,
        _ => Some(obj),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sync::inputs::watches::tests::report;

    #[test]
    fn source_key_names_the_origin_object() {
        let k = source_key(&report("west"));
        assert_eq!(
            k,
            ObjectKey::from_api_version("east", "example.com/v1", "Widget", Some("a"), "w")
        );
    }
}
