//! No import circle among cairn-bench's modules: among the top-level modules of `src/`, nor
//! among the submodules of a directory module (such as `utxo`'s `run` and `setup`).
//!
//! The test reads the source files and takes every `crate::a::…` path (in a `use` or inline,
//! grouped `crate::{a, b}` included) as an import of top-level module `a`, and inside
//! `src/d/`, every `crate::d::b…` and `super::b…` path as an import of sibling `b`. Comments are
//! left out; a path to something that is not a module (`crate::in_temp_dir`) is no edge.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`, with its path relative to `src/`.
fn sources(dir: &Path, src: &Path, out: &mut Vec<(PathBuf, String)>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .expect("a source directory")
        .map(|e| e.expect("a directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            sources(&path, src, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).expect("a source file");
            out.push((path.strip_prefix(src).unwrap().to_path_buf(), text));
        }
    }
}

/// `text` without `//` comments (a `//` inside a string literal counts as one: none here holds a
/// path).
fn code(text: &str) -> String {
    text.lines()
        .map(|line| line.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The first path segment of every path that starts with `prefix` (`crate::`, `super::`): the
/// identifier after it, or each item's first identifier in a `prefix{a::x, b}` group.
fn first_segments(code: &str, prefix: &str) -> Vec<String> {
    let ident = |s: &str| -> String {
        s.trim_start()
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    let mut found = Vec::new();
    for (at, _) in code.match_indices(prefix) {
        let before = code[..at].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            continue; // `foo::crate::` or `super::super::`: not a path from here
        }
        let rest = &code[at + prefix.len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let (mut depth, mut item_start) = (0usize, true);
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => item_start = true,
                    _ if item_start && !c.is_whitespace() => {
                        found.push(ident(&group[i..]));
                        item_start = false;
                    }
                    _ => {}
                }
            }
        } else {
            found.push(ident(rest));
        }
    }
    found
}

/// A circle in `edges`, as the list of its modules, if there is one.
fn circle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    /// Depth-first search; `path` is the current chain, `done` the modules proven circle-free.
    fn visit(
        node: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(start) = path.iter().position(|n| n == node) {
            let mut found = path[start..].to_vec();
            found.push(node.to_string());
            return Some(found);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in edges.get(node).into_iter().flatten() {
            if let Some(found) = visit(next, edges, path, done) {
                return Some(found);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    edges
        .keys()
        .find_map(|node| visit(node, edges, &mut Vec::new(), &mut done))
}

/// The module a file belongs to at the level below `dir` (`""`: `src/`): `src/a.rs` and
/// `src/a/…` are `a` at the top level; `mod.rs` of `dir` itself, and files outside it, none.
fn module_of(file: &Path, dir: &Path) -> Option<String> {
    let rest = file.strip_prefix(dir).ok()?;
    let mut parts = rest.components();
    let first = parts.next()?.as_os_str().to_str()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    (!matches!(name, "mod" | "main" | "lib")).then(|| name.to_string())
}

/// The import graph among the modules directly below `dir` (`""`: the top level).
fn graph(files: &[(PathBuf, String)], dir: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let modules: BTreeSet<String> = files
        .iter()
        .filter_map(|(file, _)| module_of(file, dir))
        .collect();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (file, text) in files {
        let Some(from) = module_of(file, dir) else {
            continue;
        };
        let code = code(text);
        let mut targets = Vec::new();
        if dir.as_os_str().is_empty() {
            targets.extend(first_segments(&code, "crate::"));
        } else {
            let prefix = format!("crate::{}::", dir.display());
            targets.extend(first_segments(&code, &prefix));
            // `super::` of a file directly in `dir` is `dir`; deeper, it is not.
            if file.parent() == Some(dir) {
                targets.extend(first_segments(&code, "super::"));
            }
        }
        for to in targets {
            if to != from && modules.contains(&to) {
                edges.entry(from.clone()).or_default().insert(to);
            }
        }
        edges.entry(from).or_default();
    }
    edges
}

/// Every directory module under `src/`, relative to it.
fn directory_modules(files: &[(PathBuf, String)]) -> BTreeSet<PathBuf> {
    files
        .iter()
        .filter_map(|(file, _)| file.parent())
        .filter(|dir| !dir.as_os_str().is_empty())
        .map(Path::to_path_buf)
        .collect()
}

#[test]
fn no_import_circle_among_the_modules() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &src, &mut files);
    let top = graph(&files, Path::new(""));
    for expected in ["cli", "engines", "utxo", "keys", "options"] {
        assert!(top.contains_key(expected), "no module {expected}: {top:?}");
    }
    assert!(
        top["utxo"].contains("engines") && top["cli"].contains("options"),
        "the scan finds imports: {top:?}"
    );
    if let Some(found) = circle(&top) {
        panic!(
            "import circle among the top-level modules: {}",
            found.join(" -> ")
        );
    }
    let dirs = directory_modules(&files);
    assert!(dirs.contains(Path::new("utxo")), "{dirs:?}");
    for dir in dirs {
        let edges = graph(&files, &dir);
        if let Some(found) = circle(&edges) {
            panic!(
                "import circle among the submodules of {}: {}",
                dir.display(),
                found.join(" -> ")
            );
        }
    }
}

#[test]
fn the_scan_sees_a_circle() {
    let files = vec![
        (PathBuf::from("a.rs"), "use crate::b::X;\n".to_string()),
        (PathBuf::from("b/mod.rs"), "// crate::c::Y\n".to_string()),
        (
            PathBuf::from("b/x.rs"),
            "fn f() { crate::{c::Y, in_temp_dir}; }".to_string(),
        ),
        (PathBuf::from("c.rs"), "use crate::a;\n".to_string()),
        (PathBuf::from("d/p.rs"), "use super::q::Z;\n".to_string()),
        (PathBuf::from("d/q.rs"), "use crate::d::p;\n".to_string()),
    ];
    let top = graph(&files, Path::new(""));
    assert_eq!(
        circle(&top),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
    let d = graph(&files, Path::new("d"));
    assert_eq!(circle(&d), Some(vec!["p".into(), "q".into(), "p".into()]));
    let acyclic = vec![(PathBuf::from("a.rs"), "use crate::b;\n".to_string())];
    assert_eq!(circle(&graph(&acyclic, Path::new(""))), None);
}
