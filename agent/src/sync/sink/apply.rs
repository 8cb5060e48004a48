//! Writes of copies: create, replace (full, so nothing someone added
//! survives), delete, orphan, and the status subresource. Every write uses
//! the agent's one field manager and is counted.

use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, PostParams, Preconditions};
use serde_json::Value;

use super::compare;
use super::mutate;
use crate::context::Context;
use crate::kube::path::segment;
use crate::kube::FIELD_MANAGER;
use crate::sync::model::{CopyError, FailureKind, Packed, Unpack};

/// A write of a copy that failed.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// The API server refused or failed.
    #[error("failed to {action}")]
    Kube {
        /// What was attempted.
        action: &'static str,
        /// Cause.
        #[source]
        source: kube::Error,
    },
    /// The object does not convert into a request body (a bug, or a hostile
    /// object that JSON cannot carry).
    #[error("the copy is not a valid object")]
    Body(#[source] serde_json::Error),
    /// The copy's kind is no longer watched (it went away during the pass).
    #[error("the kind of {0} is not watched")]
    Gone(String),
    /// The kept desired copy does not unpack (a bug: it was packed here).
    #[error(transparent)]
    Unpack(#[from] Unpack),
}

impl WriteError {
    /// The failure, typed for the copy's backoff (`model::backoff`), with
    /// the message its rule's status shows.
    pub fn copy_error(&self) -> CopyError {
        CopyError::new(self.kind(), crate::report(self))
    }

    fn kind(&self) -> FailureKind {
        match self {
            WriteError::Kube { source, .. } => kind_of(source),
            WriteError::Body(_) | WriteError::Unpack(_) => FailureKind::Invalid,
            WriteError::Gone(_) => FailureKind::Transient { retry_after: None },
        }
    }

    fn kube(action: &'static str) -> impl FnOnce(kube::Error) -> WriteError {
        move |source| WriteError::Kube { action, source }
    }
}

/// What kind of failure a Kubernetes error is, for trying again. A create
/// refused with AlreadyExists is transient: the local watch has not shown
/// the object yet (it lags, or is re-listing after its API server
/// restarted), so the view is behind, not the request wrong. A Conflict is
/// someone else's write; a refusal that names a size is too large
/// whatever its code (kube-apiserver says "Request entity too large" with
/// 413, etcd's "request is too large" with 500 or 422).
fn kind_of(e: &kube::Error) -> FailureKind {
    let kube::Error::Api(s) = e else {
        // No answer (a connection, TLS, a stream cut): tried again.
        return FailureKind::Transient { retry_after: None };
    };
    let message = s.message.to_ascii_lowercase();
    if s.code == 413 || message.contains("too large") || message.contains("too long") {
        return FailureKind::TooLarge;
    }
    match s.code {
        409 if s.is_already_exists() => FailureKind::Transient { retry_after: None },
        409 => FailureKind::Conflict,
        429 | 500..=599 => FailureKind::Transient {
            retry_after: crate::kube::throttle::retry_after_of(e),
        },
        401 | 403 => FailureKind::Forbidden,
        404 => FailureKind::NotFound,
        // 400, 422 and the rest of 4xx: the request as it is.
        _ => FailureKind::Invalid,
    }
}

/// The API of one kind, in a namespace or cluster-wide. The namespace is a
/// path segment like a name (see [`segment`]).
pub fn api(client: &kube::Client, ar: &ApiResource, namespace: Option<&str>) -> Api<DynamicObject> {
    match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), &segment(ns), ar),
        None => Api::all_with(client.clone(), ar),
    }
}

fn params(dry_run: bool) -> PostParams {
    PostParams {
        dry_run,
        field_manager: Some(FIELD_MANAGER.to_owned()),
    }
}

fn body(v: &Value) -> Result<DynamicObject, WriteError> {
    serde_json::from_value(v.clone()).map_err(WriteError::Body)
}

/// The name of `v` as the path segment of its URL (kube-rs does not escape it).
fn name_of(v: &Value) -> String {
    let name = v
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    segment(name).into_owned()
}

fn to_value(o: DynamicObject) -> Result<Value, WriteError> {
    serde_json::to_value(o).map_err(WriteError::Body)
}

/// Creates the copy (and its status, if synced); returns the server's object.
pub async fn create(
    ctx: &Context,
    api: &Api<DynamicObject>,
    desired: &Packed,
    with_status: bool,
) -> Result<Value, WriteError> {
    let desired = &desired.value()?;
    let created = api
        .create(&params(false), &body(desired)?)
        .await
        .map_err(WriteError::kube("create the copy"))?;
    ctx.metrics.sync_write("create");
    let created = to_value(created)?;
    if with_status {
        return write_status(ctx, api, desired, &created).await;
    }
    Ok(created)
}

