//! Content hash: sha256 over a canonical JSON of the object without server-managed metadata.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// `metadata` fields the API server changes on its own; excluded from the content hash
/// so that only real content changes produce a new hash.
pub const VOLATILE_METADATA_FIELDS: [&str; 7] = [
    "resourceVersion",
    "uid",
    "generation",
    "creationTimestamp",
    "managedFields",
    "selfLink",
    "deletionTimestamp",
];

/// The object with [`VOLATILE_METADATA_FIELDS`] removed from `metadata` (everything else,
/// including `status`, is kept). Idempotent.
pub fn normalize_for_hash(object: &Value) -> Value {
    let mut out = object.clone();
    if let Some(meta) = out.get_mut("metadata").and_then(Value::as_object_mut) {
        for field in VOLATILE_METADATA_FIELDS {
            meta.remove(field);
        }
    }
    out
}

/// Canonical JSON: no whitespace, object members sorted by key (byte order of the UTF-8
/// key), strings escaped as in RFC 8785 (`\"`, `\\`, `\b \t \n \f \r`, other control
/// characters `\u00xx` in lower-case hex, everything else as raw UTF-8), integers in
/// decimal, and other numbers as ECMAScript's `Number.prototype.toString` writes them (as
/// in RFC 8785; see [`ecmascript_number`]). Independent of map insertion order and of the
/// float formatting of any serde_json version.
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                write_canonical(v, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(v, out);
            }
            out.push(']');
        }
        Value::Number(n) => match n.as_f64() {
            // Integers (what Kubernetes uses) keep every digit, even beyond 2^53.
            Some(f) if n.is_f64() => out.push_str(&ecmascript_number(f)),
            _ => out.push_str(&n.to_string()),
        },
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// A finite float as ECMAScript's `Number.prototype.toString` (ECMA-262 Number::toString,
/// as used by RFC 8785): shortest round-trip digits; `1.0` is `1`, `-0.0` is `0`, `0.1` is
/// `0.1`, `1e21` is `1e+21`, `1.5e-7` is `1.5e-7`. Non-finite values (which JSON cannot
/// hold) are written `null`.
pub fn ecmascript_number(f: f64) -> String {
    if !f.is_finite() {
        return "null".to_owned();
    }
    if f == 0.0 {
        return "0".to_owned();
    }
    // Rust's `{:e}` prints the shortest digits that round-trip: `-1.5e-7`, `1e21`.
    let sci = format!("{:e}", f.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let exp: i64 = exp.parse().unwrap_or(0);
    let k = i64::try_from(digits.len()).unwrap_or(i64::MAX);
    // `n`: position of the decimal point relative to the digits (value = 0.digits × 10^n).
    let n = exp + 1;
    let mut out = String::new();
    if f < 0.0 {
        out.push('-');
    }
    let zeros = |count: i64| "0".repeat(usize::try_from(count).unwrap_or(0));
    if k <= n && n <= 21 {
        out.push_str(&digits);
        out.push_str(&zeros(n - k));
    } else if 0 < n && n <= 21 {
        let (int, frac) = digits.split_at(usize::try_from(n).unwrap_or(0));
        out.push_str(int);
        out.push('.');
        out.push_str(frac);
    } else if -6 < n && n <= 0 {
        out.push_str("0.");
        out.push_str(&zeros(-n));
        out.push_str(&digits);
    } else {
        let (first, rest) = digits.split_at(1);
        out.push_str(first);
        if !rest.is_empty() {
            out.push('.');
            out.push_str(rest);
        }
        out.push('e');
        out.push(if n - 1 < 0 { '-' } else { '+' });
        out.push_str(&(n - 1).abs().to_string());
    }
    out
}

/// Lowercase hex sha256 of the canonical JSON of the normalized object.
pub fn content_hash(object: &Value) -> String {
    let digest = Sha256::digest(canonical_json(&normalize_for_hash(object)).as_bytes());
    hex::encode(digest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn canonical_form() {
        let v = json!({"b": [1, 2.5, "x\"y"], "a": {"d": null, "c": true}});
        assert_eq!(
            canonical_json(&v),
            r#"{"a":{"c":true,"d":null},"b":[1,2.5,"x\"y"]}"#
        );
    }

    #[test]
    fn numbers_follow_ecmascript() {
        // Expected strings from ECMAScript `String(x)` (node/browsers), as in RFC 8785.
        for (f, want) in [
            (1.0, "1"),
            (-0.0, "0"),
            (0.1, "0.1"),
            (-2.5, "-2.5"),
            (100.0, "100"),
            (1e20, "100000000000000000000"),
            (1e21, "1e+21"),
            (1.5e21, "1.5e+21"),
            (123_456.789, "123456.789"),
            (0.000_001, "0.000001"),
            (1.5e-7, "1.5e-7"),
            (1e-7, "1e-7"),
            (5e-324, "5e-324"),
            (f64::MAX, "1.7976931348623157e+308"),
            (9_007_199_254_740_993.0, "9007199254740992"),
            (0.1 + 0.2, "0.30000000000000004"),
        ] {
            assert_eq!(ecmascript_number(f), want, "{f:e}");
        }
    }

    #[test]
    fn strings_and_numbers_are_pinned() {
        let v: Value = serde_json::from_str(
            r#"{"s":"q\" b\\ \b\f\n\r\t \u0001\u001f \u007f / é \u2028 😀","n":[0,-7,18446744073709551615,-9223372036854775808,1.0,0.1,1e21,-0.0]}"#,
        )
        .unwrap();
        assert_eq!(
            canonical_json(&v),
            "{\"n\":[0,-7,18446744073709551615,-9223372036854775808,1,0.1,1e+21,0],\"s\":\"q\\\" b\\\\ \\b\\f\\n\\r\\t \\u0001\\u001f \u{7f} / é \u{2028} 😀\"}"
        );
    }

    #[test]
    fn hash_ignores_volatile_metadata_only() {
        let a = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "x", "resourceVersion": "1", "uid": "u1"}, "data": {"k": "v"}});
        let b = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "x", "resourceVersion": "2", "uid": "u2",
                         "managedFields": [{"manager": "kubectl"}]}, "data": {"k": "v"}});
        let c = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "x"}, "data": {"k": "w"}});
        assert_eq!(content_hash(&a), content_hash(&b));
        assert_ne!(content_hash(&a), content_hash(&c));
        assert_eq!(content_hash(&a).len(), 64);
        // Pinned: a change here changes every hash on the wire.
        assert_eq!(
            content_hash(&json!({})),
            "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
        );
    }
}
