//! The sink's plan, kept between passes: what every (rule, source object)
//! pair makes, an index from each target to the pairs that want it, and what
//! the last decision at each target found (for rule status). A pass updates
//! it from what changed — like the source's `plan_keys` — instead of
//! computing every pair and deciding every target again, so planning a
//! change does not walk every copy (ARCHITECTURE.md, "The sink's plan").
//! Pure: no engine, no IO.
//!
//! A pair's entry holds the envelope version it was computed from (uid,
//! content hash, resourceVersion): setting a pair again from the same
//! version is a lookup, so a full plan (`Plan::full`) reuses what did not
//! change, unless rules or the fleet changed (`Plan::clear`: templates read
//! cluster records and labels).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use fleetbus_schemas::envelope::Envelope;
use fleetbus_schemas::subject::ObjectKey;

use crate::sync::model::{Candidate, Conflict, Target};
use crate::sync::placement::state::Here;
use crate::sync::policy::Refusal;

/// How often a sink pass plans every pair and decides every target though
/// no input said it must: the safety net against an input whose change was
/// not marked (`Dirty`). It costs what every pass cost before the plan was
/// kept (about 20 µs per copy: 0.2 s at 10,000 copies), once per interval.
pub const FULL_EVERY: Duration = Duration::from_secs(300);

/// What changed since the last sink pass, marked as the inputs arrive: the
/// next pass plans only these, unless `full`.
#[derive(Debug, Default)]
pub struct Dirty {
    /// Envelopes that arrived or went (every origin).
    pub keys: BTreeSet<ObjectKey>,
    /// Local objects that changed or went, by their place.
    pub targets: BTreeSet<Target>,
    /// Something that can change every pair or decision changed: a kind was
    /// (re)listed or re-read from the bus, a Namespace changed.
    pub full: bool,
}

/// What a plan depends on besides its pairs (see `pass::gate`): when it
/// changes, the next pass is a full one.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Gate {
    /// The rules that make copies here.
    pub rules: Vec<String>,
    /// Every kind by name: listed, ready, namespaced.
    pub kinds: Vec<(String, bool, bool, bool)>,
    /// The rules holding their copies (see `hold`): when a hold ends, every
    /// copy it kept back is decided again.
    pub held: Vec<String>,
}

/// A rule and a source object on the bus.
pub type Pair = (String, ObjectKey);

/// What a rule makes of one source object.
#[derive(Debug, Clone, Default)]
pub struct Computed {
    /// The copy and where it goes, or why there is none; None: the rule
    /// does not select the object.
    pub result: Option<Result<(Target, Candidate), String>>,
    /// The object carries an update-policy value fleetbus does not know.
    pub unknown_policy: bool,
    /// This cluster's SyncPolicy refuses the copy (`result` is None then):
    /// boxed, as almost every pair has none (docs/design/memory.md: the plan's size).
    pub refused: Option<Box<Refusal>>,
}

/// The envelope version an entry was computed from: a SHA-256 of its uid,
/// content hash and resourceVersion, each length-prefixed (equal iff the
/// three are). Not the three strings: 32 bytes inline instead of three
/// strings and their ~150 bytes of heap, per pair (docs/design/memory.md).
pub type Version = [u8; 32];

/// The version of `env` (see the module docs).
pub fn version_of(env: &Envelope) -> Version {
    use sha2::{Digest as _, Sha256};
    let mut h = Sha256::new();
    for part in [&env.uid, &env.content_hash, &env.resource_version] {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part.as_bytes());
    }
    h.finalize().into()
}

fn same_version(env: &Envelope, v: &Version) -> bool {
    version_of(env) == *v
}

#[derive(Debug)]
struct Entry {
    version: Version,
    computed: Computed,
}

impl Entry {
    fn target(&self) -> Option<&Target> {
        match &self.computed.result {
            Some(Ok((t, _))) => Some(t),
            _ => None,
        }
    }
}

