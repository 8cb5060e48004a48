//! Limits on request bodies and stored objects, checked before any expensive work.
//!
//! kube-apiserver refuses JSON nested deeper than 10000 levels
//! (sigs.k8s.io/json, Go's `encoding/json` scanner: "exceeded max depth") and YAML
//! deeper than 10000 (go-yaml: "exceeded max depth of 10000"). This server keeps a
//! much lower bound, [`MAX_DEPTH`], because every object it stores must stay
//! readable by serde_json's default recursion limit (128: its own redb store,
//! kube-rs clients) even inside the envelopes it is served in (a watch event adds
//! one level, a list two, a Table row three, managedFields mirror the object four
//! levels down), and because its merge, patch and managedFields code recurses.
//! The README lists both values.

use crate::status::ApiError;
use serde_json::Value;

/// Deepest nesting (objects and arrays, the top-level object counting as 1)
/// accepted in a request body or in the result of a write.
pub const MAX_DEPTH: usize = 100;

/// kube-apiserver's limit, for messages and docs.
pub const KUBE_MAX_DEPTH: usize = 10_000;

/// Why a document was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitError {
    /// Nesting deeper than [`MAX_DEPTH`].
    #[error("exceeded max depth of {max}")]
    Depth {
        /// The limit.
        max: usize,
    },
}

impl LimitError {
    /// The 400 a request gets for it.
    pub fn to_api(&self, what: &str) -> ApiError {
        ApiError::bad_request(format!("{what}: {self}"))
    }
}

/// Scans JSON text for nesting deeper than `max`, without parsing it: one pass,
/// no allocation. Brackets inside strings do not count; malformed text is left
/// for the real decoder to refuse.
pub fn scan_json(bytes: &[u8], max: usize) -> Result<(), LimitError> {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for &b in bytes {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            _ => track_bracket(b, &mut depth, max)?,
        }
    }
    Ok(())
}

/// Counts one byte of a bracket scan: `[`/`{` open a level (refused past
/// `max`), `]`/`}` close one, anything else is ignored.
fn track_bracket(b: u8, depth: &mut usize, max: usize) -> Result<(), LimitError> {
    match b {
        b'[' | b'{' => {
            *depth += 1;
            if *depth > max {
                return Err(LimitError::Depth { max });
            }
        }
        b']' | b'}' => *depth = depth.saturating_sub(1),
        _ => {}
    }
    Ok(())
}

/// Scans YAML text for flow collections (`[`, `{`) nested deeper than `max`.
///
/// libyaml's cost grows with the flow nesting level for every token (its simple
/// key stack), so this runs before it. It is a lexical approximation: quoted
/// scalars (a quote at the start of a token) and comments are skipped, every
/// other bracket counts. Block nesting is bounded by indentation and refused
/// after decoding by [`check_value`].
pub fn scan_yaml(bytes: &[u8], max: usize) -> Result<(), LimitError> {
    let mut depth = 0usize;
    let mut i = 0usize;
    let mut prev = b'\n';
    while i < bytes.len() {
        let b = bytes[i];
        let token_start = matches!(prev, b' ' | b'\t' | b'\n' | b'\r' | b'[' | b'{' | b',');
        match b {
            b'#' if token_start => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
                prev = b'\n';
                continue;
            }
            b'"' if token_start => {
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    if bytes[i] == b'\\' {
                        i += 1;
                    }
                    i += 1;
                }
            }
            b'\'' if token_start => {
                i += 1;
                while i < bytes.len() {
                    if bytes[i] == b'\'' {
                        if bytes.get(i + 1) == Some(&b'\'') {
                            i += 2;
                            continue;
                        }
                        break;
                    }
                    i += 1;
                }
            }
            _ => track_bracket(b, &mut depth, max)?,
        }
        prev = b;
        i += 1;
    }
    Ok(())
}

