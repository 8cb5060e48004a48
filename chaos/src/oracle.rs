//! The oracle: what every sink must hold after a scenario, from what the
//! origins acknowledged, and the checks of what the sinks were seen doing.
//!
//! Pure: the runner feeds it the writes its workload got acknowledged and
//! the events its watches on every sink delivered, and asks for violations at
//! the end. Nothing here reads a clock, so a verdict never depends on two
//! processes agreeing on the time.
//!
//! The workload's objects carry a sequence number (`data.seq`) that grows
//! with every write of one object name, across deletes and recreates: a copy
//! whose `seq` goes down was written with an older version over a newer one.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// One source object: the cluster it lives on, its namespace and name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Source {
    pub origin: String,
    pub namespace: String,
    pub name: String,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}/{}", self.origin, self.namespace, self.name)
    }
}

/// The state of a source object as its origin last acknowledged it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Acked {
    /// Present: its uid, its sequence number, its data.
    Present {
        uid: String,
        seq: u64,
        data: BTreeMap<String, String>,
    },
    /// Deleted (its last uid).
    Deleted,
}

/// Which clusters a rule copies from and to (the runner's own model of the
/// rule it created: namespaces and the clusters its selectors pick).
#[derive(Debug, Clone)]
pub struct RuleModel {
    /// Namespaces the rule matches.
    pub namespaces: BTreeSet<String>,
    /// Clusters whose objects it copies.
    pub sources: BTreeSet<String>,
    /// Clusters that receive copies.
    pub sinks: BTreeSet<String>,
}

/// A copy as a sink holds it at the end (from a list of the sink).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Copy {
    pub sink: String,
    /// The copy's `fleetbus.io/origin-cluster`.
    pub origin: String,
    pub namespace: String,
    pub name: String,
    /// The copy's `fleetbus.io/origin-uid`.
    pub origin_uid: String,
    pub data: BTreeMap<String, String>,
}

impl Copy {
    /// The source object this is a copy of.
    pub fn source(&self) -> Source {
        Source {
            origin: self.origin.clone(),
            namespace: self.namespace.clone(),
            name: self.name.clone(),
        }
    }
}

/// An origin's object as its final list shows it (see [`Oracle::settle`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    pub source: Source,
    pub uid: String,
    pub seq: u64,
    pub data: BTreeMap<String, String>,
}

/// One thing a sink was seen doing to a copy (from its watch, in order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    /// The copy was created or changed to this sequence number.
    Version { seq: u64 },
    /// The copy made from this origin uid was deleted.
    Deleted { origin_uid: String },
    /// Not a sink's doing: the source's origin left the fleet for good
    /// ([`Oracle::left`]); deleting the copy is its orphan policy from here on.
    OriginLeft,
}

/// An invariant that did not hold, naming the object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Violation {
    /// The sink lacks a copy of a present source.
    Missing { sink: String, source: Source },
    /// The sink's copy differs from the origin's last acknowledged version.
    Stale {
        sink: String,
        source: Source,
        want_seq: u64,
        got: BTreeMap<String, String>,
    },
    /// The sink holds a copy of a deleted source, or of nothing the oracle
    /// knows, or of a source not selected for it.
    Extra { sink: String, source: Source },
    /// A copy was deleted while its source (that uid) was never deleted: a
    /// delete because a peer was unreachable, or a resurrection race.
    DeletedWhilePresent { sink: String, source: Source },
    /// A copy that was already right was written (or deleted) after a fault
    /// (catchup-kill: the restarted sink must leave them alone).
    RewrittenWhileRight { sink: String, source: Source },
    /// An older version was written over a newer one.
    WentBack {
        sink: String,
        source: Source,
        from: u64,
        to: u64,
    },
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::Missing { sink, source } => write!(f, "{sink}: missing copy of {source}"),
            Violation::Stale {
                sink,
                source,
                want_seq,
                got,
            } => write!(
                f,
                "{sink}: stale copy of {source}: want seq {want_seq}, holds seq {}",
                got.get("seq").map_or("none", String::as_str)
            ),
            Violation::Extra { sink, source } => {
                write!(f, "{sink}: copy of {source}, which it must not hold")
            }
            Violation::RewrittenWhileRight { sink, source } => {
                write!(f, "{sink}: copy of {source} written although it was right")
            }
            Violation::DeletedWhilePresent { sink, source } => {
                write!(
                    f,
                    "{sink}: copy of {source} deleted while its source was not"
                )
            }
            Violation::WentBack {
                sink,
                source,
                from,
                to,
            } => write!(
                f,
                "{sink}: copy of {source} went back from seq {from} to {to}"
            ),
        }
    }
}

