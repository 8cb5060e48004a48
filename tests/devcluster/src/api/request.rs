//! Request decoding: query parameters, headers, bodies.

use crate::limits;
use crate::status::ApiError;
use crate::write::FieldValidation;
use bytes::Bytes;
use http::HeaderMap;
use serde_json::Value;
use std::collections::BTreeMap;

/// Query parameters (empty `&&` pairs skipped; kube-rs sends `?&...`).
#[derive(Debug, Clone, Default)]
pub struct Query(pub BTreeMap<String, String>);

impl Query {
    /// Parses a raw query string.
    pub fn parse(q: Option<&str>) -> Self {
        let mut m = BTreeMap::new();
        if let Some(q) = q {
            for (k, v) in url::form_urlencoded::parse(q.as_bytes()) {
                if !k.is_empty() {
                    m.insert(k.into_owned(), v.into_owned());
                }
            }
        }
        Query(m)
    }

    /// A parameter.
    pub fn get(&self, k: &str) -> Option<&str> {
        self.0.get(k).map(String::as_str)
    }

    /// A boolean parameter, true as Go's `strconv.ParseBool` reads it (the
    /// python client sends `watch=True`).
    pub fn flag(&self, k: &str) -> bool {
        matches!(
            self.get(k),
            Some("true" | "1" | "t" | "T" | "TRUE" | "True")
        )
    }

    /// `fieldValidation` (Warn when absent, as kube-apiserver since 1.27).
    pub fn field_validation(&self) -> Result<FieldValidation, ApiError> {
        match self.get("fieldValidation") {
            None | Some("") | Some("Warn") => Ok(FieldValidation::Warn),
            Some("Strict") => Ok(FieldValidation::Strict),
            Some("Ignore") => Ok(FieldValidation::Ignore),
            Some(other) => Err(ApiError::bad_request(format!(
                "fieldValidation must be one of \"Ignore\", \"Warn\" or \"Strict\", got \"{other}\""
            ))),
        }
    }

    /// `dryRun=All`.
    pub fn dry_run(&self) -> Result<bool, ApiError> {
        match self.get("dryRun") {
            None | Some("") => Ok(false),
            Some("All") => Ok(true),
            Some(other) => Err(ApiError::bad_request(format!(
                "unsupported dryRun value \"{other}\""
            ))),
        }
    }

    /// `force` (only meaningful for apply).
    pub fn force(&self) -> Result<Option<bool>, ApiError> {
        match self.get("force") {
            None => Ok(None),
            Some("true" | "1") => Ok(Some(true)),
            Some("false" | "0") => Ok(Some(false)),
            Some(other) => Err(ApiError::bad_request(format!(
                "invalid force value \"{other}\""
            ))),
        }
    }
}

