//! The JSONPath subset kube-apiserver evaluates for CRD additionalPrinterColumns
//! (k8s.io/client-go/util/jsonpath, wrapped in `{...}`, missing keys allowed).
//!
//! Supported: `.a.b`, `$.a`, `.a[0]`, `.a[-1]`, `.a[1:3]`, `.a[*].b`, `.*`, `..b`,
//! `['fleetbus.io/x']`, `.labels.fleetbus\.io/x`, and filters
//! `[?(@.type=="Ready")]` with `==`, `!=`, `<`, `<=`, `>`, `>=` against string,
//! number and boolean literals, or `[?(@.x)]` (exists). Anything else is a
//! [`JsonPathError`]; a table cell of a malformed column is empty, as in kube.

use serde_json::Value;

/// Why a printer-column path could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JsonPathError {
    /// The expression ended inside a bracket, quote or filter.
    #[error("unterminated expression at byte {0}")]
    Unterminated(usize),
    /// A character that starts no supported step.
    #[error("unexpected {found:?} at byte {at}")]
    Unexpected {
        /// The offending character.
        found: char,
        /// Its byte offset in the expression.
        at: usize,
    },
    /// A bracket whose content is neither an index, a slice, `*`, a quoted key nor a filter.
    #[error("unsupported subscript [{0}]")]
    Subscript(String),
    /// A filter that is not `@.path`, optionally compared with a literal.
    #[error("unsupported filter ?({0})")]
    Filter(String),
}

/// One step of a path.
#[derive(Debug, Clone, PartialEq)]
enum Step {
    /// `.name` or `['name']`.
    Field(String),
    /// `.*` or `[*]`: every child of an object or array.
    Wildcard,
    /// `..name`: `name` at any depth.
    Recursive(String),
    /// `[n]`; negative counts from the end.
    Index(i64),
    /// `[a:b]`.
    Slice(Option<i64>, Option<i64>),
    /// `[?(...)]`.
    Filter(Filter),
}

#[derive(Debug, Clone, PartialEq)]
struct Filter {
    path: Vec<Step>,
    cmp: Option<(Op, Value)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

/// A parsed path, evaluated with [`JsonPath::find`].
#[derive(Debug, Clone, PartialEq)]
pub struct JsonPath {
    steps: Vec<Step>,
}

impl JsonPath {
    /// Parses a printer column's `jsonPath` (with or without the surrounding `{}`).
    pub fn parse(expr: &str) -> Result<JsonPath, JsonPathError> {
        let t = expr.trim();
        let inner = t
            .strip_prefix('{')
            .and_then(|s| s.strip_suffix('}'))
            .unwrap_or(t);
        let inner = inner.strip_prefix('$').unwrap_or(inner);
        let mut p = Parser {
            s: inner.as_bytes(),
            src: inner,
            i: 0,
        };
        let steps = p.steps(false)?;
        Ok(JsonPath { steps })
    }

    /// Every value the path selects in `root`, in document order (kube prints the first).
    pub fn find<'a>(&self, root: &'a Value) -> Vec<&'a Value> {
        eval(&self.steps, vec![root])
    }
}

