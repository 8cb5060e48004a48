//! Subresources: /status, CSR /approval, pods/ephemeralcontainers, /scale (autoscaling/v1 Scale), serviceaccounts/token, namespaces/finalize.

use super::request::{self, Query};
use super::resource::{patch_type, write_ctx, write_response};
use super::AppState;
use crate::body::{json_response, read_body};
use crate::meta::{self, meta_mut, meta_str};
use crate::patch::{self, PatchType};
use crate::resources::ResourceDef;
use crate::status::ApiError;
use crate::watch::present;
use crate::write::{self, key_for, WriteOutcome};
use axum::body::Body;
use http::{HeaderMap, Method, Response};
use serde_json::{json, Value};

/// Dispatches `/{plural}/{name}/{sub}`.
#[allow(clippy::too_many_arguments)]
pub async fn handle(
    state: &AppState,
    def: &ResourceDef,
    ns: Option<&str>,
    name: &str,
    sub: &str,
    method: &Method,
    q: &Query,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response<Body>, ApiError> {
    let is_ns = def.group.is_empty() && def.plural == "namespaces";
    match sub {
        "status" if def.subresources.status => {
            status(state, def, ns, name, method, q, headers, body, "status").await
        }
        // Both behave like /status on another part of the object (see
        // write::prepare_update): GET shows the whole object.
        "approval" if def.has_approval() => {
            status(state, def, ns, name, method, q, headers, body, "approval").await
        }
        "ephemeralcontainers" if def.has_ephemeral_containers() => {
            status(
                state,
                def,
                ns,
                name,
                method,
                q,
                headers,
                body,
                "ephemeralcontainers",
            )
            .await
        }
        "scale" if def.subresources.scale => {
            scale(state, def, ns, name, method, q, headers, body).await
        }
        "token" if def.subresources.token => {
            if method != Method::POST {
                return Err(ApiError::method_not_allowed(method.as_str()));
            }
            let bytes = read_body(body, headers).await?;
            token(state, def, ns, name, &bytes, q)
        }
        "finalize" if is_ns => {
            if method != Method::PUT {
                return Err(ApiError::method_not_allowed(method.as_str()));
            }
            let bytes = read_body(body, headers).await?;
            let obj = request::decode_object_blocking(bytes, headers).await?;
            finalize(state, def, name, obj, q)
        }
        _ => Err(ApiError::path_not_found()),
    }
}

#[allow(clippy::too_many_arguments)]
async fn status(
    state: &AppState,
    def: &ResourceDef,
    ns: Option<&str>,
    name: &str,
    method: &Method,
    q: &Query,
    headers: &HeaderMap,
    body: Body,
    sub: &str,
) -> Result<Response<Body>, ApiError> {
    match *method {
        Method::GET => {
            let key = key_for(def, ns, name);
            let obj = state
                .store
                .read(|i| i.objects.get(&key).cloned())
                .ok_or_else(|| ApiError::not_found(def, name))?;
            Ok(json_response(200, &present(def, obj)))
        }
        Method::PUT => {
            let bytes = read_body(body, headers).await?;
            let obj = request::decode_object_blocking(bytes, headers).await?;
            let ctx = write_ctx(q, headers)?;
            let out = state.store.write(q.dry_run()?, |tx| {
                write::update(tx, def, ns, name, obj, Some(sub), &ctx)
            })?;
            Ok(write_response(def, out))
        }
        Method::PATCH => {
            let pt = patch_type(headers)?;
            let bytes = read_body(body, headers).await?;
            let ctx = write_ctx(q, headers)?;
            let parsed =
                request::decode_blocking(bytes, move |b| write::parse_patch_body(pt, b)).await?;
            let out = state.store.write(q.dry_run()?, |tx| {
                write::patch_parsed(tx, def, ns, name, pt, parsed, Some(sub), &ctx)
            })?;
            Ok(write_response(def, out))
        }
        _ => Err(ApiError::method_not_allowed(method.as_str())),
    }
}

/// The autoscaling/v1 Scale view of a scalable object.
fn to_scale(obj: &Value) -> Value {
    let selector = obj
        .get("spec")
        .and_then(|s| s.get("selector"))
        .and_then(|s| s.get("matchLabels"))
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default();
    let mut metadata = json!({});
    for k in [
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "creationTimestamp",
    ] {
        if let Some(v) = obj.get("metadata").and_then(|m| m.get(k)) {
            metadata[k] = v.clone();
        }
    }
    let mut status = json!({
        "replicas": obj.get("status").and_then(|s| s.get("replicas")).and_then(Value::as_i64).unwrap_or(0),
    });
    // ScaleStatus.selector is `omitempty`.
    if !selector.is_empty() {
        status["selector"] = json!(selector);
    }
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": metadata,
        "spec": {"replicas": obj.get("spec").and_then(|s| s.get("replicas")).and_then(Value::as_i64).unwrap_or(1)},
        "status": status,
    })
}

