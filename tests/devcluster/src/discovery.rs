//! Discovery documents: /version, legacy /api, /apis, APIResourceLists, and
//! aggregated discovery (apidiscovery.k8s.io v2 / v2beta1).

use crate::resources::ResourceDef;
use serde_json::{json, Value};

/// The Kubernetes version this server reports.
pub fn version() -> Value {
    json!({
        "major": "1",
        "minor": "33",
        "emulationMajor": "1",
        "emulationMinor": "33",
        "minCompatibilityMajor": "1",
        "minCompatibilityMinor": "32",
        "gitVersion": "v1.33.1",
        "gitCommit": "8adc0f041b8e7ad1d30e29cc59c6ae7a15e19828",
        "gitTreeState": "clean",
        "buildDate": "2025-05-15T08:19:08Z",
        "goVersion": "go1.24.2",
        "compiler": "gc",
        "platform": "linux/amd64",
    })
}

const VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// The verbs a resource serves: only `create` for the reviews, `get`/`list` for
/// componentstatuses.
fn verbs(d: &ResourceDef) -> &'static [&'static str] {
    if d.create_only() {
        &["create"]
    } else if d.read_only() {
        &["get", "list"]
    } else {
        VERBS
    }
}

/// Version priority like kube's (GA > beta > alpha; higher numbers first).
fn version_rank(v: &str) -> (u8, u32, u32) {
    let Some(rest) = v.strip_prefix('v') else {
        return (0, 0, 0);
    };
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let major = digits.parse().unwrap_or(0);
    let tail = &rest[digits.len()..];
    let (stab, minor_s) = if let Some(m) = tail.strip_prefix("beta") {
        (2, m)
    } else if let Some(m) = tail.strip_prefix("alpha") {
        (1, m)
    } else if tail.is_empty() {
        (3, "")
    } else {
        (0, "")
    };
    (stab, major, minor_s.parse().unwrap_or(0))
}

/// Groups in serving order with their versions, preferred first (core excluded).
fn groups(defs: &[ResourceDef]) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for d in defs.iter().filter(|d| !d.group.is_empty()) {
        match out.iter_mut().find(|(g, _)| *g == d.group) {
            Some((_, vs)) => {
                if !vs.contains(&d.version) {
                    vs.push(d.version.clone())
                }
            }
            None => out.push((d.group.clone(), vec![d.version.clone()])),
        }
    }
    for (_, vs) in out.iter_mut() {
        vs.sort_by_key(|v| std::cmp::Reverse(version_rank(v)));
    }
    out
}

/// GET /api (legacy APIVersions).
pub fn core_versions(server_addr: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_addr}],
    })
}

fn group_json(g: &str, vs: &[String]) -> Value {
    let versions: Vec<Value> = vs
        .iter()
        .map(|v| json!({"groupVersion": format!("{g}/{v}"), "version": v}))
        .collect();
    json!({
        "name": g,
        "versions": versions,
        "preferredVersion": versions.first().cloned().unwrap_or(json!({})),
    })
}

/// GET /apis (legacy APIGroupList).
pub fn group_list(defs: &[ResourceDef]) -> Value {
    let groups: Vec<Value> = groups(defs)
        .iter()
        .map(|(g, vs)| group_json(g, vs))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// GET /apis/{group}.
pub fn group(defs: &[ResourceDef], name: &str) -> Option<Value> {
    let (g, vs) = groups(defs).into_iter().find(|(g, _)| g == name)?;
    let mut v = group_json(&g, &vs);
    if let Some(o) = v.as_object_mut() {
        o.insert("kind".into(), json!("APIGroup"));
        o.insert("apiVersion".into(), json!("v1"));
    }
    Some(v)
}

/// Subresource entries: (name, group, version, kind, verbs).
fn subresources(d: &ResourceDef) -> Vec<(String, String, String, String, Vec<&'static str>)> {
    let mut out = Vec::new();
    if d.subresources.status {
        out.push((
            "status".into(),
            d.group.clone(),
            d.version.clone(),
            d.kind.clone(),
            vec!["get", "patch", "update"],
        ));
    }
    if d.subresources.scale {
        out.push((
            "scale".into(),
            "autoscaling".into(),
            "v1".into(),
            "Scale".into(),
            vec!["get", "patch", "update"],
        ));
    }
    if d.subresources.token {
        out.push((
            "token".into(),
            "authentication.k8s.io".into(),
            "v1".into(),
            "TokenRequest".into(),
            vec!["create"],
        ));
    }
    if d.has_approval() {
        out.push((
            "approval".into(),
            d.group.clone(),
            d.version.clone(),
            d.kind.clone(),
            vec!["get", "patch", "update"],
        ));
    }
    if d.has_ephemeral_containers() {
        out.push((
            "ephemeralcontainers".into(),
            String::new(),
            "v1".into(),
            "Pod".into(),
            vec!["get", "patch", "update"],
        ));
    }
    if d.group.is_empty() && d.plural == "namespaces" {
        out.push((
            "finalize".into(),
            String::new(),
            "v1".into(),
            "Namespace".into(),
            vec!["update"],
        ));
    }
    out
}

fn storage_hash(d: &ResourceDef) -> String {
    use base64::Engine;
    let digest = format!("{}/{}/{}", d.group, d.version, d.kind);
    // A stable, opaque string per type (kube uses a hash of the storage GVK).
    let mut h: u64 = 0xcbf29ce484222325;
    for b in digest.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x100000001b3);
    }
    base64::engine::general_purpose::STANDARD.encode(h.to_be_bytes())
}