/// What the origins acknowledged and what the sinks were seen doing.
#[derive(Debug, Default)]
pub struct Oracle {
    acked: BTreeMap<Source, Acked>,
    /// Every uid each source had that its origin acknowledged deleting.
    deleted_uids: BTreeMap<Source, BTreeSet<String>>,
    /// Per (sink, source): the events its watch delivered, in order.
    seen: BTreeMap<(String, Source), Vec<Seen>>,
    /// Acknowledged writes (creates and updates) and deletes.
    writes: u64,
    /// Origins that left the fleet for good ([`Oracle::left`]).
    left: BTreeSet<String>,
    /// Acknowledged writes by origin.
    writes_of: BTreeMap<String, u64>,
}

impl Oracle {
    /// The origin acknowledged a create or update of `source` (uid `uid`) to
    /// `seq` with `data`. Acknowledgements of one object arrive in order
    /// (one writer per object), so the last one is the truth.
    pub fn wrote(&mut self, source: Source, uid: &str, seq: u64, data: BTreeMap<String, String>) {
        self.writes += 1;
        *self.writes_of.entry(source.origin.clone()).or_default() += 1;
        // A new uid means the object was deleted in between, by a delete
        // whose acknowledgement was lost (its API server killed after it
        // applied it): the old uid's copies may go.
        if let Some(Acked::Present { uid: old, .. }) = self.acked.get(&source) {
            if old != uid {
                self.deleted_uids
                    .entry(source.clone())
                    .or_default()
                    .insert(old.clone());
            }
        }
        self.acked.insert(
            source,
            Acked::Present {
                uid: uid.to_owned(),
                seq,
                data,
            },
        );
    }

    /// The origin acknowledged deleting `source`.
    pub fn deleted(&mut self, source: Source) {
        self.writes += 1;
        *self.writes_of.entry(source.origin.clone()).or_default() += 1;
        if let Some(Acked::Present { uid, .. }) = self.acked.get(&source) {
            self.deleted_uids
                .entry(source.clone())
                .or_default()
                .insert(uid.clone());
        }
        self.acked.insert(source, Acked::Deleted);
    }

    /// The origin's objects as a list shows them once the workload stopped:
    /// the truth for writes whose acknowledgement was lost (a cut or timeout
    /// after the server applied it, or before). Every object of `origin` the
    /// oracle knew that the list lacks is deleted (its last uid with it);
    /// every listed one is present as listed.
    pub fn settle(&mut self, origin: &str, listed: Vec<Listed>) {
        let mut listed: BTreeMap<Source, Listed> =
            listed.into_iter().map(|l| (l.source.clone(), l)).collect();
        let known: Vec<Source> = self
            .acked
            .keys()
            .filter(|s| s.origin == origin)
            .cloned()
            .collect();
        for source in known {
            if !listed.contains_key(&source) {
                if let Some(Acked::Present { uid, .. }) = self.acked.get(&source) {
                    self.deleted_uids
                        .entry(source.clone())
                        .or_default()
                        .insert(uid.clone());
                }
                self.acked.insert(source, Acked::Deleted);
            }
        }
        for (source, l) in std::mem::take(&mut listed) {
            if let Some(Acked::Present { uid, .. }) = self.acked.get(&source) {
                // Recreated by a write whose acknowledgement was lost.
                if *uid != l.uid {
                    self.deleted_uids
                        .entry(source.clone())
                        .or_default()
                        .insert(uid.clone());
                }
            }
            self.acked.insert(
                source,
                Acked::Present {
                    uid: l.uid,
                    seq: l.seq,
                    data: l.data,
                },
            );
        }
    }