/// What the last decision at a target found.
#[derive(Debug, Clone, Default)]
pub struct Settled {
    /// The winner's rule.
    pub rule: String,
    /// The copy is in sync (equal, or written).
    pub synced: bool,
    /// Why it is not, when it failed.
    pub error: Option<String>,
    /// The conflicts found there: the losers', then the winner's own (a
    /// local object in the way), as the rules' status shows them.
    pub conflicts: Vec<Conflict>,
    /// Not written because the rule holds it (suspended): the copy would change.
    pub held: bool,
}

/// What the plan holds for one rule's status.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Ledger {
    /// Copies in sync.
    pub synced: i64,
    /// Source objects the rule cannot map, with why.
    pub pair_errors: BTreeMap<ObjectKey, String>,
    /// Source objects with an unknown update-policy value.
    pub unknown: BTreeSet<ObjectKey>,
    /// Source objects whose copy this cluster's SyncPolicy refuses, with why.
    pub refused: BTreeMap<ObjectKey, Refusal>,
    /// Copies failing, with the error each.
    pub errors: BTreeMap<Target, String>,
    /// Copies in conflict, with a description each.
    pub conflicts: BTreeMap<Target, String>,
    /// Copies the rule holds (suspended) that would be created or updated.
    pub held: i64,
}

impl Ledger {
    fn is_empty(&self) -> bool {
        *self == Ledger::default()
    }
}

/// The plan (see the module docs).
#[derive(Debug, Default)]
pub struct Plan {
    /// Boxed: an `Entry` is ~430 bytes, and a table keeps up to half of its
    /// slots empty (twice that while it grows), each the size of a slot.
    /// Each pair is kept once, shared with `targets` (its six strings and a
    /// 168-byte `Vec` slot per copy were a clone each; docs/design/memory.md).
    pairs: HashMap<Arc<Pair>, Box<Entry>>,
    /// The pairs that want each target, sorted (by rule, then source). A
    /// sorted `Vec`, not a `BTreeSet`: almost every target has one pair, and a
    /// one-element `BTreeSet<Pair>` costs a whole B-tree leaf (11 slots of
    /// ~170 bytes, ~1.9 KiB per copy; measured with heaptrack, docs/design/memory.md).
    targets: BTreeMap<Target, Vec<Arc<Pair>>>,
    settled: HashMap<Target, Settled>,
    ledgers: BTreeMap<String, Ledger>,
    /// What placement said of pairs' copies here (`.Placement`, the
    /// replica share; only placement rules' pairs have it): a change
    /// computes the pair again.
    shares: HashMap<Pair, Here>,
}

impl Plan {
    /// Forgets every pair (rules or the fleet changed: nothing computed
    /// before can be reused). What was settled stays until decided again.
    pub fn clear(&mut self) {
        self.pairs.clear();
        self.targets.clear();
        self.shares.clear();
        for l in self.ledgers.values_mut() {
            l.pair_errors.clear();
            l.unknown.clear();
            l.refused.clear();
        }
    }

    /// What placement said of `pair`'s copy when it was computed, if any.
    pub fn share(&self, pair: &Pair) -> Option<Here> {
        self.shares.get(pair).copied()
    }

    /// Records what placement said of `pair`'s copy.
    pub fn set_share(&mut self, pair: &Pair, share: Option<Here>) {
        match share {
            Some(n) => {
                self.shares.insert(pair.clone(), n);
            }
            None => {
                self.shares.remove(pair);
            }
        }
    }