/// Replaces the live copy with the desired one. A change the API server
/// refuses as immutable is made by deleting and recreating the copy.
pub async fn replace(
    ctx: &Context,
    api: &Api<DynamicObject>,
    desired: &Packed,
    live: &Value,
    with_status: bool,
    exclude: &[String],
) -> Result<Value, WriteError> {
    let desired = &desired.value()?;
    let mut full = desired.clone();
    compare::carry_over(&mut full, live);
    // Paths drift may not touch keep their live values.
    crate::sync::drift::policy::keep_excluded(&mut full, live, exclude);
    let name = name_of(desired);
    let replaced = match api.replace(&name, &params(false), &body(&full)?).await {
        Ok(o) => {
            let o = to_value(o)?;
            // A request all the same, but one that changed nothing (the
            // server kept the resourceVersion it had): counted apart, so
            // that a copy written again for nothing shows (chaos checks it).
            let changed = compare::resource_version(&o) != compare::resource_version(live);
            ctx.metrics
                .sync_write(if changed { "update" } else { "unchanged" });
            o
        }
        Err(kube::Error::Api(s)) if is_immutable(&s) => {
            let copy = desired.pointer("/metadata/name").and_then(Value::as_str);
            tracing::info!(
                copy = copy.unwrap_or_default(),
                "immutable field changed: deleting and recreating the copy"
            );
            delete(ctx, api, live).await?;
            let created = api
                .create(&params(false), &body(desired)?)
                .await
                .map_err(WriteError::kube("recreate the copy"))?;
            ctx.metrics.sync_write("recreate");
            to_value(created)?
        }
        Err(e) => return Err(WriteError::kube("replace the copy")(e)),
    };
    if with_status {
        return write_status(ctx, api, desired, &replaced).await;
    }
    Ok(replaced)
}

/// What the server would make of replacing `body` (dry run: nothing is written).
pub async fn dry_run_replace(api: &Api<DynamicObject>, body_: &Value) -> Result<Value, WriteError> {
    let name = name_of(body_);
    let o = api
        .replace(&name, &params(true), &body(body_)?)
        .await
        .map_err(WriteError::kube("dry-run the copy"))?;
    to_value(o)
}

/// Writes `desired.status` through the status subresource on top of `current`.
async fn write_status(
    ctx: &Context,
    api: &Api<DynamicObject>,
    desired: &Value,
    current: &Value,
) -> Result<Value, WriteError> {
    let Some(status) = desired.get("status") else {
        return Ok(current.clone());
    };
    let mut with = current.clone();
    if let Some(map) = with.as_object_mut() {
        map.insert("status".to_owned(), status.clone());
    }
    let o = api
        .replace_status(&name_of(desired), &params(false), &body(&with)?)
        .await
        .map_err(WriteError::kube("write the copy's status"))?;
    ctx.metrics.sync_write("status");
    to_value(o)
}

