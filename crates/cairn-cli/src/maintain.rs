//! The commands that write: `load` (pairs into a new snapshot), `checkpoint` and `compact` (of
//! the durable tables), `repair` (the session's metadata file; `--salvage`: what is intact of a
//! damaged snapshot, into a new one). Each takes the session's lock (but a dry run).
//!
//! Owns: reading `dump`'s formats back, and these commands' output. May call: `commands`
//! (opening sessions, failures, `out!`), `output`, `cairn`. Must never touch: the database's
//! files directly.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use cairn::inspect::{LostKeys, MetadataRepair};
use cairn::{AuthConfig, HashKind, SnapshotOverrides, TableConfig, Update};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;

use crate::commands::{open_read_only, open_writable, out, Failure, DAMAGED, FAILED, USAGE};
use crate::output::{self, count, escaped, hex};
use crate::{AuthHash, DumpFormat};

/// Pairs handed to the table at once.
const BATCH_PAIRS: usize = 4096;

/// One pair read back: key, value and blob.
type Pair = (Vec<u8>, Vec<u8>, Option<Vec<u8>>);

/// The input, pair by pair, in `format`; errors name the line (or record) that is wrong.
struct Pairs<R> {
    input: R,
    format: DumpFormat,
    /// Lines or records read.
    at: u64,
}

impl<R: BufRead> Pairs<R> {
    fn bad(&self, what: impl std::fmt::Display) -> Failure {
        Failure::new(
            FAILED,
            format!("input {} {}: {what}", unit(self.format), self.at),
        )
    }

    fn next_pair(&mut self) -> Result<Option<Pair>, Failure> {
        match self.format {
            DumpFormat::Raw => self.next_raw(),
            DumpFormat::Text => Err(Failure::new(
                USAGE,
                "the text format cannot be read back (it is for people): dump with --format hex",
            )),
            DumpFormat::Hex | DumpFormat::Json => loop {
                let mut line = String::new();
                let n = self
                    .input
                    .read_line(&mut line)
                    .map_err(|e| Failure::new(FAILED, format!("reading the input: {e}")))?;
                if n == 0 {
                    return Ok(None);
                }
                self.at += 1;
                let line = line.trim();
                if line.is_empty() {
                    continue;
                }
                return if self.format == DumpFormat::Hex {
                    self.hex_pair(line).map(Some)
                } else {
                    self.json_pair(line).map(Some)
                };
            },
        }
    }

    fn hex_pair(&self, line: &str) -> Result<Pair, Failure> {
        let fields: Vec<&str> = line.split_ascii_whitespace().collect();
        if !(2..=3).contains(&fields.len()) {
            return Err(self.bad("expected KEY VALUE [BLOB] in hex"));
        }
        let field = |i: usize| {
            output::from_hex(fields[i])
                .ok_or_else(|| self.bad(format!("{:?} is not hex", fields[i])))
        };
        let blob = match fields.get(2) {
            None | Some(&"-") => None,
            Some(_) => Some(field(2)?),
        };
        Ok((field(0)?, field(1)?, blob))
    }

    fn json_pair(&self, line: &str) -> Result<Pair, Failure> {
        let doc: serde_json::Value =
            serde_json::from_str(line).map_err(|e| self.bad(format!("not JSON: {e}")))?;
        let field = |name: &str| -> Result<Option<Vec<u8>>, Failure> {
            match doc.get(name) {
                None | Some(serde_json::Value::Null) => Ok(None),
                Some(serde_json::Value::String(s)) => output::from_hex(s)
                    .map(Some)
                    .ok_or_else(|| self.bad(format!("{name} is not hex"))),
                Some(_) => Err(self.bad(format!("{name} is not a hex string"))),
            }
        };
        let key = field("key")?.ok_or_else(|| self.bad("no key"))?;
        let value = field("value")?.ok_or_else(|| self.bad("no value"))?;
        Ok((key, value, field("blob")?))
    }

