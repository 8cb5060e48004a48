//! Decoding `application/vnd.kubernetes.protobuf` request bodies into JSON objects.
//!
//! kubectl >= 1.32 sends typed writes (`kubectl create ns|cm|secret|deployment|token`)
//! as protobuf: the magic `k8s\0`, then a `runtime.Unknown` envelope carrying the
//! TypeMeta and the object's own protobuf bytes. The field tables in `schema_gen.rs`
//! (generated from k8s-pb and k8s-openapi) turn those bytes into the JSON the rest of
//! the server handles. Responses stay JSON, which clients accept.

mod schema;
#[allow(clippy::all)]
#[rustfmt::skip]
mod schema_gen;

use base64::Engine;
use schema::{Kind, Special};
use schema_gen::{MESSAGES, ROOTS};
use serde_json::{json, Map, Value};

/// Why a protobuf body could not be decoded.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ProtoError {
    /// The body does not start with the `k8s\0` magic.
    #[error("missing the k8s protobuf magic prefix")]
    NoMagic,
    /// The wire data is malformed.
    #[error("malformed protobuf: {0}")]
    Malformed(&'static str),
    /// The envelope names a kind this server cannot decode.
    #[error("protobuf bodies of kind {0:?} are not supported")]
    Unsupported(String),
}

struct Reader<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn new(b: &'a [u8]) -> Self {
        Reader { b, pos: 0 }
    }

    fn done(&self) -> bool {
        self.pos >= self.b.len()
    }

    fn varint(&mut self) -> Result<u64, ProtoError> {
        let mut v: u64 = 0;
        for shift in (0..64).step_by(7) {
            let byte = *self
                .b
                .get(self.pos)
                .ok_or(ProtoError::Malformed("truncated varint"))?;
            self.pos += 1;
            v |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(ProtoError::Malformed("varint too long"))
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], ProtoError> {
        let end = self
            .pos
            .checked_add(n)
            .ok_or(ProtoError::Malformed("length overflow"))?;
        let s = self
            .b
            .get(self.pos..end)
            .ok_or(ProtoError::Malformed("truncated field"))?;
        self.pos = end;
        Ok(s)
    }

    fn bytes(&mut self) -> Result<&'a [u8], ProtoError> {
        let n = usize::try_from(self.varint()?)
            .map_err(|_| ProtoError::Malformed("length overflow"))?;
        self.take(n)
    }

    /// (field number, wire type).
    fn key(&mut self) -> Result<(u64, u8), ProtoError> {
        let k = self.varint()?;
        Ok((k >> 3, (k & 7) as u8))
    }

    fn skip(&mut self, wt: u8) -> Result<(), ProtoError> {
        match wt {
            0 => self.varint().map(|_| ()),
            1 => self.take(8).map(|_| ()),
            2 => self.bytes().map(|_| ()),
            5 => self.take(4).map(|_| ()),
            _ => Err(ProtoError::Malformed("unsupported wire type")),
        }
    }
}

fn string(b: &[u8]) -> Result<Value, ProtoError> {
    std::str::from_utf8(b)
        .map(|s| json!(s))
        .map_err(|_| ProtoError::Malformed("invalid UTF-8 in a string field"))
}

fn fixed(b: &[u8]) -> [u8; 8] {
    let mut a = [0u8; 8];
    a[..b.len().min(8)].copy_from_slice(&b[..b.len().min(8)]);
    a
}

