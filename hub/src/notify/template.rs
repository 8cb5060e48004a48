//! A target's own text line: `template: "{severity}: {summary} ({count}x)"`.
//! Fields in braces are the notification's (below); `{{` and `}}` are
//! braces. Parsed when the targets file is read, so a misspelt field is an
//! error then, not a blank in a message at 3 a.m.

use chrono::SecondsFormat;

use super::message::Notification;

/// The fields a template may name.
pub const FIELDS: [&str; 9] = [
    "kind", "severity", "cluster", "rule", "phase", "object", "summary", "count", "at",
];

#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(String),
    Field(&'static str),
}

/// A parsed template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template(Vec<Piece>);

/// Why a template does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    /// `{name}` names no field.
    #[error("{{{0}}} is no field; the fields are {fields}", fields = FIELDS.join(", "))]
    UnknownField(String),
    /// A `{` without its `}`, or a lone `}`.
    #[error("an unmatched brace (write {{{{ or }}}} for a brace)")]
    Unmatched,
}

impl Template {
    /// Parses `text`.
    pub fn parse(text: &str) -> Result<Self, TemplateError> {
        let mut pieces = Vec::new();
        let mut literal = String::new();
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '{' if chars.peek() == Some(&'{') => {
                    chars.next();
                    literal.push('{');
                }
                '}' if chars.peek() == Some(&'}') => {
                    chars.next();
                    literal.push('}');
                }
                '{' => {
                    let mut name = String::new();
                    loop {
                        match chars.next() {
                            Some('}') => break,
                            Some(c) => name.push(c),
                            None => return Err(TemplateError::Unmatched),
                        }
                    }
                    let field = FIELDS
                        .iter()
                        .find(|f| **f == name.trim())
                        .ok_or(TemplateError::UnknownField(name))?;
                    if !literal.is_empty() {
                        pieces.push(Piece::Text(std::mem::take(&mut literal)));
                    }
                    pieces.push(Piece::Field(field));
                }
                '}' => return Err(TemplateError::Unmatched),
                c => literal.push(c),
            }
        }
        if !literal.is_empty() {
            pieces.push(Piece::Text(literal));
        }
        Ok(Self(pieces))
    }

    /// The line for `n`.
    pub fn fill(&self, n: &Notification) -> String {
        let mut out = String::new();
        for piece in &self.0 {
            match piece {
                Piece::Text(t) => out.push_str(t),
                Piece::Field(f) => out.push_str(&field(n, f)),
            }
        }
        out
    }
}

fn field(n: &Notification, name: &str) -> String {
    match name {
        "kind" => n.kind.to_owned(),
        "severity" => n.severity.word().to_owned(),
        "cluster" => n.cluster.clone(),
        "rule" => n.rule.clone(),
        "phase" => n.phase.clone(),
        "object" => n.object.clone(),
        "summary" => n.summary.clone(),
        "count" => n.count.to_string(),
        _ => n.at.to_rfc3339_opts(SecondsFormat::Secs, true),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::notify::message::tests::drift;
    use fleetbus_schemas::drift::DriftPhase;

    #[test]
    fn fields_fill_braces_escape_and_mistakes_are_named() {
        let t =
            Template::parse("{{{severity}}} {cluster}/{rule}: {object} x{count} at {at}").unwrap();
        let n = Notification::from_drift(&drift("b", "web", "site", DriftPhase::Fight));
        assert_eq!(
            t.fill(&n),
            "{critical} b/web: ConfigMap apps/site x1 at 2023-11-14T22:13:20Z"
        );
        let e = Template::parse("{sumary}").unwrap_err();
        assert_eq!(e, TemplateError::UnknownField("sumary".into()));
        assert!(e.to_string().contains("summary"), "{e}");
        for bad in ["{summary", "summary}", "{"] {
            assert_eq!(Template::parse(bad), Err(TemplateError::Unmatched), "{bad}");
        }
    }
}