struct Parser<'s> {
    s: &'s [u8],
    src: &'s str,
    i: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn unexpected(&self) -> JsonPathError {
        match self.src.get(self.i..).and_then(|r| r.chars().next()) {
            Some(found) => JsonPathError::Unexpected { found, at: self.i },
            None => JsonPathError::Unterminated(self.i),
        }
    }

    /// Steps until the end (or, inside a filter, until an operator or `)`).
    fn steps(&mut self, in_filter: bool) -> Result<Vec<Step>, JsonPathError> {
        let mut steps = Vec::new();
        loop {
            match self.peek() {
                None => return Ok(steps),
                Some(b'.') => {
                    self.i += 1;
                    if self.peek() == Some(b'.') {
                        self.i += 1;
                        steps.push(Step::Recursive(self.name()?));
                    } else if self.peek() == Some(b'*') {
                        self.i += 1;
                        steps.push(Step::Wildcard);
                    } else if self.peek().is_none() && steps.is_empty() {
                        // `{.}` is the whole object.
                        return Ok(steps);
                    } else {
                        steps.push(Step::Field(self.name()?));
                    }
                }
                Some(b'[') => steps.push(self.subscript()?),
                Some(b' ' | b'=' | b'!' | b'<' | b'>' | b')') if in_filter => return Ok(steps),
                Some(_) => return Err(self.unexpected()),
            }
        }
    }

    /// A field name after `.`: up to the next `.`, `[`, space or operator; `\.` is a literal dot.
    fn name(&mut self) -> Result<String, JsonPathError> {
        let mut out = String::new();
        while let Some(c) = self.peek() {
            match c {
                b'\\' if self.s.get(self.i + 1) == Some(&b'.') => {
                    out.push('.');
                    self.i += 2;
                }
                b'.' | b'[' | b']' | b' ' | b'=' | b'!' | b'<' | b'>' | b'(' | b')' | b'{'
                | b'}' | b'\'' | b'"' | b'@' | b'$' | b'*' | b'?' => break,
                _ => {
                    let ch = self
                        .src
                        .get(self.i..)
                        .and_then(|r| r.chars().next())
                        .ok_or(JsonPathError::Unterminated(self.i))?;
                    out.push(ch);
                    self.i += ch.len_utf8();
                }
            }
        }
        if out.is_empty() {
            return Err(self.unexpected());
        }
        Ok(out)
    }

    /// `[...]` with the cursor on `[`.
    fn subscript(&mut self) -> Result<Step, JsonPathError> {
        let open = self.i;
        self.i += 1;
        if self.peek() == Some(b'?') {
            return self.filter(open);
        }
        let close = self
            .closing(b']')
            .ok_or(JsonPathError::Unterminated(open))?;
        let body = self.src.get(self.i..close).unwrap_or("").trim();
        self.i = close + 1;
        let bad = || JsonPathError::Subscript(body.to_string());
        if body == "*" {
            return Ok(Step::Wildcard);
        }
        if let Some(key) = unquote(body) {
            return Ok(Step::Field(key));
        }
        if let Some((a, b)) = body.split_once(':') {
            // `[a:b:step]` is valid kube JSONPath but never used by printer columns.
            let bound = |s: &str| -> Result<Option<i64>, JsonPathError> {
                let s = s.trim();
                if s.is_empty() {
                    Ok(None)
                } else {
                    s.parse().map(Some).map_err(|_| bad())
                }
            };
            return Ok(Step::Slice(bound(a)?, bound(b)?));
        }
        body.parse().map(Step::Index).map_err(|_| bad())
    }

    /// Byte offset of the next `end` outside quotes.
    fn closing(&self, end: u8) -> Option<usize> {
        let mut quote = None;
        for (k, &c) in self.s.iter().enumerate().skip(self.i) {
            match (quote, c) {
                (Some(q), c) if c == q => quote = None,
                (Some(_), _) => {}
                (None, b'\'' | b'"') => quote = Some(c),
                (None, c) if c == end => return Some(k),
                _ => {}
            }
        }
        None
    }

    /// `[?(@.path op literal)]` with the cursor on `?`.
    fn filter(&mut self, open: usize) -> Result<Step, JsonPathError> {
        self.i += 1;
        let close = self
            .closing(b']')
            .ok_or(JsonPathError::Unterminated(open))?;
        let whole = self.src.get(self.i..close).unwrap_or("").trim();
        let bad = || JsonPathError::Filter(whole.to_string());
        let body = whole
            .strip_prefix('(')
            .and_then(|b| b.strip_suffix(')'))
            .ok_or_else(bad)?
            .trim();
        let rest = body.strip_prefix('@').ok_or_else(bad)?;
        let mut sub = Parser {
            s: rest.as_bytes(),
            src: rest,
            i: 0,
        };
        let path = sub.steps(true).map_err(|_| bad())?;
        let tail = rest.get(sub.i..).unwrap_or("").trim();
        let cmp = if tail.is_empty() {
            None
        } else {
            let ops = [
                ("==", Op::Eq),
                ("!=", Op::Ne),
                ("<=", Op::Le),
                (">=", Op::Ge),
                ("<", Op::Lt),
                (">", Op::Gt),
            ];
            let (op, lit) = ops
                .iter()
                .find_map(|(t, op)| tail.strip_prefix(t).map(|l| (*op, l.trim())))
                .ok_or_else(bad)?;
            Some((op, literal(lit).ok_or_else(bad)?))
        };
        self.i = close + 1;
        Ok(Step::Filter(Filter { path, cmp }))
    }
}

