//! The module map stays true: each engine module's header names, on its "May call:" line, exactly
//! the engine modules its code uses (`crate::<module>` paths outside its unit tests, in any file
//! of a directory module), and the module table in `docs/design.md` says the same. `error` and
//! `config` are the foundation every module may use; they are not listed. The floors hold: no
//! import circle among the engine's modules, and no source file of any crate over 1,500 lines.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Modules every module may use without listing them.
const FOUNDATION: [&str; 2] = ["error", "config"];

/// Files that are not concept modules: the crate root and test or fuzzing support.
const NOT_MODULES: [&str; 3] = ["lib", "golden", "fuzzing"];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Longest source file, in lines, in any crate's `src/` (unit tests included): a longer file
/// usually holds two concepts.
const SOURCE_LINES_MAX: usize = 1_500;

/// Every engine module: its name and the file holding its header (`mod.rs` for a directory).
fn modules() -> BTreeMap<String, PathBuf> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(src()).unwrap() {
        let path = entry.unwrap().path();
        let name = if path.is_dir() {
            path.file_name().unwrap().to_string_lossy().to_string()
        } else if path.extension().is_some_and(|e| e == "rs") {
            path.file_stem().unwrap().to_string_lossy().to_string()
        } else {
            continue;
        };
        if NOT_MODULES.contains(&name.as_str()) {
            continue;
        }
        let file = if path.is_dir() {
            path.join("mod.rs")
        } else {
            path
        };
        out.insert(name, file);
    }
    out
}

/// The module names in backticks in `text` that are engine modules.
fn named(text: &str, known: &BTreeMap<String, PathBuf>) -> BTreeSet<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .filter(|w| known.contains_key(*w))
        .map(str::to_string)
        .collect()
}

/// The "May call:" list of a module's header (`//!` lines), up to "Must never touch".
fn header_may_call(source: &str, known: &BTreeMap<String, PathBuf>) -> Option<BTreeSet<String>> {
    let header: String = source
        .lines()
        .take_while(|l| l.starts_with("//!"))
        .map(|l| format!("{} ", l.trim_start_matches("//!")))
        .collect();
    let start = header.find("May call:")?;
    let rest = &header[start + "May call:".len()..];
    let end = rest.find("Must never touch").unwrap_or(rest.len());
    Some(named(&rest[..end], known))
}

/// Every `.rs` file under `dir`, recursively.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out.sort();
    out
}

/// The source of module `file` (its header file): the file itself, or for a directory module
/// every file of the directory but `tests.rs` files (unit tests kept apart).
fn module_sources(file: &Path) -> Vec<String> {
    let files = if file.ends_with("mod.rs") {
        rust_files(file.parent().unwrap())
    } else {
        vec![file.to_path_buf()]
    };
    files
        .iter()
        .filter(|path| path.file_name().is_none_or(|n| n != "tests.rs"))
        .map(|path| std::fs::read_to_string(path).unwrap())
        .collect()
}

/// The engine modules that module `name` (header file `file`) uses outside unit tests.
fn used_by_module(name: &str, file: &Path, known: &BTreeMap<String, PathBuf>) -> BTreeSet<String> {
    let sources = module_sources(file);
    sources.iter().flat_map(|s| used(s, name, known)).collect()
}

/// The engine modules a source file uses outside its `#[cfg(test)] mod tests` and comments.
fn used_all(source: &str, itself: &str, known: &BTreeMap<String, PathBuf>) -> BTreeSet<String> {
    let code = source.split("#[cfg(test)]\nmod tests").next().unwrap();
    let mut out = BTreeSet::new();
    for line in code.lines() {
        let line = line.trim_start();
        if line.starts_with("//") {
            continue;
        }
        for (i, _) in line.match_indices("crate::") {
            let rest = &line[i + "crate::".len()..];
            if let Some(group) = rest.strip_prefix('{') {
                // `use crate::{a::X, b};`
                for part in group.split(['}', ',']) {
                    let name = part.trim().split("::").next().unwrap_or("");
                    if known.contains_key(name) {
                        out.insert(name.to_string());
                    }
                }
            } else {
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                    .collect();
                if known.contains_key(&name) {
                    out.insert(name);
                }
            }
        }
    }
    out.remove(itself);
    out
}

/// [`used_all`] without the foundation, which every module may use unlisted.
fn used(source: &str, itself: &str, known: &BTreeMap<String, PathBuf>) -> BTreeSet<String> {
    let mut out = used_all(source, itself, known);
    for f in FOUNDATION {
        out.remove(f);
    }
    out
}

