//! YAML in and out for people and kubectl: CRDs, `-o yaml`, kubeconfigs, rule files.
//!
//! Why `serde-saphyr`: `serde_yaml` is archived; `serde_yaml_ng` and `serde_norway`
//! are forks of it over `unsafe-libyaml`, a C-to-unsafe-Rust translation that is
//! itself unmaintained (RUSTSEC-2024-0449), and they write `yes`, `on` and `y`
//! unquoted, which kubectl reads as booleans; `serde_yml` is unsound
//! (RUSTSEC-2025-0068). `serde-saphyr` is safe Rust, fuzzed upstream, bounds every
//! resource a document can make its reader spend, quotes YAML 1.1 lookalikes, and
//! kube-client already depends on it, so it adds no crate to the build.
//!
//! Written YAML is read back the same by YAML 1.1 readers (kubectl, client-go): a
//! string that 1.1 would take for a bool, number, null or timestamp (`yes`, `on`,
//! `n`, `1e3`, `0x10`, `010`, `~`, `12:30`, `2001-01-01`), key or value, is quoted.
//! Long strings stay on one line (no folding), so generated files diff line by line.
//!
//! Read YAML keeps the YAML 1.2 core schema the project has always read with:
//! only `true`/`false` are booleans, `010` and `1_000` stay strings, a repeated
//! key keeps its last value. The budget bounds nesting, alias expansion ("billion
//! laughs") and scalar bytes, so a hostile file is an error, not a hang or a crash.

use serde::de::DeserializeOwned;
use serde::Serialize;
use thiserror::Error;

/// Deepest nesting a reader accepts (serde-saphyr's default). The reader recurses per
/// level, ~15 KiB of stack each in a debug build: 64 levels fit the 2 MiB stack of a
/// tokio worker or a test thread, 130 do not.
pub const MAX_DEPTH: usize = 64;

/// A YAML document that could not be read or written.
#[derive(Debug, Error)]
pub enum YamlError {
    /// The text is not one YAML document of the expected shape, or it goes past
    /// the reader's budget (nesting, nodes, alias expansion, scalar bytes). The
    /// message is the reader's, with line and column.
    #[error(transparent)]
    Parse(Box<serde_saphyr::Error>),
    /// The value has no YAML representation (a map with non-scalar keys, say).
    #[error(transparent)]
    Render(serde_saphyr::SerializeError),
}

/// The reader's options: YAML 1.2 core scalars, last repeated key wins, the budget.
fn read_options() -> serde_saphyr::Options {
    serde_saphyr::options! {
        strict_booleans: true,
        leading_zero_numbers_as_strings: true,
        underscored_numbers_as_strings: true,
        duplicate_keys: serde_saphyr::DuplicateKeyPolicy::LastWins,
        // One-line messages: they end up in logs, Status messages and CLI errors.
        with_snippet: false,
        budget: serde_saphyr::budget! { max_depth: MAX_DEPTH },
    }
}

/// Reads one YAML document.
pub fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, YamlError> {
    serde_saphyr::from_str_with_options(text, read_options())
        .map_err(|e| YamlError::Parse(Box::new(e)))
}

/// Reads one YAML document from UTF-8 bytes.
pub fn from_slice<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, YamlError> {
    serde_saphyr::from_slice_with_options(bytes, read_options())
        .map_err(|e| YamlError::Parse(Box::new(e)))
}

