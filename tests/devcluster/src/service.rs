//! What kube-apiserver 1.33 does to a Service besides storing it, on this
//! single-stack IPv4 cluster whose service range is [`SERVICE_CIDR`]:
//!
//! - the v1 defaults on every write ([`set_defaults`], `SetDefaults_Service`):
//!   `type`, `sessionAffinity`, port `protocol` and `targetPort`, the traffic
//!   policies, `allocateLoadBalancerNodePorts`;
//! - on create ([`on_create`], `storage.go` `beginCreate` and `alloc.go`):
//!   `clusterIP`/`clusterIPs` kept in step, `ipFamilyPolicy` and `ipFamilies`
//!   defaulted, a ClusterIP allocated (or the requested one taken) unless the
//!   Service is headless or ExternalName;
//! - on update ([`on_update`], `beginUpdate` and the strategy's
//!   `PrepareForUpdate`): a `clusterIP`/`clusterIPs` the client left out is kept
//!   (`patchAllocatedValues`, so a PUT or an apply without them succeeds), one
//!   is allocated when an ExternalName Service gets another type, the IP fields
//!   are dropped when it becomes ExternalName;
//! - `pkg/apis/core/validation`'s rules on these fields, with kube's messages
//!   (`spec.clusterIPs[0]: Invalid value: []string{"10.96.0.10"}: may not change once set`).
//!
//! The addresses in use are the stored Services' `clusterIPs`, read in the write's
//! transaction: deleting a Service (also through its namespace) frees its address,
//! a restart with `--data-dir` finds them all, a dry run leaves nothing behind, and
//! there is no second record to keep in step. (kube-apiserver also records each
//! address as an IPAddress object under a ServiceCIDR; the devcluster serves
//! neither.) NodePorts are not allocated.

use crate::cluster_ip::{self, AllocError, SERVICE_CIDR};
use crate::meta::meta_str;
use crate::status::{ApiError, FieldCause};
use crate::store::{Inner, Tx};
use serde_json::{json, Map, Value};
use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr};

const NONE: &str = "None";
const EXTERNAL_NAME: &str = "ExternalName";
const SINGLE_STACK: &str = "SingleStack";
const PREFER_DUAL_STACK: &str = "PreferDualStack";
const REQUIRE_DUAL_STACK: &str = "RequireDualStack";
const IPV4: &str = "IPv4";
const IPV6: &str = "IPv6";
const SERVICE_TYPES: [&str; 4] = ["ClusterIP", EXTERNAL_NAME, "LoadBalancer", "NodePort"];

/// `SetDefaults_Service` (k8s.io/kubernetes `pkg/apis/core/v1/defaults.go`), which
/// kube's decoder applies to every Service it reads from a request.
pub fn set_defaults(obj: &mut Value) {
    let Some(root) = obj.as_object_mut() else {
        return;
    };
    let spec = root.entry("spec").or_insert_with(|| json!({}));
    if spec.is_null() {
        *spec = json!({});
    }
    let Some(spec) = spec.as_object_mut() else {
        return;
    };
    let empty = |v: Option<&Value>| v.is_none_or(|v| v.is_null() || v.as_str() == Some(""));
    if empty(spec.get("sessionAffinity")) {
        spec.insert("sessionAffinity".into(), json!("None"));
    }
    match spec.get("sessionAffinity").and_then(Value::as_str) {
        Some("None") => {
            spec.remove("sessionAffinityConfig");
        }
        Some("ClientIP") => {
            let timeout = spec.get("sessionAffinityConfig").and_then(|c| {
                c.get("clientIP")?
                    .get("timeoutSeconds")
                    .filter(|t| !t.is_null())
            });
            if timeout.is_none() {
                spec.insert(
                    "sessionAffinityConfig".into(),
                    json!({"clientIP": {"timeoutSeconds": 10800}}),
                );
            }
        }
        _ => {}
    }
    if empty(spec.get("type")) {
        spec.insert("type".into(), json!("ClusterIP"));
    }
    if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
        for p in ports.iter_mut().filter_map(Value::as_object_mut) {
            if empty(p.get("protocol")) {
                p.insert("protocol".into(), json!("TCP"));
            }
            let unset = match p.get("targetPort") {
                None | Some(Value::Null) => true,
                Some(Value::Number(n)) => n.as_i64() == Some(0),
                Some(Value::String(s)) => s.is_empty(),
                Some(_) => false,
            };
            if unset {
                let port = p.get("port").cloned().unwrap_or(json!(0));
                p.insert("targetPort".into(), port);
            }
        }
    }
    let kind = spec
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let has_external_ips = spec
        .get("externalIPs")
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty());
    // `service.ExternallyAccessible`.
    let external =
        kind == "LoadBalancer" || kind == "NodePort" || (kind == "ClusterIP" && has_external_ips);
    if external && empty(spec.get("externalTrafficPolicy")) {
        spec.insert("externalTrafficPolicy".into(), json!("Cluster"));
    }
    let absent = |v: Option<&Value>| v.is_none_or(Value::is_null);
    if matches!(kind.as_str(), "ClusterIP" | "NodePort" | "LoadBalancer")
        && absent(spec.get("internalTrafficPolicy"))
    {
        spec.insert("internalTrafficPolicy".into(), json!("Cluster"));
    }
    if kind == "LoadBalancer" {
        if absent(spec.get("allocateLoadBalancerNodePorts")) {
            spec.insert("allocateLoadBalancerNodePorts".into(), json!(true));
        }
        let ingress = root
            .get_mut("status")
            .and_then(|s| s.get_mut("loadBalancer"))
            .and_then(|l| l.get_mut("ingress"))
            .and_then(Value::as_array_mut);
        for ing in ingress
            .into_iter()
            .flatten()
            .filter_map(Value::as_object_mut)
        {
            let has_ip = ing
                .get("ip")
                .and_then(Value::as_str)
                .is_some_and(|ip| !ip.is_empty());
            if has_ip && absent(ing.get("ipMode")) {
                ing.insert("ipMode".into(), json!("VIP"));
            }
        }
    }
}