    /// A sink's watch delivered `event` for its copy of `source`.
    pub fn saw(&mut self, sink: &str, source: Source, event: Seen) {
        let left = self.left.contains(&source.origin);
        let events = self.seen.entry((sink.to_owned(), source)).or_default();
        // A copy first seen after its origin left (made just before).
        if left && events.is_empty() {
            events.push(Seen::OriginLeft);
        }
        events.push(event);
    }

    /// `origin` is about to leave the fleet for good (`--leave-on-shutdown`):
    /// from now on a sink deleting its copies follows the rule's orphan
    /// policy and is no violation; before now, it was.
    pub fn left(&mut self, origin: &str) {
        self.left.insert(origin.to_owned());
        for ((_, source), events) in &mut self.seen {
            if source.origin == origin {
                events.push(Seen::OriginLeft);
            }
        }
    }

    /// Writes the origins acknowledged.
    pub fn acknowledged_writes(&self) -> u64 {
        self.writes
    }

    /// Writes `origin` acknowledged.
    pub fn acknowledged_writes_of(&self, origin: &str) -> u64 {
        self.writes_of.get(origin).copied().unwrap_or(0)
    }

    /// Changes of copies the watch of `sink` delivered (versions and
    /// deletes; a re-list after a broken watch replays what is there).
    pub fn copy_events(&self, sink: &str) -> u64 {
        self.copy_events_by_source(sink).values().sum()
    }

    /// Per source: the changes of its copy the watch of `sink` delivered so
    /// far (see [`Oracle::copy_events`]).
    pub fn copy_events_by_source(&self, sink: &str) -> BTreeMap<Source, u64> {
        self.copy_history(sink)
            .into_iter()
            .map(|(source, events)| (source, events.len() as u64))
            .collect()
    }

    /// Per source: the changes of its copy the watch of `sink` delivered so
    /// far, in order.
    pub fn copy_history(&self, sink: &str) -> BTreeMap<Source, Vec<Seen>> {
        self.seen
            .iter()
            .filter(|((s, _), _)| s == sink)
            .map(|((_, source), events)| {
                let changes = events.iter().filter(|e| !matches!(e, Seen::OriginLeft));
                (source.clone(), changes.cloned().collect())
            })
            .collect()
    }

    /// The present sources with their uid and sequence number.
    pub fn present(&self) -> BTreeMap<Source, (String, u64)> {
        self.acked
            .iter()
            .filter_map(|(s, a)| match a {
                Acked::Present { uid, seq, .. } => Some((s.clone(), (uid.clone(), *seq))),
                Acked::Deleted => None,
            })
            .collect()
    }

    /// Source objects the oracle knows (present or deleted).
    pub fn objects(&self) -> usize {
        self.acked.len()
    }

    /// Every violation, given the rule and what each sink holds at the end.
    pub fn check(&self, rule: &RuleModel, held: &[Copy]) -> Vec<Violation> {
        let mut out = self.check_held(rule, held);
        out.extend(self.check_history());
        out
    }

    /// Whether `copy` is what its sink must hold: the last acknowledged
    /// version of a present source selected for it.
    pub fn right(&self, rule: &RuleModel, copy: &Copy) -> bool {
        self.judge(rule, copy).is_none()
    }

    /// What is wrong with one held copy, if anything.
    fn judge(&self, rule: &RuleModel, c: &Copy) -> Option<Violation> {
        let source = c.source();
        match self.acked.get(&source) {
            Some(Acked::Present { uid, seq, data }) if selected(rule, &c.sink, &source) => {
                // A copy of an earlier life of the object (its uid) is
                // stale even when the data happens to be the same.
                (&c.data != data || &c.origin_uid != uid).then(|| Violation::Stale {
                    sink: c.sink.clone(),
                    source,
                    want_seq: *seq,
                    got: c.data.clone(),
                })
            }
            _ => Some(Violation::Extra {
                sink: c.sink.clone(),
                source,
            }),
        }
    }

