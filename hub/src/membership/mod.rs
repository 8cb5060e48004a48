//! A fleet's membership, from the operator's side: `fleetbus fleet init`
//! ([`init`]) creates a fleet, `fleetbus join` ([`join`]) admits a cluster,
//! `fleetbus leave` ([`leave`]) revokes one. The keys and files are
//! [`crate::trust`]'s; this is what the commands do with them: print what the
//! operator needs, have a running mesh's nats-server reload a revocation
//! ([`crate::mesh::secure`]), and mark a cluster that left in the registry
//! ([`crate::clusters`]).
//!
//! Each command prints as it goes and returns the exit code. A step whose
//! failure leaves the others worth doing is said on stderr and makes the exit
//! code 1; one the command cannot go on from is a [`MembershipError`].

mod error;
mod init;
mod join;
mod leave;
mod reload;

pub use error::MembershipError;
pub use init::init;
pub use join::join;
pub use leave::leave;