    /// Sets what `pair` makes of `env` (None: the pair makes nothing: no
    /// envelope, or one the rule does not take); `compute` runs only if the
    /// pair was not computed from this very envelope version. The targets
    /// whose candidates may have changed are added to `changed`.
    pub fn set(
        &mut self,
        pair: &Pair,
        env: Option<&Envelope>,
        compute: impl FnOnce() -> Computed,
        changed: &mut BTreeSet<Target>,
    ) {
        let Some(env) = env else {
            self.remove(pair, changed);
            return;
        };
        if self
            .pairs
            .get(pair)
            .is_some_and(|e| same_version(env, &e.version))
        {
            return;
        }
        self.remove(pair, changed);
        let mut entry = Entry {
            version: version_of(env),
            computed: compute(),
        };
        // A target computed again is the one decided before: one `Target`
        // per copy, shared by every map (docs/design/memory.md).
        if let Some(Ok((t, _))) = &mut entry.computed.result {
            *t = self.shared(t.clone());
        }
        let shared = Arc::new(pair.clone());
        if let Some(t) = entry.target() {
            changed.insert(t.clone());
            // Capacity 1: a first push would reserve 4.
            let pairs = self
                .targets
                .entry(t.clone())
                .or_insert_with(|| Vec::with_capacity(1));
            if let Err(at) = pairs.binary_search_by(|p| p.as_ref().cmp(pair)) {
                pairs.insert(at, Arc::clone(&shared));
            }
        }
        let (rule, key) = pair;
        if let Some(Err(message)) = &entry.computed.result {
            self.ledger(rule)
                .pair_errors
                .insert(key.clone(), message.clone());
        }
        if entry.computed.unknown_policy {
            self.ledger(rule).unknown.insert(key.clone());
        }
        if let Some(why) = &entry.computed.refused {
            self.ledger(rule)
                .refused
                .insert(key.clone(), (**why).clone());
        }
        self.pairs.insert(shared, Box::new(entry));
    }

    /// The target `pair` makes a copy at, if it makes one.
    pub fn target_of(&self, pair: &Pair) -> Option<&Target> {
        self.pairs.get(pair)?.target()
    }

    /// Forgets `pair`.
    fn remove(&mut self, pair: &Pair, changed: &mut BTreeSet<Target>) {
        // What placement said goes with the pair (`set_share` follows a set).
        self.shares.remove(pair);
        let Some(old) = self.pairs.remove(pair) else {
            return;
        };
        if let Some(t) = old.target() {
            changed.insert(t.clone());
            if let Some(pairs) = self.targets.get_mut(t) {
                if let Ok(at) = pairs.binary_search_by(|p| p.as_ref().cmp(pair)) {
                    pairs.remove(at);
                }
                if pairs.is_empty() {
                    self.targets.remove(t);
                }
            }
        }
        let (rule, key) = pair;
        if let Some(l) = self.ledgers.get_mut(rule) {
            l.pair_errors.remove(key);
            l.unknown.remove(key);
            l.refused.remove(key);
            if l.is_empty() {
                self.ledgers.remove(rule);
            }
        }
    }

    /// Ends a full plan: forgets the pairs not in `seen` (objects or rules
    /// gone).
    pub fn retain(&mut self, seen: &BTreeSet<Pair>, changed: &mut BTreeSet<Target>) {
        let gone: Vec<Pair> = self
            .pairs
            .keys()
            .filter(|p| !seen.contains(p.as_ref()))
            .map(|p| Pair::clone(p))
            .collect();
        for p in &gone {
            self.remove(p, changed);
        }
    }

    /// The candidates for `target`, by rule then source object.
    pub fn candidates(&self, target: &Target) -> Vec<Candidate> {
        let Some(pairs) = self.targets.get(target) else {
            return Vec::new();
        };
        pairs
            .iter()
            .filter_map(|p| match &self.pairs.get(p)?.computed.result {
                Some(Ok((_, c))) => Some(c.clone()),
                _ => None,
            })
            .collect()
    }

    /// The plan's own `Target` for the place `target` names, if it knows
    /// that place, else `target`: a copy's maps then share one allocation
    /// of its key instead of a clone each (docs/design/memory.md).
    pub fn shared(&self, target: Target) -> Target {
        let known = (self.targets.get_key_value(&target).map(|(k, _)| k))
            .or_else(|| self.settled.get_key_value(&target).map(|(k, _)| k));
        match known {
            Some(k) => k.clone(),
            None => target,
        }
    }

