//! Resource verbs: get, list, watch, create, update, patch, delete, deletecollection.

use super::request::{self, Query};
use super::route::ResPath;
use super::{subresource, AppState};
use crate::auth::rbac::{Attributes, Target};
use crate::auth::UserInfo;
use crate::body::{error_response, json_response, read_body};
use crate::delete::{self, DeleteOpts};
use crate::deletion::DeleteOutcome;
use crate::partial;
use crate::patch::PatchType;
use crate::resources::ResourceDef;
use crate::selectors::{FieldSelector, LabelSelector};
use crate::status::ApiError;
use crate::store::ObjKey;
use crate::table;
use crate::watch::{self, present, Filter, WatchParams};
use crate::write::{self, key_for, WriteCtx, WriteOutcome};
use axum::body::Body;
use base64::Engine;
use http::{HeaderMap, HeaderValue, Method, Request, Response};
use serde_json::{json, Value};
use std::time::Duration;

/// Dispatches a request under /api/v1 or /apis/{g}/{v}.
pub async fn handle(state: &AppState, rp: ResPath, q: Query, req: Request<Body>) -> Response<Body> {
    match handle_inner(state, rp, q, req).await {
        Ok(r) => r,
        Err(e) => error_response(&e),
    }
}

async fn handle_inner(
    state: &AppState,
    rp: ResPath,
    q: Query,
    req: Request<Body>,
) -> Result<Response<Body>, ApiError> {
    let def = state
        .store
        .read(|i| i.registry.find(&rp.group, &rp.version, &rp.plural))
        .ok_or_else(ApiError::path_not_found)?;
    if (!def.namespaced && rp.namespace.is_some())
        || (def.namespaced && rp.name.is_some() && rp.namespace.is_none())
    {
        return Err(ApiError::path_not_found());
    }
    let (parts, body) = req.into_parts();
    let headers = parts.headers;
    let method = parts.method;
    let ns = rp.namespace.as_deref();
    if def.create_only() {
        return match (&method, rp.name.as_deref()) {
            (&Method::POST, None) => {
                let bytes = read_body(body, &headers).await?;
                let obj = request::decode_object_blocking(bytes, &headers).await?;
                // The caller, authenticated in api::admit.
                let user = parts
                    .extensions
                    .get::<UserInfo>()
                    .cloned()
                    .unwrap_or_else(UserInfo::admin);
                Ok(json_response(201, &review(state, &def, obj, &user)?))
            }
            _ => Err(ApiError::method_not_allowed(method.as_str())),
        };
    }
    if def.read_only() {
        return component_statuses(&def, &method, rp.name.as_deref());
    }
    if let (Some(sub), Some(name)) = (rp.sub.as_deref(), rp.name.as_deref()) {
        return subresource::handle(state, &def, ns, name, sub, &method, &q, &headers, body).await;
    }
    // Namespaced collections accept writes only inside a namespace (like kube's routes).
    let all_namespaces = def.namespaced && ns.is_none();
    match (&method, rp.name.as_deref()) {
        (&Method::POST | &Method::DELETE, None) if all_namespaces => {
            Err(ApiError::method_not_allowed(method.as_str()))
        }
        (&Method::GET, Some(name)) if q.flag("watch") => {
            // Deprecated single-object watch: a collection watch on metadata.name.
            let mut q = q.clone();
            let sel = match q.get("fieldSelector").filter(|s| !s.is_empty()) {
                Some(s) => format!("{s},metadata.name={name}"),
                None => format!("metadata.name={name}"),
            };
            q.0.insert("fieldSelector".into(), sel);
            watch_collection(state, def, ns, &q, &headers, parts.uri.path())
        }
        (&Method::GET, Some(name)) => get(state, &def, ns, name, &headers),
        (&Method::GET, None) if q.flag("watch") => {
            watch_collection(state, def, ns, &q, &headers, parts.uri.path())
        }
        (&Method::GET, None) => list(state, &def, ns, &q, &headers),
        (&Method::POST, None) => {
            let bytes = read_body(body, &headers).await?;
            let obj = request::decode_object_blocking(bytes, &headers).await?;
            let ctx = write_ctx(&q, &headers)?;
            let out = state
                .store
                .write(q.dry_run()?, |tx| write::create(tx, &def, ns, obj, &ctx))?;
            Ok(write_response_as(&def, out, &headers))
        }
        (&Method::PUT, Some(name)) => {
            let bytes = read_body(body, &headers).await?;
            let obj = request::decode_object_blocking(bytes, &headers).await?;
            let ctx = write_ctx(&q, &headers)?;
            let out = state.store.write(q.dry_run()?, |tx| {
                write::update(tx, &def, ns, name, obj, None, &ctx)
            })?;
            Ok(write_response_as(&def, out, &headers))
        }
        (&Method::PATCH, Some(name)) => {
            let pt = patch_type(&headers)?;
            let bytes = read_body(body, &headers).await?;
            let ctx = write_ctx(&q, &headers)?;
            let parsed =
                request::decode_blocking(bytes, move |b| write::parse_patch_body(pt, b)).await?;
            let out = state.store.write(q.dry_run()?, |tx| {
                write::patch_parsed(tx, &def, ns, name, pt, parsed, None, &ctx)
            })?;
            Ok(write_response_as(&def, out, &headers))
        }
        (&Method::DELETE, Some(name)) => {
            let bytes = read_body(body, &headers).await?;
            let opts = delete_opts(&q, &bytes, &headers)?;
            let key = key_for(&def, ns, name);
            let out = state
                .store
                .write(q.dry_run()?, |tx| delete::delete(tx, &def, &key, &opts))?;
            Ok(match out {
                DeleteOutcome::Pending(obj) => json_response(200, &present(&def, obj)),
                DeleteOutcome::Deleted(obj) if def.returns_deleted_object() => {
                    json_response(200, &present(&def, obj))
                }
                DeleteOutcome::Deleted(obj) => {
                    json_response(200, &delete::success_status(&def, &obj))
                }
            })
        }
        (&Method::DELETE, None) => {
            let bytes = read_body(body, &headers).await?;
            let opts = delete_opts(&q, &bytes, &headers)?;
            delete_collection(state, &def, ns, &q, &opts)
        }
        _ => Err(ApiError::method_not_allowed(method.as_str())),
    }
}