    /// A raw record: key and value, each a u32 little-endian length and its bytes (as `dump
    /// --format raw` writes them without `--blobs`).
    fn next_raw(&mut self) -> Result<Option<Pair>, Failure> {
        let Some(key) = self.raw_field(true)? else {
            return Ok(None);
        };
        self.at += 1;
        let value = self
            .raw_field(false)?
            .ok_or_else(|| self.bad("ends after its key"))?;
        Ok(Some((key, value, None)))
    }

    fn raw_field(&mut self, may_end: bool) -> Result<Option<Vec<u8>>, Failure> {
        let mut len = [0u8; 4];
        match self.input.read_exact(&mut len) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && may_end => return Ok(None),
            Err(e) => return Err(self.bad(format!("cut short: {e}"))),
        }
        let len = u32::from_le_bytes(len);
        if len == u32::MAX {
            return Err(self.bad("has a blob field: load the raw format without blobs"));
        }
        if len as usize > cairn::VALUE_SIZE_MAX.max(cairn::KEY_SIZE_MAX) {
            return Err(self.bad(format!(
                "a field of {len} bytes is longer than any key or value"
            )));
        }
        let mut bytes = vec![0u8; len as usize];
        self.input
            .read_exact(&mut bytes)
            .map_err(|e| self.bad(format!("cut short: {e}")))?;
        Ok(Some(bytes))
    }
}

pub fn load(
    dir: &Path,
    name: &str,
    file: Option<&Path>,
    format: DumpFormat,
    label: &str,
    auth: Option<AuthHash>,
    json: bool,
) -> Result<u8, Failure> {
    let input: Box<dyn Read> =
        match file {
            Some(path) => Box::new(std::fs::File::open(path).map_err(|e| {
                Failure::new(FAILED, format!("cannot open {}: {e}", path.display()))
            })?),
            None => Box::new(std::io::stdin().lock()),
        };
    let mut pairs = Pairs {
        input: BufReader::with_capacity(1 << 20, input),
        format,
        at: 0,
    };
    let session = open_writable(dir)?;
    if session.snapshot_exists(name)? {
        return Err(cairn::Error::SnapshotExists(name.to_string()).into());
    }
    let mut config = TableConfig::default();
    if let Some(hash) = auth {
        let kind = match hash {
            AuthHash::Sha256 => HashKind::Sha256,
            AuthHash::Blake3 => HashKind::Blake3,
        };
        config = config.auth(Some(AuthConfig::default().hash(kind)));
    }
    let table = session.new_table(config)?;
    let mut batch: Vec<Pair> = Vec::with_capacity(BATCH_PAIRS);
    let mut loaded = 0u64;
    loop {
        let next = pairs.next_pair()?;
        let end = next.is_none();
        batch.extend(next);
        if batch.len() == BATCH_PAIRS || (end && !batch.is_empty()) {
            let updates: Vec<(&[u8], Update<'_>)> = batch
                .iter()
                .map(|(k, v, blob)| {
                    let update = match blob {
                        Some(b) => Update::InsertWithBlob(v, b),
                        None => Update::Insert(v),
                    };
                    (&k[..], update)
                })
                .collect();
            table.updates(&updates).map_err(|e| {
                Failure::new(
                    FAILED,
                    format!(
                        "input up to {} {}: {}",
                        unit(format),
                        pairs.at,
                        e.with_causes()
                    ),
                )
            })?;
            loaded += batch.len() as u64;
            batch.clear();
        }
        if end {
            break;
        }
    }
    table.save_snapshot(name, label)?;
    if json {
        out!(
            "{}",
            json!({ "snapshot": name, "label": label, "pairs": loaded })
        );
    } else {
        out!(
            "loaded {} into snapshot {name:?} (label {label:?})",
            output::plural(loaded, "pair")
        );
    }
    Ok(0)
}

/// What one piece of input in `format` is called in messages.
fn unit(format: DumpFormat) -> &'static str {
    if format == DumpFormat::Raw {
        "record"
    } else {
        "line"
    }
}

/// The session in `dir` with its write-ahead log; a failure saying so for one without.
fn open_logged(dir: &Path) -> Result<cairn::Session, Failure> {
    let session = open_writable(dir)?;
    if session.log_stats().is_err() {
        return Err(Failure::new(
            FAILED,
            format!(
                "{} has no write-ahead log, so no durable tables (its tables are snapshots)",
                dir.display()
            ),
        ));
    }
    Ok(session)
}

