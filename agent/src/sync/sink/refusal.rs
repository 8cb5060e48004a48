//! What this cluster's SyncPolicy refuses of the copies rules would write
//! here, judged on the copy as computed (asked by the plan, and for every
//! placement rule's source object, chosen here or not: what
//! `placement::fitness` tells the origin).

use crate::sync::model::Target;
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