#[allow(clippy::too_many_arguments)]
async fn scale(
    state: &AppState,
    def: &ResourceDef,
    ns: Option<&str>,
    name: &str,
    method: &Method,
    q: &Query,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response<Body>, ApiError> {
    let key = key_for(def, ns, name);
    if *method == Method::GET {
        let obj = state
            .store
            .read(|i| i.objects.get(&key).cloned())
            .ok_or_else(|| ApiError::not_found(def, name))?;
        return Ok(json_response(200, &to_scale(&obj)));
    }
    let pt = match *method {
        Method::PUT => None,
        Method::PATCH => Some(patch_type(headers)?),
        _ => return Err(ApiError::method_not_allowed(method.as_str())),
    };
    if pt == Some(PatchType::Apply) {
        return Err(ApiError::unsupported_media_type(
            "apply patches are not supported on /scale by fleetbus-devcluster",
        ));
    }
    let bytes = read_body(body, headers).await?;
    let ctx = write_ctx(q, headers)?;
    let out = state.store.write(q.dry_run()?, |tx| {
        let old = tx
            .get(&key)
            .cloned()
            .ok_or_else(|| ApiError::not_found(def, name))?;
        let current = to_scale(&old);
        let wanted = match pt {
            None => request::decode_object(&bytes, headers)?,
            Some(pt) => patch::apply_patch(pt, &current, &bytes, def)?,
        };
        if let Some(rv) = meta_str(&wanted, "resourceVersion") {
            if !rv.is_empty() && Some(rv) != meta_str(&old, "resourceVersion") {
                return Err(ApiError::conflict(def, name));
            }
        }
        let replicas = wanted
            .get("spec")
            .and_then(|s| s.get("replicas"))
            .and_then(Value::as_i64)
            .filter(|r| *r >= 0)
            .ok_or_else(|| {
                ApiError::invalid(
                    "autoscaling",
                    "Scale",
                    name,
                    vec![crate::status::FieldCause {
                        reason: "FieldValueInvalid",
                        field: "spec.replicas".into(),
                        message: "Invalid value: must be a non-negative integer".into(),
                    }],
                )
            })?;
        let mut new = old.clone();
        if let Some(o) = new.as_object_mut() {
            let spec = o.entry("spec").or_insert(json!({}));
            if let Some(s) = spec.as_object_mut() {
                s.insert("replicas".into(), json!(replicas));
            }
        }
        // A custom resource's new replicas must still satisfy its schema.
        crate::validation::crd_schema::admit(def, &mut new, Some(&old))?;
        let stored = write::store_update(tx, def, &key, &old, new, &ctx.manager, Some("scale"));
        Ok(WriteOutcome {
            obj: stored,
            created: false,
            warnings: Vec::new(),
        })
    })?;
    Ok(json_response(200, &to_scale(&out.obj)))
}

fn token(
    state: &AppState,
    def: &ResourceDef,
    ns: Option<&str>,
    name: &str,
    body: &[u8],
    q: &Query,
) -> Result<Response<Body>, ApiError> {
    let req: Value = if body.iter().all(u8::is_ascii_whitespace) {
        json!({})
    } else if request::is_protobuf_body(body) {
        request::decode_protobuf(body)?
    } else {
        serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("invalid TokenRequest: {e}")))?
    };
    let spec = req.get("spec").cloned().unwrap_or(json!({}));
    let exp = spec
        .get("expirationSeconds")
        .and_then(Value::as_i64)
        .unwrap_or(3600)
        .max(600);
    let audiences = spec
        .get("audiences")
        .filter(|a| a.as_array().is_some_and(|a| !a.is_empty()))
        .cloned()
        .unwrap_or(json!(["https://kubernetes.default.svc.cluster.local"]));
    let key = key_for(def, ns, name);
    let aud: Vec<String> = audiences
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    // A signed JWT (see auth::jwt), valid until it expires while the
    // ServiceAccount exists with the same uid; kept in the store too, like
    // the opaque tokens of older versions.
    let (now, uid, token) = state.store.write(q.dry_run()?, |tx| {
        let sa = tx.get(&key).ok_or_else(|| ApiError::not_found(def, name))?;
        let uid = meta_str(sa, "uid").unwrap_or("").to_string();
        let iat = chrono::DateTime::parse_from_rfc3339(&tx.now)
            .map(|t| t.timestamp())
            .unwrap_or_else(|_| chrono::Utc::now().timestamp());
        let token = state
            .auth
            .mint(ns.unwrap_or(""), name, &uid, aud.clone(), iat, exp)?;
        tx.add_token(&token);
        Ok((tx.now.clone(), uid, token))
    })?;
    let expires = chrono::DateTime::parse_from_rfc3339(&now)
        .map(|t| (t + chrono::Duration::seconds(exp)).with_timezone(&chrono::Utc))
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .unwrap_or_default();
    Ok(json_response(
        201,
        &json!({
            "kind": "TokenRequest",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"name": name, "namespace": ns.unwrap_or(""), "creationTimestamp": now},
            "spec": {"audiences": audiences, "expirationSeconds": exp, "boundObjectRef": spec.get("boundObjectRef").cloned().unwrap_or(Value::Null)},
            "status": {"token": token, "expirationTimestamp": expires, "serviceAccountUID": uid},
        }),
    ))
}

fn finalize(
    state: &AppState,
    def: &ResourceDef,
    name: &str,
    body: Value,
    q: &Query,
) -> Result<Response<Body>, ApiError> {
    let key = key_for(def, None, name);
    let finalizers = body
        .get("spec")
        .and_then(|s| s.get("finalizers"))
        .cloned()
        .unwrap_or(json!([]));
    let obj = state.store.write(q.dry_run()?, |tx| {
        let old = tx
            .get(&key)
            .cloned()
            .ok_or_else(|| ApiError::not_found(def, name))?;
        let mut new = old.clone();
        new["spec"] = json!({"finalizers": finalizers});
        meta_mut(&mut new);
        if meta::is_noop(&old, &new) {
            return Ok(old);
        }
        let stored = tx.put(&key, new);
        crate::gc::try_finalize_namespace(tx, name);
        Ok(stored)
    })?;
    Ok(json_response(200, &obj))
}
