//! meta.k8s.io/v1 Table rendering (what `kubectl get` prints).
//!
//! Like kube-apiserver, the server always returns every column (the wide set);
//! kubectl hides `priority > 0` columns unless `-o wide`. Built-in kinds follow
//! kube's `pkg/printers/internalversion/printers.go` where the printer is simple;
//! CRDs follow apiextensions-apiserver's tableconvertor: each
//! additionalPrinterColumn is a JSONPath, the first value found is the cell.

use crate::jsonpath::JsonPath;
use crate::resources::ResourceDef;
use serde_json::{json, Value};

/// How a column's cell is computed.
#[derive(Debug, Clone)]
enum Cell {
    /// A CRD printer column; `None` when its path does not parse (the cell is empty).
    Path(Option<JsonPath>),
    Fixed(fn(&Value) -> Value),
}

/// One column.
#[derive(Debug, Clone)]
pub struct Column {
    name: String,
    typ: String,
    format: String,
    priority: i64,
    cell: Cell,
}

fn col(name: &str, typ: &str, f: fn(&Value) -> Value) -> Column {
    Column {
        name: name.into(),
        typ: typ.into(),
        format: String::new(),
        priority: 0,
        cell: Cell::Fixed(f),
    }
}

/// A `-o wide` only column.
fn wide(name: &str, typ: &str, f: fn(&Value) -> Value) -> Column {
    Column {
        priority: 1,
        ..col(name, typ, f)
    }
}

fn name_col() -> Column {
    Column {
        format: "name".into(),
        ..col("Name", "string", |v| {
            json!(str_at(v, &["metadata", "name"]).unwrap_or(""))
        })
    }
}

fn age_col() -> Column {
    col("Age", "string", |v| {
        json!(age_of(str_at(v, &["metadata", "creationTimestamp"])))
    })
}

fn at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Value> {
    let mut cur = v;
    for p in path {
        cur = cur.get(*p)?;
    }
    Some(cur)
}

fn str_at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    at(v, path)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

fn count(v: Option<&Value>) -> usize {
    match v {
        Some(Value::Object(m)) => m.len(),
        Some(Value::Array(a)) => a.len(),
        _ => 0,
    }
}

fn int(v: &Value, path: &[&str]) -> i64 {
    at(v, path).and_then(Value::as_i64).unwrap_or(0)
}

fn text(v: &Value, path: &[&str], default: &str) -> Value {
    json!(str_at(v, path).unwrap_or(default))
}

fn or_none(parts: Vec<String>) -> Value {
    json!(if parts.is_empty() {
        "<none>".to_string()
    } else {
        parts.join(",")
    })
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// `k=v,...` sorted by key, as labels.Selector's String() prints matchLabels.
fn key_values(v: Option<&Value>) -> Vec<String> {
    let mut kv: Vec<String> = v
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                .collect()
        })
        .unwrap_or_default();
    kv.sort();
    kv
}

/// `ready/desired`, desired defaulting to 1 as the API server would.
fn ready_of(v: &Value) -> Value {
    json!(format!(
        "{}/{}",
        int(v, &["status", "readyReplicas"]),
        at(v, &["spec", "replicas"])
            .and_then(Value::as_i64)
            .unwrap_or(1)
    ))
}