/// `'x'` or `"x"` without the quotes.
fn unquote(s: &str) -> Option<String> {
    let q = s.chars().next().filter(|c| *c == '\'' || *c == '"')?;
    let inner = s.strip_prefix(q)?.strip_suffix(q)?;
    (!inner.contains(q)).then(|| inner.to_string())
}

/// A filter's right-hand side: quoted string, number, `true`/`false`.
fn literal(s: &str) -> Option<Value> {
    if let Some(q) = unquote(s) {
        return Some(Value::String(q));
    }
    match s {
        "true" => Some(Value::Bool(true)),
        "false" => Some(Value::Bool(false)),
        _ => serde_json::from_str::<serde_json::Number>(s)
            .ok()
            .map(Value::Number),
    }
}

fn eval<'a>(steps: &[Step], mut cur: Vec<&'a Value>) -> Vec<&'a Value> {
    for step in steps {
        let mut next = Vec::new();
        for v in cur {
            apply(step, v, &mut next);
        }
        cur = next;
    }
    cur
}

fn apply<'a>(step: &Step, v: &'a Value, out: &mut Vec<&'a Value>) {
    match step {
        Step::Field(k) => out.extend(v.as_object().and_then(|m| m.get(k))),
        Step::Wildcard => match v {
            Value::Object(m) => out.extend(m.values()),
            Value::Array(a) => out.extend(a.iter()),
            _ => {}
        },
        Step::Recursive(k) => recurse(k, v, out),
        Step::Index(n) => {
            if let Some(a) = v.as_array() {
                out.extend(resolve(*n, a.len()).and_then(|i| a.get(i)));
            }
        }
        Step::Slice(from, to) => {
            if let Some(a) = v.as_array() {
                let len = a.len();
                let clamp = |b: i64| -> usize {
                    let b = if b < 0 { b + len as i64 } else { b };
                    b.clamp(0, len as i64) as usize
                };
                let start = from.map_or(0, clamp);
                let end = to.map_or(len, clamp);
                if start < end {
                    out.extend(a.get(start..end).into_iter().flatten());
                }
            }
        }
        Step::Filter(f) => {
            if let Some(a) = v.as_array() {
                out.extend(a.iter().filter(|item| f.matches(item)));
            }
        }
    }
}

fn resolve(n: i64, len: usize) -> Option<usize> {
    let i = if n < 0 { n.checked_add(len as i64)? } else { n };
    usize::try_from(i).ok().filter(|i| *i < len)
}

fn recurse<'a>(k: &str, v: &'a Value, out: &mut Vec<&'a Value>) {
    match v {
        Value::Object(m) => {
            out.extend(m.get(k));
            for child in m.values() {
                recurse(k, child, out);
            }
        }
        Value::Array(a) => {
            for child in a {
                recurse(k, child, out);
            }
        }
        _ => {}
    }
}

impl Filter {
    fn matches(&self, item: &Value) -> bool {
        let found = eval(&self.path, vec![item]);
        let Some((op, lit)) = &self.cmp else {
            return !found.is_empty();
        };
        found.iter().any(|v| compare(v, *op, lit))
    }
}

