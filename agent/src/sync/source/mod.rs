//! The source side: which of this cluster's originals some rule lets it
//! publish, decided by comparing them with the bus (`publish::plan`, pure),
//! the published form of an object and its memoized hash ([`published`]),
//! publishing and withdrawing ([`publish`]), to whom a sealed object is
//! sealed ([`sealing`], pure), and what it keeps between passes ([`state`]).

pub(super) mod publish;
pub(super) mod published;
pub(super) mod sealing;
pub(super) mod state;