/// Names and images of the pod template's containers (`Containers`/`Images` columns).
fn template_containers(v: &Value, field: &str) -> Value {
    let names: Vec<String> = at(v, &["spec", "template", "spec", "containers"])
        .and_then(Value::as_array)
        .map(|cs| {
            cs.iter()
                .filter_map(|c| c.get(field).and_then(Value::as_str))
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    json!(names.join(","))
}

fn containers(v: &Value) -> Value {
    template_containers(v, "name")
}

fn images(v: &Value) -> Value {
    template_containers(v, "image")
}

fn match_labels(v: &Value) -> Value {
    or_none(key_values(at(v, &["spec", "selector", "matchLabels"])))
}

fn pod_ready(v: &Value) -> Value {
    let ready = at(v, &["status", "containerStatuses"])
        .and_then(Value::as_array)
        .map_or(0, |cs| {
            cs.iter()
                .filter(|c| c.get("ready").and_then(Value::as_bool) == Some(true))
                .count()
        });
    json!(format!("{ready}/{}", count(at(v, &["spec", "containers"]))))
}

/// kube's pod STATUS without init-container and readiness-gate detail.
fn pod_status(v: &Value) -> Value {
    let mut reason = str_at(v, &["status", "phase"]).unwrap_or("").to_string();
    if let Some(r) = str_at(v, &["status", "reason"]) {
        reason = r.to_string();
    }
    for c in at(v, &["status", "containerStatuses"])
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let Some(r) = str_at(c, &["state", "waiting", "reason"]) {
            reason = r.to_string();
        } else if let Some(r) = str_at(c, &["state", "terminated", "reason"]) {
            reason = r.to_string();
        } else if let Some(t) = at(c, &["state", "terminated"]) {
            reason = match t.get("signal").and_then(Value::as_i64).filter(|s| *s != 0) {
                Some(sig) => format!("Signal:{sig}"),
                None => format!("ExitCode:{}", int(t, &["exitCode"])),
            };
        }
    }
    if at(v, &["metadata", "deletionTimestamp"]).is_some_and(|d| !d.is_null())
        && reason != "NodeLost"
    {
        reason = "Terminating".into();
    }
    json!(reason)
}

fn pod_restarts(v: &Value) -> Value {
    let n: i64 = at(v, &["status", "containerStatuses"])
        .and_then(Value::as_array)
        .map_or(0, |cs| cs.iter().map(|c| int(c, &["restartCount"])).sum());
    json!(n.to_string())
}

fn node_status(v: &Value) -> Value {
    let ready = at(v, &["status", "conditions"])
        .and_then(Value::as_array)
        .and_then(|cs| {
            cs.iter()
                .find(|c| c.get("type").and_then(Value::as_str) == Some("Ready"))
        })
        .map(|c| c.get("status").and_then(Value::as_str) == Some("True"));
    let mut status = match ready {
        Some(true) => "Ready",
        Some(false) => "NotReady",
        None => "Unknown",
    }
    .to_string();
    if at(v, &["spec", "unschedulable"]).and_then(Value::as_bool) == Some(true) {
        status.push_str(",SchedulingDisabled");
    }
    json!(status)
}

fn node_roles(v: &Value) -> Value {
    let mut roles: Vec<String> = at(v, &["metadata", "labels"])
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(
                    |(k, val)| match k.strip_prefix("node-role.kubernetes.io/") {
                        Some(role) if !role.is_empty() => Some(role.to_string()),
                        Some(_) => None,
                        None if k == "kubernetes.io/role" => {
                            val.as_str().filter(|s| !s.is_empty()).map(str::to_string)
                        }
                        None => None,
                    },
                )
                .collect()
        })
        .unwrap_or_default();
    roles.sort();
    roles.dedup();
    or_none(roles)
}

fn node_address(v: &Value, typ: &str) -> Value {
    let addr = at(v, &["status", "addresses"])
        .and_then(Value::as_array)
        .and_then(|a| {
            a.iter()
                .find(|x| x.get("type").and_then(Value::as_str) == Some(typ))
        })
        .and_then(|x| x.get("address").and_then(Value::as_str));
    json!(addr.unwrap_or("<none>"))
}

fn service_cluster_ip(v: &Value) -> Value {
    let ip = at(v, &["spec", "clusterIPs"])
        .and_then(|a| a.get(0))
        .and_then(Value::as_str)
        .or_else(|| str_at(v, &["spec", "clusterIP"]));
    json!(ip.unwrap_or("<none>"))
}

fn service_external_ip(v: &Value) -> Value {
    let external = strings(at(v, &["spec", "externalIPs"]));
    match str_at(v, &["spec", "type"]).unwrap_or("ClusterIP") {
        "ClusterIP" | "NodePort" => or_none(external),
        "LoadBalancer" => {
            let mut ips: Vec<String> = at(v, &["status", "loadBalancer", "ingress"])
                .and_then(Value::as_array)
                .map(|ing| {
                    ing.iter()
                        .filter_map(|i| {
                            str_at(i, &["ip"])
                                .or_else(|| str_at(i, &["hostname"]))
                                .map(str::to_string)
                        })
                        .collect()
                })
                .unwrap_or_default();
            ips.extend(external);
            json!(if ips.is_empty() {
                "<pending>".to_string()
            } else {
                ips.join(",")
            })
        }
        "ExternalName" => text(v, &["spec", "externalName"], ""),
        _ => json!("<unknown>"),
    }
}

