//! The benchmark records committed under `docs/benchmarks/` still render their reports: every
//! directory there (at any depth) that holds records a report command reads is copied to a
//! temporary directory (its JSON files only, so nothing committed is written over) and rendered
//! there by `report` (`utxo-run` records), `auth-report` (arrays of `auth` records) and
//! `chain-report` (`chain-*.json` records), whichever apply. It walks whatever directories exist.
//! Each is rendered twice, in two copies, and the two renderings must be the same byte for byte
//! (the charts are hand-written SVG for that, see `report::svg`).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// The report commands, and the file each writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// `report`: `README.md` and three charts.
    Utxo,
    /// `auth-report`: `README.md` and three charts.
    Auth,
    /// `chain-report`: `chain.md`.
    Chain,
}

impl Kind {
    fn command(self) -> &'static str {
        match self {
            Kind::Utxo => "report",
            Kind::Auth => "auth-report",
            Kind::Chain => "chain-report",
        }
    }

    fn outputs(self) -> &'static [&'static str] {
        match self {
            Kind::Utxo => &["README.md", "ops.svg", "latency.svg", "memory.svg"],
            Kind::Auth => &["README.md", "commit.svg", "proofs.svg", "utxo.svg"],
            Kind::Chain => &["chain.md"],
        }
    }
}

/// The report a JSON file is a record of, by the rules of the commands' own loaders.
fn kind_of(path: &Path) -> Option<Kind> {
    let value: Value = serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()?;
    let name = path.file_name()?.to_str()?;
    match &value {
        Value::Object(_) if value["benchmark"] == "utxo-run" => Some(Kind::Utxo),
        Value::Object(_) if value["benchmark"] == "chain" && name.starts_with("chain-") => {
            Some(Kind::Chain)
        }
        Value::Array(items)
            if !items.is_empty() && items.iter().all(|i| i["benchmark"] == "auth") =>
        {
            Some(Kind::Auth)
        }
        _ => None,
    }
}

/// Every directory under `dir`, `dir` included, with its JSON files.
fn directories(dir: &Path, out: &mut Vec<(PathBuf, Vec<PathBuf>)>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("a records directory")
        .map(|e| e.expect("a directory entry").path())
        .collect();
    entries.sort();
    let json = entries
        .iter()
        .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "json"))
        .cloned()
        .collect();
    out.push((dir.to_path_buf(), json));
    for sub in entries.iter().filter(|p| p.is_dir()) {
        directories(sub, out);
    }
}

#[test]
fn every_committed_record_directory_renders_its_report() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/benchmarks");
    let mut dirs = Vec::new();
    directories(&root, &mut dirs);
    let mut rendered = 0;
    for (dir, json) in dirs {
        let kinds: Vec<Kind> = [Kind::Utxo, Kind::Auth, Kind::Chain]
            .into_iter()
            .filter(|&k| json.iter().any(|p| kind_of(p) == Some(k)))
            .collect();
        if kinds.is_empty() {
            continue;
        }
        let copies = [(); 2].map(|()| {
            let copy = tempfile::tempdir().expect("a temporary directory");
            for file in &json {
                std::fs::copy(file, copy.path().join(file.file_name().unwrap())).expect("a copy");
            }
            copy
        });
        for kind in kinds {
            for copy in &copies {
                let out = Command::new(env!("CARGO_BIN_EXE_cairn-bench"))
                    .args([kind.command(), "--dir"])
                    .arg(copy.path())
                    .output()
                    .expect("runs cairn-bench");
                assert!(
                    out.status.success(),
                    "cairn-bench {} of {} failed:\n{}",
                    kind.command(),
                    dir.display(),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            for name in kind.outputs() {
                let [first, second] = copies.each_ref().map(|copy| {
                    std::fs::read_to_string(copy.path().join(name)).unwrap_or_default()
                });
                assert!(
                    !first.trim().is_empty(),
                    "{} of {}: no {name}",
                    kind.command(),
                    dir.display()
                );
                assert!(
                    first == second,
                    "{} of {}: {name} differs between two renderings",
                    kind.command(),
                    dir.display()
                );
            }
            rendered += 1;
        }
    }
    assert!(rendered > 0, "no record directory under {}", root.display());
}