/// The answer to a review (TokenReview, SubjectAccessReview and the like):
/// created, never stored, decided for `user`.
fn review(
    state: &AppState,
    def: &ResourceDef,
    obj: Value,
    user: &UserInfo,
) -> Result<Value, ApiError> {
    let decide = |verb: String, target: Target| {
        let attrs = Attributes { user, verb, target };
        state.store.read(|i| state.auth.decide(i, &attrs))
    };
    let rules = |ns: &str| state.store.read(|i| state.auth.rules(i, user, ns));
    let caller = crate::review::Caller {
        decide: &decide,
        rules: &rules,
    };
    if def.kind == "TokenReview" {
        let token = obj
            .get("spec")
            .and_then(|s| s.get("token"))
            .and_then(Value::as_str)
            .unwrap_or("");
        let now = chrono::Utc::now().timestamp();
        let user = state.store.read(|i| state.auth.token_user(i, token, now));
        crate::token_review::answer(def, obj, user)
    } else {
        crate::review::answer(def, obj, &caller)
    }
}

/// componentstatuses: computed on every read, never stored, and deprecated
/// (kube's warning, which kubectl prints).
fn component_statuses(
    def: &ResourceDef,
    method: &Method,
    name: Option<&str>,
) -> Result<Response<Body>, ApiError> {
    let all = crate::bootstrap::component_statuses();
    let warn = |mut r: Response<Body>| {
        r.headers_mut().append(
            http::header::WARNING,
            HeaderValue::from_static("299 - \"v1 ComponentStatus is deprecated in v1.19+\""),
        );
        r
    };
    match (method, name) {
        (&Method::GET, None) => Ok(warn(json_response(
            200,
            &json!({"kind": def.list_kind, "apiVersion": "v1", "metadata": {}, "items": all}),
        ))),
        (&Method::GET, Some(name)) => all
            .into_iter()
            .find(|c| c["metadata"]["name"] == name)
            .map(|c| warn(json_response(200, &c)))
            .ok_or_else(|| ApiError::not_found(def, name)),
        _ => Err(ApiError::method_not_allowed(method.as_str())),
    }
}

