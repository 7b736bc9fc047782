//! The records of a `report` directory: every `*.json` file directly in it, parsed as the record
//! its `benchmark` field names.
//!
//! Owns: which files are read and how a bad one is reported. Must never touch: any file it does
//! not read (it writes nothing).

use std::fs;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::failure::{Context, Failure};
use crate::record::{RunRecord, SetupRecord, SuiteRecord, RUN, SETUP, SUITE};

/// One parsed file.
enum Record {
    Suite(SuiteRecord),
    Setup(SetupRecord),
    Run(RunRecord),
    Other,
}

/// Every record of a directory.
#[derive(Default)]
pub(super) struct Records {
    /// The `utxo-suite` record with the latest date.
    pub(super) suite: Option<SuiteRecord>,
    /// How many `utxo-suite` records there were.
    pub(super) suites: usize,
    /// The `utxo-setup` records.
    pub(super) setups: Vec<SetupRecord>,
    /// The `utxo-run` records.
    pub(super) runs: Vec<RunRecord>,
}

/// Reads every record in `dir`; fails when there is no run record.
pub(super) fn load(dir: &Path) -> Result<Records, Failure> {
    let mut records = Records::default();
    for path in json_files(dir)? {
        match read_record(&path)? {
            Record::Suite(suite) => records.add_suite(suite),
            Record::Setup(setup) => records.setups.push(setup),
            Record::Run(run) => records.runs.push(run),
            Record::Other => {}
        }
    }
    if records.runs.is_empty() {
        return Err(Failure(format!(
            "report: no {RUN} records (JSON files with \"benchmark\": \"{RUN}\") in {}",
            dir.display()
        )));
    }
    Ok(records)
}

impl Records {
    /// Keeps the suite with the latest date.
    fn add_suite(&mut self, suite: SuiteRecord) {
        self.suites += 1;
        if self.suite.as_ref().is_none_or(|old| suite.date >= old.date) {
            self.suite = Some(suite);
        }
    }
}

/// The `*.json` files directly in `dir`, sorted by name.
fn json_files(dir: &Path) -> Result<Vec<PathBuf>, Failure> {
    let listing = || format!("report: cannot list {}", dir.display());
    let mut files = Vec::new();
    for entry in fs::read_dir(dir).context(listing)? {
        let path = entry.context(listing)?.path();
        if path.extension().is_some_and(|ext| ext == "json") && path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// Parses one file; records of other benchmarks are [`Record::Other`].
fn read_record(path: &Path) -> Result<Record, Failure> {
    let text =
        fs::read_to_string(path).context(|| format!("report: cannot read {}", path.display()))?;
    let value: Value = serde_json::from_str(&text)
        .context(|| format!("report: {} is not valid JSON", path.display()))?;
    let kind = value.get("benchmark").and_then(Value::as_str).unwrap_or("");
    Ok(match kind {
        SUITE => Record::Suite(parse(path, SUITE, value)?),
        SETUP => Record::Setup(parse(path, SETUP, value)?),
        RUN => Record::Run(parse(path, RUN, value)?),
        _ => Record::Other,
    })
}

/// Deserializes a record of kind `kind`.
fn parse<T: DeserializeOwned>(path: &Path, kind: &str, value: Value) -> Result<T, Failure> {
    T::deserialize(value)
        .context(|| format!("report: {} is not a valid {kind} record", path.display()))
}
