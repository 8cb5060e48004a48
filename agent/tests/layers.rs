//! The agent's shape, checked on its source (ARCHITECTURE.md, "Layers inside
//! the agent"): no two files import each other, directly or around a loop,
//! and each module imports only its own layer and the ones before it (the
//! building blocks `kube/`, `bus/` nothing of `registry/` or `sync/`).
//!
//! The import graph is read from the text: every `use` tree (groups and
//! `super::{a, b}` included) and every `crate::`/`super::`/`self::` path,
//! outside `#[cfg(test)]` modules and comments, resolved to the file that
//! defines the longest module prefix it names.

// A test program: a missing source directory is a failed test, not an error.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module path from the crate root, e.g. `["sync", "engine"]`.
type Module = Vec<String>;

/// Import cycles still being taken apart: an SCC wholly inside one
/// of these folders is reported but tolerated. Remove an entry as soon as its
/// folder has no cycle, so it cannot come back.
const CYCLES_BEING_REMOVED: &[&str] = &[];

/// ARCHITECTURE.md's layer table: a top-level module imports only modules of
/// its own layer or the layers before it.
const LAYERS: &[&[&str]] = &[
    &[
        "kube",
        "bus",
        "metrics",
        "health",
        "trust",
        "mark",
        "log_gate",
        "credentials",
    ],
    &["cli", "config", "context"],
    &["bootstrap", "identity", "metadata", "copy_mark"],
    &["registry"],
    &["nodes", "kubeconfig", "sync", "inventory"],
    &["services"],
    &["run", "lib", "main", "bin"],
];

/// Imports against the layer table known and written down (ARCHITECTURE.md),
/// to be removed by the change that fixes each.
const LAYER_EXCEPTIONS: &[(&str, &str)] = &[];

/// The layers inside `sync/` (ARCHITECTURE.md, "Layers inside sync"): the
/// shared model, the rules, the World every stage reads, the stages, and the
/// engine that owns their state and calls them. A stage never imports the
/// engine; stages may use each other's leaves (the same row).
const SYNC_LAYERS: &[&[&str]] = &[
    &["model", "digest", "withheld", "health", "policy"],
    &["rules"],
    &["world"],
    &[
        "inputs",
        "source",
        "sink",
        "drift",
        "returns",
        "rollout",
        "placement",
        "status",
        "status_bus",
        "preview",
        "progress",
        "policy_watch",
    ],
    &["engine"],
];

/// A module's row in `SYNC_LAYERS` (`None` outside `sync/`, and for
/// `sync/mod.rs`, the folder's table of contents, which only declares).
fn sync_layer(m: &Module) -> Option<usize> {
    match m.as_slice() {
        [top, sub, ..] if top == "sync" => {
            SYNC_LAYERS.iter().position(|l| l.contains(&sub.as_str()))
        }
        _ => None,
    }
}