/// The ClusterIP fields of one Service, as kube's Go struct holds them (an
/// absent field reads as its zero value).
#[derive(Debug, Clone, PartialEq, Default)]
struct Ips {
    kind: String,
    cluster_ip: String,
    cluster_ips: Vec<String>,
    families: Vec<String>,
    policy: Option<String>,
    selectorless: bool,
}

impl Ips {
    fn read(spec: &Map<String, Value>) -> Ips {
        let s = |k: &str| {
            spec.get(k)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        let strs = |k: &str| -> Vec<String> {
            spec.get(k)
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default()
        };
        Ips {
            kind: s("type"),
            cluster_ip: s("clusterIP"),
            cluster_ips: strs("clusterIPs"),
            families: strs("ipFamilies"),
            policy: spec
                .get("ipFamilyPolicy")
                .and_then(Value::as_str)
                .map(str::to_string),
            selectorless: spec
                .get("selector")
                .and_then(Value::as_object)
                .is_none_or(Map::is_empty),
        }
    }

    /// Writes the fields back, leaving out empty ones as kube's `omitempty` does.
    fn write(&self, spec: &mut Map<String, Value>) {
        let mut put = |k: &str, v: Option<Value>| match v {
            Some(v) => spec.insert(k.into(), v),
            None => spec.remove(k),
        };
        let nonempty = |v: &Vec<String>| (!v.is_empty()).then(|| json!(v));
        put(
            "clusterIP",
            (!self.cluster_ip.is_empty()).then(|| json!(self.cluster_ip)),
        );
        put("clusterIPs", nonempty(&self.cluster_ips));
        put("ipFamilies", nonempty(&self.families));
        put("ipFamilyPolicy", self.policy.as_ref().map(|p| json!(p)));
    }

    fn needs_cluster_ip(&self) -> bool {
        self.kind != EXTERNAL_NAME
    }

    fn headless(&self) -> bool {
        self.cluster_ips.len() == 1 && self.cluster_ips[0] == NONE
    }

    fn policy(&self) -> &str {
        self.policy.as_deref().unwrap_or("")
    }
}

fn spec_mut(obj: &mut Value) -> Option<&mut Map<String, Value>> {
    obj.get_mut("spec").and_then(Value::as_object_mut)
}

/// The addresses the stored Services hold (`clusterIPs`, and `clusterIP` for
/// one stored before the plural field).
fn in_use(inner: &Inner) -> HashSet<Ipv4Addr> {
    let mut used = HashSet::new();
    for (_, svc) in inner.scan("", "services", None) {
        let Some(spec) = svc.get("spec") else {
            continue;
        };
        let plural = spec.get("clusterIPs").and_then(Value::as_array);
        let ips = plural
            .into_iter()
            .flatten()
            .chain(spec.get("clusterIP"))
            .filter_map(|ip| ip.as_str()?.parse::<Ipv4Addr>().ok());
        used.extend(ips);
    }
    used
}

/// A new Service (POST, or an apply that creates): keeps `clusterIP` and
/// `clusterIPs` in step, defaults the IP family fields, allocates its ClusterIP.
pub fn on_create(tx: &Tx<'_>, obj: &mut Value) -> Result<(), ApiError> {
    let name = meta_str(obj, "name").unwrap_or("").to_string();
    let Some(spec) = spec_mut(obj) else {
        return Ok(());
    };
    let mut svc = Ips::read(spec);
    normalize_cluster_ips(&mut svc, None);
    init_families(&mut svc, None).map_err(|c| invalid(&name, c))?;
    allocate(tx, &name, &mut svc)?;
    let causes = spec_causes(&svc);
    if !causes.is_empty() {
        return Err(invalid(&name, causes));
    }
    svc.write(spec);
    Ok(())
}

/// An update of a Service's main resource (PUT, each patch type, apply):
/// `new` is what the write would store over `old`.
pub fn on_update(tx: &Tx<'_>, old: &Value, new: &mut Value) -> Result<(), ApiError> {
    let name = meta_str(old, "name").unwrap_or("").to_string();
    let Some(old_spec) = old.get("spec").and_then(Value::as_object) else {
        return Ok(());
    };
    let mut before = Ips::read(old_spec);
    default_on_read(&mut before);
    let Some(spec) = spec_mut(new) else {
        return Ok(());
    };
    let mut svc = Ips::read(spec);
    patch_allocated(&mut svc, &before);
    normalize_cluster_ips(&mut svc, Some(&before));
    init_families(&mut svc, Some(&before)).map_err(|c| invalid(&name, c))?;
    if !prefer_dual_stack_unchanged(&svc, &before)
        && !before.needs_cluster_ip()
        && svc.needs_cluster_ip()
    {
        allocate(tx, &name, &mut svc)?;
    }
    drop_type_dependent(&mut svc, &before);
    let mut causes = update_causes(&svc, &before);
    causes.extend(spec_causes(&svc));
    if !causes.is_empty() {
        return Err(invalid(&name, causes));
    }
    svc.write(spec);
    Ok(())
}

fn invalid(name: &str, causes: Vec<FieldCause>) -> ApiError {
    ApiError::invalid("", "Service", name, causes)
}

/// `normalizeClusterIPs`: a client may manage `clusterIP` alone (older clients)
/// or both fields.
fn normalize_cluster_ips(svc: &mut Ips, old: Option<&Ips>) {
    let Some(old) = old else {
        if !svc.cluster_ip.is_empty() && svc.cluster_ips.is_empty() {
            svc.cluster_ips = vec![svc.cluster_ip.clone()];
        }
        return;
    };
    if !old.cluster_ips.is_empty() && svc.cluster_ips.is_empty() && old.cluster_ip == svc.cluster_ip
    {
        svc.cluster_ips = old.cluster_ips.clone();
    }
    if old.cluster_ip != svc.cluster_ip && old.cluster_ips == svc.cluster_ips {
        svc.cluster_ips = if !old.cluster_ip.is_empty() && svc.cluster_ip.is_empty() {
            Vec::new()
        } else {
            vec![svc.cluster_ip.clone()]
        };
    }
}

/// `patchAllocatedValues`: what the server allocated stays when the client
/// leaves it out (resubmitting the YAML it created the Service with).
fn patch_allocated(svc: &mut Ips, old: &Ips) {
    if old.needs_cluster_ip() && svc.needs_cluster_ip() {
        if svc.cluster_ip.is_empty() {
            svc.cluster_ip = old.cluster_ip.clone();
        }
        if svc.cluster_ips.is_empty() && !old.cluster_ips.is_empty() {
            svc.cluster_ips = old.cluster_ips.clone();
        }
    }
}

/// `defaultOnReadService` for the stored object an update starts from (a Service
/// stored before its IP family fields were set).
fn default_on_read(old: &mut Ips) {
    normalize_cluster_ips(old, None);
    if !old.needs_cluster_ip() || !old.families.is_empty() {
        return;
    }
    if old.cluster_ip == NONE {
        if old.selectorless {
            old.policy = Some(REQUIRE_DUAL_STACK.into());
            old.families = vec![IPV4.into(), IPV6.into()];
        } else {
            old.policy = Some(SINGLE_STACK.into());
            old.families = vec![IPV4.into()];
        }
    } else {
        old.families = old
            .cluster_ips
            .iter()
            .map(|ip| family_of(ip).into())
            .collect();
        old.policy = match old.families.len() {
            1 => Some(SINGLE_STACK.into()),
            2 => Some(REQUIRE_DUAL_STACK.into()),
            _ => old.policy.take(),
        };
    }
}

/// `isMatchingPreferDualStackClusterIPFields`: nothing to (re)allocate.
fn prefer_dual_stack_unchanged(svc: &Ips, old: &Ips) -> bool {
    svc.policy.is_some()
        && svc.kind == old.kind
        && svc.needs_cluster_ip()
        && svc.policy() == PREFER_DUAL_STACK
        && old.policy.as_deref().is_none_or(|p| p == PREFER_DUAL_STACK)
        && svc.cluster_ips == old.cluster_ips
        && svc.families == old.families
}

fn family_of(ip: &str) -> &'static str {
    if ip.contains(':') {
        IPV6
    } else {
        IPV4
    }
}

