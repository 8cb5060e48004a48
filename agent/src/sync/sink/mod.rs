//! The sink side: every desired copy computed from the rules and the bus
//! ([`pass`]; kept between passes and updated from what changed in
//! [`plan`], Bundles unwrapped by
//! [`bundle`], mapped by [`mutate`]), one winner per target ([`conflicts`]),
//! what to do with each decided without writing ([`wave`], pure: equal, a
//! plain create or replace run together, or the serial path, told why), the
//! serial path ([`serial`]) and the drift it finds ([`drifted`]), first looks
//! at copies without a baseline (dry runs run together, [`look`]), writes ([`apply`], skipped when [`compare`]
//! finds the copy equal; what the SyncPolicy refuses: [`refusal`]), copies held for their rule's `dependsOn` ([`depends`]),
//! copies nothing wants collected ([`collect`]) unless
//! deleting them would take unmanaged objects along ([`keep`]), and failures
//! announced ([`failures`]). What it keeps between passes that the engine
//! owns is in leaves ([`state`]'s `SinkState`, [`bundle_state`], [`keep`]'s `KeptCopy`).

pub(super) mod apply;
pub(super) mod bundle;
pub(super) mod bundle_read;
pub(super) mod bundle_state;
pub(super) mod collect;
pub(super) mod compare;
pub(super) mod conflicts;
pub(super) mod depends;
mod drifted;
pub(super) mod failures;
pub(super) mod hold;
pub(super) mod keep;
pub(super) mod look;
pub(super) mod mutate;
pub(super) mod pass;
pub(super) mod plan;
pub(super) mod refusal;
mod serial;
pub(super) mod state;
pub(super) mod values;
pub(super) mod wave;
