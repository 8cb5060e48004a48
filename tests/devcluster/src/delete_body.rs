//! DELETE request bodies: `DeleteOptions` as JSON or Kubernetes protobuf, or none.
//!
//! client-go >= 0.32 typed clients (helm v4, kubectl's typed paths, controllers)
//! send DeleteOptions as protobuf: `k8s\0` + a `runtime.Unknown` envelope
//! (kind `DeleteOptions`) around `meta.v1.DeleteOptions`. kubectl sends JSON,
//! the Python client nothing. Anything that does not decode as DeleteOptions is
//! a 400 and deletes nothing (kube's `DeleteResource` handler decodes the body
//! before it touches storage).

use crate::decode::go_json_type;
use crate::delete::DeleteOpts;
use crate::deletion::Propagation;
use crate::proto;
use crate::status::ApiError;
use k8s_pb::apimachinery::pkg::apis::meta::v1::DeleteOptions;
use k8s_pb::apimachinery::pkg::runtime::Unknown;
use prost::Message;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;

/// The body as DeleteOptions JSON (`{}` when empty).
pub fn decode(body: &[u8], content_type: &str) -> Result<Value, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(json!({}));
    }
    if proto::is_protobuf(body) || content_type == proto::CONTENT_TYPE {
        return decode_protobuf(body);
    }
    crate::limits::scan_json(body, crate::limits::MAX_DEPTH).map_err(|e| {
        ApiError::bad_request(format!("couldn't get version/kind; json parse error: {e}"))
    })?;
    let v: Value = serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(format!("couldn't get version/kind; json parse error: {e}"))
    })?;
    let Value::Object(m) = v else {
        // Go's decoder reads the TypeMeta out of the body first.
        return Err(ApiError::bad_request(format!(
            "couldn't get version/kind; json parse error: json: cannot unmarshal {} into Go value of type struct {{ APIVersion string \"json:\\\"apiVersion,omitempty\\\"\"; Kind string \"json:\\\"kind,omitempty\\\"\" }}",
            go_json_type(&v)
        )));
    };
    check_kind(m.get("kind").and_then(Value::as_str))?;
    check_types(&m)?;
    Ok(Value::Object(m))
}

fn check_kind(kind: Option<&str>) -> Result<(), ApiError> {
    match kind {
        None | Some("") | Some("DeleteOptions") => Ok(()),
        Some(other) => Err(ApiError::bad_request(format!(
            "the body of a DELETE must be a DeleteOptions, not a {other}"
        ))),
    }
}

/// Field types as Go's decoder enforces them on `metav1.DeleteOptions`.
fn check_types(m: &Map<String, Value>) -> Result<(), ApiError> {
    let wrong = |field: &str, v: &Value, want: &str| {
        ApiError::bad_request(format!(
            "json: cannot unmarshal {} into Go struct field DeleteOptions.{field} of type {want}",
            go_json_type(v)
        ))
    };
    for (field, v) in m {
        let ok = match field.as_str() {
            "propagationPolicy" | "kind" | "apiVersion" => v.is_string() || v.is_null(),
            "orphanDependents" | "ignoreStoreReadErrorWithClusterBreakingPotential" => {
                v.is_boolean() || v.is_null()
            }
            "gracePeriodSeconds" => v.is_i64() || v.is_null(),
            "dryRun" => v.is_null() || v.as_array().is_some_and(|a| a.iter().all(Value::is_string)),
            "preconditions" => match v {
                Value::Null => true,
                Value::Object(p) => {
                    for (k, pv) in p {
                        if matches!(k.as_str(), "uid" | "resourceVersion")
                            && !(pv.is_string() || pv.is_null())
                        {
                            return Err(wrong(&format!("preconditions.{k}"), pv, "string"));
                        }
                    }
                    true
                }
                _ => false,
            },
            // Unknown fields are dropped by kube's decoder.
            _ => true,
        };
        if !ok {
            let want = match field.as_str() {
                "orphanDependents" | "ignoreStoreReadErrorWithClusterBreakingPotential" => "bool",
                "gracePeriodSeconds" => "int64",
                "dryRun" => "[]string",
                "preconditions" => "v1.Preconditions",
                _ => "string",
            };
            return Err(wrong(field, v, want));
        }
    }
    Ok(())
}

