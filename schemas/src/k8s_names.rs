//! Kubernetes name syntax checks (DNS-1123 labels and subdomains, qualified names, label values).

/// A DNS-1123 label: 1-63 chars of `[a-z0-9-]`, starting and ending alphanumeric (namespaces).
pub fn is_dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b.first().is_some_and(u8::is_ascii_alphanumeric)
        && b.last().is_some_and(u8::is_ascii_alphanumeric)
}

/// A DNS-1123 subdomain: at most 253 chars, dot-separated DNS-1123 labels (most object names, API groups).
pub fn is_dns1123_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns1123_label)
}

/// A label value: empty, or up to 63 chars of `[A-Za-z0-9._-]` starting and ending alphanumeric.
pub fn is_label_value(s: &str) -> bool {
    s.is_empty() || is_qualified_name_part(s)
}

/// A qualified name (label or annotation key): `[prefix/]name`, prefix a DNS subdomain,
/// name up to 63 chars of `[A-Za-z0-9._-]` starting and ending alphanumeric.
pub fn is_qualified_name(s: &str) -> bool {
    match s.split_once('/') {
        Some((prefix, name)) => is_dns1123_subdomain(prefix) && is_qualified_name_part(name),
        None => is_qualified_name_part(s),
    }
}

fn is_qualified_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        && b.first().is_some_and(u8::is_ascii_alphanumeric)
        && b.last().is_some_and(u8::is_ascii_alphanumeric)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(is_dns1123_label("kube-system"));
        assert!(!is_dns1123_label("Kube"));
        assert!(!is_dns1123_label("-a"));
        assert!(!is_dns1123_label(""));
        assert!(is_dns1123_subdomain("networking.k8s.io"));
        assert!(!is_dns1123_subdomain("a..b"));
        assert!(is_qualified_name("fleetbus.io/managed"));
        assert!(is_qualified_name("app"));
        assert!(!is_qualified_name("a/b/c"));
        assert!(!is_qualified_name("/x"));
        assert!(is_label_value(""));
        assert!(is_label_value("v1.2_3"));
        assert!(!is_label_value("a b"));
    }
}
