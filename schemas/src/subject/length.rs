//! The longest subject that can be published.

use thiserror::Error;

/// Longest subject (in bytes) fleetbus publishes. nats-server closes the connection of a
/// client whose protocol line exceeds `max_control_line` (4096 bytes by default), and a
/// JetStream publish line also carries `HPUB`, a reply inbox and two sizes; 4000 leaves
/// room for those. Kubernetes limits most names to 253 characters (a 338-byte token), so
/// only RBAC-style names, which have no length limit, can reach this.
pub const MAX_SUBJECT_LEN: usize = 4000;

/// A subject too long to publish: the object is not published and the error reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("subject is {len} bytes; at most {MAX_SUBJECT_LEN} fit in a NATS protocol line")]
pub struct SubjectTooLong {
    /// Length of the subject in bytes.
    pub len: usize,
}

/// Checks a subject against [`MAX_SUBJECT_LEN`] before publishing it.
pub fn check_subject_len(subject: &str) -> Result<(), SubjectTooLong> {
    if subject.len() <= MAX_SUBJECT_LEN {
        Ok(())
    } else {
        Err(SubjectTooLong { len: subject.len() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::subject::{ObjectKey, Prefix};

    #[test]
    fn longest_dns_names_fit_and_unbounded_rbac_names_do_not() {
        let p = Prefix::new("a".repeat(64)).unwrap();
        let long = format!("{}.{}", "a".repeat(63), "b".repeat(189));
        let key = ObjectKey {
            origin: long.clone(),
            group: long.clone(),
            version: "v1alpha1".into(),
            kind: "K".repeat(63),
            namespace: Some("n".repeat(63)),
            name: long,
        };
        assert_eq!(check_subject_len(&key.to_subject(&p)), Ok(()));
        let rbac = ObjectKey {
            name: ":".repeat(3000),
            ..key
        };
        let subject = rbac.to_subject(&p);
        assert_eq!(
            check_subject_len(&subject),
            Err(SubjectTooLong { len: subject.len() })
        );
    }
}