pub fn checkpoint(dir: &Path, json: bool) -> Result<u8, Failure> {
    let session = open_logged(dir)?;
    session.checkpoint()?;
    let tables = session.durable_tables();
    session.close();
    if json {
        out!(
            "{}",
            json!({ "dir": dir.display().to_string(), "tables": tables })
        );
    } else {
        out!(
            "checkpointed {} of {}",
            output::plural(tables.len() as u64, "durable table"),
            dir.display()
        );
    }
    Ok(0)
}

pub fn compact(dir: &Path, names: &[String], json: bool) -> Result<u8, Failure> {
    let session = open_logged(dir)?;
    let names = match names.is_empty() {
        true => session.durable_tables(),
        false => names.to_vec(),
    };
    let mut done = Vec::new();
    for name in &names {
        let table = session.durable_table(name).ok_or_else(|| {
            Failure::new(FAILED, format!("the session has no durable table {name:?}"))
        })?;
        let steps = table.complete_merges()?;
        done.push((name.clone(), steps));
    }
    session.checkpoint()?;
    session.close();
    if json {
        let tables: Vec<_> = (done.iter())
            .map(|(name, steps)| json!({ "table": name, "merge_steps": steps }))
            .collect();
        out!(
            "{}",
            json!({ "dir": dir.display().to_string(), "tables": tables })
        );
    } else {
        for (name, steps) in &done {
            out!("{name}: merges completed in {} steps", count(*steps));
        }
        out!(
            "checkpointed {}",
            output::plural(done.len() as u64, "durable table")
        );
    }
    Ok(0)
}

pub fn repair(dir: &Path, dry_run: bool, json: bool) -> Result<u8, Failure> {
    let r = cairn::inspect::repair_metadata(&cairn::fs::RealFs, dir, dry_run)?;
    if json {
        let mut doc = repair_json(&r);
        doc["dir"] = json!(dir.display().to_string());
        out!("{doc}");
    } else {
        repair_text(dir, &r, dry_run)?;
    }
    Ok(0)
}

/// What a metadata repair did, for scripts.
fn repair_json(r: &MetadataRepair) -> serde_json::Value {
    json!({
        "was_sound": r.was_sound,
        "salt": r.salt,
        "runs_read": r.runs_read,
        "written": r.written,
        "created": r.created.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
    })
}

/// What a metadata repair did, for people.
fn repair_text(dir: &Path, r: &MetadataRepair, dry_run: bool) -> Result<(), Failure> {
    if r.was_sound {
        out!(
            "{}: the metadata file is sound (salt {:#018x}): nothing to repair",
            dir.display(),
            r.salt
        );
        return Ok(());
    }
    let verb = if dry_run { "would write" } else { "wrote" };
    let source = match r.runs_read {
        0 => "a new one: the session has no runs".to_string(),
        n => format!("the one {} agree on", output::plural(n, "run filter")),
    };
    out!(
        "{}: {verb} a new metadata file with salt {:#018x}, {source}",
        dir.display(),
        r.salt
    );
    for path in &r.created {
        let verb = if dry_run { "would make" } else { "made" };
        out!("  {verb} the missing directory {}", path.display());
    }
    Ok(())
}

