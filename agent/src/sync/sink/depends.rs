//! `spec.dependsOn` (pure): on each sink, a rule's copies wait until the
//! rules it depends on are synced and healthy there (CRDs before their
//! objects, a namespace's quota before its workloads). The cycles, which
//! make every rule on them Invalid, are found with the rules (`rules::cycles`).
//!
//! A dependency ready here holds at least one copy here, every one live and
//! `Current`: "no copy" cannot be told from "not arrived yet" (a rule and
//! the objects it selects travel apart on the bus), so a dependency that
//! places nothing on a sink keeps its dependents waiting there, and says so.
//!
//! Only creates and updates wait: deletes are not ordered (`sink/keep`
//! already stops a CRD's deletion from taking unmanaged instances with it).

use fleetbus_schemas::health::Health;

/// What this sink knows of a rule another depends on.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Dependency {
    /// The rule exists, is valid, selects this cluster, its kinds are read,
    /// and the last pass applied it already.
    pub active: bool,
    /// It is held itself (suspended, or waiting on its own dependencies).
    pub held: bool,
    /// Copies failing or in conflict here.
    pub troubled: usize,
    /// The health of every copy it holds here (None: not live yet).
    pub copies: Vec<Option<Health>>,
}

/// Why a rule's copies wait for `deps` (its `dependsOn`, each looked up:
/// None when no such rule exists); None when every one is ready here.
pub fn waiting(deps: &[(&str, Option<&Dependency>)]) -> Option<String> {
    let mut why = Vec::new();
    for (name, dep) in deps {
        let Some(d) = dep else {
            why.push(format!("rule {name} does not exist"));
            continue;
        };
        if !d.active {
            why.push(format!(
                "rule {name} is not applied here yet (or invalid, or not selecting this cluster)"
            ));
        } else if d.held {
            why.push(format!("rule {name} is itself held"));
        } else if d.copies.is_empty() {
            // Not yet known to be nothing: its sources' objects may still be
            // on their way (rules and objects travel apart). Safe over live: a
            // dependency that places nothing here keeps its dependents
            // waiting, and says so.
            why.push(format!("rule {name} holds no copy here yet"));
        } else if d.troubled > 0 {
            why.push(format!(
                "rule {name} has {} copy(ies) failing or in conflict",
                d.troubled
            ));
        } else {
            let current = d
                .copies
                .iter()
                .filter(|h| h.as_ref().is_some_and(Health::is_current))
                .count();
            if current < d.copies.len() {
                why.push(format!(
                    "rule {name}: {current}/{} copies Current",
                    d.copies.len()
                ));
            }
        }
    }
    (!why.is_empty()).then(|| format!("dependsOn: {}", why.join("; ")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleetbus_schemas::health::HealthStatus;

    #[test]
    fn waits_until_every_dependency_is_active_clean_and_current() {
        let current = Some(Health::new(HealthStatus::Current, ""));
        let ready = Dependency {
            active: true,
            copies: vec![current.clone(), current.clone()],
            ..Dependency::default()
        };
        assert_eq!(waiting(&[("crds", Some(&ready))]), None);
        assert_eq!(waiting(&[]), None);
        let empty = Dependency {
            active: true,
            ..Dependency::default()
        };
        assert_eq!(
            waiting(&[("crds", Some(&empty))]).as_deref(),
            Some("dependsOn: rule crds holds no copy here yet"),
            "no copy yet is no proof of readiness"
        );
        let mut rolling = ready.clone();
        rolling.copies[1] = Some(Health::new(HealthStatus::InProgress, "Ready: 0/1"));
        assert_eq!(
            waiting(&[("crds", Some(&ready)), ("db", Some(&rolling))]).as_deref(),
            Some("dependsOn: rule db: 1/2 copies Current")
        );
        let mut unseen = ready.clone();
        unseen.copies.push(None);
        assert!(
            waiting(&[("db", Some(&unseen))]).is_some(),
            "a copy not live yet"
        );
        let troubled = Dependency {
            troubled: 1,
            ..ready.clone()
        };
        assert!(waiting(&[("db", Some(&troubled))])
            .unwrap()
            .contains("failing"));
        let held = Dependency {
            held: true,
            ..ready.clone()
        };
        assert!(waiting(&[("db", Some(&held))])
            .unwrap()
            .contains("itself held"));
        let inactive = Dependency::default();
        assert!(waiting(&[("db", Some(&inactive))])
            .unwrap()
            .contains("not applied here yet"));
        assert_eq!(
            waiting(&[("nope", None)]).as_deref(),
            Some("dependsOn: rule nope does not exist")
        );
    }
}