/// `initIPFamilyFields` for a cluster whose only family is IPv4.
fn init_families(svc: &mut Ips, old: Option<&Ips>) -> Result<(), Vec<FieldCause>> {
    if !svc.needs_cluster_ip() || old.is_some_and(|o| prefer_dual_stack_unchanged(svc, o)) {
        return Ok(());
    }
    if svc.policy.is_none() {
        svc.policy = Some(match old.and_then(|o| o.policy.clone()) {
            Some(p) => p,
            None if svc.cluster_ip == NONE && svc.selectorless => REQUIRE_DUAL_STACK.into(),
            None => SINGLE_STACK.into(),
        });
    }
    let pre = cluster_ips_causes(svc);
    if !pre.is_empty() {
        return Err(pre);
    }
    let mut causes = Vec::new();
    let policy_value = json!(svc.policy).to_string();
    if let Some(old) = old {
        if svc.policy() == SINGLE_STACK {
            if svc.cluster_ips == old.cluster_ips && svc.cluster_ips.len() > 1 {
                svc.cluster_ips.truncate(1);
            }
            if svc.families == old.families && svc.families.len() > 1 {
                svc.families.truncate(1);
            }
        } else {
            let reduced = |new: &[String], old: &[String]| !new.is_empty() && new.len() < old.len();
            if reduced(&svc.cluster_ips, &old.cluster_ips) {
                causes.push(cause_invalid(
                    "spec.ipFamilyPolicy",
                    &policy_value,
                    "must be 'SingleStack' to release the secondary cluster IP",
                ));
            }
            if reduced(&svc.families, &old.families) {
                causes.push(cause_invalid(
                    "spec.ipFamilyPolicy",
                    &policy_value,
                    "must be 'SingleStack' to release the secondary IP family",
                ));
            }
        }
    }
    if svc.policy() == SINGLE_STACK {
        if svc.cluster_ips.len() == 2 {
            causes.push(cause_invalid(
                "spec.ipFamilyPolicy",
                &policy_value,
                "must be 'RequireDualStack' or 'PreferDualStack' when multiple cluster IPs are specified",
            ));
        }
        if svc.families.len() == 2 {
            causes.push(cause_invalid(
                "spec.ipFamilyPolicy",
                &policy_value,
                "must be 'RequireDualStack' or 'PreferDualStack' when multiple IP families are specified",
            ));
        }
    }
    for (i, ip) in svc.cluster_ips.clone().iter().enumerate() {
        if ip == NONE {
            break;
        }
        if i >= svc.families.len() {
            let family = family_of(ip);
            if family == IPV4 {
                svc.families.push(IPV4.into());
            } else {
                causes.push(cause_invalid(
                    &format!("spec.clusterIPs[{i}]"),
                    &go_strings(&svc.cluster_ips),
                    &format!("{family} is not configured on this cluster"),
                ));
            }
        }
    }
    if !causes.is_empty() {
        return Err(causes);
    }
    if svc.cluster_ip == NONE && svc.selectorless {
        // Headless without a selector may list both families, even here.
        if svc.families.is_empty() {
            svc.families = vec![IPV4.into()];
        }
        if svc.families.len() < 2 && svc.policy() != SINGLE_STACK {
            let other = if svc.families[0] == IPV4 { IPV6 } else { IPV4 };
            svc.families.push(other.into());
        }
        return Ok(());
    }
    if svc.policy() == REQUIRE_DUAL_STACK {
        causes.push(cause_invalid(
            "spec.ipFamilyPolicy",
            &policy_value,
            "this cluster is not configured for dual-stack services",
        ));
    }
    for (i, family) in svc.families.iter().enumerate() {
        if family != IPV4 {
            causes.push(cause_invalid(
                &format!("spec.ipFamilies[{i}]"),
                &json!(family).to_string(),
                "not configured on this cluster",
            ));
        }
    }
    if !causes.is_empty() {
        return Err(causes);
    }
    if svc.families.is_empty() {
        svc.families = vec![IPV4.into()];
    }
    Ok(())
}