/// The nesting depth of a decoded value (a scalar is 0, `{}` is 1). Iterative, so
/// a value of any depth is measured without recursion.
pub fn value_depth(v: &Value) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(v, 0usize)];
    while let Some((v, d)) = stack.pop() {
        match v {
            Value::Array(a) => {
                deepest = deepest.max(d + 1);
                stack.extend(a.iter().map(|c| (c, d + 1)));
            }
            Value::Object(o) => {
                deepest = deepest.max(d + 1);
                stack.extend(o.values().map(|c| (c, d + 1)));
            }
            _ => {}
        }
    }
    deepest
}

/// Refuses a decoded value nested deeper than [`MAX_DEPTH`].
pub fn check_value(v: &Value) -> Result<(), LimitError> {
    if value_depth(v) > MAX_DEPTH {
        return Err(LimitError::Depth { max: MAX_DEPTH });
    }
    Ok(())
}

/// Largest object a write may store, as JSON: the request body limit, so every
/// stored object could also have been sent in one body. (kube-apiserver's bound
/// is etcd's request limit, 1.5 MiB by default.)
pub const MAX_OBJECT_BYTES: usize = 3 * 1024 * 1024;

/// Counts serialised bytes without keeping them.
struct CountingSink(usize);

impl std::io::Write for CountingSink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 = self.0.saturating_add(buf.len());
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The size of `v` as compact JSON.
pub fn json_size(v: &Value) -> usize {
    let mut sink = CountingSink(0);
    // Writing to a sink that never fails cannot fail for a `Value`.
    let _ = serde_json::to_writer(&mut sink, v);
    sink.0
}

/// Refuses the result of a write (create, update, any patch, apply, a
/// subresource write) that a request body of the same shape would be refused
/// for: repeated patches must not grow an object past what a body may hold.
/// Depth is checked first, so the size count never recurses too deep.
pub fn check_object(v: &Value) -> Result<(), ApiError> {
    check_value(v).map_err(|e| e.to_api("the resulting object is invalid"))?;
    let size = json_size(v);
    if size > MAX_OBJECT_BYTES {
        return Err(ApiError::other(
            413,
            "RequestEntityTooLarge",
            format!(
                "Request entity too large: the resulting object is {size} bytes, limit is {MAX_OBJECT_BYTES}"
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn nested(open: &str, close: &str, n: usize) -> String {
        format!("{}{}", open.repeat(n), close.repeat(n))
    }

    #[test]
    fn json_scan_counts_only_structure() {
        assert!(scan_json(nested("[", "]", 100).as_bytes(), 100).is_ok());
        assert!(scan_json(nested("[", "]", 101).as_bytes(), 100).is_err());
        let in_string = format!("{{\"a\": \"{}\\\"{}\"}}", "[".repeat(500), "{".repeat(500));
        assert!(scan_json(in_string.as_bytes(), 100).is_ok());
        // Siblings do not add up.
        let wide = "[[1],[2],[3]]".repeat(1000);
        assert!(scan_json(wide.as_bytes(), 2).is_ok());
    }

    #[test]
    fn yaml_scan_skips_quotes_and_comments() {
        let deep = format!("data: {{x: {}}}\n", nested("[", "]", 200));
        assert!(scan_yaml(deep.as_bytes(), 100).is_err());
        let quoted = format!(
            "a: '{}'\nb: \"{}\"\n# {}\nc: x[y]\n",
            "[".repeat(300),
            "{".repeat(300),
            "[".repeat(300)
        );
        assert!(scan_yaml(quoted.as_bytes(), 100).is_ok());
        assert!(scan_yaml(b"a: [[1], {b: [2]}]\n", 3).is_ok());
        assert!(scan_yaml(b"a: [[1], {b: [2]}]\n", 2).is_err());
    }

    #[test]
    fn value_depth_is_iterative() {
        assert_eq!(value_depth(&json!(1)), 0);
        assert_eq!(value_depth(&json!({"a": [1, {"b": {}}]})), 4);
        let mut v = json!(0);
        for _ in 0..100_000 {
            v = Value::Array(vec![v]);
        }
        assert_eq!(value_depth(&v), 100_000);
        assert!(check_value(&v).is_err());
        // Dropping a value this deep recurses; leak it instead in this test.
        std::mem::forget(v);
    }
}