/// `repair --salvage NAME [--into NEW]`: the session's metadata file repaired first (if it
/// needs it), then what is intact of snapshot `name` saved as `into` (or, with `dry_run`, only
/// read). Exit code 1 if anything was lost.
pub fn salvage(
    dir: &Path,
    name: &str,
    into: Option<&str>,
    dry_run: bool,
    json: bool,
) -> Result<u8, Failure> {
    if into.is_none() && !dry_run {
        return Err(Failure::new(
            USAGE,
            "--salvage needs --into NEW, the snapshot to save what is intact into (or --dry-run)",
        ));
    }
    let into = if dry_run { None } else { into };
    let metadata = cairn::inspect::repair_metadata(&cairn::fs::RealFs, dir, dry_run)?;
    if !json && !metadata.was_sound {
        repair_text(dir, &metadata, dry_run)?;
    }
    let session = match into {
        Some(_) => open_writable(dir)?,
        None => open_read_only(dir)?,
    };
    let bar = ProgressBar::new(0);
    if let Ok(style) =
        ProgressStyle::with_template("{prefix}: [{bar:30}] {bytes}/{total_bytes} ({bytes_per_sec})")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_prefix(name.to_string());
    let report = session.salvage_snapshot(name, into, SnapshotOverrides::default(), &mut |p| {
        bar.set_length(p.total.max(p.bytes));
        bar.set_position(p.bytes);
    });
    bar.finish_and_clear();
    let report = report?;
    session.close();
    let code = if report.is_complete() { 0 } else { DAMAGED };
    if json {
        let losses: Vec<_> = (report.losses.iter())
            .map(|l| {
                let (after, before, key) = match &l.keys {
                    LostKeys::Between { after, before } => {
                        (after.as_deref().map(hex), before.as_deref().map(hex), None)
                    }
                    LostKeys::One(key) => (None, None, Some(hex(key))),
                    _ => (None, None, None),
                };
                json!({
                    "path": l.path.display().to_string(),
                    "first_page": l.first_page,
                    "pages": l.pages,
                    "after": after,
                    "before": before,
                    "key": key,
                    "detail": l.detail,
                })
            })
            .collect();
        let unchecked: Vec<_> = (report.unchecked.iter())
            .map(|p| p.display().to_string())
            .collect();
        out!(
            "{}",
            json!({
                "dir": dir.display().to_string(),
                "metadata": repair_json(&metadata),
                "snapshot": name,
                "into": into,
                "complete": report.is_complete(),
                "runs": report.runs,
                "pages_read": report.pages_read,
                "pages_lost": report.pages_lost,
                "entries_read": report.entries_read,
                "entries_lost": report.entries_lost,
                "keys": report.keys_written,
                "root": report.root.as_ref().map(output::root),
                "losses": losses,
                "unchecked": unchecked,
            })
        );
        return Ok(code);
    }
    let saved = match into {
        Some(to) => format!("salvaged into {to}"),
        None => "would be salvaged (dry run: nothing written)".to_string(),
    };
    out!(
        "{name}: {} {saved}; {} read: {} intact, {} lost",
        output::plural(report.keys_written, "key"),
        output::plural(report.runs, "run file"),
        output::plural(report.pages_read, "page"),
        count(report.pages_lost),
    );
    if report.entries_lost > 0 {
        out!(
            "  {} lost with a damaged blob",
            output::plural(report.entries_lost, "entry")
        );
    }
    if let Some(root) = &report.root {
        out!(
            "  state root of {}: {}",
            into.unwrap_or(name),
            output::root(root)
        );
    }
    for l in &report.losses {
        let pages = match (l.first_page, l.pages) {
            (Some(first), 1) => format!(" page {first}"),
            (Some(first), n) => format!(" pages {first} to {}", first + n - 1),
            (None, _) => String::new(),
        };
        let keys = match &l.keys {
            LostKeys::Between { after, before } => {
                let after = after.as_deref().map(|k| format!(" after {}", escaped(k)));
                let and = if after.is_some() { " and" } else { "" };
                let before = (before.as_deref()).map(|k| format!("{and} before {}", escaped(k)));
                match (after, before) {
                    (None, None) => "any key".to_string(),
                    (a, b) => format!("keys{}{}", a.unwrap_or_default(), b.unwrap_or_default()),
                }
            }
            LostKeys::One(key) => format!("key {}", escaped(key)),
            _ => "some keys".to_string(),
        };
        out!("  lost: {}{pages}: {keys} ({})", l.path.display(), l.detail);
    }
    for path in &report.unchecked {
        out!(
            "  unchecked: {} (its checksums file is missing, damaged or not the one the \
             metadata pins: pages decoded, not checked)",
            path.display()
        );
    }
    if code == 0 {
        out!("  nothing lost");
    }
    Ok(code)
}