fn layer(m: &Module) -> Option<usize> {
    // The crate root (lib.rs/main.rs) is the empty module path: wiring.
    let top = m.first().map_or("lib", String::as_str);
    LAYERS.iter().position(|l| l.contains(&top))
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn module_of(root: &Path, file: &Path) -> Module {
    let rel = file.strip_prefix(root).unwrap().with_extension("");
    let mut m: Module = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(m.last().map(String::as_str), Some("mod" | "lib" | "main")) {
        m.pop();
    }
    m
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The text without `#[cfg(test)] mod … { … }` blocks and `//` comments.
fn production_text(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = &rest[at..];
        let Some(open) = after.find('{') else {
            rest = "";
            break;
        };
        // Only a module block is skipped; a cfg(test) item without a body
        // (a `use`, a `mod x;`) ends at its `;`.
        let semi = after.find(';').unwrap_or(usize::MAX);
        if semi < open {
            rest = &after[semi + 1..];
            continue;
        }
        let mut depth = 0usize;
        let mut end = after.len();
        for (i, ch) in after[open..].char_indices() {
            match ch {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = open + i + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    out.lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Expands a use tree (`super::{a, b::{c, d}}`) into its paths.
fn expand(tree: &str) -> Vec<String> {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        return vec![tree.split(" as ").next().unwrap_or("").trim().to_owned()];
    };
    let prefix = tree[..open].trim_end_matches("::").trim();
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let (mut parts, mut depth, mut cur) = (Vec::new(), 0i32, String::new());
    for ch in inner.chars() {
        match ch {
            '{' => depth += 1,
            '}' => depth -= 1,
            _ => {}
        }
        if ch == ',' && depth == 0 {
            parts.push(std::mem::take(&mut cur));
        } else {
            cur.push(ch);
        }
    }
    parts.push(cur);
    let mut out = vec![prefix.to_owned()];
    for p in parts.iter().map(|p| p.trim()).filter(|p| !p.is_empty()) {
        for e in expand(p) {
            out.push(match (prefix.is_empty(), e.as_str()) {
                (_, "self") => prefix.to_owned(),
                (true, _) => e,
                (false, _) => format!("{prefix}::{e}"),
            });
        }
    }
    out
}

/// The paths a file names: `use` trees and inline `crate::`/`super::` paths.
fn paths(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("use ") {
        let boundary = at == 0 || !rest.as_bytes()[at - 1].is_ascii_alphanumeric();
        let after = &rest[at + 4..];
        let end = after.find(';').unwrap_or(after.len());
        if boundary {
            out.extend(expand(&after[..end]));
        }
        rest = &after[end.min(after.len())..];
    }
    for start in ["crate::", "super::", "self::"] {
        let mut rest = text;
        while let Some(at) = rest.find(start) {
            let tail = &rest[at..];
            let len = tail
                .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                .unwrap_or(tail.len());
            out.push(tail[..len].trim_end_matches(':').to_owned());
            rest = &tail[len.max(1)..];
        }
    }
    out
}

/// The module file a path from `from` lands in (longest known prefix).
fn resolve(from: &Module, path: &str, known: &BTreeSet<Module>) -> Option<Module> {
    let mut parts: Vec<&str> = path.split("::").filter(|p| !p.is_empty()).collect();
    let mut base: Module = match parts.first() {
        Some(&"crate") => {
            parts.remove(0);
            Vec::new()
        }
        Some(&("super" | "self")) => {
            // `self` of a file `a/b.rs` is `a::b`, of `a/mod.rs` `a`
            // (`module_of` drops the `mod`): `super` is one step up from it.
            let mut base = from.clone();
            while let Some(&p) = parts.first() {
                match p {
                    "super" => {
                        base.pop();
                    }
                    "self" => {}
                    _ => break,
                }
                parts.remove(0);
            }
            base
        }
        _ => return None,
    };
    base.extend(parts.iter().map(|p| (*p).to_owned()));
    (1..=base.len())
        .rev()
        .map(|k| base[..k].to_vec())
        .find(|m| known.contains(m))
}

fn graph() -> BTreeMap<Module, BTreeSet<Module>> {
    let root = src();
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    let modules: BTreeMap<Module, PathBuf> = files
        .iter()
        .map(|f| (module_of(&root, f), f.clone()))
        .collect();
    let known: BTreeSet<Module> = modules.keys().cloned().collect();
    let mut edges = BTreeMap::new();
    for (m, file) in &modules {
        let text = production_text(&std::fs::read_to_string(file).unwrap());
        let to: BTreeSet<Module> = paths(&text)
            .iter()
            .filter_map(|p| resolve(m, p, &known))
            .filter(|t| t != m && !t.is_empty())
            .collect();
        edges.insert(m.clone(), to);
    }
    edges
}

/// Strongly connected components with more than one file (Tarjan).
fn cycles(g: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<Vec<Module>> {
    struct T<'a> {
        g: &'a BTreeMap<Module, BTreeSet<Module>>,
        index: BTreeMap<&'a Module, usize>,
        low: BTreeMap<&'a Module, usize>,
        stack: Vec<&'a Module>,
        on: BTreeSet<&'a Module>,
        out: Vec<Vec<Module>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a Module) {
        let i = t.index.len();
        t.index.insert(v, i);
        t.low.insert(v, i);
        t.stack.push(v);
        t.on.insert(v);
        for w in t.g.get(v).into_iter().flatten() {
            let Some((w, _)) = t.g.get_key_value(w) else {
                continue;
            };
            if !t.index.contains_key(w) {
                visit(t, w);
                let lw = t.low[w];
                let lv = t.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if t.on.contains(w) {
                let iw = t.index[w];
                let lv = t.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if t.low[v] == t.index[v] {
            let mut scc = Vec::new();
            while let Some(w) = t.stack.pop() {
                t.on.remove(w);
                scc.push(w.clone());
                if w == v {
                    break;
                }
            }
            if scc.len() > 1 {
                scc.sort();
                t.out.push(scc);
            }
        }
    }
    let mut t = T {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in g.keys() {
        if !t.index.contains_key(v) {
            visit(&mut t, v);
        }
    }
    t.out
}

fn show(m: &Module) -> String {
    m.join("/")
}

#[test]
fn no_two_files_import_each_other() {
    let g = graph();
    let mut bad = Vec::new();
    for scc in cycles(&g) {
        let tolerated = CYCLES_BEING_REMOVED
            .iter()
            .any(|dir| scc.iter().all(|m| m.first().is_some_and(|f| f == dir)));
        let names: Vec<String> = scc.iter().map(show).collect();
        if tolerated {
            eprintln!("cycle being removed: {}", names.join(", "));
        } else {
            bad.push(names.join(", "));
        }
    }
    assert!(bad.is_empty(), "import cycles:\n{}", bad.join("\n"));
}

#[test]
fn every_module_imports_only_its_layer_and_below() {
    let g = graph();
    let mut bad = Vec::new();
    for (from, to) in &g {
        let Some(lf) = layer(from) else {
            bad.push(format!(
                "{} is in no layer of ARCHITECTURE.md's table",
                show(from)
            ));
            continue;
        };
        for t in to {
            let excepted = LAYER_EXCEPTIONS
                .iter()
                .any(|(f, x)| show(from) == *f && show(t) == *x);
            if layer(t).is_some_and(|lt| lt > lf) && !excepted {
                bad.push(format!(
                    "{} imports {} (a later layer)",
                    show(from),
                    show(t)
                ));
            }
        }
    }
    assert!(bad.is_empty(), "layer violations:\n{}", bad.join("\n"));
}

#[test]
fn inside_sync_each_module_imports_only_its_row_and_below() {
    let g = graph();
    let mut bad = Vec::new();
    for (from, to) in g.iter().filter(|(m, _)| m.len() > 1 && m[0] == "sync") {
        let Some(lf) = sync_layer(from) else {
            bad.push(format!("{} is in no row of sync's layer table", show(from)));
            continue;
        };
        for t in to {
            if sync_layer(t).is_some_and(|lt| lt > lf) {
                bad.push(format!("{} imports {} (a later row)", show(from), show(t)));
            }
        }
    }
    assert!(bad.is_empty(), "sync layer violations:\n{}", bad.join("\n"));
}

/// What `use` lines miss: a stage that adds methods to the engine's type
/// depends on all of the engine's state. Only `sync/engine/` may say
/// `impl Engine`, and no file outside it may name the type.
#[test]
fn only_the_engine_folder_names_the_engine() {
    let root = src().join("sync");
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    let mut bad = Vec::new();
    for f in files.iter().filter(|f| !f.starts_with(root.join("engine"))) {
        let text = production_text(&std::fs::read_to_string(f).unwrap());
        if names_engine(&text) {
            bad.push(f.strip_prefix(&root).unwrap().display().to_string());
        }
    }
    assert!(
        bad.is_empty(),
        "files outside sync/engine/ that name Engine:\n{}",
        bad.join("\n")
    );
}

/// Whether the text names the type `Engine` as a word (not `EngineX`).
fn names_engine(text: &str) -> bool {
    text.match_indices("Engine").any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + "Engine".len()..].chars().next();
        let word = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
        !word(before) && !word(after)
    })
}

#[test]
fn the_engine_checker_sees_an_impl_and_a_path_but_not_a_longer_name() {
    assert!(names_engine("impl Engine {\n}"));
    assert!(names_engine("fn f(e: &mut crate::sync::engine::Engine) {}"));
    assert!(!names_engine("struct EngineIo; fn engine_run() {}"));
    assert!(!names_engine(&production_text("// the Engine\nfn f() {}")));
}

/// The checker itself finds what it must: a grouped `super::{…}` import is
/// an edge, a test module's import is not.
#[test]
fn the_reader_sees_grouped_imports_and_skips_tests() {
    let text = production_text(
        "use super::{a, b::{c, self}};\nfn f() { crate::x::y(); }\n#[cfg(test)]\nmod tests { use crate::z; }\n",
    );
    let p = paths(&text);
    for want in ["super::a", "super::b::c", "super::b", "crate::x::y"] {
        assert!(p.iter().any(|x| x == want), "{want} missing from {p:?}");
    }
    assert!(!p.iter().any(|x| x.contains('z')), "{p:?}");
}