#[test]
fn every_header_names_exactly_the_modules_its_code_uses() {
    let known = modules();
    let mut problems = Vec::new();
    for (name, file) in &known {
        let source = std::fs::read_to_string(file).unwrap();
        let used = used_by_module(name, file, &known);
        if FOUNDATION.contains(&name.as_str()) && used.is_empty() {
            continue;
        }
        let Some(listed) = header_may_call(&source, &known) else {
            problems.push(format!("{name}: no \"May call:\" line in its header"));
            continue;
        };
        let missing: Vec<_> = used.difference(&listed).collect();
        let stale: Vec<_> = listed.difference(&used).collect();
        if !missing.is_empty() || !stale.is_empty() {
            problems.push(format!(
                "{name}: uses but does not list {missing:?}; lists but does not use {stale:?}"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_design_docs_module_table_agrees_with_the_headers() {
    let known = modules();
    let design = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/design.md");
    let design = std::fs::read_to_string(design).unwrap();
    // Rows of the module table: | `name` | owns | may call | never touches |
    let mut rows = BTreeMap::new();
    for line in design.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.len() < 5 {
            continue;
        }
        let Some(name) = cells[1].strip_prefix('`').and_then(|c| c.strip_suffix('`')) else {
            continue;
        };
        if known.contains_key(name) {
            rows.insert(name.to_string(), named(cells[3], &known));
        }
    }
    let mut problems = Vec::new();
    for (name, file) in &known {
        let source = std::fs::read_to_string(file).unwrap();
        let listed = header_may_call(&source, &known).unwrap_or_default();
        match rows.get(name) {
            None => problems.push(format!("{name}: no row in docs/design.md's module table")),
            Some(row) if *row != listed => problems.push(format!(
                "{name}: design.md says it may call {row:?}, its header {listed:?}"
            )),
            Some(_) => {}
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The import graph of the engine's modules, `error` and `config` included: module -> the
/// modules its code (outside unit tests) uses.
fn import_graph() -> BTreeMap<String, BTreeSet<String>> {
    let mut known = modules();
    // The foundation is part of the graph here: it must not import upwards either.
    for f in FOUNDATION {
        known
            .entry(f.to_string())
            .or_insert_with(|| src().join(format!("{f}.rs")));
    }
    let mut graph = BTreeMap::new();
    for (name, file) in &known {
        let sources = module_sources(file);
        let uses = sources.iter().flat_map(|s| used_all(s, name, &known));
        graph.insert(name.clone(), uses.collect());
    }
    graph
}

/// A cycle in `graph`, if there is one: the modules along it, first repeated at the end.
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    // Depth-first search; 0 unvisited, 1 on the current path, 2 done.
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        mark: &mut BTreeMap<String, u8>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        mark.insert(node.to_string(), 1);
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            match mark.get(next.as_str()).copied().unwrap_or(0) {
                1 => {
                    let start = path.iter().position(|n| n == next).unwrap();
                    let mut cycle = path[start..].to_vec();
                    cycle.push(next.clone());
                    return Some(cycle);
                }
                0 => {
                    if let Some(cycle) = visit(next, graph, mark, path) {
                        return Some(cycle);
                    }
                }
                _ => {}
            }
        }
        path.pop();
        mark.insert(node.to_string(), 2);
        None
    }
    let mut mark = BTreeMap::new();
    for node in graph.keys() {
        if mark.get(node.as_str()).copied().unwrap_or(0) == 0 {
            if let Some(cycle) = visit(node, graph, &mut mark, &mut Vec::new()) {
                return Some(cycle);
            }
        }
    }
    None
}

#[test]
fn no_import_circle_among_the_engines_modules() {
    let graph = import_graph();
    assert!(graph.contains_key("session_core") && graph.contains_key("lsm"));
    if let Some(cycle) = find_cycle(&graph) {
        panic!("import circle: {}", cycle.join(" -> "));
    }
}

#[test]
fn the_cycle_check_finds_a_circle() {
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("a".to_string(), ["b".to_string()].into()),
        ("b".to_string(), ["c".to_string()].into()),
        ("c".to_string(), ["a".to_string()].into()),
        ("d".to_string(), BTreeSet::new()),
    ]
    .into();
    assert_eq!(find_cycle(&graph).unwrap(), ["a", "b", "c", "a"]);
    let acyclic: BTreeMap<String, BTreeSet<String>> = [
        ("a".to_string(), ["b".to_string(), "c".to_string()].into()),
        ("b".to_string(), ["c".to_string()].into()),
        ("c".to_string(), BTreeSet::new()),
    ]
    .into();
    assert_eq!(find_cycle(&acyclic), None);
}

#[test]
fn the_session_core_sits_below_the_front() {
    let graph = import_graph();
    let above = [
        "table", "lsm", "snapshot", "durable", "inspect", "union", "session",
    ];
    let core = &graph["session_core"];
    let bad: Vec<_> = above.iter().filter(|m| core.contains(**m)).collect();
    assert!(bad.is_empty(), "session_core imports {bad:?}");
    // Nothing imports the public front but the front itself and the crate root.
    for (name, uses) in &graph {
        if name != "session" {
            assert!(
                !uses.contains("session"),
                "{name} imports the public session front"
            );
        }
        if !["session", "table", "batch", "transaction"].contains(&name.as_str()) {
            assert!(
                !uses.contains("table"),
                "{name} imports the public table front"
            );
        }
    }
}

#[test]
fn no_source_file_is_over_the_line_limit() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut long = Vec::new();
    for entry in std::fs::read_dir(&crates).unwrap() {
        let src = entry.unwrap().path().join("src");
        if !src.is_dir() {
            continue;
        }
        for file in rust_files(&src) {
            let lines = std::fs::read_to_string(&file).unwrap().lines().count();
            if lines > SOURCE_LINES_MAX {
                long.push(format!("{} ({lines} lines)", file.display()));
            }
        }
    }
    assert!(
        long.is_empty(),
        "source files over {SOURCE_LINES_MAX} lines: {}",
        long.join(", ")
    );
}
