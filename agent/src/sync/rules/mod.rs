//! ResourceSyncRules: compiled from their objects, the built-in one that
//! replicates them included ([`compile`]), which objects and clusters a rule
//! selects ([`matching`]), and the templates of its mutations ([`template`]).
//! All pure.

pub(super) mod compile;
mod cycles;
pub(super) mod matching;
pub(super) mod template;
