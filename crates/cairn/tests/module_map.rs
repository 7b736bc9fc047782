//! The module map stays true: each engine module's header names, on its "May call:" line, exactly
//! the engine modules its code uses (`crate::<module>` paths outside its unit tests), and the
//! module table in `docs/design.md` says the same. `error` and `config` are the foundation every
//! module may use; they are not listed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Modules every module may use without listing them.
const FOUNDATION: [&str; 2] = ["error", "config"];

/// Files that are not concept modules: the crate root and test or fuzzing support.
const NOT_MODULES: [&str; 3] = ["lib", "golden", "fuzzing"];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every engine module: its name and source file.
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

/// The engine modules a source file uses outside its `#[cfg(test)] mod tests` and comments.
fn used(source: &str, itself: &str, known: &BTreeMap<String, PathBuf>) -> BTreeSet<String> {
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
        let used = used(&source, name, &known);
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
