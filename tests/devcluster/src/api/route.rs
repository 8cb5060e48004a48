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
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            let hex = std::str::from_utf8(&b[i + 1..i + 3])
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok());
            if let Some(v) = hex {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
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
    let segs: Vec<String> = path
        .split('/')
        .filter(|s| !s.is_empty())
        .map(percent_decode)
        .collect();
    let s: Vec<&str> = segs.iter().map(String::as_str).collect();
    match s.as_slice() {
        ["version"] => Route::Version,
        ["healthz" | "livez" | "readyz", ..] => Route::Health,
        ["debug", "writes"] => Route::Writes,
        ["debug", "store"] => Route::DebugStore,
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
}