/// `allocClusterIPs`: the requested address is taken, else a free one. A dry run
/// checks a requested address against the range only and "allocates" the
/// network address, as kube's dry-run allocator does.
fn allocate(tx: &Tx<'_>, name: &str, svc: &mut Ips) -> Result<(), ApiError> {
    if !svc.needs_cluster_ip() || svc.cluster_ips.first().is_some_and(|ip| ip == NONE) {
        return Ok(());
    }
    let requested = svc.cluster_ips.first().filter(|ip| !ip.is_empty()).cloned();
    let ip = match requested {
        Some(text) => {
            let failed = |e: AllocError| {
                invalid(
                    name,
                    vec![cause_invalid(
                        "spec.clusterIPs",
                        &go_strings(&svc.cluster_ips),
                        &format!("failed to allocate IP {text}: {e}"),
                    )],
                )
            };
            // Checked by `cluster_ips_causes` and `init_families`: an IPv4 address.
            let ip: Ipv4Addr = text
                .parse()
                .map_err(|_| ApiError::internal(format!("failed to parse service IP {text:?}")))?;
            if tx.is_dry_run() {
                cluster_ip::check_range(&SERVICE_CIDR, ip).map_err(failed)?;
            } else {
                cluster_ip::claim(&SERVICE_CIDR, &in_use(&*tx.inner), ip).map_err(failed)?;
            }
            ip
        }
        None if tx.is_dry_run() => SERVICE_CIDR.network(),
        None => cluster_ip::next_free(&SERVICE_CIDR, &in_use(&*tx.inner), rand::random())
            .map_err(|e| ApiError::internal(format!("failed to allocate a serviceIP: {e}")))?,
    };
    let ip = ip.to_string();
    match svc.cluster_ips.first_mut() {
        Some(first) => *first = ip.clone(),
        None => svc.cluster_ips.push(ip.clone()),
    }
    svc.cluster_ip = ip;
    Ok(())
}

/// `dropTypeDependentFields` (the strategy's `PrepareForUpdate`): a Service that
/// becomes ExternalName loses the IP fields it did not change.
fn drop_type_dependent(svc: &mut Ips, old: &Ips) {
    if old.needs_cluster_ip() && !svc.needs_cluster_ip() {
        if svc.cluster_ips == old.cluster_ips {
            svc.cluster_ip.clear();
            svc.cluster_ips.clear();
        }
        if svc.families == old.families {
            svc.families.clear();
        }
        if svc.policy == old.policy {
            svc.policy = None;
        }
    }
}

/// `ValidateServiceClusterIPsRelatedFields`.
fn cluster_ips_causes(svc: &Ips) -> Vec<FieldCause> {
    let mut out = Vec::new();
    if !svc.needs_cluster_ip() {
        return out;
    }
    let ips = go_strings(&svc.cluster_ips);
    if !svc.cluster_ip.is_empty() {
        if svc.cluster_ips.is_empty() {
            out.push(cause_required("spec.clusterIPs"));
        } else if svc.cluster_ips[0] != svc.cluster_ip {
            out.push(cause_invalid(
                "spec.clusterIPs",
                &ips,
                "first value must match `clusterIP`",
            ));
        }
    } else if !svc.cluster_ips.is_empty() {
        out.push(cause_invalid(
            "spec.clusterIPs",
            &ips,
            "must be empty when `clusterIP` is not specified",
        ));
    }
    let mut seen = HashSet::new();
    for (i, family) in svc.families.iter().enumerate() {
        if family != IPV4 && family != IPV6 {
            out.push(cause_not_supported(
                &format!("spec.ipFamilies[{i}]"),
                family,
                &[IPV4, IPV6],
            ));
        }
        if !seen.insert(family) {
            out.push(FieldCause {
                reason: "FieldValueDuplicate",
                field: format!("spec.ipFamilies[{i}]"),
                message: format!("Duplicate value: {}", json!(family)),
            });
        }
    }
    if let Some(p) = &svc.policy {
        let supported = [PREFER_DUAL_STACK, REQUIRE_DUAL_STACK, SINGLE_STACK];
        if !supported.contains(&p.as_str()) {
            out.push(cause_not_supported("spec.ipFamilyPolicy", p, &supported));
        }
    }
    let mut bad_ips = false;
    for (i, ip) in svc.cluster_ips.iter().enumerate() {
        if i == 0 && ip == NONE {
            if svc.cluster_ips.len() > 1 {
                bad_ips = true;
                out.push(cause_invalid(
                    "spec.clusterIPs",
                    &ips,
                    "'None' must be the first and only value",
                ));
            }
            continue;
        }
        if ip.parse::<IpAddr>().is_err() {
            bad_ips = true;
            out.push(cause_invalid(
                &format!("spec.clusterIPs[{i}]"),
                &json!(ip).to_string(),
                "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
            ));
        }
    }
    if svc.cluster_ips.len() > 2 {
        out.push(cause_invalid(
            "spec.clusterIPs",
            &ips,
            "may only hold up to 2 values",
        ));
    }
    if bad_ips {
        return out;
    }
    if svc.cluster_ips.len() == 2
        && family_of(&svc.cluster_ips[0]) == family_of(&svc.cluster_ips[1])
    {
        out.push(cause_invalid(
            "spec.clusterIPs",
            &ips,
            "may specify no more than one IP for each IP family",
        ));
    }
    if !svc.headless() {
        for (i, (ip, family)) in svc.cluster_ips.iter().zip(&svc.families).enumerate() {
            if family_of(ip) != family {
                out.push(cause_invalid(
                    &format!("spec.clusterIPs[{i}]"),
                    &json!(ip).to_string(),
                    &format!("expected an {family} value as indicated by `ipFamilies[{i}]`"),
                ));
            }
        }
    }
    out
}