/// Builds the per-write options from the query string and headers.
pub(super) fn write_ctx(q: &Query, headers: &HeaderMap) -> Result<WriteCtx, ApiError> {
    let (manager, explicit) = request::manager(q, headers);
    Ok(WriteCtx {
        manager,
        manager_explicit: explicit,
        validation: q.field_validation()?,
        force: q.force()?,
    })
}

/// The patch type from Content-Type, or 415.
pub(super) fn patch_type(headers: &HeaderMap) -> Result<PatchType, ApiError> {
    let ct = headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    PatchType::from_content_type(ct).ok_or_else(|| {
        if request::content_type(headers) == "application/vnd.kubernetes.protobuf" {
            ApiError::unsupported_media_type(request::PROTOBUF_MSG)
        } else {
            ApiError::unsupported_media_type(format!("the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json (got \"{ct}\")"))
        }
    })
}

/// 200/201 with the object and any `Warning` headers.
pub(super) fn write_response(def: &ResourceDef, out: WriteOutcome) -> Response<Body> {
    write_response_shaped(def, out, false)
}

/// [`write_response`], metadata only if the Accept header asks for
/// PartialObjectMetadata (kube transforms whatever object a verb returns).
fn write_response_as(def: &ResourceDef, out: WriteOutcome, headers: &HeaderMap) -> Response<Body> {
    write_response_shaped(def, out, request::wants_metadata(headers))
}

fn write_response_shaped(
    def: &ResourceDef,
    out: WriteOutcome,
    metadata_only: bool,
) -> Response<Body> {
    let code = if out.created { 201 } else { 200 };
    let obj = present(def, out.obj);
    let obj = if metadata_only {
        partial::object(&obj)
    } else {
        obj
    };
    let mut resp = json_response(code, &obj);
    for w in out.warnings {
        let escaped = w.replace('\\', "\\\\").replace('"', "\\\"");
        if let Ok(v) = HeaderValue::from_str(&format!("299 - \"{escaped}\"")) {
            resp.headers_mut().append(http::header::WARNING, v);
        }
    }
    resp
}

fn get(
    state: &AppState,
    def: &ResourceDef,
    ns: Option<&str>,
    name: &str,
    headers: &HeaderMap,
) -> Result<Response<Body>, ApiError> {
    let key = key_for(def, ns, name);
    let obj = state
        .store
        .read(|i| i.objects.get(&key).cloned())
        .ok_or_else(|| ApiError::not_found(def, name))?;
    let obj = present(def, obj);
    if request::wants_metadata(headers) {
        return Ok(json_response(200, &partial::object(&obj)));
    }
    if request::wants_table(headers) {
        let cols = table::columns(def, state.store.read(|i| i.registry.printer_columns(def)));
        let rv = obj
            .get("metadata")
            .and_then(|m| m.get("resourceVersion"))
            .cloned()
            .unwrap_or(json!(""));
        return Ok(json_response(
            200,
            &table::render(&cols, &[obj], json!({"resourceVersion": rv}), true),
        ));
    }
    Ok(json_response(200, &obj))
}

fn filter_from(def: &ResourceDef, ns: Option<&str>, q: &Query) -> Result<Filter, ApiError> {
    let labels = LabelSelector::parse(q.get("labelSelector").unwrap_or(""))
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let fields = FieldSelector::parse(q.get("fieldSelector").unwrap_or(""), &def.group, &def.plural).map_err(|e| {
        ApiError::bad_request(format!(
            "Unable to find \"{}/{}, Resource={}\" that match label selector \"{}\", field selector \"{}\": {e}",
            def.group,
            def.version,
            def.plural,
            q.get("labelSelector").unwrap_or(""),
            q.get("fieldSelector").unwrap_or("")
        ))
    })?;
    Ok(Filter {
        namespace: ns.map(str::to_string),
        labels,
        fields,
    })
}