fn compare(v: &Value, op: Op, lit: &Value) -> bool {
    use std::cmp::Ordering;
    let ord = match (v, lit) {
        (Value::Number(a), Value::Number(b)) => match (a.as_f64(), b.as_f64()) {
            (Some(a), Some(b)) => a.partial_cmp(&b),
            _ => None,
        },
        (Value::String(a), Value::String(b)) => Some(a.cmp(b)),
        (Value::Bool(a), Value::Bool(b)) => Some(a.cmp(b)),
        // kube errors on mismatched types and prints an empty cell; no match is the closest.
        _ => None,
    };
    match (op, ord) {
        (_, None) => false,
        (Op::Eq, Some(o)) => o == Ordering::Equal,
        (Op::Ne, Some(o)) => o != Ordering::Equal,
        (Op::Lt, Some(o)) => o == Ordering::Less,
        (Op::Le, Some(o)) => o != Ordering::Greater,
        (Op::Gt, Some(o)) => o == Ordering::Greater,
        (Op::Ge, Some(o)) => o != Ordering::Less,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj() -> Value {
        json!({
            "metadata": {"name": "a", "labels": {"fleetbus.io/x": "lx", "app": "web"}},
            "spec": {"replicas": 3, "paused": false, "ratio": 1.5,
                     "ports": [{"port": 80, "name": "http"}, {"port": 443, "name": "https"}]},
            "status": {"conditions": [
                {"type": "Ready", "status": "False", "gen": 1},
                {"type": "ClustersSynced", "status": "True", "gen": 2, "ok": true}
            ]}
        })
    }

    fn find(expr: &str) -> Vec<Value> {
        let o = obj();
        JsonPath::parse(expr)
            .unwrap()
            .find(&o)
            .into_iter()
            .cloned()
            .collect()
    }

    #[test]
    fn fields_indexes_and_wildcards() {
        assert_eq!(find(".metadata.name"), [json!("a")]);
        assert_eq!(find("{.metadata.name}"), [json!("a")]);
        assert_eq!(find("$.spec.replicas"), [json!(3)]);
        assert_eq!(find(".spec.ports[0].port"), [json!(80)]);
        assert_eq!(find(".spec.ports[-1].name"), [json!("https")]);
        assert_eq!(find(".spec.ports[*].port"), [json!(80), json!(443)]);
        assert_eq!(find(".spec.ports[0:1].port"), [json!(80)]);
        assert_eq!(find(".spec.ports.*.name"), [json!("http"), json!("https")]);
        assert_eq!(find("..port"), [json!(80), json!(443)]);
        assert!(find(".spec.ports[7].port").is_empty());
        assert!(find(".spec.missing.deeper").is_empty());
        assert!(find(".spec.replicas.x").is_empty());
    }

    #[test]
    fn quoted_and_escaped_keys() {
        assert_eq!(find(".metadata.labels['fleetbus.io/x']"), [json!("lx")]);
        assert_eq!(find(".metadata.labels[\"app\"]"), [json!("web")]);
        assert_eq!(find(".metadata.labels.fleetbus\\.io/x"), [json!("lx")]);
    }

    #[test]
    fn filters() {
        let p = ".status.conditions[?(@.type==\"ClustersSynced\")].status";
        assert_eq!(find(p), [json!("True")]);
        assert_eq!(
            find(".status.conditions[?(@.type == 'Ready')].status"),
            [json!("False")]
        );
        assert_eq!(
            find(".status.conditions[?(@.type!=\"Ready\")].type"),
            [json!("ClustersSynced")]
        );
        assert_eq!(
            find(".status.conditions[?(@.gen>1)].type"),
            [json!("ClustersSynced")]
        );
        assert_eq!(
            find(".status.conditions[?(@.gen==1)].type"),
            [json!("Ready")]
        );
        assert_eq!(
            find(".status.conditions[?(@.ok==true)].type"),
            [json!("ClustersSynced")]
        );
        assert_eq!(
            find(".status.conditions[?(@.ok)].type"),
            [json!("ClustersSynced")]
        );
        assert!(find(".status.conditions[?(@.type==\"Nope\")].status").is_empty());
        // A string literal never equals a number.
        assert!(find(".status.conditions[?(@.gen==\"1\")].type").is_empty());
        // Filtering an object selects nothing.
        assert!(find(".spec[?(@.x==1)]").is_empty());
    }

    #[test]
    fn malformed_expressions_are_errors() {
        for bad in [
            ".a[",
            ".a[?(@.x==)]",
            ".a[?(@.x==\"y\"",
            ".a[?(x==1)]",
            ".a[abc]",
            ".a[1:x]",
            ".a..",
            "a b",
            ".a.",
            ".[",
            ".a['x]",
            ".a[?(@.x=~1)]",
            "{",
            ".é.[",
        ] {
            assert!(JsonPath::parse(bad).is_err(), "{bad:?} parsed");
        }
        // Multi-byte names are fine.
        let v = json!({"é": {"ü": 1}});
        assert_eq!(JsonPath::parse(".é.ü").unwrap().find(&v), [&json!(1)]);
        // The whole object.
        assert_eq!(JsonPath::parse(".").unwrap().find(&v), [&v]);
    }

    #[test]
    fn every_truncation_parses_or_errors_without_panicking() {
        let o = obj();
        for expr in [
            "{.status.conditions[?(@.type==\"ClustersSynced\")].status}",
            ".metadata.labels['fleetbus.io/x']",
            ".metadata.labels.fleetbus\\.io/x",
            ".spec.ports[-1:].port",
            "$..é[?(@.n>=1.5e3)]",
        ] {
            for (end, _) in expr.char_indices() {
                if let Ok(p) = JsonPath::parse(&expr[..end]) {
                    let _ = p.find(&o);
                }
            }
        }
    }
}