/// `validateUpgradeDowngradeClusterIPs` and `validateUpgradeDowngradeIPFamilies`.
fn update_causes(svc: &Ips, old: &Ips) -> Vec<FieldCause> {
    let mut out = Vec::new();
    if !svc.needs_cluster_ip() || !old.needs_cluster_ip() {
        return out;
    }
    let ips = go_strings(&svc.cluster_ips);
    let families = go_families(&svc.families);
    let policy = json!(svc.policy).to_string();
    let changed = "may not change once set";
    if !(old.headless() && svc.headless()) {
        let (n, o) = (&svc.cluster_ips, &old.cluster_ips);
        if n.len() == o.len() {
            for i in (0..o.len()).filter(|&i| o[i] != n[i]) {
                out.push(cause_invalid(
                    &format!("spec.clusterIPs[{i}]"),
                    &ips,
                    changed,
                ));
            }
        } else if n.len() < o.len() {
            if n.is_empty() {
                out.push(cause_invalid(
                    "spec.clusterIPs[0]",
                    &ips,
                    "primary clusterIP can not be unset",
                ));
            }
            if !o.is_empty() && !n.is_empty() && n[0] != o[0] {
                out.push(cause_invalid("spec.clusterIPs[0]", &ips, changed));
            }
            if n.len() == 1 && svc.policy() != SINGLE_STACK {
                out.push(cause_invalid(
                    "spec.ipFamilyPolicy",
                    &policy,
                    "must be set to 'SingleStack' when releasing the secondary clusterIP",
                ));
            }
        } else if !o.is_empty() && n[0] != o[0] {
            out.push(cause_invalid("spec.clusterIPs[0]", &ips, changed));
        }
    }
    if old.headless() || svc.headless() {
        return out;
    }
    let (n, o) = (&svc.families, &old.families);
    if n.len() == o.len() {
        for _ in (0..o.len()).filter(|&i| o[i] != n[i]) {
            out.push(cause_invalid("spec.ipFamilies[0]", &families, changed));
        }
    } else if n.len() < o.len() {
        if svc.cluster_ips.is_empty() {
            out.push(cause_invalid(
                "spec.ipFamilies[0]",
                &families,
                "primary ipFamily can not be unset",
            ));
        }
        if !n.is_empty() && n[0] != o[0] {
            out.push(cause_invalid("spec.ipFamilies[0]", &ips, changed));
        }
        if n.len() == 1 && svc.policy() != SINGLE_STACK {
            out.push(cause_invalid(
                "spec.ipFamilyPolicy",
                &policy,
                "must be set to 'SingleStack' when releasing the secondary ipFamily",
            ));
        }
    } else if !o.is_empty() && !n.is_empty() && n[0] != o[0] {
        out.push(cause_invalid("spec.ipFamilies[0]", &ips, changed));
    }
    out
}

/// `ValidateService`'s rules on `type` and the IP fields by type.
fn spec_causes(svc: &Ips) -> Vec<FieldCause> {
    let mut out = Vec::new();
    match svc.kind.as_str() {
        kind @ ("LoadBalancer" | "NodePort") if svc.headless() => out.push(cause_invalid(
            "spec.clusterIPs[0]",
            &json!(NONE).to_string(),
            &format!("may not be set to 'None' for {kind} services"),
        )),
        EXTERNAL_NAME => {
            let forbidden = |field: &str| FieldCause {
                reason: "FieldValueForbidden",
                field: field.into(),
                message: "Forbidden: may not be set for ExternalName services".into(),
            };
            if !svc.cluster_ips.is_empty() {
                out.push(forbidden("spec.clusterIPs"));
            }
            if !svc.families.is_empty() {
                out.push(forbidden("spec.ipFamilies"));
            }
            if svc.policy.is_some() {
                out.push(forbidden("spec.ipFamilyPolicy"));
            }
        }
        _ => {}
    }
    if !SERVICE_TYPES.contains(&svc.kind.as_str()) {
        out.push(cause_not_supported("spec.type", &svc.kind, &SERVICE_TYPES));
    }
    out
}

/// Go's `%#v` of a `[]string`, as kube prints a bad value.
fn go_strings(v: &[String]) -> String {
    go_slice("[]string", v)
}

/// Go's `%#v` of a `[]core.IPFamily`.
fn go_families(v: &[String]) -> String {
    go_slice("[]core.IPFamily", v)
}

fn go_slice(ty: &str, v: &[String]) -> String {
    if v.is_empty() {
        return format!("{ty}(nil)");
    }
    let items: Vec<String> = v.iter().map(|s| json!(s).to_string()).collect();
    format!("{ty}{{{}}}", items.join(", "))
}

fn cause_invalid(field: &str, value: &str, detail: &str) -> FieldCause {
    FieldCause {
        reason: "FieldValueInvalid",
        field: field.into(),
        message: format!("Invalid value: {value}: {detail}"),
    }
}

fn cause_required(field: &str) -> FieldCause {
    FieldCause {
        reason: "FieldValueRequired",
        field: field.into(),
        message: "Required value".into(),
    }
}