/// Deletes the copy, only if it is still the object we looked at (uid).
pub async fn delete(
    ctx: &Context,
    api: &Api<DynamicObject>,
    live: &Value,
) -> Result<(), WriteError> {
    let uid = live.pointer("/metadata/uid").and_then(Value::as_str);
    let dp = DeleteParams {
        preconditions: uid.map(|u| Preconditions {
            uid: Some(u.to_owned()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match api.delete(&name_of(live), &dp).await {
        Ok(_) => {
            ctx.metrics.sync_write("delete");
            Ok(())
        }
        // Already gone: what we wanted.
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(WriteError::kube("delete the copy")(e)),
    }
}

/// Keeps the copy but hands it over: without fleetbus's annotations and label.
pub async fn orphan(
    ctx: &Context,
    api: &Api<DynamicObject>,
    live: &Value,
) -> Result<(), WriteError> {
    let released = mutate::unmanage(live);
    match api
        .replace(&name_of(live), &params(false), &body(&released)?)
        .await
    {
        Ok(_) => {
            ctx.metrics.sync_write("orphan");
            Ok(())
        }
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(WriteError::kube("orphan the copy")(e)),
    }
}

/// Creates a namespace a rule with `createNamespace: true` needs.
pub async fn create_namespace(ctx: &Context, name: &str) -> Result<(), WriteError> {
    let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(ctx.copy_writer.clone());
    let ns = k8s_openapi::api::core::v1::Namespace {
        metadata: kube::api::ObjectMeta {
            name: Some(name.to_owned()),
            ..Default::default()
        },
        ..Default::default()
    };
    match api.create(&params(false), &ns).await {
        Ok(_) => {
            ctx.metrics.sync_write("namespace");
            Ok(())
        }
        Err(kube::Error::Api(s)) if s.is_already_exists() => Ok(()),
        Err(e) => Err(WriteError::kube("create the namespace")(e)),
    }
}

/// Whether the API server refused an update because it changes an immutable
/// field. Kubernetes has no machine-readable code for this: it is a 422
/// whose causes say "field is immutable" (apimachinery's
/// `ValidateImmutableField` and the ConfigMap/Secret `immutable` checks).
pub fn is_immutable(s: &kube::core::Status) -> bool {
    // kube-apiserver says "field is immutable" for most fields, and "may not
    // change once set" for a Service's `clusterIPs` (1.33's
    // `ValidateServiceUpdate`).
    let immutable =
        |m: &str| m.contains("field is immutable") || m.contains("may not change once set");
    s.code == 422
        && (immutable(&s.message)
            || s.details
                .as_ref()
                .is_some_and(|d| d.causes.iter().any(|c| immutable(&c.message))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::response::{StatusCause, StatusDetails};
    use kube::core::Status;

    fn api_error(code: u16, reason: &str, message: &str) -> WriteError {
        let mut s = Status::failure(message, reason);
        s.code = code;
        WriteError::Kube {
            action: "create the copy",
            source: kube::Error::Api(Box::new(s)),
        }
    }

    #[test]
    fn each_refusal_has_the_kind_its_backoff_needs() {
        let transient = FailureKind::Transient { retry_after: None };
        for (code, reason, message, want) in [
            // The local watch lags: tried again.
            (
                409,
                "AlreadyExists",
                "secrets \"c\" already exists",
                transient,
            ),
            (
                409,
                "Conflict",
                "the object has been modified",
                FailureKind::Conflict,
            ),
            (
                422,
                "Invalid",
                "Secret \"c\" is invalid",
                FailureKind::Invalid,
            ),
            (400, "BadRequest", "bad", FailureKind::Invalid),
            (403, "Forbidden", "cannot create", FailureKind::Forbidden),
            (
                404,
                "NotFound",
                "namespaces \"a\" not found",
                FailureKind::NotFound,
            ),
            (
                413,
                "RequestEntityTooLarge",
                "Request entity too large",
                FailureKind::TooLarge,
            ),
            (
                500,
                "InternalError",
                "etcdserver: request is too large",
                FailureKind::TooLarge,
            ),
            (503, "ServiceUnavailable", "unavailable", transient),
            (429, "TooManyRequests", "slow down", transient),
        ] {
            let e = api_error(code, reason, message).copy_error();
            assert_eq!(e.kind, want, "{code} {reason}");
            assert!(e.message.contains(message), "{}", e.message);
        }
    }

    #[test]
    fn a_429_carries_the_servers_retry_after() {
        let mut s = Status::failure("slow down", "TooManyRequests");
        s.code = 429;
        s.details = Some(
            serde_json::from_value::<StatusDetails>(serde_json::json!({"retryAfterSeconds": 4}))
                .unwrap(),
        );
        let e = WriteError::Kube {
            action: "replace the copy",
            source: kube::Error::Api(Box::new(s)),
        };
        assert_eq!(
            e.copy_error().kind,
            FailureKind::Transient {
                retry_after: Some(std::time::Duration::from_secs(4))
            }
        );
    }

    #[test]
    fn immutable_is_a_422_saying_so() {
        let mut s = Status::failure("ConfigMap \"x\" is invalid: data: Forbidden: field is immutable when `immutable` is set", "Invalid");
        s.code = 422;
        assert!(is_immutable(&s));
        let mut other = Status::failure(
            "ConfigMap \"x\" is invalid: metadata.labels: Invalid value",
            "Invalid",
        );
        other.code = 422;
        assert!(!is_immutable(&other));
        let mut via_cause = Status::failure("Service \"x\" is invalid", "Invalid");
        via_cause.code = 422;
        via_cause.details = Some(StatusDetails {
            causes: vec![StatusCause {
                reason: "FieldValueInvalid".into(),
                message: "Invalid value: \"10.0.0.2\": field is immutable".into(),
                field: "spec.clusterIP".into(),
            }],
            name: "x".into(),
            group: String::new(),
            kind: "services".into(),
            uid: String::new(),
            retry_after_seconds: 0,
        });
        assert!(is_immutable(&via_cause));
        // What kube-apiserver 1.33 says of a Service's address.
        let mut svc = Status::failure(
            "Service \"x\" is invalid: spec.clusterIPs[0]: Invalid value: []string{\"10.96.0.77\"}: may not change once set",
            "Invalid",
        );
        svc.code = 422;
        assert!(is_immutable(&svc));
        let mut conflict = Status::failure("field is immutable", "Conflict");
        conflict.code = 409;
        assert!(!is_immutable(&conflict));
    }
}
