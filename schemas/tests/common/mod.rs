//! Helpers shared by the integration tests.

#![allow(dead_code)] // each test binary uses a subset

use std::path::PathBuf;

/// docs/PROTOCOL.md as committed.
pub fn protocol_doc() -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/PROTOCOL.md");
    std::fs::read_to_string(&path).unwrap_or_default()
}

/// Re-indents compact JSON the way `serde_json::to_string_pretty` would, keeping member order.
pub fn pretty(compact: &str) -> String {
    let mut out = String::new();
    let mut depth = 0usize;
    let (mut in_string, mut escaped) = (false, false);
    let chars: Vec<char> = compact.chars().collect();
    let mut i = 0;
    let newline = |out: &mut String, depth: usize| {
        out.push('\n');
        out.push_str(&"  ".repeat(depth));
    };
    while i < chars.len() {
        let c = chars[i];
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
            i += 1;
            continue;
        }
        match c {
            '"' => {
                in_string = true;
                out.push(c);
            }
            '{' | '[' => {
                let close = if c == '{' { '}' } else { ']' };
                if chars.get(i + 1) == Some(&close) {
                    out.push(c);
                    out.push(close);
                    i += 1;
                } else {
                    out.push(c);
                    depth += 1;
                    newline(&mut out, depth);
                }
            }
            '}' | ']' => {
                depth -= 1;
                newline(&mut out, depth);
                out.push(c);
            }
            ',' => {
                out.push(',');
                newline(&mut out, depth);
            }
            ':' => out.push_str(": "),
            _ => out.push(c),
        }
        i += 1;
    }
    out
}

/// Fails unless the doc contains `text`, printing what to paste.
pub fn assert_doc_contains(text: &str) {
    assert!(
        protocol_doc().contains(text),
        "docs/PROTOCOL.md must contain this exact text (code and doc drifted apart):\n{text}"
    );
}