/// GET /api/v1 or /apis/{g}/{v} (APIResourceList).
pub fn resource_list(defs: &[ResourceDef], group: &str, version: &str) -> Option<Value> {
    let mut resources = Vec::new();
    for d in defs
        .iter()
        .filter(|d| d.group == group && d.version == version)
    {
        let mut r = json!({
            "name": d.plural,
            "singularName": d.singular,
            "namespaced": d.namespaced,
            "kind": d.kind,
            "verbs": verbs(d),
            "storageVersionHash": storage_hash(d),
        });
        if let Some(o) = r.as_object_mut() {
            if !d.short_names.is_empty() {
                o.insert("shortNames".into(), json!(d.short_names));
            }
            if !d.categories.is_empty() {
                o.insert("categories".into(), json!(d.categories));
            }
        }
        resources.push(r);
        for (sub, g, v, kind, verbs) in subresources(d) {
            let mut r = json!({
                "name": format!("{}/{sub}", d.plural),
                "singularName": "",
                "namespaced": d.namespaced,
                "kind": kind,
                "verbs": verbs,
            });
            if g != d.group || v != d.version {
                if let Some(o) = r.as_object_mut() {
                    o.insert("group".into(), json!(g));
                    o.insert("version".into(), json!(v));
                }
            }
            resources.push(r);
        }
    }
    if resources.is_empty() {
        return None;
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}),
    )
}

fn aggregated_resource(d: &ResourceDef) -> Value {
    let subs: Vec<Value> = subresources(d)
        .into_iter()
        .map(|(sub, g, v, kind, verbs)| {
            json!({"subresource": sub, "responseKind": {"group": g, "version": v, "kind": kind}, "verbs": verbs})
        })
        .collect();
    let mut r = json!({
        "resource": d.plural,
        "responseKind": {"group": d.group, "version": d.version, "kind": d.kind},
        "scope": if d.namespaced { "Namespaced" } else { "Cluster" },
        "singularResource": d.singular,
        "verbs": verbs(d),
    });
    if let Some(o) = r.as_object_mut() {
        if !d.short_names.is_empty() {
            o.insert("shortNames".into(), json!(d.short_names));
        }
        if !d.categories.is_empty() {
            o.insert("categories".into(), json!(d.categories));
        }
        if !subs.is_empty() {
            o.insert("subresources".into(), json!(subs));
        }
    }
    r
}

fn aggregated_group(defs: &[ResourceDef], name: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| {
            let resources: Vec<Value> = defs
                .iter()
                .filter(|d| d.group == name && d.version == *v)
                .map(aggregated_resource)
                .collect();
            json!({"version": v, "resources": resources, "freshness": "Current"})
        })
        .collect();
    json!({"metadata": {"name": name, "creationTimestamp": null}, "versions": vs})
}

/// Aggregated discovery for /api (`core` true) or /apis.
pub fn aggregated(defs: &[ResourceDef], core: bool, version: &str) -> Value {
    let items: Vec<Value> = if core {
        vec![aggregated_group(defs, "", &["v1".to_string()])]
    } else {
        groups(defs)
            .iter()
            .map(|(g, vs)| aggregated_group(defs, g, vs))
            .collect()
    };
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": format!("apidiscovery.k8s.io/{version}"),
        "metadata": {},
        "items": items,
    })
}

/// The Content-Type an aggregated reply must carry.
pub fn aggregated_content_type(version: &str) -> String {
    format!("application/json;g=apidiscovery.k8s.io;v={version};as=APIGroupDiscoveryList")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::builtins;

    #[test]
    fn legacy_lists() {
        let defs = builtins();
        let core = resource_list(&defs, "", "v1").unwrap();
        let names: Vec<&str> = core["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap())
            .collect();
        assert!(names.contains(&"serviceaccounts/token"));
        assert!(names.contains(&"namespaces/status"));
        let tok = core["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == "serviceaccounts/token")
            .unwrap();
        assert_eq!(tok["group"], "authentication.k8s.io");
        assert_eq!(tok["kind"], "TokenRequest");
        let apps = resource_list(&defs, "apps", "v1").unwrap();
        let scale = apps["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == "deployments/scale")
            .unwrap();
        assert_eq!(scale["kind"], "Scale");
        assert!(resource_list(&defs, "nope", "v1").is_none());
        let authz = resource_list(&defs, "authorization.k8s.io", "v1").unwrap();
        assert_eq!(authz["resources"][0]["name"], "selfsubjectaccessreviews");
        assert_eq!(authz["resources"][0]["verbs"], json!(["create"]));
        let gl = group_list(&defs);
        assert!(gl["groups"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["name"] == "apps"));
    }

    #[test]
    fn aggregated_shape() {
        let defs = builtins();
        let a = aggregated(&defs, false, "v2");
        let apps = a["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["metadata"]["name"] == "apps")
            .unwrap();
        assert_eq!(apps["versions"][0]["version"], "v1");
        assert!(apps["versions"][0]["resources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["resource"] == "deployments"));
        let core = aggregated(&defs, true, "v2beta1");
        assert_eq!(core["apiVersion"], "apidiscovery.k8s.io/v2beta1");
        assert_eq!(core["items"][0]["versions"][0]["version"], "v1");
    }

    #[test]
    fn version_order() {
        let mut v = vec![
            "v1beta1".to_string(),
            "v2".into(),
            "v1".into(),
            "v1alpha1".into(),
        ];
        v.sort_by_key(|x| std::cmp::Reverse(version_rank(x)));
        assert_eq!(v, vec!["v2", "v1", "v1beta1", "v1alpha1"]);
    }
}
