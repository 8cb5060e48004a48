//! Rule sync: the pure parts (matching, templates, mutations, comparison); see sync-design.
pub mod compare;
pub mod matching;
pub mod mutate;
pub mod template;
