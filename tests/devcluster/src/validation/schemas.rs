//! OpenAPI v3 schemas of the built-in kinds, generated once from k8s-openapi's
//! `JsonSchema` impls (the same definitions kube-apiserver publishes).

use serde_json::{Map, Value};
use std::sync::LazyLock;

use k8s_openapi::api::{
    apps::v1 as apps, batch::v1 as batch, coordination::v1 as coordination, core::v1 as core,
    events::v1 as events, networking::v1 as networking, policy::v1 as policy, rbac::v1 as rbac,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiextensions;
use schemars::{generate::SchemaSettings, JsonSchema, SchemaGenerator};

/// Prefix of `$ref` values in the generated definitions.
pub const REF_PREFIX: &str = "#/components/schemas/";

/// Definition name of ObjectMeta (CRD objects are validated against it too).
pub const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";

struct Builtins {
    /// (group, kind) -> definition name.
    kinds: Vec<(&'static str, &'static str, String)>,
    /// Every definition reachable from those kinds, by name.
    definitions: Map<String, Value>,
}

fn add<T: JsonSchema>(
    g: &mut SchemaGenerator,
    kinds: &mut Vec<(&'static str, &'static str, String)>,
    group: &'static str,
    kind: &'static str,
) {
    g.subschema_for::<T>();
    kinds.push((group, kind, T::schema_name().into_owned()));
}

static BUILTINS: LazyLock<Builtins> = LazyLock::new(|| {
    let mut g = SchemaSettings::openapi3().into_generator();
    let mut k = Vec::new();
    add::<core::Namespace>(&mut g, &mut k, "", "Namespace");
    add::<core::ConfigMap>(&mut g, &mut k, "", "ConfigMap");
    add::<core::Secret>(&mut g, &mut k, "", "Secret");
    add::<core::ServiceAccount>(&mut g, &mut k, "", "ServiceAccount");
    add::<core::Service>(&mut g, &mut k, "", "Service");
    add::<core::Event>(&mut g, &mut k, "", "Event");
    add::<core::Pod>(&mut g, &mut k, "", "Pod");
    add::<core::PodTemplate>(&mut g, &mut k, "", "PodTemplate");
    add::<core::Node>(&mut g, &mut k, "", "Node");
    add::<core::Endpoints>(&mut g, &mut k, "", "Endpoints");
    add::<core::PersistentVolumeClaim>(&mut g, &mut k, "", "PersistentVolumeClaim");
    add::<apps::Deployment>(&mut g, &mut k, "apps", "Deployment");
    add::<apps::StatefulSet>(&mut g, &mut k, "apps", "StatefulSet");
    add::<apps::DaemonSet>(&mut g, &mut k, "apps", "DaemonSet");
    add::<apps::ReplicaSet>(&mut g, &mut k, "apps", "ReplicaSet");
    add::<batch::Job>(&mut g, &mut k, "batch", "Job");
    add::<batch::CronJob>(&mut g, &mut k, "batch", "CronJob");
    add::<rbac::Role>(&mut g, &mut k, "rbac.authorization.k8s.io", "Role");
    add::<rbac::RoleBinding>(&mut g, &mut k, "rbac.authorization.k8s.io", "RoleBinding");
    add::<rbac::ClusterRole>(&mut g, &mut k, "rbac.authorization.k8s.io", "ClusterRole");
    add::<rbac::ClusterRoleBinding>(
        &mut g,
        &mut k,
        "rbac.authorization.k8s.io",
        "ClusterRoleBinding",
    );
    add::<networking::Ingress>(&mut g, &mut k, "networking.k8s.io", "Ingress");
    add::<networking::NetworkPolicy>(&mut g, &mut k, "networking.k8s.io", "NetworkPolicy");
    add::<coordination::Lease>(&mut g, &mut k, "coordination.k8s.io", "Lease");
    add::<policy::PodDisruptionBudget>(&mut g, &mut k, "policy", "PodDisruptionBudget");
    add::<apiextensions::CustomResourceDefinition>(
        &mut g,
        &mut k,
        "apiextensions.k8s.io",
        "CustomResourceDefinition",
    );
    add::<events::Event>(&mut g, &mut k, "events.k8s.io", "Event");
    Builtins {
        kinds: k,
        definitions: g.take_definitions(true),
    }
});

/// The definition name of a built-in kind, if its schema is known.
pub fn builtin_definition(group: &str, kind: &str) -> Option<&'static str> {
    BUILTINS
        .kinds
        .iter()
        .find(|(g, k, _)| *g == group && *k == kind)
        .map(|(_, _, name)| name.as_str())
}

/// All generated definitions, by name.
pub fn definitions() -> &'static Map<String, Value> {
    &BUILTINS.definitions
}

/// Follows `$ref` (also a lone `$ref` inside `allOf`, as produced for
/// described references) to the schema it names.
pub fn resolve(schema: &Value) -> &Value {
    let mut cur = schema;
    for _ in 0..16 {
        if let Some(r) = cur.get("$ref").and_then(Value::as_str) {
            match r
                .strip_prefix(REF_PREFIX)
                .and_then(|n| definitions().get(n))
            {
                Some(next) => cur = next,
                None => return cur,
            }
        } else if let Some([only]) = cur
            .get("allOf")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
        {
            cur = only;
        } else {
            return cur;
        }
    }
    cur
}

/// Names of every definition reachable from `roots` (including the roots).
pub fn closure(roots: &[&str]) -> Vec<String> {
    let mut seen: Vec<String> = Vec::new();
    let mut todo: Vec<String> = roots.iter().map(|s| s.to_string()).collect();
    while let Some(name) = todo.pop() {
        if seen.contains(&name) {
            continue;
        }
        if let Some(def) = definitions().get(&name) {
            collect_refs(def, &mut todo);
        }
        seen.push(name);
    }
    seen.sort();
    seen
}

fn collect_refs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            if let Some(name) = m
                .get("$ref")
                .and_then(Value::as_str)
                .and_then(|r| r.strip_prefix(REF_PREFIX))
            {
                out.push(name.to_string());
            }
            m.values().for_each(|c| collect_refs(c, out));
        }
        Value::Array(a) => a.iter().for_each(|c| collect_refs(c, out)),
        _ => {}
    }
}
