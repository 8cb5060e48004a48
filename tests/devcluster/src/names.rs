//! Object name validation (DNS-1123 subdomain / label, path segment).

/// Which naming rule a resource uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameRule {
    /// DNS-1123 subdomain: most resources.
    Subdomain,
    /// DNS-1123 label: namespaces.
    Label,
    /// Path segment: RBAC objects (anything but '/', '%', "." and "..").
    PathSegment,
}

/// The naming rule kube-apiserver applies to a resource.
pub fn rule_for(group: &str, plural: &str) -> NameRule {
    match (group, plural) {
        ("", "namespaces") => NameRule::Label,
        ("rbac.authorization.k8s.io", _) => NameRule::PathSegment,
        _ => NameRule::Subdomain,
    }
}

const SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";

fn is_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// Validates `name`; returns kube's message (without the `Invalid value` prefix) on failure.
pub fn validate(rule: NameRule, name: &str) -> Result<(), String> {
    match rule {
        NameRule::Subdomain => {
            if name.len() > 253 {
                return Err("must be no more than 253 characters".into());
            }
            if name.split('.').all(is_label) {
                Ok(())
            } else {
                Err(SUBDOMAIN_MSG.into())
            }
        }
        NameRule::Label => {
            if name.len() > 63 {
                return Err("must be no more than 63 characters".into());
            }
            if is_label(name) {
                Ok(())
            } else {
                Err(LABEL_MSG.into())
            }
        }
        NameRule::PathSegment => {
            if name == "." || name == ".." {
                Err(format!("may not be '{name}'"))
            } else if name.contains('/') {
                Err("may not contain '/'".into())
            } else if name.contains('%') {
                Err("may not contain '%'".into())
            } else if name.is_empty() {
                Err("name or generateName is required".into())
            } else {
                Ok(())
            }
        }
    }
}

/// Validates a label key or value pair set (metadata.labels); returns the first problem.
pub fn validate_label_value(v: &str) -> Result<(), String> {
    let ok = v.len() <= 63
        && (v.is_empty()
            || (v
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_' || c == b'.')
                && v.as_bytes()[0].is_ascii_alphanumeric()
                && v.as_bytes()[v.len() - 1].is_ascii_alphanumeric()));
    if ok {
        Ok(())
    } else {
        Err("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subdomain() {
        assert!(validate(NameRule::Subdomain, "a.b-c.d1").is_ok());
        assert!(validate(NameRule::Subdomain, "Upper").is_err());
        assert!(validate(NameRule::Subdomain, "-a").is_err());
        assert!(validate(NameRule::Subdomain, "a..b").is_err());
        assert!(validate(NameRule::Subdomain, "").is_err());
        assert!(validate(NameRule::Subdomain, &"a".repeat(254)).is_err());
    }

    #[test]
    fn label_and_path_segment() {
        assert!(validate(NameRule::Label, "a.b").is_err());
        assert!(validate(NameRule::Label, "kube-system").is_ok());
        assert!(validate(NameRule::PathSegment, "system:controller:x").is_ok());
        assert!(validate(NameRule::PathSegment, "..").is_err());
        assert!(validate(NameRule::PathSegment, "a/b").is_err());
        assert!(validate(NameRule::PathSegment, "a%b").is_err());
        assert_eq!(
            rule_for("rbac.authorization.k8s.io", "roles"),
            NameRule::PathSegment
        );
    }

    #[test]
    fn label_values() {
        assert!(validate_label_value("").is_ok());
        assert!(validate_label_value("a_b.c-1").is_ok());
        assert!(validate_label_value("-a").is_err());
        assert!(validate_label_value("a b").is_err());
    }
}
