//! Object names (and namespaces) as request path segments.
//!
//! kube-rs puts the name given to `Api::get`, `replace`, `delete`, `patch`
//! … into the URL as it is. Kubernetes accepts names that are not valid in
//! a URL path: an RBAC object may be called `q r` or `what?now` (only `/`,
//! `%`, `.` and `..` are refused: apimachinery's `IsValidPathSegmentName`),
//! and a request for it fails to build ("invalid uri character") or, worse,
//! addresses another path (`?` starts the query, `#` a fragment). Every
//! name the agent passes to a kube `Api` goes through [`segment`], as
//! client-go's `Request.Name` ends up escaped by `url.URL.EscapedPath`.
//! The exceptions are names the agent makes from its own DNS labels (its
//! cluster name, namespace and peers' names, validated where they enter:
//! `cli::validate_dns_label`, `registry::membership`), which need none.

use std::borrow::Cow;

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

/// What is escaped in a segment: everything but RFC 3986's unreserved
/// characters and the sub-delimiters Go's `url.PathEscape` leaves alone
/// (`$ & + : = @`). `/` is escaped too: a name holding one (which no API
/// server accepts) must not address another path.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~')
    .remove(b'$')
    .remove(b'&')
    .remove(b'+')
    .remove(b':')
    .remove(b'=')
    .remove(b'@');

/// `name` percent-encoded as one URL path segment (UTF-8 bytes, as the API
/// server decodes them); borrowed when nothing needs escaping.
pub fn segment(name: &str) -> Cow<'_, str> {
    utf8_percent_encode(name, SEGMENT).into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn plain_names_are_borrowed_as_they_are() {
        for n in ["web", "a.b-c_d~e", "system:controller:x", "a@b=c+d&e$f"] {
            assert!(matches!(segment(n), Cow::Borrowed(s) if s == n), "{n}");
        }
    }

    #[test]
    fn names_that_are_not_url_safe_are_escaped() {
        assert_eq!(segment("sp ace*star>gt.dot"), "sp%20ace%2Astar%3Egt.dot");
        assert_eq!(segment("q r"), "q%20r");
        assert_eq!(segment("what?now#frag%25"), "what%3Fnow%23frag%2525");
        assert_eq!(segment("a/../b"), "a%2F..%2Fb");
        assert_eq!(segment("名前"), "%E5%90%8D%E5%89%8D");
    }

    /// The request that kube-rs builds from an escaped name is a valid URI
    /// whose path holds the name as one segment, decoded back exactly.
    fn round_trip(name: &str) {
        let uri: http::Uri = format!("/apis/g/v1/things/{}?x=1", segment(name))
            .parse()
            .unwrap_or_else(|e| panic!("{name:?}: {e}"));
        let last = uri.path().rsplit('/').next().unwrap_or_default();
        let decoded = percent_encoding::percent_decode_str(last).decode_utf8();
        assert_eq!(decoded.as_deref().ok(), Some(name), "{uri}");
        assert_eq!(uri.query(), Some("x=1"));
    }

    #[test]
    fn hard_names_round_trip() {
        let long = vec!["a".repeat(63); 4].join(".") + ".b";
        for n in [
            "sp ace*star>gt.dot",
            "q r",
            "100%",
            "a#b",
            "a?b",
            "ünï—名前",
            "..",
            &long,
        ] {
            round_trip(n);
        }
    }

    proptest! {
        #[test]
        fn any_name_round_trips(name in "\\PC{1,64}") {
            round_trip(&name);
        }
    }
}