    /// Present copies against the last acknowledged state.
    fn check_held(&self, rule: &RuleModel, held: &[Copy]) -> Vec<Violation> {
        let mut out = Vec::new();
        let mut found: BTreeSet<(String, Source)> = BTreeSet::new();
        for c in held {
            found.insert((c.sink.clone(), c.source()));
            out.extend(self.judge(rule, c));
        }
        for (source, acked) in &self.acked {
            if !matches!(acked, Acked::Present { .. }) {
                continue;
            }
            for sink in &rule.sinks {
                if selected(rule, sink, source) && !found.contains(&(sink.clone(), source.clone()))
                {
                    out.push(Violation::Missing {
                        sink: sink.clone(),
                        source: source.clone(),
                    });
                }
            }
        }
        out
    }

    /// What the watches saw: versions never go back within one uid's life,
    /// and no copy was deleted whose source uid was never deleted.
    fn check_history(&self) -> Vec<Violation> {
        let mut out = Vec::new();
        for ((sink, source), events) in &self.seen {
            let mut last: Option<u64> = None;
            let mut origin_left = false;
            for e in events {
                match e {
                    Seen::OriginLeft => origin_left = true,
                    Seen::Version { seq } => {
                        if let Some(prev) = last.filter(|p| seq < p) {
                            out.push(Violation::WentBack {
                                sink: sink.clone(),
                                source: source.clone(),
                                from: prev,
                                to: *seq,
                            });
                        }
                        last = Some(last.map_or(*seq, |p| p.max(*seq)));
                    }
                    Seen::Deleted { origin_uid } => {
                        let legit = origin_left
                            || self
                                .deleted_uids
                                .get(source)
                                .is_some_and(|uids| uids.contains(origin_uid));
                        if !legit {
                            out.push(Violation::DeletedWhilePresent {
                                sink: sink.clone(),
                                source: source.clone(),
                            });
                        }
                    }
                }
            }
        }
        out
    }
}