fn service_ports(v: &Value) -> Value {
    let ports: Vec<String> = at(v, &["spec", "ports"])
        .and_then(Value::as_array)
        .map(|ps| {
            ps.iter()
                .map(|p| {
                    let proto = p.get("protocol").and_then(Value::as_str).unwrap_or("TCP");
                    let port = int(p, &["port"]);
                    match int(p, &["nodePort"]) {
                        0 => format!("{port}/{proto}"),
                        np => format!("{port}:{np}/{proto}"),
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    or_none(ports)
}

/// A core/v1 Event field, or its events.k8s.io/v1 name (both kinds print alike in kube).
fn ev<'a>(v: &'a Value, core: &str, events_v1: &str) -> Option<&'a Value> {
    v.get(core)
        .filter(|x| !x.is_null())
        .or_else(|| v.get(events_v1).filter(|x| !x.is_null()))
}

fn ev_str<'a>(v: &'a Value, core: &str, events_v1: &str) -> &'a str {
    ev(v, core, events_v1).and_then(Value::as_str).unwrap_or("")
}

fn event_first_seen(v: &Value) -> String {
    match ev(v, "firstTimestamp", "deprecatedFirstTimestamp").and_then(Value::as_str) {
        Some(t) if !t.is_empty() => age_of(Some(t)),
        _ => age_of(v.get("eventTime").and_then(Value::as_str)),
    }
}

fn event_last_seen(v: &Value) -> Value {
    if let Some(t) = at(v, &["series", "lastObservedTime"]).and_then(Value::as_str) {
        return json!(age_of(Some(t)));
    }
    match ev(v, "lastTimestamp", "deprecatedLastTimestamp").and_then(Value::as_str) {
        Some(t) if !t.is_empty() => json!(age_of(Some(t))),
        _ => json!(event_first_seen(v)),
    }
}

fn event_object(v: &Value) -> Value {
    let o = ev(v, "involvedObject", "regarding");
    let kind = o
        .and_then(|o| o.get("kind"))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_lowercase();
    match o.and_then(|o| str_at(o, &["name"])) {
        Some(name) => json!(format!("{kind}/{name}")),
        None => json!(kind),
    }
}

fn event_source(v: &Value) -> Value {
    let src = ev(v, "source", "deprecatedSource");
    let pick = |field: &str, alt: &str, alt_v1: &str| -> String {
        src.and_then(|s| str_at(s, &[field]))
            .unwrap_or_else(|| ev_str(v, alt, alt_v1))
            .to_string()
    };
    let component = pick("component", "reportingComponent", "reportingController");
    let instance = pick("host", "reportingInstance", "reportingInstance");
    json!(match (component.is_empty(), instance.is_empty()) {
        (true, _) => String::new(),
        (false, true) => component,
        (false, false) => format!("{component}, {instance}"),
    })
}

fn event_count(v: &Value) -> Value {
    if let Some(n) = at(v, &["series", "count"]).and_then(Value::as_i64) {
        return json!(n);
    }
    match ev(v, "count", "deprecatedCount").and_then(Value::as_i64) {
        Some(n) if n != 0 => json!(n),
        // Singleton events of the new API carry no count.
        _ => json!(1),
    }
}

fn event_columns() -> Vec<Column> {
    vec![
        col("Last Seen", "string", event_last_seen),
        col("Type", "string", |v| json!(ev_str(v, "type", "type"))),
        col("Reason", "string", |v| json!(ev_str(v, "reason", "reason"))),
        col("Object", "string", event_object),
        wide("Subobject", "string", |v| {
            json!(ev(v, "involvedObject", "regarding")
                .and_then(|o| o.get("fieldPath"))
                .and_then(Value::as_str)
                .unwrap_or(""))
        }),
        wide("Source", "string", event_source),
        col("Message", "string", |v| {
            json!(ev_str(v, "message", "note").trim())
        }),
        wide("First Seen", "string", |v| json!(event_first_seen(v))),
        wide("Count", "string", event_count),
        Column {
            priority: 1,
            ..name_col()
        },
    ]
}

/// The columns of a built-in kind between NAME and AGE, then those after AGE.
fn builtin_columns(group: &str, plural: &str) -> Option<(Vec<Column>, Vec<Column>)> {
    let cols = match (group, plural) {
        ("", "namespaces") => (
            vec![col("Status", "string", |v| {
                text(v, &["status", "phase"], "")
            })],
            vec![],
        ),
        ("", "configmaps") => (
            vec![col("Data", "string", |v| {
                json!(count(v.get("data")) + count(v.get("binaryData")))
            })],
            vec![],
        ),
        ("", "secrets") => (
            vec![
                col("Type", "string", |v| text(v, &["type"], "")),
                col("Data", "string", |v| json!(count(v.get("data")))),
            ],
            vec![],
        ),
        ("", "serviceaccounts") => (
            vec![col("Secrets", "string", |v| json!(count(v.get("secrets"))))],
            vec![],
        ),
        ("", "pods") => pod_columns(),
        ("", "nodes") => node_columns(),
        ("", "services") => service_columns(),
        ("apps", "deployments") => (
            vec![
                col("Ready", "string", ready_of),
                col("Up-to-date", "string", |v| {
                    json!(int(v, &["status", "updatedReplicas"]))
                }),
                col("Available", "string", |v| {
                    json!(int(v, &["status", "availableReplicas"]))
                }),
            ],
            vec![
                wide("Containers", "string", containers),
                wide("Images", "string", images),
                wide("Selector", "string", match_labels),
            ],
        ),
        ("apps", "statefulsets") => (
            vec![col("Ready", "string", ready_of)],
            vec![
                wide("Containers", "string", containers),
                wide("Images", "string", images),
            ],
        ),
        ("apps", "replicasets") => (
            vec![
                col("Desired", "integer", |v| {
                    json!(at(v, &["spec", "replicas"])
                        .and_then(Value::as_i64)
                        .unwrap_or(1))
                }),
                col("Current", "integer", |v| {
                    json!(int(v, &["status", "replicas"]))
                }),
                col("Ready", "integer", |v| {
                    json!(int(v, &["status", "readyReplicas"]))
                }),
            ],
            vec![
                wide("Containers", "string", containers),
                wide("Images", "string", images),
                wide("Selector", "string", match_labels),
            ],
        ),
        ("batch", "jobs") => (
            vec![col("Completions", "string", |v| {
                json!(format!(
                    "{}/{}",
                    int(v, &["status", "succeeded"]),
                    at(v, &["spec", "completions"])
                        .and_then(Value::as_i64)
                        .unwrap_or(1)
                ))
            })],
            vec![],
        ),
        ("coordination.k8s.io", "leases") => (
            vec![col("Holder", "string", |v| {
                text(v, &["spec", "holderIdentity"], "")
            })],
            vec![],
        ),
        _ => return None,
    };
    Some(cols)
}

/// kubectl's Pod columns: READY, STATUS, RESTARTS; wide: IP, NODE, NOMINATED NODE, READINESS GATES.
fn pod_columns() -> (Vec<Column>, Vec<Column>) {
    (
        vec![
            col("Ready", "string", pod_ready),
            col("Status", "string", pod_status),
            col("Restarts", "string", pod_restarts),
        ],
        vec![
            wide("IP", "string", |v| text(v, &["status", "podIP"], "<none>")),
            wide("Node", "string", |v| {
                text(v, &["spec", "nodeName"], "<none>")
            }),
            wide("Nominated Node", "string", |v| {
                text(v, &["status", "nominatedNodeName"], "<none>")
            }),
            wide("Readiness Gates", "string", |v| {
                match count(at(v, &["spec", "readinessGates"])) {
                    0 => json!("<none>"),
                    n => json!(format!("0/{n}")),
                }
            }),
        ],
    )
}

/// kubectl's Node columns: STATUS, ROLES; after AGE: VERSION, and wide the addresses and node info.
fn node_columns() -> (Vec<Column>, Vec<Column>) {
    (
        vec![
            col("Status", "string", node_status),
            col("Roles", "string", node_roles),
        ],
        vec![
            col("Version", "string", |v| {
                text(v, &["status", "nodeInfo", "kubeletVersion"], "")
            }),
            wide("Internal-IP", "string", |v| node_address(v, "InternalIP")),
            wide("External-IP", "string", |v| node_address(v, "ExternalIP")),
            wide("OS-Image", "string", |v| {
                text(v, &["status", "nodeInfo", "osImage"], "<unknown>")
            }),
            wide("Kernel-Version", "string", |v| {
                text(v, &["status", "nodeInfo", "kernelVersion"], "<unknown>")
            }),
            wide("Container-Runtime", "string", |v| {
                text(
                    v,
                    &["status", "nodeInfo", "containerRuntimeVersion"],
                    "<unknown>",
                )
            }),
        ],
    )
}

/// kubectl's Service columns: TYPE, CLUSTER-IP, EXTERNAL-IP, PORT(S); wide: SELECTOR.
fn service_columns() -> (Vec<Column>, Vec<Column>) {
    (
        vec![
            col("Type", "string", |v| {
                text(v, &["spec", "type"], "ClusterIP")
            }),
            col("Cluster-IP", "string", service_cluster_ip),
            col("External-IP", "string", service_external_ip),
            col("Port(s)", "string", service_ports),
        ],
        vec![wide("Selector", "string", |v| {
            or_none(key_values(at(v, &["spec", "selector"])))
        })],
    )
}

/// The columns for `def` (`printer` = the CRD version's additionalPrinterColumns).
pub fn columns(def: &ResourceDef, printer: Option<Vec<Value>>) -> Vec<Column> {
    if def.custom {
        return crd_columns(printer.unwrap_or_default());
    }
    match (def.group.as_str(), def.plural.as_str()) {
        ("" | "events.k8s.io", "events") => event_columns(),
        // kube's default table convertor: the creation time itself, not an age.
        ("apiextensions.k8s.io", "customresourcedefinitions") => vec![
            name_col(),
            col("Created At", "date", |v| {
                json!(str_at(v, &["metadata", "creationTimestamp"])
                    .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                    .map(|t| t
                        .with_timezone(&chrono::Utc)
                        .format("%Y-%m-%dT%H:%M:%SZ")
                        .to_string())
                    .unwrap_or_default())
            }),
        ],
        (g, p) => {
            let (before, after) = builtin_columns(g, p).unwrap_or_default();
            let mut cols = vec![name_col()];
            cols.extend(before);
            cols.push(age_col());
            cols.extend(after);
            cols
        }
    }
}

/// apiextensions-apiserver: NAME, then each printer column (a CRD without any gets AGE).
fn crd_columns(printer: Vec<Value>) -> Vec<Column> {
    let printer = if printer.is_empty() {
        vec![json!({"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"})]
    } else {
        printer
    };
    let mut cols = vec![name_col()];
    for c in printer {
        let s = |k: &str| c.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        let path = s("jsonPath");
        let parsed = JsonPath::parse(&path);
        if let Err(e) = &parsed {
            tracing::debug!(column = %s("name"), path = %path, error = %e, "unparsable printer column");
        }
        cols.push(Column {
            name: s("name"),
            typ: s("type"),
            format: s("format"),
            priority: c.get("priority").and_then(Value::as_i64).unwrap_or(0),
            cell: Cell::Path(parsed.ok()),
        });
    }
    cols
}

/// tableconvertor's cellForJSONValue: the first value found, formatted for the column type.
fn crd_cell(path: &JsonPath, typ: &str, obj: &Value) -> Value {
    let Some(v) = path.find(obj).into_iter().next() else {
        return Value::Null;
    };
    match (typ, v) {
        (_, Value::Null) => Value::Null,
        // kube prints string columns through the JSONPath printer: any value becomes text.
        ("string", Value::String(s)) => json!(s),
        ("string", Value::Bool(_) | Value::Number(_)) => json!(v.to_string()),
        ("string", other) => json!(serde_json::to_string(other).unwrap_or_default()),
        ("integer", Value::Number(n)) => n
            .as_i64()
            .or_else(|| n.as_f64().map(|f| f as i64))
            .map_or(Value::Null, |i| json!(i)),
        ("number", Value::Number(n)) => n.as_f64().map_or(Value::Null, |f| json!(f)),
        ("boolean", Value::Bool(b)) => json!(b),
        ("date", Value::String(s)) => json!(date_cell(s)),
        _ => Value::Null,
    }
}

/// metav1.Time's UnmarshalQueryParameter then ConvertToHumanReadableDateType.
fn date_cell(s: &str) -> String {
    if s.is_empty() || s == "null" {
        return "<unknown>".into();
    }
    match chrono::DateTime::parse_from_rfc3339(s) {
        Ok(t) => human_duration((chrono::Utc::now() - t.with_timezone(&chrono::Utc)).num_seconds()),
        Err(_) => "<invalid>".into(),
    }
}

/// kube's duration.HumanDuration (`5s`, `3m20s`, `4h`, `12d`, `3y20d`).
pub fn human_duration(secs: i64) -> String {
    if secs < -1 {
        return "<invalid>".into();
    }
    let s = secs.max(0);
    let (m, h) = (s / 60, s / 3600);
    if s < 120 {
        format!("{s}s")
    } else if m < 10 {
        if s % 60 == 0 {
            format!("{m}m")
        } else {
            format!("{m}m{}s", s % 60)
        }
    } else if m < 180 {
        format!("{m}m")
    } else if h < 8 {
        if m % 60 == 0 {
            format!("{h}h")
        } else {
            format!("{h}h{}m", m % 60)
        }
    } else if h < 48 {
        format!("{h}h")
    } else if h < 24 * 8 {
        if h % 24 == 0 {
            format!("{}d", h / 24)
        } else {
            format!("{}d{}h", h / 24, h % 24)
        }
    } else if h < 24 * 365 * 2 {
        format!("{}d", h / 24)
    } else if h < 24 * 365 * 8 {
        let days = (h / 24) % 365;
        if days == 0 {
            format!("{}y", h / 24 / 365)
        } else {
            format!("{}y{days}d", h / 24 / 365)
        }
    } else {
        format!("{}y", h / 24 / 365)
    }
}

/// translateTimestampSince: `<unknown>` for a missing time.
fn age_of(ts: Option<&str>) -> String {
    match ts.and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok()) {
        Some(t) => {
            human_duration((chrono::Utc::now() - t.with_timezone(&chrono::Utc)).num_seconds())
        }
        None => "<unknown>".into(),
    }
}