fn decode_protobuf(body: &[u8]) -> Result<Value, ApiError> {
    let bad = |what: &str, e: &dyn std::fmt::Display| {
        ApiError::bad_request(format!(
            "failed to decode the protobuf DeleteOptions ({what}): {e}"
        ))
    };
    let rest = body
        .strip_prefix(proto::MAGIC)
        .ok_or_else(|| bad("magic", &"the body does not start with \"k8s\\0\""))?;
    let envelope = Unknown::decode(rest).map_err(|e| bad("envelope", &e))?;
    if let Some(enc) = envelope
        .content_encoding
        .as_deref()
        .filter(|e| !e.is_empty())
    {
        return Err(ApiError::unsupported_media_type(format!(
            "unsupported protobuf contentEncoding {enc:?}"
        )));
    }
    let kind = envelope.type_meta.as_ref().and_then(|t| t.kind.as_deref());
    check_kind(kind)?;
    let opts = DeleteOptions::decode(envelope.raw.as_deref().unwrap_or_default())
        .map_err(|e| bad("DeleteOptions", &e))?;
    let mut out = Map::new();
    if let Some(p) = opts.propagation_policy {
        out.insert("propagationPolicy".into(), json!(p));
    }
    if let Some(o) = opts.orphan_dependents {
        out.insert("orphanDependents".into(), json!(o));
    }
    if let Some(g) = opts.grace_period_seconds {
        out.insert("gracePeriodSeconds".into(), json!(g));
    }
    if !opts.dry_run.is_empty() {
        out.insert("dryRun".into(), json!(opts.dry_run));
    }
    if let Some(p) = opts.preconditions {
        let mut pre = Map::new();
        if let Some(uid) = p.uid {
            pre.insert("uid".into(), json!(uid));
        }
        if let Some(rv) = p.resource_version {
            pre.insert("resourceVersion".into(), json!(rv));
        }
        out.insert("preconditions".into(), Value::Object(pre));
    }
    Ok(Value::Object(out))
}

/// DeleteOptions from a decoded body and the query string (the body wins).
pub fn options(query: &BTreeMap<String, String>, v: &Value) -> Result<DeleteOpts, ApiError> {
    let q = |k: &str| query.get(k).map(String::as_str);
    let mut opts = DeleteOpts::default();
    let policy = v
        .get("propagationPolicy")
        .and_then(Value::as_str)
        .or(q("propagationPolicy"));
    if let Some(p) = policy.filter(|p| !p.is_empty()) {
        opts.propagation = Propagation::parse(p)?;
    }
    let orphan = v
        .get("orphanDependents")
        .and_then(Value::as_bool)
        .or_else(|| q("orphanDependents").map(|o| o == "true"));
    if orphan == Some(true) {
        opts.propagation = Propagation::Orphan;
    }
    let pre = v.get("preconditions");
    opts.uid = pre
        .and_then(|p| p.get("uid"))
        .and_then(Value::as_str)
        .map(str::to_string);
    opts.resource_version = pre
        .and_then(|p| p.get("resourceVersion"))
        .and_then(Value::as_str)
        .map(str::to_string);
    Ok(opts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_pb::apimachinery::pkg::apis::meta::v1::Preconditions;
    use k8s_pb::apimachinery::pkg::runtime::TypeMeta;

    /// What client-go's protobuf serializer writes for a DeleteOptions body.
    pub fn protobuf_body(opts: &DeleteOptions, api_version: &str) -> Vec<u8> {
        let env = Unknown {
            type_meta: Some(TypeMeta {
                api_version: Some(api_version.into()),
                kind: Some("DeleteOptions".into()),
            }),
            raw: Some(opts.encode_to_vec()),
            content_encoding: Some(String::new()),
            content_type: Some(String::new()),
        };
        let mut out = proto::MAGIC.to_vec();
        out.extend(env.encode_to_vec());
        out
    }

    #[test]
    fn protobuf_delete_options() {
        let opts = DeleteOptions {
            propagation_policy: Some("Foreground".into()),
            preconditions: Some(Preconditions {
                uid: Some("u".into()),
                resource_version: None,
            }),
            ..Default::default()
        };
        let v = decode(
            &protobuf_body(&opts, "v1"),
            "application/vnd.kubernetes.protobuf",
        )
        .unwrap();
        assert_eq!(
            v,
            json!({"propagationPolicy": "Foreground", "preconditions": {"uid": "u"}})
        );
        let o = options(&BTreeMap::new(), &v).unwrap();
        assert_eq!(o.propagation, Propagation::Foreground);
        assert_eq!(o.uid.as_deref(), Some("u"));
    }

    #[test]
    fn bodies_that_are_not_delete_options() {
        for body in [
            &b"5"[..],
            b"\"x\"",
            b"[]",
            b"{",
            b"{\"kind\":\"ConfigMap\"}",
            b"{\"propagationPolicy\":5}",
            b"{\"preconditions\":{\"uid\":1}}",
        ] {
            let e = decode(body, "application/json").unwrap_err();
            assert_eq!(e.code, 400, "{}", String::from_utf8_lossy(body));
        }
        assert_eq!(decode(b"", "application/json").unwrap(), json!({}));
        assert_eq!(decode(b" \n", "").unwrap(), json!({}));
        assert!(decode(
            b"{\"kind\":\"DeleteOptions\",\"apiVersion\":\"v1\"}",
            "application/json"
        )
        .is_ok());
    }
}