/// Writes `value` as one YAML document (no `---`), ending in a newline.
pub fn to_string<T: Serialize>(value: &T) -> Result<String, YamlError> {
    let options = serde_saphyr::ser_options! { folded_wrap_chars: usize::MAX };
    serde_saphyr::to_string_with_options(value, options).map_err(YamlError::Render)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::{json, Value};
    use std::time::{Duration, Instant};

    /// Every spelling a YAML 1.1 reader resolves to something else than a string.
    const YAML_11_NON_STRINGS: &[&str] = &[
        "yes",
        "Yes",
        "YES",
        "no",
        "No",
        "on",
        "On",
        "ON",
        "off",
        "Off",
        "y",
        "Y",
        "n",
        "N",
        "true",
        "True",
        "FALSE",
        "null",
        "Null",
        "~",
        "",
        "1e3",
        "1E3",
        "0x10",
        "0o10",
        "010",
        "0755",
        "0b101",
        "1_000",
        "+1",
        "-0",
        ".5",
        "1.0",
        ".inf",
        "-.Inf",
        ".nan",
        "12:30",
        "190:20:30",
        "2001-01-01",
        "2001-12-14t21:59:43.10-05:00",
        "<<",
        "=",
    ];

    #[test]
    fn yaml_11_lookalikes_are_quoted_as_keys_and_values() {
        for s in YAML_11_NON_STRINGS {
            let doc = to_string(&json!({ *s: *s, "list": [s] })).unwrap();
            let quoted = format!("\"{s}\"");
            assert!(
                doc.contains(&format!("{quoted}: {quoted}\n"))
                    && doc.contains(&format!("- {quoted}\n")),
                "{s:?} not quoted in:\n{doc}"
            );
            let back: Value = from_str(&doc).unwrap();
            assert_eq!(back, json!({ *s: *s, "list": [s] }));
        }
    }

    #[test]
    fn plain_strings_stay_plain_and_long_ones_on_one_line() {
        let long = "word ".repeat(40).trim_end().to_owned();
        let doc = to_string(&json!({"name": "c1", "text": long, "lines": "a\nb"})).unwrap();
        assert_eq!(
            doc,
            format!("lines: |-\n  a\n  b\nname: c1\ntext: {long}\n")
        );
    }

    #[test]
    fn reads_the_yaml_12_core_schema() {
        let v: Value =
            from_str("a: yes\nb: on\nc: 010\nd: 1_000\ne: 0x10\nf: true\ng: ~\nh: 12:30\n")
                .unwrap();
        assert_eq!(
            v,
            json!({"a": "yes", "b": "on", "c": "010", "d": "1_000", "e": 16, "f": true, "g": null, "h": "12:30"})
        );
        let v: Value = from_str("a: 1\na: 2\n").unwrap();
        assert_eq!(v, json!({"a": 2}));
    }

    /// Nesting past [`MAX_DEPTH`] (below the parser's own recursion limit of 255,
    /// so this is the budget at work) is an error, in block and in flow style.
    #[test]
    fn deep_nesting_is_refused() {
        let depth = MAX_DEPTH + 50;
        let mut block = String::new();
        for i in 0..depth {
            block += &format!("{}k:\n", " ".repeat(i));
        }
        let flow = format!("k: {}1{}", "[".repeat(depth), "]".repeat(depth));
        for doc in [block, flow] {
            assert!(matches!(from_str::<Value>(&doc), Err(YamlError::Parse(_))));
        }
        let ok = format!(
            "k: {}1{}",
            "[".repeat(MAX_DEPTH - 2),
            "]".repeat(MAX_DEPTH - 2)
        );
        assert!(from_str::<Value>(&ok).is_ok());
    }

    /// Ten aliases per level, six levels: a million strings from 400 bytes.
    fn laughs(levels: usize) -> String {
        let mut doc = format!("l0: &l0 [{}]\n", ["lol"; 10].join(", "));
        for i in 1..levels {
            let refs = vec![format!("*l{}", i - 1); 10].join(", ");
            doc += &format!("l{i}: &l{i} [{refs}]\n");
        }
        doc
    }

    #[test]
    fn alias_expansion_is_bounded() {
        let started = Instant::now();
        assert!(matches!(
            from_str::<Value>(&laughs(6)),
            Err(YamlError::Parse(_))
        ));
        assert!(matches!(
            from_str::<Value>(&laughs(10)),
            Err(YamlError::Parse(_))
        ));
        assert!(started.elapsed() < Duration::from_secs(20));
        // A few aliases are fine.
        let v: Value = from_str("a: &x {k: v}\nb: *x\n").unwrap();
        assert_eq!(v["b"], json!({"k": "v"}));
    }

    /// A 2 MiB scalar replayed by 99 aliases would be 200 MB of strings.
    #[test]
    fn huge_scalars_are_bounded_including_through_aliases() {
        let big = "x".repeat(2 << 20);
        let amplified = format!("a: &x {big}\nb: [{}]\n", ["*x"; 99].join(", "));
        assert!(matches!(
            from_str::<Value>(&amplified),
            Err(YamlError::Parse(_))
        ));
        let huge = format!("a: {}\n", "y".repeat(65 << 20));
        assert!(matches!(from_str::<Value>(&huge), Err(YamlError::Parse(_))));
        let v: Value = from_str(&format!("a: {big}\n")).unwrap();
        assert_eq!(v["a"].as_str().map(str::len), Some(big.len()));
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_parse_or_fail_without_panicking(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..256)) {
            let _ = from_slice::<Value>(&bytes);
        }

        #[test]
        fn any_text_round_trips_as_a_string(s in ".{0,24}") {
            let doc = to_string(&json!({ s.clone(): s.clone() })).unwrap();
            let back: Value = from_str(&doc).unwrap();
            proptest::prop_assert_eq!(back, json!({ s.clone(): s }), "{}", doc);
        }
    }
}
