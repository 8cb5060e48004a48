//! What this cluster's SyncPolicy refuses of the copies rules would write
//! here: the copy as computed (`import_refused`, asked by the plan), and a
//! placement rule's source object as it is, before any cluster is chosen
//! (`placement_unfit`: what `placement::fitness` tells the origin).

use fleetbus_schemas::subject::ObjectKey;

use crate::sync::model::{Place, Target};
use crate::sync::rules::compile::CompiledRule;
use crate::sync::world::World;

/// Why this cluster's SyncPolicy refuses a copy of `rule` at `target`,
/// if it does. The built-in rule that replicates rules is not asked:
/// rules always travel, the policy judges what they bring.
pub(in crate::sync) fn import_refused(
    world: &World,
    rule: &CompiledRule,
    target: &Target,
) -> Option<crate::sync::policy::Refusal> {
    if rule.builtin {
        return None;
    }
    let (group, _) = fleetbus_schemas::subject::split_api_version(&target.api_version);
    let what = crate::sync::policy::Subject {
        group,
        kind: &target.kind,
        namespace: target.namespace.as_deref(),
    };
    let local = &world.fleet.local.name;
    let author = rule.author(local);
    world
        .policy
        .import_claimed(local, author, rule.author_verified, &what)
        .err()
}

/// Why this cluster would refuse `rule`'s copy of `key`, judged on the
/// source's kind and namespace (what a policy judges; the name does not
/// matter to it). A mutation that moves the copy elsewhere is judged
/// exactly once the copy is computed (`import_refused`).
pub(in crate::sync) fn placement_unfit(
    world: &World,
    rule: &CompiledRule,
    key: &ObjectKey,
) -> Option<String> {
    let api_version = if key.group.is_empty() {
        key.version.clone()
    } else {
        format!("{}/{}", key.group, key.version)
    };
    let target = Target::from(Place {
        api_version,
        kind: key.kind.clone(),
        namespace: key.namespace.clone(),
        name: key.name.clone(),
    });
    import_refused(world, rule, &target).map(|r| r.to_string())
}
