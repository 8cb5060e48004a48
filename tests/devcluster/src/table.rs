//! meta.k8s.io/v1 Table rendering (what `kubectl get` prints).

use crate::resources::ResourceDef;
use serde_json::{json, Value};

/// How a column's cell is computed.
#[derive(Debug, Clone)]
enum Cell {
    Name,
    Age,
    /// A simple `.a.b` JSONPath (CRD additionalPrinterColumns).
    Path(String, String),
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

fn col(name: &str, typ: &str, cell: Cell) -> Column {
    Column {
        name: name.into(),
        typ: typ.into(),
        format: String::new(),
        priority: 0,
        cell,
    }
}

fn at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Value> {
    let mut cur = v;
    for p in path {
        cur = cur.get(*p)?;
    }
    Some(cur)
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
    json!(at(v, path).and_then(Value::as_str).unwrap_or(default))
}

fn node_status(v: &Value) -> Value {
    let ready = at(v, &["status", "conditions"])
        .and_then(Value::as_array)
        .and_then(|cs| {
            cs.iter()
                .find(|c| c.get("type").and_then(Value::as_str) == Some("Ready"))
        })
        .and_then(|c| c.get("status").and_then(Value::as_str))
        == Some("True");
    json!(if ready { "Ready" } else { "NotReady" })
}

fn service_ports(v: &Value) -> Value {
    let ports: Vec<String> = at(v, &["spec", "ports"])
        .and_then(Value::as_array)
        .map(|ps| {
            ps.iter()
                .map(|p| {
                    format!(
                        "{}/{}",
                        p.get("port").and_then(Value::as_i64).unwrap_or(0),
                        p.get("protocol").and_then(Value::as_str).unwrap_or("TCP")
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    json!(if ports.is_empty() {
        "<none>".to_string()
    } else {
        ports.join(",")
    })
}

/// The columns for `def` (`printer` = the CRD version's additionalPrinterColumns).
pub fn columns(def: &ResourceDef, printer: Option<Vec<Value>>) -> Vec<Column> {
    let name = col("Name", "string", Cell::Name);
    let age = col("Age", "string", Cell::Age);
    let mut cols = vec![name];
    if def.custom {
        match printer.filter(|p| !p.is_empty()) {
            Some(p) => {
                for c in p {
                    let s = |k: &str| c.get(k).and_then(Value::as_str).unwrap_or("").to_string();
                    cols.push(Column {
                        name: s("name"),
                        typ: s("type"),
                        format: s("format"),
                        priority: c.get("priority").and_then(Value::as_i64).unwrap_or(0),
                        cell: Cell::Path(s("jsonPath"), s("type")),
                    });
                }
            }
            None => cols.push(age),
        }
        return cols;
    }
    let extra: Vec<Column> = match (def.group.as_str(), def.plural.as_str()) {
        ("", "namespaces") => vec![col(
            "Status",
            "string",
            Cell::Fixed(|v| text(v, &["status", "phase"], "")),
        )],
        ("", "configmaps") => vec![col(
            "Data",
            "string",
            Cell::Fixed(|v| json!(count(v.get("data")) + count(v.get("binaryData")))),
        )],
        ("", "secrets") => vec![
            col("Type", "string", Cell::Fixed(|v| text(v, &["type"], ""))),
            col(
                "Data",
                "string",
                Cell::Fixed(|v| json!(count(v.get("data")))),
            ),
        ],
        ("", "serviceaccounts") => vec![col(
            "Secrets",
            "string",
            Cell::Fixed(|v| json!(count(v.get("secrets")))),
        )],
        ("", "pods") => vec![
            col(
                "Ready",
                "string",
                Cell::Fixed(|v| json!(format!("0/{}", count(at(v, &["spec", "containers"]))))),
            ),
            col(
                "Status",
                "string",
                Cell::Fixed(|v| text(v, &["status", "phase"], "Pending")),
            ),
            col("Restarts", "string", Cell::Fixed(|_| json!("0"))),
        ],
        ("", "nodes") => vec![
            col("Status", "string", Cell::Fixed(node_status)),
            col("Roles", "string", Cell::Fixed(|_| json!("<none>"))),
        ],
        ("", "services") => vec![
            col(
                "Type",
                "string",
                Cell::Fixed(|v| text(v, &["spec", "type"], "ClusterIP")),
            ),
            col(
                "Cluster-IP",
                "string",
                Cell::Fixed(|v| text(v, &["spec", "clusterIP"], "<none>")),
            ),
            col("External-IP", "string", Cell::Fixed(|_| json!("<none>"))),
            col("Port(s)", "string", Cell::Fixed(service_ports)),
        ],
        ("apps", "deployments") => vec![
            col(
                "Ready",
                "string",
                Cell::Fixed(|v| {
                    json!(format!(
                        "{}/{}",
                        int(v, &["status", "readyReplicas"]),
                        at(v, &["spec", "replicas"])
                            .and_then(Value::as_i64)
                            .unwrap_or(1)
                    ))
                }),
            ),
            col(
                "Up-to-date",
                "integer",
                Cell::Fixed(|v| json!(int(v, &["status", "updatedReplicas"]))),
            ),
            col(
                "Available",
                "integer",
                Cell::Fixed(|v| json!(int(v, &["status", "availableReplicas"]))),
            ),
        ],
        ("apps", "statefulsets") | ("apps", "replicasets") => vec![col(
            "Ready",
            "string",
            Cell::Fixed(|v| {
                json!(format!(
                    "{}/{}",
                    int(v, &["status", "readyReplicas"]),
                    at(v, &["spec", "replicas"])
                        .and_then(Value::as_i64)
                        .unwrap_or(1)
                ))
            }),
        )],
        ("batch", "jobs") => vec![col(
            "Completions",
            "string",
            Cell::Fixed(|v| {
                json!(format!(
                    "{}/{}",
                    int(v, &["status", "succeeded"]),
                    at(v, &["spec", "completions"])
                        .and_then(Value::as_i64)
                        .unwrap_or(1)
                ))
            }),
        )],
        ("apiextensions.k8s.io", "customresourcedefinitions") => {
            return vec![
                col("Name", "string", Cell::Name),
                Column {
                    name: "Created At".into(),
                    typ: "date".into(),
                    format: String::new(),
                    priority: 0,
                    cell: Cell::Path(".metadata.creationTimestamp".into(), "string".into()),
                },
            ]
        }
        _ => vec![],
    };
    cols.extend(extra);
    cols.push(age);
    if def.group.is_empty() && def.plural == "nodes" {
        cols.push(col(
            "Version",
            "string",
            Cell::Fixed(|v| text(v, &["status", "nodeInfo", "kubeletVersion"], "")),
        ));
    }
    cols
}

/// kube's HumanDuration (`5s`, `3m20s`, `4h`, `12d`).
pub fn human_duration(secs: i64) -> String {
    if secs < -1 {
        return "<invalid>".into();
    }
    let s = secs.max(0);
    let (m, h, d) = (s / 60, s / 3600, s / 86400);
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
            format!("{d}d")
        } else {
            format!("{d}d{}h", h % 24)
        }
    } else if h < 24 * 365 * 2 {
        format!("{d}d")
    } else {
        format!("{}y", d / 365)
    }
}

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
        Cell::Name => json!(obj
            .get("metadata")
            .and_then(|m| m.get("name"))
            .and_then(Value::as_str)
            .unwrap_or("")),
        Cell::Age => json!(age_of(
            obj.get("metadata")
                .and_then(|m| m.get("creationTimestamp"))
                .and_then(Value::as_str)
        )),
        Cell::Fixed(f) => f(obj),
        Cell::Path(path, typ) => {
            let segs: Vec<&str> = path
                .trim_start_matches('.')
                .split('.')
                .filter(|s| !s.is_empty())
                .collect();
            match at(obj, &segs) {
                None | Some(Value::Null) => Value::Null,
                Some(Value::String(s)) if c.typ == "date" || typ == "date" => {
                    json!(age_of(Some(s)))
                }
                Some(v @ (Value::String(_) | Value::Number(_) | Value::Bool(_))) => v.clone(),
                Some(v) => json!(v.to_string()),
            }
        }
    }
}

/// A Table of `objs`. `headers` false omits columnDefinitions (watch events after the first).
pub fn render(cols: &[Column], objs: &[Value], list_meta: Value, headers: bool) -> Value {
    let defs: Vec<Value> = if headers {
        cols.iter()
            .map(|c| {
                json!({
                    "name": c.name,
                    "type": if c.typ == "date" { "string" } else { c.typ.as_str() },
                    "format": if c.name == "Name" { "name" } else { c.format.as_str() },
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

    #[test]
    fn durations() {
        assert_eq!(human_duration(5), "5s");
        assert_eq!(human_duration(200), "3m20s");
        assert_eq!(human_duration(900), "15m");
        assert_eq!(human_duration(3 * 3600 + 60), "3h1m");
        assert_eq!(human_duration(20 * 3600), "20h");
        assert_eq!(human_duration(3 * 86400), "3d");
    }

    #[test]
    fn configmap_table() {
        let defs = builtins();
        let cm = defs.iter().find(|d| d.plural == "configmaps").unwrap();
        let cols = columns(cm, None);
        let obj = json!({"metadata": {"name": "a", "creationTimestamp": "2020-01-01T00:00:00Z"}, "data": {"x": "1", "y": "2"}});
        let t = render(&cols, &[obj], json!({"resourceVersion": "5"}), true);
        assert_eq!(t["columnDefinitions"][0]["name"], "Name");
        assert_eq!(t["columnDefinitions"][1]["name"], "Data");
        assert_eq!(t["rows"][0]["cells"][0], "a");
        assert_eq!(t["rows"][0]["cells"][1], 2);
        assert_eq!(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");
        let t = render(&cols, &[], json!({}), false);
        assert_eq!(t["columnDefinitions"], json!([]));
    }
}