/// Whether `rule` copies `source` to `sink`.
fn selected(rule: &RuleModel, sink: &str, source: &Source) -> bool {
    source.origin != sink
        && rule.sinks.contains(sink)
        && rule.sources.contains(&source.origin)
        && rule.namespaces.contains(&source.namespace)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn src(origin: &str, name: &str) -> Source {
        Source {
            origin: origin.into(),
            namespace: "load".into(),
            name: name.into(),
        }
    }

    fn data(seq: u64) -> BTreeMap<String, String> {
        BTreeMap::from([("seq".to_owned(), seq.to_string())])
    }

    fn copy(sink: &str, s: &Source, uid: &str, seq: u64) -> Copy {
        Copy {
            sink: sink.into(),
            origin: s.origin.clone(),
            namespace: s.namespace.clone(),
            name: s.name.clone(),
            origin_uid: uid.into(),
            data: data(seq),
        }
    }

    fn rule() -> RuleModel {
        let all: BTreeSet<String> = ["a", "b", "c"].map(String::from).into();
        RuleModel {
            namespaces: ["load".to_owned()].into(),
            sources: all.clone(),
            sinks: all,
        }
    }

    #[test]
    fn a_converged_fleet_has_no_violation() {
        let mut o = Oracle::default();
        let x = src("a", "x");
        o.wrote(x.clone(), "u1", 1, data(1));
        o.wrote(x.clone(), "u1", 2, data(2));
        o.saw("b", x.clone(), Seen::Version { seq: 1 });
        o.saw("b", x.clone(), Seen::Version { seq: 2 });
        let held = [copy("b", &x, "u1", 2), copy("c", &x, "u1", 2)];
        assert_eq!(o.check(&rule(), &held), vec![]);
        assert_eq!(o.acknowledged_writes(), 2);
        assert_eq!(
            (o.acknowledged_writes_of("a"), o.acknowledged_writes_of("b")),
            (2, 0)
        );
        assert_eq!((o.copy_events("b"), o.copy_events("c")), (2, 0));
    }

    #[test]
    fn missing_stale_and_extra_copies_are_named() {
        let mut o = Oracle::default();
        let (x, y, z) = (src("a", "x"), src("a", "y"), src("b", "z"));
        o.wrote(x.clone(), "u1", 3, data(3));
        o.wrote(y.clone(), "u2", 1, data(1));
        o.deleted(y.clone());
        o.wrote(z.clone(), "u3", 1, data(1));
        let held = [
            copy("b", &x, "u1", 2), // stale
            copy("b", &y, "u2", 1), // a deleted source's copy
            copy("a", &z, "u3", 1), // fine
            copy("a", &x, "u1", 3), // a copy on its own origin: extra
        ];
        let v = o.check(&rule(), &held);
        assert!(v.contains(&Violation::Stale {
            sink: "b".into(),
            source: x.clone(),
            want_seq: 3,
            got: data(2)
        }));
        assert!(v.contains(&Violation::Extra {
            sink: "b".into(),
            source: y
        }));
        assert!(v.contains(&Violation::Extra {
            sink: "a".into(),
            source: x.clone()
        }));
        assert!(v.contains(&Violation::Missing {
            sink: "c".into(),
            source: x
        }));
        assert!(v.contains(&Violation::Missing {
            sink: "c".into(),
            source: z
        }));
        assert_eq!(v.len(), 5, "{v:#?}");
    }

    #[test]
    fn a_copy_is_right_only_as_the_origin_last_acknowledged_it() {
        let mut o = Oracle::default();
        let (x, y) = (src("a", "x"), src("a", "y"));
        o.wrote(x.clone(), "u1", 2, data(2));
        o.wrote(y.clone(), "u2", 1, data(1));
        o.deleted(y.clone());
        assert!(o.right(&rule(), &copy("b", &x, "u1", 2)));
        assert!(!o.right(&rule(), &copy("b", &x, "u1", 1)), "stale");
        assert!(
            !o.right(&rule(), &copy("b", &x, "u0", 2)),
            "an earlier life"
        );
        assert!(!o.right(&rule(), &copy("a", &x, "u1", 2)), "on its origin");
        assert!(!o.right(&rule(), &copy("b", &y, "u2", 1)), "source deleted");
    }

    #[test]
    fn history_catches_going_back_and_deletes_of_live_sources() {
        let mut o = Oracle::default();
        let x = src("a", "x");
        o.wrote(x.clone(), "u1", 5, data(5));
        o.saw("b", x.clone(), Seen::Version { seq: 4 });
        o.saw("b", x.clone(), Seen::Version { seq: 5 });
        o.saw("b", x.clone(), Seen::Version { seq: 3 });
        o.saw(
            "c",
            x.clone(),
            Seen::Deleted {
                origin_uid: "u1".into(),
            },
        );
        let v = o.check_history();
        assert_eq!(
            v,
            vec![
                Violation::WentBack {
                    sink: "b".into(),
                    source: x.clone(),
                    from: 5,
                    to: 3
                },
                Violation::DeletedWhilePresent {
                    sink: "c".into(),
                    source: x
                },
            ]
        );
    }

    /// The delete's acknowledgement lost (its API server killed after it
    /// applied it), then the object created again: the old uid's copies
    /// may go; the new one's may not.
    #[test]
    fn a_recreate_acknowledged_under_a_new_uid_ends_the_old_uids_life() {
        let mut o = Oracle::default();
        let x = src("a", "x");
        o.wrote(x.clone(), "u1", 1, data(1));
        o.wrote(x.clone(), "u2", 2, data(2));
        let gone = |uid: &str| Seen::Deleted {
            origin_uid: uid.into(),
        };
        o.saw("b", x.clone(), gone("u1"));
        assert_eq!(o.check_history(), vec![]);
        o.saw("b", x.clone(), gone("u2"));
        assert_eq!(
            o.check_history(),
            vec![Violation::DeletedWhilePresent {
                sink: "b".into(),
                source: x
            }]
        );
    }

    /// An oracle that saw `a` write x (uid u1) and y (uid u2) at seq 1.
    fn two_written() -> (Oracle, Source, Source) {
        let mut o = Oracle::default();
        let (x, y) = (src("a", "x"), src("a", "y"));
        o.wrote(x.clone(), "u1", 1, data(1));
        o.wrote(y.clone(), "u2", 1, data(1));
        (o, x, y)
    }

    #[test]
    fn copies_of_an_origin_that_left_may_go_but_not_before_it_left() {
        let (mut o, x, y) = two_written();
        let gone = || Seen::Deleted {
            origin_uid: "u1".into(),
        };
        o.saw("b", x.clone(), Seen::Version { seq: 1 });
        // Deleted while its origin was still a member: a violation.
        o.saw("c", x.clone(), Seen::Version { seq: 1 });
        o.saw("c", x.clone(), gone());
        o.left("a");
        o.saw("b", x.clone(), gone());
        // First seen after the leave (a copy made just before it), then gone.
        o.saw("c", y.clone(), Seen::Version { seq: 1 });
        o.saw(
            "c",
            y,
            Seen::Deleted {
                origin_uid: "u2".into(),
            },
        );
        assert_eq!(
            o.check_history(),
            vec![Violation::DeletedWhilePresent {
                sink: "c".into(),
                source: x
            }]
        );
    }

    #[test]
    fn a_delete_and_recreate_is_not_a_violation() {
        let mut o = Oracle::default();
        let x = src("a", "x");
        o.wrote(x.clone(), "u1", 1, data(1));
        o.deleted(x.clone());
        o.wrote(x.clone(), "u2", 2, data(2));
        // The sink may see the new version before the old copy's delete is
        // recorded: only the uid matters, not the order of recording.
        o.saw("b", x.clone(), Seen::Version { seq: 1 });
        o.saw(
            "b",
            x.clone(),
            Seen::Deleted {
                origin_uid: "u1".into(),
            },
        );
        o.saw("b", x.clone(), Seen::Version { seq: 2 });
        let held = [copy("b", &x, "u2", 2), copy("c", &x, "u2", 2)];
        assert_eq!(o.check(&rule(), &held), vec![]);
    }

    #[test]
    fn settling_on_the_origins_list_resolves_lost_acknowledgements() {
        let (mut o, x, y) = two_written();
        // x's update to 2 and y's delete got no answer; the list shows that
        // x's update applied and y's delete did too; z was created unanswered.
        let z = src("a", "z");
        o.settle(
            "a",
            vec![
                Listed {
                    source: x.clone(),
                    uid: "u1".into(),
                    seq: 2,
                    data: data(2),
                },
                Listed {
                    source: z.clone(),
                    uid: "u3".into(),
                    seq: 1,
                    data: data(1),
                },
            ],
        );
        o.saw(
            "b",
            y.clone(),
            Seen::Deleted {
                origin_uid: "u2".into(),
            },
        );
        let held = [
            copy("b", &x, "u1", 2),
            copy("c", &x, "u1", 2),
            copy("b", &z, "u3", 1),
            copy("c", &z, "u3", 1),
        ];
        assert_eq!(o.check(&rule(), &held), vec![]);
    }

    #[test]
    fn unselected_sinks_must_hold_nothing() {
        let mut o = Oracle::default();
        let x = src("a", "x");
        o.wrote(x.clone(), "u1", 1, data(1));
        let mut r = rule();
        r.sinks.remove("c");
        let held = [copy("b", &x, "u1", 1), copy("c", &x, "u1", 1)];
        assert_eq!(
            o.check(&r, &held),
            vec![Violation::Extra {
                sink: "c".into(),
                source: x
            }]
        );
    }
}
