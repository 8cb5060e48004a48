//! Data output for scripts (`-o json|yaml`): one place, so every command prints the
//! same value in either form.

use std::io::Write;

use serde::Serialize;

use crate::cli::OutputFormat;

/// Writes `value` as pretty JSON or as one YAML document. `Table` is the
/// caller's to render; given here, it writes JSON (no command does that).
pub fn data(
    out: &mut impl Write,
    format: OutputFormat,
    value: &impl Serialize,
) -> std::io::Result<()> {
    write(out, format, value, false)
}

/// One item of a stream of values (`drift watch`, `clusters progress --watch`): a
/// compact JSON line (NDJSON), or a YAML document starting with `---`.
pub fn item(
    out: &mut impl Write,
    format: OutputFormat,
    value: &impl Serialize,
) -> std::io::Result<()> {
    write(out, format, value, true)
}

fn write(
    out: &mut impl Write,
    format: OutputFormat,
    value: &impl Serialize,
    streamed: bool,
) -> std::io::Result<()> {
    match format {
        OutputFormat::Yaml => {
            let text = fleetbus_schemas::yaml::to_string(value).map_err(std::io::Error::other)?;
            let start = if streamed { "---\n" } else { "" };
            write!(out, "{start}{text}")
        }
        OutputFormat::Json | OutputFormat::Table => {
            if streamed {
                serde_json::to_writer(&mut *out, value)
            } else {
                serde_json::to_writer_pretty(&mut *out, value)
            }
            .map_err(std::io::Error::from)?;
            writeln!(out)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_and_yaml_say_the_same() {
        let v = serde_json::json!({"name": "c1", "labels": {"env": "prod"}, "n": [1, 2]});
        let mut json = Vec::new();
        data(&mut json, OutputFormat::Json, &v).unwrap();
        let mut yaml = Vec::new();
        data(&mut yaml, OutputFormat::Yaml, &v).unwrap();
        let back: serde_json::Value = fleetbus_schemas::yaml::from_slice(&yaml).unwrap();
        assert_eq!(back, v);
        assert_eq!(
            serde_json::from_slice::<serde_json::Value>(&json).unwrap(),
            v
        );
        let mut docs = Vec::new();
        item(&mut docs, OutputFormat::Yaml, &v).unwrap();
        item(&mut docs, OutputFormat::Yaml, &v).unwrap();
        assert_eq!(String::from_utf8(docs).unwrap().matches("---\n").count(), 2);
    }

    /// kubectl reads YAML 1.1: `on`, `no`, `010` or `12:30` unquoted would not be
    /// strings there.
    #[test]
    fn yaml_quotes_what_yaml_11_would_not_read_as_a_string() {
        let v = serde_json::json!({"labels": {"on": "no", "zone": "010", "at": "12:30"}});
        let mut yaml = Vec::new();
        data(&mut yaml, OutputFormat::Yaml, &v).unwrap();
        assert_eq!(
            String::from_utf8(yaml).unwrap(),
            "labels:\n  at: \"12:30\"\n  \"on\": \"no\"\n  zone: \"010\"\n"
        );
    }
}