fn encode_continue(rv: u64, ns: &str, name: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(json!({"rv": rv, "ns": ns, "name": name}).to_string())
}

fn decode_continue(tok: &str) -> Result<(u64, String, String), ApiError> {
    let bad = || ApiError::bad_request("continue key is not valid: the token is malformed");
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(tok)
        .map_err(|_| bad())?;
    let v: Value = serde_json::from_slice(&raw).map_err(|_| bad())?;
    Ok((
        v.get("rv").and_then(Value::as_u64).ok_or_else(bad)?,
        v.get("ns")
            .and_then(Value::as_str)
            .ok_or_else(bad)?
            .to_string(),
        v.get("name")
            .and_then(Value::as_str)
            .ok_or_else(bad)?
            .to_string(),
    ))
}

fn list(
    state: &AppState,
    def: &ResourceDef,
    ns: Option<&str>,
    q: &Query,
    headers: &HeaderMap,
) -> Result<Response<Body>, ApiError> {
    let filter = filter_from(def, ns, q)?;
    let limit = match q.get("limit") {
        None | Some("") => None,
        Some(l) => Some(
            l.parse::<i64>()
                .map_err(|_| ApiError::bad_request(format!("invalid limit \"{l}\"")))?,
        ),
    }
    .filter(|l| *l > 0)
    .map(|l| l as usize);
    let cont = match q.get("continue") {
        None | Some("") => None,
        Some(t) => Some(decode_continue(t)?),
    };
    let (rv, items, next, remaining, printer) = state.store.read(|inner| {
        let rv = cont.as_ref().map(|c| c.0).unwrap_or(inner.rv);
        let after = cont
            .as_ref()
            .map(|c| ObjKey::new(&def.group, &def.plural, &c.1, &c.2));
        let mut matched = inner
            .scan(&def.group, &def.plural, ns)
            .filter(|(k, _)| after.as_ref().is_none_or(|a| *k > a))
            .filter(|(_, v)| filter.matches(v));
        let mut items = Vec::new();
        let mut last: Option<ObjKey> = None;
        for (k, v) in matched.by_ref() {
            items.push(v.clone());
            last = Some(k.clone());
            if limit.is_some_and(|l| items.len() >= l) {
                break;
            }
        }
        let remaining = matched.count();
        let next = if remaining > 0 {
            last.map(|k| encode_continue(rv, &k.namespace, &k.name))
        } else {
            None
        };
        (
            rv,
            items,
            next,
            remaining,
            inner.registry.printer_columns(def),
        )
    });
    let items: Vec<Value> = items.into_iter().map(|o| present(def, o)).collect();
    let mut meta = json!({"resourceVersion": rv.to_string()});
    if let Some(n) = next {
        meta["continue"] = json!(n);
        meta["remainingItemCount"] = json!(remaining);
    }
    if request::wants_metadata(headers) {
        return Ok(json_response(200, &partial::list(meta, &items)));
    }
    if request::wants_table(headers) {
        let cols = table::columns(def, printer);
        return Ok(json_response(
            200,
            &table::render(&cols, &items, meta, true),
        ));
    }
    Ok(json_response(
        200,
        &json!({"kind": def.list_kind, "apiVersion": def.api_version(), "metadata": meta, "items": items}),
    ))
}

