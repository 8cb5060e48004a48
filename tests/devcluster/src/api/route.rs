//! URL paths to routes.

/// A request target inside a resource collection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResPath {
    /// API group ("" for core).
    pub group: String,
    /// Version.
    pub version: String,
    /// Resource plural.
    pub plural: String,
    /// Namespace from the URL.
    pub namespace: Option<String>,
    /// Object name.
    pub name: Option<String>,
    /// Subresource ("status", "scale", "token", "finalize").
    pub sub: Option<String>,
}

/// What a path addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// /version
    Version,
    /// /healthz, /livez, /readyz (and sub-paths)
    Health,
    /// /debug/writes
    Writes,
    /// `/debug/store`: stored records skipped at startup.
    DebugStore,
    /// `/debug/faults` (with `--debug-faults`).
    DebugFaults,
    /// /openapi/v2 (and /swagger-2.0.0.pb-v1)
    OpenApiV2,
    /// /openapi/v3
    OpenApiV3Root,
    /// /openapi/v3/api/v1, /openapi/v3/apis/{g}/{v}
    OpenApiV3Gv(String, String),
    /// /api
    CoreVersions,
    /// /apis
    Groups,
    /// /apis/{group}
    Group(String),
    /// /api/v1, /apis/{group}/{version}
    ResourceList(String, String),
    /// Anything under a group-version.
    Resource(ResPath),
    /// Unknown.
    NotFound,
    /// A `%` not followed by two hex digits: Go's HTTP server refuses the
    /// request line before kube-apiserver sees it.
    BadRequest,
}