/// The managedFields manager: fieldManager, else the User-Agent program name, else "unknown".
pub fn manager(q: &Query, headers: &HeaderMap) -> (String, bool) {
    if let Some(m) = q.get("fieldManager").filter(|m| !m.is_empty()) {
        return (m.to_string(), true);
    }
    let ua = headers
        .get(http::header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let prog = ua.split('/').next().unwrap_or("").trim();
    if prog.is_empty() {
        ("unknown".into(), false)
    } else {
        (prog.chars().take(128).collect(), false)
    }
}

/// Media types in an Accept header, each as (type, params).
fn accept_entries(headers: &HeaderMap) -> Vec<(String, BTreeMap<String, String>)> {
    let accept = headers
        .get(http::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    accept
        .split(',')
        .map(|entry| {
            let mut parts = entry.split(';');
            let ty = parts.next().unwrap_or("").trim().to_ascii_lowercase();
            let params = parts
                .filter_map(|p| p.split_once('='))
                .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
                .collect();
            (ty, params)
        })
        .collect()
}

/// True if the client asked for a meta.k8s.io Table.
pub fn wants_table(headers: &HeaderMap) -> bool {
    accept_entries(headers).iter().any(|(_, p)| {
        p.get("as").map(String::as_str) == Some("Table")
            && p.get("g").map(String::as_str) == Some("meta.k8s.io")
    })
}

/// True if the client asked for metadata only (`as=PartialObjectMetadata` or
/// `as=PartialObjectMetadataList`, group meta.k8s.io), as kube-rs's `*_metadata`
/// calls and client-go's metadata client do.
pub fn wants_metadata(headers: &HeaderMap) -> bool {
    accept_entries(headers).iter().any(|(_, p)| {
        matches!(
            p.get("as").map(String::as_str),
            Some("PartialObjectMetadata" | "PartialObjectMetadataList")
        ) && p.get("g").map(String::as_str) == Some("meta.k8s.io")
    })
}

/// The aggregated-discovery version the client asked for ("v2" or "v2beta1"), first match wins.
pub fn wants_aggregated(headers: &HeaderMap) -> Option<&'static str> {
    for (_, p) in accept_entries(headers) {
        if p.get("as").map(String::as_str) == Some("APIGroupDiscoveryList")
            && p.get("g").map(String::as_str) == Some("apidiscovery.k8s.io")
        {
            match p.get("v").map(String::as_str) {
                Some("v2") => return Some("v2"),
                Some("v2beta1") => return Some("v2beta1"),
                _ => {}
            }
        }
    }
    None
}

/// The Content-Type without parameters, lowercased.
pub fn content_type(headers: &HeaderMap) -> String {
    headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

/// The message for protobuf bodies, which this server does not decode.
pub const PROTOBUF_MSG: &str = "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf (fleetbus-devcluster decodes protobuf only for built-in kinds and not for PATCH; use kubectl <= 1.31 or `kubectl create ... --dry-run=client -o yaml | kubectl apply -f -`)";

/// True for a Kubernetes protobuf envelope ("k8s\0" magic).
pub fn is_protobuf_body(body: &[u8]) -> bool {
    body.starts_with(b"k8s\0")
}

/// Decodes a protobuf body. `proto` converts, exactly as kube-apiserver would
/// (Go's `omitempty` included), every kind `kubectl create` sends; any other kind
/// gets a 415 naming it rather than a guessed conversion.
pub fn decode_protobuf(bytes: &[u8]) -> Result<Value, ApiError> {
    crate::proto::decode(bytes).map_err(|e| {
        if e.is_unsupported() {
            ApiError::unsupported_media_type(format!("{PROTOBUF_MSG} ({e})"))
        } else {
            ApiError::bad_request(format!("failed to decode the protobuf body: {e}"))
        }
    })
}

/// Decodes a create/update body (JSON, YAML or Kubernetes protobuf).
pub fn decode_object(bytes: &[u8], headers: &HeaderMap) -> Result<Value, ApiError> {
    decode_object_as(bytes, &content_type(headers))
}

/// At most this many bodies are decoded at once, each on a blocking thread: a
/// large body costs up to a few hundred milliseconds of CPU, and the async
/// workers must stay free for `/healthz`, GETs and watches meanwhile.
static DECODE_PERMITS: std::sync::LazyLock<tokio::sync::Semaphore> =
    std::sync::LazyLock::new(|| tokio::sync::Semaphore::new(2));

/// [`decode_object`] off the async workers (see [`DECODE_PERMITS`]).
pub async fn decode_object_blocking(bytes: Bytes, headers: &HeaderMap) -> Result<Value, ApiError> {
    let ct = content_type(headers);
    decode_blocking(bytes, move |b| decode_object_as(b, &ct)).await
}

/// Runs `decode` on `bytes` off the async workers, at most [`DECODE_PERMITS`]
/// at a time; small bodies are cheaper to decode in place than to hand over.
pub async fn decode_blocking<T: Send + 'static>(
    bytes: Bytes,
    decode: impl FnOnce(&[u8]) -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    if bytes.len() < 16 * 1024 {
        return decode(&bytes);
    }
    let _permit = DECODE_PERMITS
        .acquire()
        .await
        .map_err(|_| ApiError::internal("the decoder pool is closed"))?;
    tokio::task::spawn_blocking(move || decode(&bytes))
        .await
        .map_err(|e| ApiError::internal(format!("decoding the body failed: {e}")))?
}

/// Decodes a body of content type `ct` (without parameters). Nesting is bounded
/// before the decoder runs ([`limits`]): kube's decoders refuse past their depth
/// limit too, and ours would otherwise spend time quadratic in the depth.
pub fn decode_object_as(bytes: &[u8], ct: &str) -> Result<Value, ApiError> {
    if is_protobuf_body(bytes) || ct == "application/vnd.kubernetes.protobuf" {
        let v = decode_protobuf(bytes)?;
        limits::check_value(&v).map_err(|e| e.to_api("failed to decode the protobuf body"))?;
        return Ok(v);
    }
    let v: Value = match ct {
        "" | "application/json" | "*/*" => {
            let json_err = |e: &dyn std::fmt::Display| {
                ApiError::bad_request(format!("couldn't get version/kind; json parse error: {e}"))
            };
            limits::scan_json(bytes, limits::MAX_DEPTH).map_err(|e| json_err(&e))?;
            serde_json::from_slice(bytes).map_err(|e| json_err(&e))?
        }
        "application/yaml" | "application/x-yaml" | "text/yaml" => {
            let yaml_err = |e: &dyn std::fmt::Display| {
                ApiError::bad_request(format!("error converting YAML to JSON: yaml: {e}"))
            };
            limits::scan_yaml(bytes, limits::MAX_DEPTH).map_err(|e| yaml_err(&e))?;
            let v: Value = crate::yaml::from_slice(bytes).map_err(|e| yaml_err(&e))?;
            limits::check_value(&v).map_err(|e| yaml_err(&e))?;
            v
        }
        other => {
            return Err(ApiError::unsupported_media_type(format!(
                "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml (got {other})"
            )))
        }
    };
    if !v.is_object() {
        return Err(ApiError::bad_request(
            "Object 'Kind' is missing: the body must be a JSON object",
        ));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_skips_empty_pairs() {
        let q = Query::parse(Some("&labelSelector=app%3Da&&limit=1"));
        assert_eq!(q.get("labelSelector"), Some("app=a"));
        assert_eq!(q.get("limit"), Some("1"));
        assert_eq!(q.0.len(), 2);
    }

    #[test]
    fn boolean_flags_parse_like_go() {
        let q = Query::parse(Some("watch=True&a=1&b=t&c=false&d=yes&e=TRUE"));
        assert!(q.flag("watch") && q.flag("a") && q.flag("b") && q.flag("e"));
        assert!(!q.flag("c") && !q.flag("d") && !q.flag("missing"));
    }

    #[test]
    fn accept_negotiation() {
        let mut h = HeaderMap::new();
        h.insert(
            http::header::ACCEPT,
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json"
                .parse()
                .unwrap(),
        );
        assert_eq!(wants_aggregated(&h), Some("v2"));
        assert!(!wants_table(&h));
        h.insert(
            http::header::ACCEPT,
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
                .parse()
                .unwrap(),
        );
        assert!(wants_table(&h));
        assert_eq!(wants_aggregated(&h), None);
        assert!(!wants_metadata(&h));
        h.insert(
            http::header::ACCEPT,
            "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
                .parse()
                .unwrap(),
        );
        assert!(wants_metadata(&h) && !wants_table(&h));
    }

    #[test]
    fn manager_names() {
        let mut h = HeaderMap::new();
        assert_eq!(manager(&Query::default(), &h).0, "unknown");
        h.insert(
            http::header::USER_AGENT,
            "kubectl/v1.33.1 (linux/amd64)".parse().unwrap(),
        );
        assert_eq!(manager(&Query::default(), &h).0, "kubectl");
        let q = Query::parse(Some("fieldManager=me"));
        assert_eq!(manager(&q, &h), ("me".to_string(), true));
    }
}