fn cause_not_supported(field: &str, value: &str, supported: &[&str]) -> FieldCause {
    let listed: Vec<String> = supported.iter().map(|s| json!(s).to_string()).collect();
    FieldCause {
        reason: "FieldValueNotSupported",
        field: field.into(),
        message: format!(
            "Unsupported value: {}: supported values: {}",
            json!(value),
            listed.join(", ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::delete::{delete, DeleteOpts};
    use crate::patch::PatchType;
    use crate::resources::{builtins, ResourceDef};
    use crate::seed;
    use crate::store::{ObjKey, Store};
    use crate::write::{self, FieldValidation, WriteCtx};

    fn ctx() -> WriteCtx {
        WriteCtx {
            manager: "test".into(),
            manager_explicit: true,
            validation: FieldValidation::Warn,
            force: None,
        }
    }

    fn svc_def() -> ResourceDef {
        builtins()
            .into_iter()
            .find(|d| d.group.is_empty() && d.plural == "services")
            .unwrap()
    }

    fn store() -> Store {
        let s = Store::open(None, 1000).unwrap();
        seed::seed(&s, "t", 0).unwrap();
        crate::bootstrap::bootstrap(&s, "127.0.0.1:6443".parse().unwrap()).unwrap();
        s
    }

    fn create(s: &Store, body: Value) -> Result<Value, ApiError> {
        s.write(false, |tx| {
            write::create(tx, &svc_def(), Some("default"), body, &ctx())
        })
        .map(|o| o.obj)
    }

    fn put(s: &Store, name: &str, body: Value) -> Result<Value, ApiError> {
        s.write(false, |tx| {
            write::update(tx, &svc_def(), Some("default"), name, body, None, &ctx())
        })
        .map(|o| o.obj)
    }

    fn patch(s: &Store, name: &str, pt: PatchType, body: &Value) -> Result<Value, ApiError> {
        let bytes = body.to_string().into_bytes();
        s.write(false, |tx| {
            write::patch(
                tx,
                &svc_def(),
                Some("default"),
                name,
                pt,
                &bytes,
                None,
                &ctx(),
            )
        })
        .map(|o| o.obj)
    }

    fn svc(name: &str, spec: Value) -> Value {
        json!({"metadata": {"name": name}, "spec": spec})
    }

    fn ip_of(obj: &Value) -> Ipv4Addr {
        obj["spec"]["clusterIP"].as_str().unwrap().parse().unwrap()
    }

    fn in_range(ip: Ipv4Addr) -> bool {
        ip >= SERVICE_CIDR.first() && ip <= SERVICE_CIDR.last()
    }

    #[test]
    fn v1_defaults() {
        let mut o = json!({"spec": {"ports": [{"port": 80}, {"port": 53, "protocol": "UDP", "targetPort": "dns"}]}});
        set_defaults(&mut o);
        assert_eq!(
            o["spec"],
            json!({"type": "ClusterIP", "sessionAffinity": "None", "internalTrafficPolicy": "Cluster",
                "ports": [{"port": 80, "protocol": "TCP", "targetPort": 80},
                          {"port": 53, "protocol": "UDP", "targetPort": "dns"}]})
        );
        let mut lb = json!({"spec": {"type": "LoadBalancer", "sessionAffinity": "ClientIP"},
            "status": {"loadBalancer": {"ingress": [{"ip": "1.2.3.4"}, {"hostname": "h"}]}}});
        set_defaults(&mut lb);
        assert_eq!(lb["spec"]["externalTrafficPolicy"], "Cluster");
        assert_eq!(lb["spec"]["allocateLoadBalancerNodePorts"], true);
        assert_eq!(
            lb["spec"]["sessionAffinityConfig"]["clientIP"]["timeoutSeconds"],
            10800
        );
        assert_eq!(lb["status"]["loadBalancer"]["ingress"][0]["ipMode"], "VIP");
        assert!(lb["status"]["loadBalancer"]["ingress"][1]
            .get("ipMode")
            .is_none());
        let mut ext = json!({"spec": {"type": "ExternalName", "externalName": "example.com"}});
        set_defaults(&mut ext);
        assert!(ext["spec"].get("internalTrafficPolicy").is_none());
        let mut no_spec = json!({"metadata": {"name": "x"}});
        set_defaults(&mut no_spec);
        assert_eq!(no_spec["spec"]["type"], "ClusterIP");
    }

    /// Failed before: a Service got a random 10.96.x.y (twice the same one now and
    /// then), a requested address was taken whatever held it, and no IP family
    /// fields were set.
    #[test]
    fn create_allocates_distinct_free_addresses_with_the_family_fields() {
        let s = store();
        let a = create(&s, svc("a", json!({"ports": [{"port": 80}]}))).unwrap();
        let b = create(&s, svc("b", json!({"ports": [{"port": 80}]}))).unwrap();
        assert_ne!(ip_of(&a), ip_of(&b));
        for o in [&a, &b] {
            assert!(in_range(ip_of(o)), "{o}");
            assert_eq!(o["spec"]["clusterIPs"], json!([o["spec"]["clusterIP"]]));
            assert_eq!(o["spec"]["ipFamilies"], json!(["IPv4"]));
            assert_eq!(o["spec"]["ipFamilyPolicy"], "SingleStack");
            assert_eq!(o["spec"]["type"], "ClusterIP");
            assert_eq!(o["spec"]["sessionAffinity"], "None");
            assert_eq!(o["spec"]["internalTrafficPolicy"], "Cluster");
        }
        // An old client's `clusterIP` alone, and an empty one.
        let c = create(
            &s,
            svc(
                "c",
                json!({"clusterIP": "10.96.0.10", "ports": [{"port": 1}]}),
            ),
        )
        .unwrap();
        assert_eq!(c["spec"]["clusterIPs"], json!(["10.96.0.10"]));
        let d = create(
            &s,
            svc(
                "d",
                json!({"clusterIP": "", "type": "NodePort", "ports": [{"port": 1}]}),
            ),
        )
        .unwrap();
        assert!(in_range(ip_of(&d)));
    }

    #[test]
    fn create_refuses_a_held_or_foreign_address_with_kubes_messages() {
        let s = store();
        create(
            &s,
            svc(
                "a",
                json!({"clusterIP": "10.96.0.10", "ports": [{"port": 80}]}),
            ),
        )
        .unwrap();
        let e = create(
            &s,
            svc(
                "b",
                json!({"clusterIP": "10.96.0.10", "ports": [{"port": 80}]}),
            ),
        )
        .unwrap_err();
        assert_eq!((e.code, e.reason), (422, "Invalid"));
        assert_eq!(
            e.message,
            "Service \"b\" is invalid: spec.clusterIPs: Invalid value: []string{\"10.96.0.10\"}: \
             failed to allocate IP 10.96.0.10: provided IP is already allocated"
        );
        let causes = &e.details.as_ref().unwrap()["causes"];
        assert_eq!(causes[0]["field"], "spec.clusterIPs");
        assert_eq!(causes[0]["reason"], "FieldValueInvalid");
        // The kubernetes Service holds the first address.
        let e = create(
            &s,
            svc(
                "k",
                json!({"clusterIP": "10.96.0.1", "ports": [{"port": 1}]}),
            ),
        )
        .unwrap_err();
        assert!(
            e.message.ends_with("provided IP is already allocated"),
            "{}",
            e.message
        );
        let e = create(
            &s,
            svc(
                "o",
                json!({"clusterIP": "192.168.1.1", "ports": [{"port": 1}]}),
            ),
        )
        .unwrap_err();
        assert_eq!(
            e.message,
            "Service \"o\" is invalid: spec.clusterIPs: Invalid value: []string{\"192.168.1.1\"}: \
             failed to allocate IP 192.168.1.1: the provided network does not match the current range"
        );
        let e = create(
            &s,
            svc(
                "v6",
                json!({"clusterIP": "fd00::1", "ports": [{"port": 1}]}),
            ),
        )
        .unwrap_err();
        assert_eq!(
            e.message,
            "Service \"v6\" is invalid: spec.clusterIPs[0]: Invalid value: []string{\"fd00::1\"}: \
             IPv6 is not configured on this cluster"
        );
        let e = create(
            &s,
            svc(
                "bad",
                json!({"clusterIP": "10.96.0.300", "ports": [{"port": 1}]}),
            ),
        )
        .unwrap_err();
        assert_eq!(
            e.message,
            "Service \"bad\" is invalid: spec.clusterIPs[0]: Invalid value: \"10.96.0.300\": \
             must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"
        );
        let e = create(
            &s,
            svc(
                "dual",
                json!({"ipFamilyPolicy": "RequireDualStack", "ports": [{"port": 1}]}),
            ),
        )
        .unwrap_err();
        assert_eq!(
            e.message,
            "Service \"dual\" is invalid: spec.ipFamilyPolicy: Invalid value: \"RequireDualStack\": \
             this cluster is not configured for dual-stack services"
        );
        // Nothing of the refused creates was stored.
        assert_eq!(
            s.read(|i| i.scan("", "services", Some("default")).count()),
            2
        );
    }

    #[test]
    fn headless_and_external_name_services_get_no_address() {
        let s = store();
        let headless = create(
            &s,
            svc(
                "h",
                json!({"clusterIP": "None", "selector": {"app": "x"}, "ports": [{"port": 80}]}),
            ),
        )
        .unwrap();
        assert_eq!(headless["spec"]["clusterIPs"], json!(["None"]));
        assert_eq!(headless["spec"]["ipFamilies"], json!(["IPv4"]));
        assert_eq!(headless["spec"]["ipFamilyPolicy"], "SingleStack");
        // Headless and selector-less: both families, even on a single-stack cluster.
        let bare = create(&s, svc("hb", json!({"clusterIP": "None"}))).unwrap();
        assert_eq!(bare["spec"]["clusterIP"], "None");
        assert_eq!(bare["spec"]["ipFamilies"], json!(["IPv4", "IPv6"]));
        assert_eq!(bare["spec"]["ipFamilyPolicy"], "RequireDualStack");
        let ext = create(
            &s,
            svc(
                "e",
                json!({"type": "ExternalName", "externalName": "example.com"}),
            ),
        )
        .unwrap();
        for f in [
            "clusterIP",
            "clusterIPs",
            "ipFamilies",
            "ipFamilyPolicy",
            "internalTrafficPolicy",
        ] {
            assert!(ext["spec"].get(f).is_none(), "{f}: {ext}");
        }
        let e = create(
            &s,
            svc(
                "e2",
                json!({"type": "ExternalName", "externalName": "x.com", "clusterIP": "10.96.0.5"}),
            ),
        )
        .unwrap_err();
        assert_eq!(
            e.message,
            "Service \"e2\" is invalid: spec.clusterIPs: Forbidden: may not be set for ExternalName services"
        );
        let e = create(
            &s,
            svc(
                "np",
                json!({"type": "NodePort", "clusterIP": "None", "ports": [{"port": 1}]}),
            ),
        )
        .unwrap_err();
        assert_eq!(
            e.message,
            "Service \"np\" is invalid: spec.clusterIPs[0]: Invalid value: \"None\": may not be set to 'None' for NodePort services"
        );
    }

    #[test]
    fn a_dry_run_create_shows_the_network_address_and_holds_nothing() {
        let s = store();
        let dry = s
            .write(true, |tx| {
                write::create(
                    tx,
                    &svc_def(),
                    Some("default"),
                    svc("d", json!({"ports": [{"port": 1}]})),
                    &ctx(),
                )
            })
            .unwrap();
        assert_eq!(dry.obj["spec"]["clusterIP"], "10.96.0.0");
        // A dry run cannot see held addresses (kube's dry-run allocator checks the range).
        let dry = s
            .write(true, |tx| {
                write::create(
                    tx,
                    &svc_def(),
                    Some("default"),
                    svc(
                        "d",
                        json!({"clusterIP": "10.96.0.1", "ports": [{"port": 1}]}),
                    ),
                    &ctx(),
                )
            })
            .unwrap();
        assert_eq!(dry.obj["spec"]["clusterIP"], "10.96.0.1");
        let real = create(
            &s,
            svc(
                "d",
                json!({"clusterIP": "10.96.0.20", "ports": [{"port": 1}]}),
            ),
        )
        .unwrap();
        assert_eq!(ip_of(&real), "10.96.0.20".parse::<Ipv4Addr>().unwrap());
    }

    /// Failed before: a PUT without `clusterIP` was stored without it, and a changed
    /// one was stored.
    #[test]
    fn updates_keep_the_address_and_refuse_to_change_it() {
        let s = store();
        let a = create(&s, svc("a", json!({"ports": [{"port": 80}]}))).unwrap();
        let ip = ip_of(&a);
        // The YAML it was created with, again (kubectl replace, an agent's PUT).
        let again = put(&s, "a", svc("a", json!({"ports": [{"port": 81}]}))).unwrap();
        assert_eq!(ip_of(&again), ip);
        assert_eq!(again["spec"]["clusterIPs"], json!([ip.to_string()]));
        assert_eq!(again["spec"]["ipFamilyPolicy"], "SingleStack");
        assert_eq!(again["spec"]["ports"][0]["port"], 81);
        let e = put(
            &s,
            "a",
            svc(
                "a",
                json!({"clusterIP": "10.96.0.99", "ports": [{"port": 81}]}),
            ),
        )
        .unwrap_err();
        assert_eq!((e.code, e.reason), (422, "Invalid"));
        assert_eq!(
            e.message,
            "Service \"a\" is invalid: spec.clusterIPs[0]: Invalid value: []string{\"10.96.0.99\"}: may not change once set"
        );
        let e = patch(
            &s,
            "a",
            PatchType::Merge,
            &json!({"spec": {"clusterIP": "10.96.0.99"}}),
        )
        .unwrap_err();
        assert!(
            e.message.ends_with("may not change once set"),
            "{}",
            e.message
        );
        let e = patch(
            &s,
            "a",
            PatchType::Merge,
            &json!({"spec": {"clusterIP": "None", "clusterIPs": ["None"]}}),
        )
        .unwrap_err();
        assert!(
            e.message.ends_with("may not change once set"),
            "{}",
            e.message
        );
        // A merge patch of something else keeps everything.
        let p = patch(
            &s,
            "a",
            PatchType::Merge,
            &json!({"spec": {"selector": {"app": "a"}}}),
        )
        .unwrap();
        assert_eq!(ip_of(&p), ip);
    }

    #[test]
    fn apply_without_the_address_keeps_it() {
        let s = store();
        let apply = |body: Value| {
            let bytes = body.to_string().into_bytes();
            s.write(false, |tx| {
                write::patch(
                    tx,
                    &svc_def(),
                    Some("default"),
                    "ap",
                    PatchType::Apply,
                    &bytes,
                    None,
                    &ctx(),
                )
            })
        };
        let body = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "ap"},
            "spec": {"ports": [{"port": 80}]}});
        let created = apply(body.clone()).unwrap();
        assert!(created.created);
        let ip = ip_of(&created.obj);
        assert!(in_range(ip));
        let mut changed = body;
        changed["spec"]["ports"][0]["port"] = json!(8080);
        let updated = apply(changed).unwrap();
        assert_eq!(ip_of(&updated.obj), ip);
        assert_eq!(updated.obj["spec"]["ports"][0]["port"], 8080);
    }

    #[test]
    fn type_changes_allocate_and_release() {
        let s = store();
        create(
            &s,
            svc(
                "e",
                json!({"type": "ExternalName", "externalName": "example.com"}),
            ),
        )
        .unwrap();
        let c = patch(
            &s,
            "e",
            PatchType::Merge,
            &json!({"spec": {"type": "ClusterIP", "externalName": null, "ports": [{"port": 1}]}}),
        )
        .unwrap();
        let ip = ip_of(&c);
        assert!(in_range(ip));
        assert_eq!(c["spec"]["ipFamilies"], json!(["IPv4"]));
        let back = patch(
            &s,
            "e",
            PatchType::Merge,
            &json!({"spec": {"type": "ExternalName", "externalName": "example.com"}}),
        )
        .unwrap();
        for f in ["clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"] {
            assert!(back["spec"].get(f).is_none(), "{f}: {back}");
        }
        // Its address is free again.
        let again = create(
            &s,
            svc(
                "x",
                json!({"clusterIP": ip.to_string(), "ports": [{"port": 1}]}),
            ),
        )
        .unwrap();
        assert_eq!(ip_of(&again), ip);
    }

    #[test]
    fn delete_frees_the_address() {
        let s = store();
        let a = create(
            &s,
            svc(
                "a",
                json!({"clusterIP": "10.96.0.30", "ports": [{"port": 1}]}),
            ),
        )
        .unwrap();
        assert!(create(
            &s,
            svc(
                "b",
                json!({"clusterIP": "10.96.0.30", "ports": [{"port": 1}]})
            )
        )
        .is_err());
        let key = ObjKey::new("", "services", "default", "a");
        s.write(false, |tx| {
            delete(tx, &svc_def(), &key, &DeleteOpts::default())
        })
        .unwrap();
        let b = create(
            &s,
            svc(
                "b",
                json!({"clusterIP": "10.96.0.30", "ports": [{"port": 1}]}),
            ),
        )
        .unwrap();
        assert_eq!(ip_of(&b), ip_of(&a));
    }

    /// A Service stored before the family fields were set (an older devcluster's
    /// data dir) gets them on its next update, as kube's `defaultOnRead` does.
    #[test]
    fn an_update_fills_the_family_fields_of_an_old_service() {
        let s = store();
        let key = ObjKey::new("", "services", "default", "old");
        s.write(false, |tx| {
            tx.put(
                &key,
                json!({"apiVersion": "v1", "kind": "Service",
                    "metadata": {"name": "old", "namespace": "default", "uid": "u"},
                    "spec": {"type": "ClusterIP", "clusterIP": "10.96.7.7", "sessionAffinity": "None",
                        "ports": [{"port": 1, "protocol": "TCP", "targetPort": 1}]}}),
            );
            Ok(())
        })
        .unwrap();
        // Its singular `clusterIP` holds the address.
        let e = create(
            &s,
            svc(
                "new",
                json!({"clusterIP": "10.96.7.7", "ports": [{"port": 1}]}),
            ),
        )
        .unwrap_err();
        assert!(
            e.message.ends_with("provided IP is already allocated"),
            "{}",
            e.message
        );
        let p = patch(
            &s,
            "old",
            PatchType::Merge,
            &json!({"metadata": {"labels": {"a": "b"}}}),
        )
        .unwrap();
        assert_eq!(p["spec"]["clusterIPs"], json!(["10.96.7.7"]));
        assert_eq!(p["spec"]["ipFamilies"], json!(["IPv4"]));
        assert_eq!(p["spec"]["ipFamilyPolicy"], "SingleStack");
    }

    #[test]
    fn go_renders_slices_as_kube_prints_them() {
        assert_eq!(
            go_strings(&["10.96.0.10".into()]),
            "[]string{\"10.96.0.10\"}"
        );
        assert_eq!(go_strings(&[]), "[]string(nil)");
        assert_eq!(
            go_families(&["IPv4".into(), "IPv6".into()]),
            "[]core.IPFamily{\"IPv4\", \"IPv6\"}"
        );
    }
}