/// Decodes one scalar or message value of `kind` whose wire type is `wt`.
fn value(r: &mut Reader<'_>, kind: &Kind, wt: u8, depth: usize) -> Result<Value, ProtoError> {
    Ok(match (kind, wt) {
        (Kind::Str, 2) => string(r.bytes()?)?,
        (Kind::Bytes, 2) => json!(base64::engine::general_purpose::STANDARD.encode(r.bytes()?)),
        (Kind::Int, 0) => json!(r.varint()? as i64),
        (Kind::Bool, 0) => json!(r.varint()? != 0),
        (Kind::F64, 1) => json!(f64::from_le_bytes(fixed(r.take(8)?))),
        (Kind::F32, 5) => {
            let b = r.take(4)?;
            json!(f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        }
        (Kind::Msg(i), 2) => message(*i, r.bytes()?, depth + 1)?,
        _ => return Err(ProtoError::Malformed("wire type does not match the field")),
    })
}

fn map_entry(b: &[u8], value_kind: &Kind, depth: usize) -> Result<(String, Value), ProtoError> {
    let mut r = Reader::new(b);
    let (mut k, mut v) = (String::new(), Value::Null);
    while !r.done() {
        let (tag, wt) = r.key()?;
        match tag {
            1 if wt == 2 => {
                k = std::str::from_utf8(r.bytes()?)
                    .map_err(|_| ProtoError::Malformed("invalid map key"))?
                    .to_string()
            }
            2 => v = value(&mut r, value_kind, wt, depth)?,
            _ => r.skip(wt)?,
        }
    }
    if v.is_null() {
        // A present entry with an empty value encodes no value field.
        v = match value_kind {
            Kind::Msg(_) => json!({}),
            _ => json!(""),
        };
    }
    Ok((k, v))
}

fn special(s: &Special, b: &[u8]) -> Result<Value, ProtoError> {
    let mut r = Reader::new(b);
    let mut f: [Option<Value>; 4] = [None, None, None, None];
    let mut ints = [0i64; 4];
    while !r.done() {
        let (tag, wt) = r.key()?;
        let i = tag as usize;
        match (i, wt) {
            (1..=3, 0) => ints[i] = r.varint()? as i64,
            (1..=3, 2) => {
                f[i] = Some(match s {
                    Special::RawJson => {
                        let raw = r.bytes()?;
                        serde_json::from_slice(raw)
                            .unwrap_or_else(|_| json!(String::from_utf8_lossy(raw)))
                    }
                    _ => string(r.bytes()?)?,
                })
            }
            _ => r.skip(wt)?,
        }
    }
    Ok(match s {
        Special::Time | Special::MicroTime => {
            if ints[1] == 0 && ints[2] == 0 {
                Value::Null
            } else {
                let t =
                    chrono::DateTime::from_timestamp(ints[1], ints[2].clamp(0, 999_999_999) as u32)
                        .ok_or(ProtoError::Malformed("timestamp out of range"))?;
                let fmt = if matches!(s, Special::Time) {
                    chrono::SecondsFormat::Secs
                } else {
                    chrono::SecondsFormat::Micros
                };
                json!(t.to_rfc3339_opts(fmt, true))
            }
        }
        Special::Duration => {
            let secs = ints[1] / 1_000_000_000;
            let (h, m, s2) = (secs / 3600, (secs % 3600) / 60, secs % 60);
            json!(if h > 0 {
                format!("{h}h{m}m{s2}s")
            } else if m > 0 {
                format!("{m}m{s2}s")
            } else {
                format!("{s2}s")
            })
        }
        Special::RawJson => f[1].take().unwrap_or(Value::Null),
        Special::Quantity => f[1].take().unwrap_or(json!("0")),
        Special::IntOrString => {
            if ints[1] == 1 {
                f[3].take().unwrap_or(json!(""))
            } else {
                json!(ints[2])
            }
        }
        Special::None => Value::Null,
    })
}

/// Decodes message `idx` of the generated table.
fn message(idx: usize, b: &[u8], depth: usize) -> Result<Value, ProtoError> {
    if depth > 64 {
        return Err(ProtoError::Malformed("nesting too deep"));
    }
    let msg = MESSAGES
        .get(idx)
        .ok_or(ProtoError::Malformed("bad schema index"))?;
    if !matches!(msg.special, Special::None) {
        return special(&msg.special, b);
    }
    let mut out = Map::new();
    let mut r = Reader::new(b);
    while !r.done() {
        let (tag, wt) = r.key()?;
        let Some(field) = msg.fields.iter().find(|f| u64::from(f.0) == tag) else {
            r.skip(wt)?;
            continue;
        };
        let name = field.1;
        match &field.2 {
            Kind::Inline(i) => {
                if wt != 2 {
                    return Err(ProtoError::Malformed(
                        "embedded struct is not length-delimited",
                    ));
                }
                if let Value::Object(inner) = message(*i, r.bytes()?, depth + 1)? {
                    out.extend(inner);
                }
            }
            Kind::MapString | Kind::MapBytes | Kind::MapMsg(_) => {
                let vk = match &field.2 {
                    Kind::MapString => Kind::Str,
                    Kind::MapBytes => Kind::Bytes,
                    Kind::MapMsg(i) => Kind::Msg(*i),
                    _ => Kind::Str,
                };
                if wt != 2 {
                    return Err(ProtoError::Malformed("map entry is not length-delimited"));
                }
                let (k, v) = map_entry(r.bytes()?, &vk, depth)?;
                if let Value::Object(m) = out.entry(name).or_insert_with(|| json!({})) {
                    m.insert(k, v);
                }
            }
            kind if field.3 => {
                let arr = out.entry(name).or_insert_with(|| json!([]));
                let scalar = matches!(kind, Kind::Int | Kind::Bool | Kind::F64 | Kind::F32);
                if scalar && wt == 2 {
                    // Packed repeated scalars.
                    let mut pr = Reader::new(r.bytes()?);
                    let inner_wt = match kind {
                        Kind::F64 => 1,
                        Kind::F32 => 5,
                        _ => 0,
                    };
                    while !pr.done() {
                        let v = value(&mut pr, kind, inner_wt, depth)?;
                        if let Value::Array(a) = arr {
                            a.push(v);
                        }
                    }
                } else {
                    let v = value(&mut r, kind, wt, depth)?;
                    if let Value::Array(a) = arr {
                        a.push(v);
                    }
                }
            }
            kind => {
                let v = value(&mut r, kind, wt, depth)?;
                out.insert(name.to_string(), v);
            }
        }
    }
    // Like Go's `omitempty`: unset strings, zero times and empty lists/maps vanish.
    out.retain(|_, v| match v {
        Value::Null => false,
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        _ => true,
    });
    Ok(Value::Object(out))
}

/// Decodes a `k8s\0`-prefixed protobuf body into the JSON object it encodes.
pub fn decode(body: &[u8]) -> Result<Value, ProtoError> {
    let rest = body.strip_prefix(b"k8s\0").ok_or(ProtoError::NoMagic)?;
    let mut r = Reader::new(rest);
    let (mut api_version, mut kind, mut raw) = (String::new(), String::new(), None);
    while !r.done() {
        let (tag, wt) = r.key()?;
        match (tag, wt) {
            (1, 2) => {
                let mut tm = Reader::new(r.bytes()?);
                while !tm.done() {
                    let (t, w) = tm.key()?;
                    match (t, w) {
                        (1, 2) => api_version = String::from_utf8_lossy(tm.bytes()?).into_owned(),
                        (2, 2) => kind = String::from_utf8_lossy(tm.bytes()?).into_owned(),
                        _ => tm.skip(w)?,
                    }
                }
            }
            (2, 2) => raw = Some(r.bytes()?),
            _ => r.skip(wt)?,
        }
    }
    let group = api_version.rsplit_once('/').map(|(g, _)| g).unwrap_or("");
    let idx = ROOTS
        .iter()
        .find(|(g, k, _)| *g == group && *k == kind)
        .map(|(_, _, i)| *i)
        .ok_or_else(|| ProtoError::Unsupported(format!("{api_version}/{kind}")))?;
    let mut obj = message(idx, raw.unwrap_or(&[]), 0)?;
    if let Some(o) = obj.as_object_mut() {
        o.insert("apiVersion".into(), json!(api_version));
        o.insert("kind".into(), json!(kind));
    }
    Ok(obj)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn varint(mut v: u64, out: &mut Vec<u8>) {
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(b);
                return;
            }
            out.push(b | 0x80);
        }
    }

    fn field(tag: u64, payload: &[u8], out: &mut Vec<u8>) {
        varint(tag << 3 | 2, out);
        varint(payload.len() as u64, out);
        out.extend_from_slice(payload);
    }

    fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
        let mut tm = Vec::new();
        field(1, api_version.as_bytes(), &mut tm);
        field(2, kind.as_bytes(), &mut tm);
        let mut body = b"k8s\0".to_vec();
        field(1, &tm, &mut body);
        field(2, raw, &mut body);
        body
    }

    #[test]
    fn decodes_a_configmap() {
        // metadata{name:"x", namespace:""}, data{"a":"b"}, immutable:false
        let mut meta = Vec::new();
        field(1, b"x", &mut meta);
        field(3, b"", &mut meta);
        let mut entry = Vec::new();
        field(1, b"a", &mut entry);
        field(2, b"b", &mut entry);
        let mut raw = Vec::new();
        field(1, &meta, &mut raw);
        field(2, &entry, &mut raw);
        varint(4 << 3, &mut raw);
        varint(0, &mut raw);
        let v = decode(&envelope("v1", "ConfigMap", &raw)).unwrap();
        assert_eq!(
            v,
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"a": "b"}, "immutable": false})
        );
    }

    #[test]
    fn decodes_a_secret_with_bytes_and_a_namespace() {
        let mut meta = Vec::new();
        field(1, b"s", &mut meta);
        let mut entry = Vec::new();
        field(1, b"k", &mut entry);
        field(2, b"\x00\x01", &mut entry);
        let mut raw = Vec::new();
        field(1, &meta, &mut raw);
        field(2, &entry, &mut raw);
        field(3, b"Opaque", &mut raw);
        let v = decode(&envelope("v1", "Secret", &raw)).unwrap();
        assert_eq!(v["data"]["k"], "AAE=");
        assert_eq!(v["type"], "Opaque");
        let mut ns_raw = Vec::new();
        field(1, &meta, &mut ns_raw);
        let ns = decode(&envelope("v1", "Namespace", &ns_raw)).unwrap();
        assert_eq!(ns["metadata"]["name"], "s");
    }

    #[test]
    fn rejects_garbage_without_panicking() {
        assert_eq!(decode(b"nope"), Err(ProtoError::NoMagic));
        assert!(decode(b"k8s\0\x0a\xff").is_err());
        assert!(matches!(
            decode(&envelope("example.com/v1", "Widget", b"")),
            Err(ProtoError::Unsupported(_))
        ));
        for n in 0..64u8 {
            let mut b = b"k8s\0".to_vec();
            b.extend((0..n).map(|i| i.wrapping_mul(37)));
            let _ = decode(&b);
        }
    }

    #[test]
    fn every_root_kind_is_served() {
        let defs = crate::resources::builtins();
        for (g, k, _) in ROOTS {
            assert!(
                defs.iter().any(|d| d.group == *g && d.kind == *k) || *k == "TokenRequest",
                "{g}/{k}"
            );
        }
    }
}