fn cell(c: &Column, obj: &Value) -> Value {
    match &c.cell {
        Cell::Fixed(f) => f(obj),
        Cell::Path(Some(path)) => crd_cell(path, &c.typ, obj),
        Cell::Path(None) => Value::Null,
    }
}

/// A Table of `objs`. `headers` false omits columnDefinitions (watch events after the first).
pub fn render(cols: &[Column], objs: &[Value], list_meta: Value, headers: bool) -> Value {
    let defs: Vec<Value> = if headers {
        cols.iter()
            .map(|c| {
                json!({
                    "name": c.name,
                    "type": c.typ,
                    "format": c.format,
                    "description": "",
                    "priority": c.priority,
                })
            })
            .collect()
    } else {
        Vec::new()
    };
    let rows: Vec<Value> = objs
        .iter()
        .map(|o| {
            let cells: Vec<Value> = cols.iter().map(|c| cell(c, o)).collect();
            json!({
                "cells": cells,
                "object": {
                    "kind": "PartialObjectMetadata",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": o.get("metadata").cloned().unwrap_or(json!({})),
                }
            })
        })
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_meta,
        "columnDefinitions": defs,
        "rows": rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::builtins;

    fn def(group: &str, plural: &str) -> ResourceDef {
        builtins()
            .into_iter()
            .find(|d| d.group == group && d.plural == plural)
            .unwrap()
    }

    fn names(cols: &[Column]) -> Vec<(String, i64)> {
        cols.iter().map(|c| (c.name.clone(), c.priority)).collect()
    }

    fn ago(secs: i64) -> String {
        (chrono::Utc::now() - chrono::Duration::seconds(secs))
            .format("%Y-%m-%dT%H:%M:%SZ")
            .to_string()
    }

    #[test]
    fn durations() {
        assert_eq!(human_duration(-5), "<invalid>");
        assert_eq!(human_duration(-1), "0s");
        assert_eq!(human_duration(5), "5s");
        assert_eq!(human_duration(119), "119s");
        assert_eq!(human_duration(120), "2m");
        assert_eq!(human_duration(200), "3m20s");
        assert_eq!(human_duration(900), "15m");
        assert_eq!(human_duration(179 * 60), "179m");
        assert_eq!(human_duration(3 * 3600), "3h");
        assert_eq!(human_duration(3 * 3600 + 60), "3h1m");
        assert_eq!(human_duration(20 * 3600), "20h");
        assert_eq!(human_duration(3 * 86400), "3d");
        assert_eq!(human_duration(2 * 86400 + 3 * 3600), "2d3h");
        assert_eq!(human_duration(30 * 86400), "30d");
        assert_eq!(human_duration(365 * 2 * 86400), "2y");
        assert_eq!(human_duration((365 * 3 + 20) * 86400), "3y20d");
        assert_eq!(human_duration(365 * 9 * 86400 + 86400), "9y");
    }

    #[test]
    fn configmap_table() {
        let cols = columns(&def("", "configmaps"), None);
        let obj = json!({"metadata": {"name": "a", "creationTimestamp": "2020-01-01T00:00:00Z"}, "data": {"x": "1", "y": "2"}});
        let t = render(&cols, &[obj], json!({"resourceVersion": "5"}), true);
        assert_eq!(t["columnDefinitions"][0]["name"], "Name");
        assert_eq!(t["columnDefinitions"][0]["format"], "name");
        assert_eq!(t["columnDefinitions"][1]["name"], "Data");
        assert_eq!(t["rows"][0]["cells"][0], "a");
        assert_eq!(t["rows"][0]["cells"][1], 2);
        assert_eq!(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");
        let t = render(&cols, &[], json!({}), false);
        assert_eq!(t["columnDefinitions"], json!([]));
    }

    #[test]
    fn crd_printer_columns() {
        let printer = vec![
            json!({"name": "Synced", "type": "string",
                   "jsonPath": ".status.conditions[?(@.type==\"ClustersSynced\")].status"}),
            json!({"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas"}),
            json!({"name": "Ratio", "type": "number", "jsonPath": ".spec.ratio"}),
            json!({"name": "Paused", "type": "boolean", "jsonPath": ".spec.paused"}),
            json!({"name": "Ports", "type": "string", "jsonPath": ".spec.ports[*]"}),
            json!({"name": "Zone", "type": "string", "priority": 1,
                   "jsonPath": ".metadata.labels['fleetbus.io/zone']"}),
            json!({"name": "Seen", "type": "date", "jsonPath": ".status.seen"}),
            json!({"name": "Bad", "type": "string", "jsonPath": ".status.conditions[?(@.type=="}),
            json!({"name": "Missing", "type": "string", "jsonPath": ".status.nothing"}),
            json!({"name": "Mistyped", "type": "integer", "jsonPath": ".spec.paused"}),
            json!({"name": "NumText", "type": "string", "jsonPath": ".spec.replicas"}),
            json!({"name": "BadDate", "type": "date", "jsonPath": ".spec.name"}),
        ];
        let mut d = def("", "configmaps");
        d.custom = true;
        let cols = columns(&d, Some(printer));
        let obj = json!({
            "metadata": {"name": "c1", "labels": {"fleetbus.io/zone": "z1"}},
            "spec": {"replicas": 3.0, "ratio": 2, "paused": true, "name": "x",
                     "ports": [{"port": 80}, {"port": 81}]},
            "status": {"seen": ago(5 * 60), "conditions": [
                {"type": "Ready", "status": "False"},
                {"type": "ClustersSynced", "status": "True"}]}
        });
        let t = render(&cols, &[obj], json!({}), true);
        let cells = &t["rows"][0]["cells"];
        assert_eq!(
            cells,
            &json!([
                "c1",
                "True",
                3,
                2.0,
                true,
                "{\"port\":80}",
                "z1",
                "5m",
                null,
                null,
                null,
                "3.0",
                "<invalid>"
            ])
        );
        assert_eq!(t["columnDefinitions"][6]["priority"], 1);
        assert_eq!(t["columnDefinitions"][7]["type"], "date");
        assert_eq!(t["columnDefinitions"][0]["format"], "name");
        // No printer columns: NAME and AGE, as kube's default.
        let cols = columns(&d, Some(vec![]));
        assert_eq!(names(&cols), [("Name".into(), 0), ("Age".into(), 0)]);
    }

    #[test]
    fn event_tables_match_kube() {
        let want: Vec<(String, i64)> = [
            ("Last Seen", 0),
            ("Type", 0),
            ("Reason", 0),
            ("Object", 0),
            ("Subobject", 1),
            ("Source", 1),
            ("Message", 0),
            ("First Seen", 1),
            ("Count", 1),
            ("Name", 1),
        ]
        .iter()
        .map(|(n, p)| (n.to_string(), *p))
        .collect();
        let core = columns(&def("", "events"), None);
        assert_eq!(names(&core), want);
        let v1 = columns(&def("events.k8s.io", "events"), None);
        assert_eq!(names(&v1), want);
        let core_ev = json!({
            "metadata": {"name": "e1"}, "type": "Warning", "reason": "Failed",
            "involvedObject": {"kind": "Pod", "name": "web-1", "fieldPath": "spec.containers{app}"},
            "message": "  boom \n", "source": {"component": "kubelet", "host": "n1"},
            "firstTimestamp": ago(3600), "lastTimestamp": ago(30), "count": 4
        });
        let t = render(&core, &[core_ev], json!({}), true);
        assert_eq!(
            t["rows"][0]["cells"],
            json!([
                "30s",
                "Warning",
                "Failed",
                "pod/web-1",
                "spec.containers{app}",
                "kubelet, n1",
                "boom",
                "60m",
                4,
                "e1"
            ])
        );
        let new_ev = json!({
            "metadata": {"name": "e2"}, "type": "Normal", "reason": "Synced",
            "regarding": {"kind": "Cluster"}, "note": "ok",
            "reportingController": "fleetbus",
            // One second more: the fraction must not make it younger than 3d.
            "eventTime": ago(3 * 86400 + 1).replace('Z', ".123456Z")
        });
        let t = render(&v1, &[new_ev], json!({}), true);
        let cells = &t["rows"][0]["cells"];
        assert_eq!(cells[3], "cluster");
        assert_eq!(cells[5], "fleetbus");
        assert_eq!(cells[6], "ok");
        assert_eq!(cells[8], 1);
        assert_eq!(cells[0], "3d");
        assert_eq!(cells[7], "3d");
    }

    #[test]
    fn builtin_column_sets() {
        let cases: &[(&str, &str, &[&str])] = &[
            ("", "namespaces", &["Name", "Status", "Age"]),
            ("", "secrets", &["Name", "Type", "Data", "Age"]),
            (
                "",
                "pods",
                &[
                    "Name",
                    "Ready",
                    "Status",
                    "Restarts",
                    "Age",
                    "IP",
                    "Node",
                    "Nominated Node",
                    "Readiness Gates",
                ],
            ),
            (
                "",
                "nodes",
                &[
                    "Name",
                    "Status",
                    "Roles",
                    "Age",
                    "Version",
                    "Internal-IP",
                    "External-IP",
                    "OS-Image",
                    "Kernel-Version",
                    "Container-Runtime",
                ],
            ),
            (
                "",
                "services",
                &[
                    "Name",
                    "Type",
                    "Cluster-IP",
                    "External-IP",
                    "Port(s)",
                    "Age",
                    "Selector",
                ],
            ),
            (
                "apps",
                "deployments",
                &[
                    "Name",
                    "Ready",
                    "Up-to-date",
                    "Available",
                    "Age",
                    "Containers",
                    "Images",
                    "Selector",
                ],
            ),
            ("coordination.k8s.io", "leases", &["Name", "Holder", "Age"]),
            (
                "apiextensions.k8s.io",
                "customresourcedefinitions",
                &["Name", "Created At"],
            ),
        ];
        for (g, p, want) in cases {
            let got: Vec<String> = columns(&def(g, p), None)
                .iter()
                .map(|c| c.name.clone())
                .collect();
            assert_eq!(&got, want, "{g}/{p}");
        }
    }

    #[test]
    fn builtin_cells() {
        let node = json!({"metadata": {"name": "n1", "labels": {
                "node-role.kubernetes.io/control-plane": "", "kubernetes.io/role": "edge"}},
            "spec": {"unschedulable": true},
            "status": {"conditions": [{"type": "Ready", "status": "True"}],
                       "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
                       "nodeInfo": {"kubeletVersion": "v1.33.0"}}});
        let t = render(&columns(&def("", "nodes"), None), &[node], json!({}), true);
        let c = &t["rows"][0]["cells"];
        assert_eq!(c[1], "Ready,SchedulingDisabled");
        assert_eq!(c[2], "control-plane,edge");
        assert_eq!(c[4], "v1.33.0");
        assert_eq!(c[5], "10.0.0.1");
        assert_eq!(c[6], "<none>");
        assert_eq!(c[7], "<unknown>");
        let svc = json!({"metadata": {"name": "s"}, "spec": {"type": "LoadBalancer",
            "clusterIPs": ["10.96.0.5"], "ports": [{"port": 80, "nodePort": 30080, "protocol": "TCP"},
            {"port": 53, "protocol": "UDP"}], "selector": {"b": "2", "a": "1"}}});
        let t = render(
            &columns(&def("", "services"), None),
            &[svc],
            json!({}),
            true,
        );
        let c = &t["rows"][0]["cells"];
        assert_eq!(c[2], "10.96.0.5");
        assert_eq!(c[3], "<pending>");
        assert_eq!(c[4], "80:30080/TCP,53/UDP");
        assert_eq!(c[6], "a=1,b=2");
        let pod = json!({"metadata": {"name": "p"}, "spec": {"containers": [{}, {}]},
            "status": {"phase": "Running", "containerStatuses": [
                {"ready": true, "restartCount": 2, "state": {"running": {}}},
                {"ready": false, "restartCount": 1, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}});
        let t = render(&columns(&def("", "pods"), None), &[pod], json!({}), true);
        let c = &t["rows"][0]["cells"];
        assert_eq!(c[1], "1/2");
        assert_eq!(c[2], "CrashLoopBackOff");
        assert_eq!(c[3], "3");
        assert_eq!(c[5], "<none>");
        let lease = json!({"metadata": {"name": "l"}, "spec": {"holderIdentity": "agent-0"}});
        let t = render(
            &columns(&def("coordination.k8s.io", "leases"), None),
            &[lease],
            json!({}),
            true,
        );
        assert_eq!(t["rows"][0]["cells"][1], "agent-0");
    }
}