fn watch_collection(
    state: &AppState,
    def: ResourceDef,
    ns: Option<&str>,
    q: &Query,
    headers: &HeaderMap,
    path: &str,
) -> Result<Response<Body>, ApiError> {
    let filter = filter_from(&def, ns, q)?;
    let send_initial = q.flag("sendInitialEvents");
    if send_initial {
        // kube's ListOptions validation for streaming lists.
        let mut causes = Vec::new();
        if !q.flag("allowWatchBookmarks") {
            causes.push(crate::status::FieldCause {
                reason: "FieldValueForbidden",
                field: "allowWatchBookmarks".into(),
                message: "Forbidden: allowWatchBookmarks must be set to true when sendInitialEvents is set".into(),
            });
        }
        if q.get("resourceVersionMatch") != Some("NotOlderThan") {
            causes.push(crate::status::FieldCause {
                reason: "FieldValueForbidden",
                field: "resourceVersionMatch".into(),
                message: "Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan".into(),
            });
        }
        if !causes.is_empty() {
            return Err(ApiError::invalid("meta.k8s.io", "ListOptions", "", causes));
        }
    }
    let from = match q.get("resourceVersion") {
        _ if send_initial => None,
        None | Some("") | Some("0") => None,
        Some(rv) => Some(
            rv.parse::<u64>()
                .map_err(|_| ApiError::bad_request(format!("invalid resource version \"{rv}\"")))?,
        ),
    };
    let timeout = match q.get("timeoutSeconds") {
        // kube: unset or 0 means the server's default (minRequestTimeout-based).
        None | Some("") | Some("0") => Duration::from_secs(1800),
        Some(t) => Duration::from_secs(
            t.parse::<u64>()
                .map_err(|_| ApiError::bad_request(format!("invalid timeoutSeconds \"{t}\"")))?,
        ),
    };
    let mut expire = None;
    if let Some(faults) = &state.faults {
        let client = crate::faults::client_of(headers);
        // After a compaction, a watch cannot resume from before it: the
        // client must list again.
        if let Some(compacted) = from.and_then(|f| faults.compacted_since(&client, path, f)) {
            let e = crate::faults::compacted_before_watch(from.unwrap_or(0), compacted);
            return Ok(watch_response(watch::error_body(&e)));
        }
        expire = Some(crate::faults::Expiry {
            faults: faults.clone(),
            client,
            path: path.to_owned(),
        });
    }
    let params = WatchParams {
        from,
        bookmarks: q.flag("allowWatchBookmarks"),
        initial_events_end: send_initial,
        timeout,
        bookmark_every: state.bookmark_every,
        metadata_only: request::wants_metadata(headers),
        expire,
    };
    let cols = if request::wants_table(headers) {
        Some(table::columns(
            &def,
            state.store.read(|i| i.registry.printer_columns(&def)),
        ))
    } else {
        None
    };
    let body = watch::start(&state.store, def, filter, params, cols);
    Ok(watch_response(body))
}

/// A watch's 200 response around its stream of events.
fn watch_response(body: Body) -> Response<Body> {
    let mut resp = Response::new(body);
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp.headers_mut().insert(
        http::header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, private"),
    );
    resp
}

/// DeleteOptions from the body (JSON, protobuf or empty) and the query string.
pub(super) fn delete_opts(
    q: &Query,
    body: &[u8],
    headers: &HeaderMap,
) -> Result<DeleteOpts, ApiError> {
    let v = crate::delete_body::decode(body, &request::content_type(headers))?;
    crate::delete_body::options(&q.0, &v)
}

fn delete_collection(
    state: &AppState,
    def: &ResourceDef,
    ns: Option<&str>,
    q: &Query,
    opts: &DeleteOpts,
) -> Result<Response<Body>, ApiError> {
    let filter = filter_from(def, ns, q)?;
    let deleted = state.store.write(q.dry_run()?, |tx| {
        let keys: Vec<ObjKey> = tx
            .inner
            .scan(&def.group, &def.plural, ns)
            .filter(|(_, v)| filter.matches(v))
            .map(|(k, _)| k.clone())
            .collect();
        let mut out = Vec::new();
        for k in keys {
            match delete::delete(tx, def, &k, opts) {
                Ok(DeleteOutcome::Pending(o) | DeleteOutcome::Deleted(o)) => {
                    out.push(present(def, o))
                }
                // Protected namespaces and vanished objects are skipped, as kube does.
                Err(e) if e.code == 403 || e.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    })?;
    Ok(json_response(
        200,
        &json!({"kind": def.list_kind, "apiVersion": def.api_version(), "metadata": {}, "items": deleted}),
    ))
}
