//! Types of the generated protobuf field tables.
// The generator may emit any variant; the current set of root kinds does not use all.
#![allow(dead_code)]

/// How a field's value is encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// string
    Str,
    /// int32/int64/uint*
    Int,
    /// bool
    Bool,
    /// double
    F64,
    /// float
    F32,
    /// bytes (JSON: base64)
    Bytes,
    /// A nested message (index into MESSAGES).
    Msg(usize),
    /// An embedded Go struct (`json:",inline"`): its fields merge into the parent.
    Inline(usize),
    /// map<string, string>
    MapString,
    /// map<string, bytes>
    MapBytes,
    /// map<string, message>
    MapMsg(usize),
}

/// Messages with a JSON form that is not an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Special {
    /// An ordinary message.
    None,
    /// metav1.Time: RFC 3339 seconds.
    Time,
    /// metav1.MicroTime: RFC 3339 microseconds.
    MicroTime,
    /// metav1.Duration: Go duration string.
    Duration,
    /// runtime.RawExtension / FieldsV1: embedded JSON bytes.
    RawJson,
    /// intstr.IntOrString.
    IntOrString,
    /// resource.Quantity: its string.
    Quantity,
}

/// (tag, JSON name, kind, repeated).
#[derive(Debug)]
pub struct Field(pub u32, pub &'static str, pub Kind, pub bool);

/// One message.
#[derive(Debug)]
pub struct Msg {
    /// k8s-pb module path and name.
    pub name: &'static str,
    /// Non-object JSON form, if any.
    pub special: Special,
    /// Fields by tag.
    pub fields: &'static [Field],
}