    /// The plan's own pair of `rule` and `key` at `target` (shared, as
    /// `shared`), or a new one if the plan does not hold it (a Bundle's
    /// manifest).
    pub fn pair(&self, target: &Target, rule: &str, key: &ObjectKey) -> Arc<Pair> {
        let want = (rule, key);
        self.targets
            .get(target)
            .and_then(|pairs| {
                let at = pairs
                    .binary_search_by(|p| (p.0.as_str(), &p.1).cmp(&want))
                    .ok()?;
                pairs.get(at).cloned()
            })
            .unwrap_or_else(|| Arc::new((rule.to_owned(), key.clone())))
    }

    /// Whether some pair wants a copy at `target`.
    pub fn wants(&self, target: &Target) -> bool {
        self.targets.contains_key(target)
    }

    /// Every target some pair wants, or that was decided before (a full pass
    /// decides them all: the gone ones are forgotten).
    pub fn every_target(&self) -> BTreeSet<Target> {
        self.targets
            .keys()
            .chain(self.settled.keys())
            .cloned()
            .collect()
    }

    /// The targets some pair wants.
    #[cfg(test)]
    pub fn wanted(&self) -> impl Iterator<Item = &Target> {
        self.targets.keys()
    }

    /// Records the decision at `target` (None: nothing wants it now);
    /// returns the one it replaces.
    pub fn settle(&mut self, target: &Target, now: Option<Settled>) -> Option<Settled> {
        let old = self.settled.remove(target);
        if let Some(o) = &old {
            self.count(target, o, false);
        }
        if let Some(s) = now {
            self.count(target, &s, true);
            self.settled.insert(target.clone(), s);
        }
        old
    }

    /// Adds (`add`) or takes back what `s` at `target` contributes to its
    /// rules' status. Only this target's decision writes these (rule,
    /// target) entries, so taking back removes them whatever they hold.
    fn count(&mut self, target: &Target, s: &Settled, add: bool) {
        let l = self.ledgers.entry(s.rule.clone()).or_default();
        if s.synced {
            l.synced += if add { 1 } else { -1 };
        }
        if s.held {
            l.held += if add { 1 } else { -1 };
        }
        if let Some(e) = &s.error {
            if add {
                l.errors.insert(target.clone(), e.clone());
            } else {
                l.errors.remove(target);
            }
        }
        for c in &s.conflicts {
            let l = self.ledgers.entry(c.rule.clone()).or_default();
            if add {
                l.conflicts.insert(target.clone(), c.message.clone());
            } else {
                l.conflicts.remove(target);
            }
        }
        if !add {
            // Rules gone leave no empty ledger behind.
            let rules = std::iter::once(&s.rule).chain(s.conflicts.iter().map(|c| &c.rule));
            for rule in rules {
                if self.ledgers.get(rule).is_some_and(Ledger::is_empty) {
                    self.ledgers.remove(rule);
                }
            }
        }
    }

    fn ledger(&mut self, rule: &str) -> &mut Ledger {
        self.ledgers.entry(rule.to_owned()).or_default()
    }

    /// Copies in sync, over every rule.
    pub fn synced(&self) -> usize {
        let n: i64 = self.ledgers.values().map(|l| l.synced).sum();
        usize::try_from(n).unwrap_or(0)
    }

    /// Whether the copy at `target` was in sync at its last decision.
    pub fn is_synced(&self, target: &Target) -> bool {
        self.settled.get(target).is_some_and(|s| s.synced)
    }

    /// What the plan holds for `rule`'s status.
    pub fn ledger_of(&self, rule: &str) -> Option<&Ledger> {
        self.ledgers.get(rule)
    }
}

#[cfg(test)]
mod tests;