fn hex(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// The request path decoded as kube-apiserver sees it: Go's `net/url`
/// decodes every `%XX` of the whole path into `URL.Path` (`+` stays `+`),
/// and `RequestInfoFactory` then splits that on `/`, so `%2F` separates
/// segments. None for a `%` without two hex digits after it, which Go's
/// `url.ParseRequestURI` refuses. Decoded bytes that are not UTF-8 (Go keeps
/// them) become U+FFFD: no stored name can hold them, so either way such a
/// request finds nothing.
pub fn unescape(path: &str) -> Option<String> {
    let b = path.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hi = hex(*b.get(i + 1)?)?;
            let lo = hex(*b.get(i + 2)?)?;
            out.push(hi << 4 | lo);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Some(String::from_utf8_lossy(&out).into_owned())
}

fn resource(group: &str, version: &str, rest: &[String]) -> Route {
    let mk = |plural: &str, ns: Option<&str>, name: Option<&str>, sub: Option<&str>| {
        Route::Resource(ResPath {
            group: group.into(),
            version: version.into(),
            plural: plural.into(),
            namespace: ns.map(str::to_string),
            name: name.map(str::to_string),
            sub: sub.map(str::to_string),
        })
    };
    let r: Vec<&str> = rest.iter().map(String::as_str).collect();
    match r.as_slice() {
        [] => Route::ResourceList(group.into(), version.into()),
        [plural] => mk(plural, None, None, None),
        ["namespaces", ns, sub @ ("status" | "finalize")] if group.is_empty() => {
            mk("namespaces", None, Some(ns), Some(sub))
        }
        ["namespaces", ns, plural] => mk(plural, Some(ns), None, None),
        ["namespaces", ns, plural, name] => mk(plural, Some(ns), Some(name), None),
        ["namespaces", ns, plural, name, sub] => mk(plural, Some(ns), Some(name), Some(sub)),
        [plural, name] => mk(plural, None, Some(name), None),
        [plural, name, sub] => mk(plural, None, Some(name), Some(sub)),
        _ => Route::NotFound,
    }
}

/// Parses a request path.
pub fn parse(path: &str) -> Route {
    let Some(decoded) = unescape(path) else {
        return Route::BadRequest;
    };
    let segs: Vec<String> = decoded
        .split('/')
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    let s: Vec<&str> = segs.iter().map(String::as_str).collect();
    match s.as_slice() {
        ["version"] => Route::Version,
        ["healthz" | "livez" | "readyz", ..] => Route::Health,
        ["debug", "writes"] => Route::Writes,
        ["debug", "store"] => Route::DebugStore,
        ["debug", "faults"] => Route::DebugFaults,
        ["openapi", "v2"] | ["swagger-2.0.0.pb-v1"] => Route::OpenApiV2,
        ["openapi", "v3"] => Route::OpenApiV3Root,
        ["openapi", "v3", "api", v] => Route::OpenApiV3Gv(String::new(), (*v).into()),
        ["openapi", "v3", "apis", g, v] => Route::OpenApiV3Gv((*g).into(), (*v).into()),
        ["api"] => Route::CoreVersions,
        ["apis"] => Route::Groups,
        ["apis", g] => Route::Group((*g).into()),
        ["api", v, ..] => resource("", v, &segs[2..]),
        ["apis", g, v, ..] => resource(g, v, &segs[3..]),
        _ => Route::NotFound,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(p: &str) -> ResPath {
        match parse(p) {
            Route::Resource(r) => r,
            other => unreachable!("{p}: {other:?}"),
        }
    }

    #[test]
    fn paths() {
        assert_eq!(parse("/api"), Route::CoreVersions);
        assert_eq!(
            parse("/api/v1"),
            Route::ResourceList("".into(), "v1".into())
        );
        assert_eq!(
            parse("/apis/apps/v1"),
            Route::ResourceList("apps".into(), "v1".into())
        );
        let r = res("/api/v1/namespaces");
        assert_eq!((r.plural.as_str(), r.name), ("namespaces", None));
        let r = res("/api/v1/namespaces/x");
        assert_eq!(
            (r.plural.as_str(), r.name.as_deref(), r.namespace),
            ("namespaces", Some("x"), None)
        );
        let r = res("/api/v1/namespaces/x/status");
        assert_eq!(
            (r.plural.as_str(), r.sub.as_deref()),
            ("namespaces", Some("status"))
        );
        let r = res("/api/v1/namespaces/x/configmaps");
        assert_eq!(
            (r.plural.as_str(), r.namespace.as_deref(), r.name),
            ("configmaps", Some("x"), None)
        );
        let r = res("/apis/apps/v1/namespaces/x/deployments/d/scale");
        assert_eq!(
            (r.name.as_deref(), r.sub.as_deref()),
            (Some("d"), Some("scale"))
        );
        let r = res("/apis/rbac.authorization.k8s.io/v1/clusterroles/system%3Aadmin");
        assert_eq!(r.name.as_deref(), Some("system:admin"));
        assert_eq!(
            parse("/openapi/v3/apis/apps/v1"),
            Route::OpenApiV3Gv("apps".into(), "v1".into())
        );
        assert_eq!(parse("/nope"), Route::NotFound);
    }

    #[test]
    fn escaped_names_decode_like_kube_apiserver() {
        let cr = "/apis/rbac.authorization.k8s.io/v1/clusterroles/";
        for (escaped, name) in [
            ("sp%20ace%2Astar%3Egt.dot", "sp ace*star>gt.dot"),
            ("q%20r", "q r"),
            ("what%3Fnow%23x", "what?now#x"),
            ("%E5%90%8D%e5%89%8d", "名前"),
            ("a+b", "a+b"),
            ("%2e%2E", ".."),
        ] {
            let r = res(&format!("{cr}{escaped}"));
            assert_eq!((r.name.as_deref(), r.sub), (Some(name), None), "{escaped}");
        }
        // The whole path is decoded, then split: an escaped slash separates
        // segments (here it names a subresource), as in kube-apiserver.
        let r = res(&format!("{cr}a%2Fstatus"));
        assert_eq!(
            (r.name.as_deref(), r.sub.as_deref()),
            (Some("a"), Some("status"))
        );
        let r = res("/api/v1/namespaces/x/configmaps/a%2Fb");
        assert_eq!(
            (r.name.as_deref(), r.sub.as_deref()),
            (Some("a"), Some("b"))
        );
        assert_eq!(
            parse("/api/v1/namespaces/x/configmaps/a%2Fb%2Fc"),
            Route::NotFound
        );
        // Not an escape: refused before routing, like Go's net/http.
        for bad in ["%", "%4", "%zz", "%%41", "%G0", "%e5%9"] {
            assert_eq!(parse(&format!("{cr}{bad}")), Route::BadRequest, "{bad}");
        }
    }
}
