//! The subcommands: each opens the session (read-only unless it must write), does its work
//! through the engine's public API, and prints text or JSON.
//!
//! Owns: exit codes, error messages, output layout. Must never touch: the database's files
//! directly (everything goes through `cairn`).

use std::io::{BufWriter, Write};
use std::path::Path;

use cairn::inspect::{RunPlace, RunStats, SnapshotInfo, VerifyOptions, VerifyReport};
use cairn::{Error, Session, SessionOptions, SnapshotOverrides, Table};
use serde_json::{json, Value};

use cairn_ledger::{AuditOptions, AuditProblem, Error as LedgerError, Ledger, LedgerConfig};

use crate::output::{self, count, hex, size, AuditBar, VerifyBar};
use crate::{maintain, read, wal, Cli, Command, DumpFormat};

/// Exit code: damage found.
pub(crate) const DAMAGED: u8 = 1;
/// Exit code: a usage error (as clap's).
pub(crate) const USAGE: u8 = 2;
/// Exit code: the command failed.
pub(crate) const FAILED: u8 = 3;
/// Exit code: another process holds the session's lock.
const LOCKED: u8 = 4;

/// Why a command stopped: its exit code and a one-line message.
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub message: String,
}

impl Failure {
    pub(crate) fn new(code: u8, message: impl Into<String>) -> Failure {
        Failure {
            code,
            message: message.into(),
        }
    }
}

impl From<Error> for Failure {
    fn from(e: Error) -> Failure {
        let code = match e {
            Error::SessionLocked(_) => LOCKED,
            _ => FAILED,
        };
        let mut message = e.with_causes();
        if code == LOCKED {
            message.push_str(" (stop the process that owns it first)");
        }
        Failure::new(code, message)
    }
}

/// Output that went to a closed pipe (`cairn dump ... | head`) ends the command quietly.
pub(crate) fn write_failed(e: std::io::Error) -> Failure {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        Failure::new(0, "")
    } else {
        Failure::new(FAILED, format!("writing the output: {e}"))
    }
}

/// `println!` that ends the command quietly when stdout is a closed pipe (`cairn info ... |
/// head`), through [`write_failed`], instead of panicking; for functions returning
/// `Result<_, Failure>`.
macro_rules! out {
    () => {{
        use std::io::Write as _;
        writeln!(std::io::stdout()).map_err($crate::commands::write_failed)?
    }};
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout(), $($arg)*).map_err($crate::commands::write_failed)?
    }};
}
pub(crate) use out;

/// Runs the command; returns the exit code.
pub fn run(cli: Cli) -> Result<u8, Failure> {
    let json = cli.json;
    match cli.command {
        Command::Info { dir, salt, live } => info(&dir, salt, live, json),
        Command::Verify {
            dir,
            snapshot,
            root_memory,
        } => verify(&dir, snapshot.as_deref(), root_memory, json),
        Command::Dump {
            dir,
            snapshot,
            from,
            to,
            format,
            blobs,
            prefix,
            reverse,
            limit,
            table,
        } => {
            let format = if json { DumpFormat::Json } else { format };
            let range = Range {
                table,
                from,
                to,
                prefix,
                reverse,
                limit,
            };
            dump(&dir, &snapshot, range, format, blobs)
        }
        Command::Get {
            dir,
            snapshot,
            keys,
            format,
            table,
        } => read::get(&dir, &snapshot, &keys, format, table, json),
        Command::Root { dir, snapshot } => read::root(&dir, &snapshot, json),
        Command::Prove {
            dir,
            snapshot,
            keys,
            encoded,
        } => read::prove(&dir, &snapshot, &keys, encoded, json),
        Command::Diff {
            dir,
            first,
            second,
            format,
            limit,
        } => read::diff(&dir, &first, &second, format, limit, json),
        Command::Load {
            dir,
            snapshot,
            file,
            format,
            label,
            auth,
        } => maintain::load(&dir, &snapshot, file.as_deref(), format, &label, auth, json),
        Command::Wal {
            dir,
            records,
            limit,
        } => wal::wal(&dir, records, limit, json),
        Command::Repair {
            dir,
            dry_run,
            salvage,
            into,
        } => match salvage {
            None => maintain::repair(&dir, dry_run, json),
            Some(name) => maintain::salvage(&dir, &name, into.as_deref(), dry_run, json),
        },
        Command::Checkpoint { dir } => maintain::checkpoint(&dir, json),
        Command::Compact { dir, tables } => maintain::compact(&dir, &tables, json),
        Command::Stats {
            dir,
            snapshot,
            sample,
        } => stats(&dir, &snapshot, sample, json),
        Command::Export {
            dir,
            snapshot,
            target,
        } => {
            let session = open_writable(&dir)?;
            session.export_snapshot(&snapshot, &target)?;
            done(json, "exported", &snapshot, &target)
        }
        Command::Import {
            dir,
            snapshot,
            source,
            no_verify,
        } => import(&dir, &snapshot, &source, no_verify, json),
        Command::Audit {
            dir,
            digests,
            root_memory,
        } => audit(&dir, digests.as_deref(), root_memory, json),
        Command::Delete { dir, snapshot } => {
            let session = open_writable(&dir)?;
            session.delete_snapshot(&snapshot)?;
            done(json, "deleted", &snapshot, &dir)
        }
    }
}

fn done(json: bool, what: &str, snapshot: &str, path: &Path) -> Result<u8, Failure> {
    if json {
        out!(
            "{}",
            json!({ what: snapshot, "path": path.display().to_string() })
        );
    } else {
        out!("{what} snapshot {snapshot:?} ({})", path.display());
    }
    Ok(0)
}

/// The session in `dir`, read-only: no lock, nothing written.
pub(crate) fn open_read_only(dir: &Path) -> Result<Session, Failure> {
    // What the engine's errors cannot tell apart, said plainly.
    let shown = dir.display();
    if dir.is_file() {
        return Err(Failure::new(
            FAILED,
            format!("{shown} is a file, not a Cairn session directory"),
        ));
    }
    if std::fs::read_dir(dir).is_ok_and(|mut entries| entries.next().is_none()) {
        return Err(Failure::new(
            FAILED,
            format!("{shown} is an empty directory, not a Cairn session"),
        ));
    }
    let options = SessionOptions::default().read_only(true);
    Ok(Session::open_with_options(dir, options)?)
}

/// The session in `dir`, with its lock, for commands that write. `dir` must already be a
/// session: opening an empty directory would make one.
pub(crate) fn open_writable(dir: &Path) -> Result<Session, Failure> {
    // The read-only open checks that `dir` is a session, without creating anything.
    drop(open_read_only(dir)?);
    // A session with a write-ahead log is opened with it (its durable tables recovered, as
    // their owner would); one without gets none created by a snapshot command.
    let options = SessionOptions::default()
        .log(dir.join("log").is_dir().then(cairn::LogOptions::default))
        .create_if_missing(false);
    Ok(Session::open_with_options(dir, options)?)
}

/// The snapshots to look at: `name`, or every snapshot of the session.
fn snapshots(session: &Session, name: Option<&str>) -> Result<Vec<String>, Failure> {
    match name {
        Some(name) => {
            if !session.snapshot_exists(name)? {
                return Err(Error::SnapshotMissing(name.to_string()).into());
            }
            Ok(vec![name.to_string()])
        }
        None => Ok(session.list_snapshots()?),
    }
}

fn place(p: RunPlace) -> String {
    match p {
        RunPlace::WriteBuffer => "write buffer".into(),
        RunPlace::Level {
            level,
            merging: false,
        } => format!("level {level}"),
        RunPlace::Level {
            level,
            merging: true,
        } => format!("level {level} (merging)"),
        RunPlace::Union => "union input".into(),
    }
}

fn place_json(p: RunPlace) -> Value {
    match p {
        RunPlace::WriteBuffer => json!({ "kind": "write_buffer" }),
        RunPlace::Level { level, merging } => {
            json!({ "kind": "level", "level": level, "merging": merging })
        }
        RunPlace::Union => json!({ "kind": "union" }),
    }
}

fn info_json(info: &SnapshotInfo) -> Value {
    json!({
        "name": info.name,
        "label": info.label,
        "files": info.files,
        "bytes": info.bytes,
        "stored_entries": info.stored_entries(),
        "levels": info.levels,
        "resolve": info.resolve,
        "index": format!("{:?}", info.index).to_lowercase(),
        "write_buffer_entries": info.write_buffer_entries,
        "union_inputs": info.union_inputs,
        "runs": info.runs.iter().map(|r| json!({
            "number": r.number,
            "place": place_json(r.place),
            "entries": r.entries,
            "pages": r.pages,
            "bytes": r.bytes,
        })).collect::<Vec<_>>(),
        "auth": info.auth.map(|a| json!({
            "hash": output::hash_name(a.root.kind),
            "root": hex(&a.root.hash),
            "version": a.version,
            "retained_bytes": a.retained_bytes,
        })),
    })
}

fn info_text(info: &SnapshotInfo) -> Result<(), Failure> {
    out!(
        "snapshot {:?}: label {:?}, {} files, {}",
        info.name,
        info.label,
        info.files,
        size(info.bytes)
    );
    out!(
        "  {} stored (deletes and older versions included) in {} on {}{}",
        output::plural(info.stored_entries(), "entry"),
        output::plural(info.runs.len() as u64, "run"),
        output::plural(info.levels as u64, "level"),
        if info.union_inputs > 0 {
            format!(
                ", above a union of {} tables in progress",
                info.union_inputs
            )
        } else {
            String::new()
        }
    );
    out!(
        "  resolve {}, {} index, write buffer of {} entries",
        info.resolve,
        format!("{:?}", info.index).to_lowercase(),
        count(info.write_buffer_entries as u64)
    );
    if let Some(auth) = &info.auth {
        out!(
            "  state root {} (version {})",
            output::root(&auth.root),
            auth.version
        );
    }
    for run in &info.runs {
        out!(
            "  run {:>3}  {:<20} {:>12} entries {:>10} pages {:>11}",
            run.number,
            place(run.place),
            count(run.entries),
            count(run.pages),
            size(run.bytes)
        );
    }
    Ok(())
}

fn info(dir: &Path, salt: bool, live: bool, json: bool) -> Result<u8, Failure> {
    let session = open_read_only(dir)?;
    let names = session.list_snapshots()?;
    let mut code = 0;
    let mut entries = Vec::new();
    if !json {
        out!("session {}", dir.display());
        if salt {
            out!("  salt {:#018x}", session.salt());
        }
        out!("  {}", output::plural(names.len() as u64, "snapshot"));
    }
    for name in &names {
        let found = session.snapshot_info(name).and_then(|info| {
            let live = live.then(|| live_entries(&session, &info)).transpose()?;
            Ok((info, live))
        });
        match found {
            Ok((info, live)) if json => {
                let mut doc = info_json(&info);
                if let Some(n) = live {
                    doc["live_entries"] = json!(n);
                }
                entries.push(doc);
            }
            Ok((info, live)) => {
                out!();
                info_text(&info)?;
                if let Some(n) = live {
                    out!(
                        "  {} live (keys a lookup finds)",
                        output::plural(n, "entry")
                    );
                }
            }
            Err(e) => {
                code = DAMAGED;
                let message = format!("{} (run `cairn verify` for every problem)", e.with_causes());
                if json {
                    entries.push(json!({ "name": name, "error": message }));
                } else {
                    out!();
                    out!("snapshot {name:?}: cannot be read: {message}");
                }
            }
        }
    }
    if json {
        let mut doc = json!({
            "dir": dir.display().to_string(),
            "snapshots": entries,
        });
        if salt {
            doc["salt"] = json!(session.salt());
        }
        out!("{doc}");
    }
    Ok(code)
}

/// The live entries of the snapshot `info` describes: one pass over it.
fn live_entries(session: &Session, info: &SnapshotInfo) -> cairn::Result<u64> {
    let table = session.open_snapshot(&info.name, &info.label, SnapshotOverrides::default())?;
    let mut n = 0;
    for entry in table.cursor()? {
        entry?;
        n += 1;
    }
    Ok(n)
}

fn report_json(name: &str, r: &VerifyReport) -> Value {
    json!({
        "snapshot": name,
        "sound": r.is_sound(),
        "files": r.files,
        "bytes": r.bytes,
        "stored_entries": r.stored_entries,
        "entries": r.entries,
        "root": r.root.map(|root| output::root(&root)),
        "skipped": r.skipped,
        "problems": r.problems.iter().map(|p| json!({
            "path": p.path.display().to_string(),
            "offset": p.offset,
            "detail": p.detail,
        })).collect::<Vec<_>>(),
    })
}

fn verify(dir: &Path, name: Option<&str>, root_memory: usize, json: bool) -> Result<u8, Failure> {
    let session = open_read_only(dir)?;
    let names = snapshots(&session, name)?;
    let options = VerifyOptions::default().root_memory_bytes(root_memory.saturating_mul(1 << 20));
    let mut damaged = 0;
    let mut reports = Vec::new();
    for name in &names {
        let mut bar = VerifyBar::new(name);
        let report = session.verify_snapshot(name, options, &mut |p| bar.update(p));
        bar.finish();
        let report = report?;
        damaged += usize::from(!report.is_sound());
        if json {
            reports.push(report_json(name, &report));
            continue;
        }
        if report.is_sound() {
            let mut line = format!(
                "snapshot {name:?}: ok, {} files, {}, {} entries stored",
                report.files,
                size(report.bytes),
                count(report.stored_entries)
            );
            if let Some(entries) = report.entries {
                line.push_str(&format!(", {} entries read", count(entries)));
            }
            if let Some(root) = &report.root {
                line.push_str(&format!(", state root {} recomputed", output::root(root)));
            }
            out!("{line}");
        } else {
            out!(
                "snapshot {name:?}: DAMAGED, {} problem{}:",
                report.problems.len(),
                if report.problems.len() == 1 { "" } else { "s" }
            );
            for problem in &report.problems {
                out!("  {problem}");
            }
        }
        for skipped in &report.skipped {
            out!("  not checked: {skipped}");
        }
    }
    if json {
        out!(
            "{}",
            json!({ "dir": dir.display().to_string(), "damaged": damaged, "snapshots": reports })
        );
    } else if names.len() != 1 {
        out!("{} of {} snapshots damaged", damaged, names.len());
    }
    Ok(if damaged > 0 { DAMAGED } else { 0 })
}

/// Published digests from a file of `SIZE ROOT` lines.
fn read_digests(path: &Path) -> Result<Vec<cairn_proof::Digest>, Failure> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Failure::new(FAILED, format!("reading {}: {e}", path.display())))?;
    let mut digests = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let bad = || {
            Failure::new(
                USAGE,
                format!(
                    "{} line {}: expected `SIZE ROOT` (a number, 64 hex digits)",
                    path.display(),
                    n + 1
                ),
            )
        };
        let mut parts = line.split_whitespace();
        let size: u64 = parts.next().and_then(|s| s.parse().ok()).ok_or_else(bad)?;
        let root: [u8; 32] = parts
            .next()
            .and_then(output::from_hex)
            .and_then(|b| b.try_into().ok())
            .ok_or_else(bad)?;
        if parts.next().is_some() {
            return Err(bad());
        }
        digests.push(cairn_proof::Digest { size, root });
    }
    Ok(digests)
}

fn problem_text(p: &AuditProblem) -> String {
    match p {
        AuditProblem::TableRoot {
            table,
            version,
            recorded,
            computed,
            keys,
        } => {
            let mut line = format!(
                "table {table:?}: its contents hash to {}, version {version} recorded {}",
                output::root(computed),
                output::root(recorded)
            );
            if !keys.is_empty() {
                let shown: Vec<String> = keys.iter().map(|k| output::escaped(k)).collect();
                line.push_str(&format!(
                    "; keys the trie does not vouch for: {}",
                    shown.join(", ")
                ));
            }
            line
        }
        AuditProblem::Record { version, detail } => format!("version {version}'s record: {detail}"),
        AuditProblem::Undo {
            version,
            table: Some(table),
            detail,
        } => format!("kept version {version}, table {table:?}: {detail}"),
        AuditProblem::Undo {
            version,
            table: None,
            detail,
        } => format!("kept version {version} cannot be rebuilt: {detail}"),
        AuditProblem::Chain { table, key, detail } => format!(
            "ordered table {table:?}: its chain breaks at key {}: {detail}",
            output::escaped(key)
        ),
        AuditProblem::Node { level, index } => {
            format!("history node ({level}, {index}) is missing or differs from the records'")
        }
        AuditProblem::Digest {
            published,
            stored: Some(stored),
        } => format!(
            "published digest at size {} has root {}, the stored history {}",
            published.size,
            hex(&published.root),
            hex(&stored.root)
        ),
        AuditProblem::Digest {
            published,
            stored: None,
        } => format!(
            "published digest at size {} is beyond the ledger's versions (rolled back or \
             truncated?)",
            published.size
        ),
        _ => format!("{p:?}"),
    }
}

fn audit(
    dir: &Path,
    digests: Option<&Path>,
    root_memory: usize,
    json: bool,
) -> Result<u8, Failure> {
    let published = match digests {
        Some(path) => read_digests(path)?,
        None => Vec::new(),
    };
    if !dir.is_dir() {
        return Err(Failure::new(
            FAILED,
            format!("{} is not a directory", dir.display()),
        ));
    }
    // Every undo record kept (an open with a smaller window would delete some).
    let ledger =
        Ledger::open(dir, LedgerConfig::default().history(u64::MAX)).map_err(|e| match e {
            LedgerError::Engine(e) => Failure::from(e),
            e => Failure::new(FAILED, e.to_string()),
        })?;
    let options = AuditOptions::default()
        .digests(published)
        .root_memory_bytes(root_memory.saturating_mul(1 << 20));
    let mut bar = AuditBar::new();
    let report = ledger.audit(&options, &mut |p| bar.update(&p));
    bar.finish();
    let report = report.map_err(|e| Failure::new(FAILED, e.to_string()))?;
    ledger.close();
    if json {
        out!(
            "{}",
            json!({
                "dir": dir.display().to_string(),
                "clean": report.is_clean(),
                "versions": report.versions,
                "digest": { "size": report.digest.size, "root": hex(&report.digest.root) },
                "digests_checked": report.digests_checked,
                "versions_rebuilt": report.versions_rebuilt,
                "first_bad_version": report.first_bad_version,
                "problems": report.problems.iter().map(problem_text).collect::<Vec<_>>(),
            })
        );
    } else {
        out!(
            "ledger {}: {} versions ({} kept versions rebuilt), digest {} {}, {} published \
             digests checked",
            dir.display(),
            count(report.versions),
            count(report.versions_rebuilt),
            report.digest.size,
            hex(&report.digest.root),
            report.digests_checked
        );
        if report.is_clean() {
            out!("clean: every table, version record, history node and digest agrees");
        } else {
            out!(
                "DAMAGED: {} problem{}, first bad version {}:",
                report.problems.len(),
                if report.problems.len() == 1 { "" } else { "s" },
                report
                    .first_bad_version
                    .map_or("?".into(), |v| v.to_string())
            );
            for p in &report.problems {
                out!("  {}", problem_text(p));
            }
        }
    }
    Ok(if report.is_clean() { 0 } else { DAMAGED })
}

/// A key given on the command line: `hex:<digits>` or UTF-8 text.
pub(crate) fn parse_key(text: &str) -> Result<Vec<u8>, Failure> {
    match text.strip_prefix("hex:") {
        Some(digits) => output::from_hex(digits).ok_or_else(|| {
            Failure::new(
                2,
                format!("{text:?} is not hex: an even number of 0-9, a-f"),
            )
        }),
        None => Ok(text.as_bytes().to_vec()),
    }
}

/// Opens a snapshot as a table of a read-only session.
pub(crate) fn open_table(session: &Session, name: &str) -> Result<Table, Failure> {
    if !session.snapshot_exists(name)? {
        return Err(Error::SnapshotMissing(name.to_string()).into());
    }
    let label = session.snapshot_info(name)?.label;
    Ok(session.open_snapshot(name, &label, SnapshotOverrides::default())?)
}

/// The pairs `dump` prints: a key range, a prefix, an order and a count.
struct Range {
    /// NAME is a durable table (read through `Session::durable_view`), not a snapshot.
    table: bool,
    from: Option<String>,
    to: Option<String>,
    prefix: Option<String>,
    reverse: bool,
    limit: Option<u64>,
}

fn dump(
    dir: &Path,
    name: &str,
    range: Range,
    format: DumpFormat,
    blobs: bool,
) -> Result<u8, Failure> {
    let from = range.from.as_deref().map(parse_key).transpose()?;
    let to = range.to.as_deref().map(parse_key).transpose()?;
    let prefix = range.prefix.as_deref().map(parse_key).transpose()?;
    let session = open_read_only(dir)?;
    let bounds = read::key_range(from, to, prefix);
    let stdout = std::io::stdout();
    let mut out = BufWriter::with_capacity(1 << 16, stdout.lock());
    let limit = range.limit;
    let take = limit.map_or(usize::MAX, |l| l.try_into().unwrap_or(usize::MAX));
    // The pairs, from a snapshot or from a durable table's live view.
    let (table, view);
    let pairs: Box<dyn Iterator<Item = Result<read::Pair, Failure>>> = match range.table {
        false => {
            table = open_table(&session, name)?;
            let t = &table;
            Box::new(
                t.range(bounds)?
                    .map(move |e| read::Pair::from_cursor(t, e?, blobs)),
            )
        }
        true => {
            view = session.durable_view()?;
            let live = read::live_table(&view, name)?;
            Box::new(
                live.range(bounds, blobs)?
                    .map(|e| Ok(read::Pair::from_live(e?))),
            )
        }
    };
    let entries: Box<dyn Iterator<Item = Result<read::Pair, Failure>>> = match range.reverse {
        true => Box::new(read::reversed(pairs, limit)?.into_iter().map(Ok)),
        false => Box::new(pairs.take(take)),
    };
    for entry in entries {
        let entry = entry?;
        let blob = entry.blob;
        match format {
            DumpFormat::Hex | DumpFormat::Text => {
                let show = if format == DumpFormat::Hex {
                    hex
                } else {
                    output::escaped
                };
                write!(out, "{} {}", show(&entry.key), show(&entry.value)).map_err(write_failed)?;
                if blobs {
                    let blob = blob.as_deref().map_or_else(|| "-".to_string(), show);
                    write!(out, " {blob}").map_err(write_failed)?;
                }
                writeln!(out).map_err(write_failed)?;
            }
            DumpFormat::Json => {
                let mut object = json!({ "key": hex(&entry.key), "value": hex(&entry.value) });
                if let Some(n) = entry.blob_bytes {
                    object["blob_bytes"] = json!(n);
                }
                if let Some(blob) = &blob {
                    object["blob"] = json!(hex(blob));
                }
                writeln!(out, "{object}").map_err(write_failed)?;
            }
            DumpFormat::Raw => {
                for field in [Some(&entry.key), Some(&entry.value)] {
                    let field = field.expect("present");
                    out.write_all(&(field.len() as u32).to_le_bytes())
                        .and_then(|()| out.write_all(field))
                        .map_err(write_failed)?;
                }
                if blobs {
                    match &blob {
                        Some(b) => out
                            .write_all(&(b.len() as u32).to_le_bytes())
                            .and_then(|()| out.write_all(b)),
                        None => out.write_all(&u32::MAX.to_le_bytes()),
                    }
                    .map_err(write_failed)?;
                }
            }
        }
    }
    out.flush().map_err(write_failed)?;
    Ok(0)
}

fn stats_json(s: &RunStats) -> Value {
    json!({
        "number": s.run.number,
        "place": place_json(s.run.place),
        "entries": s.run.entries,
        "inserts": s.ops[0],
        "upserts": s.ops[1],
        "deletes": s.ops[2],
        "blobs": s.blobs,
        "pages": s.run.pages,
        "overflow_pages": s.overflow_pages,
        "bytes": s.run.bytes,
        "keyops_bytes": s.keyops_bytes,
        "blob_bytes": s.blob_bytes,
        "filter_bytes": s.filter_bytes,
        "filter_bits_per_key": s.filter_bits_per_key,
        "filter_hashes": s.filter_hashes,
        "filter_fpr_measured": s.filter_fpr,
        "filter_sample": s.filter_sample,
        "index": format!("{:?}", s.index).to_lowercase(),
        "index_bytes": s.index_bytes,
    })
}

fn stats(dir: &Path, name: &str, sample: u64, json: bool) -> Result<u8, Failure> {
    let session = open_read_only(dir)?;
    if !session.snapshot_exists(name)? {
        return Err(Error::SnapshotMissing(name.to_string()).into());
    }
    let runs = match session.snapshot_stats(name, sample) {
        Ok(runs) => runs,
        Err(
            e
            @ (Error::CorruptFile { .. } | Error::ChecksumMismatch { .. } | Error::Corrupt { .. }),
        ) => {
            return Err(Failure::new(DAMAGED, e.with_causes()));
        }
        Err(e) => return Err(e.into()),
    };
    if json {
        let runs: Vec<Value> = runs.iter().map(stats_json).collect();
        out!("{}", json!({ "snapshot": name, "runs": runs }));
        return Ok(0);
    }
    out!(
        "snapshot {name:?}: {}",
        output::plural(runs.len() as u64, "run")
    );
    out!(
        "{:>4} {:<20} {:>11} {:>9} {:>9} {:>8} {:>9} {:>9} {:>10} {:>10} {:>9} {:>6} {:>8} {:>9} {:>10}",
        "run", "place", "entries", "upserts", "deletes", "blobs", "pages", "overflow", "keyops",
        "blob file", "bits/key", "hashes", "fpr", "index", "index size"
    );
    for s in &runs {
        out!(
            "{:>4} {:<20} {:>11} {:>9} {:>9} {:>8} {:>9} {:>9} {:>10} {:>10} {:>9.2} {:>6} {:>7.3}% {:>9} {:>10}",
            s.run.number,
            place(s.run.place),
            count(s.run.entries),
            count(s.ops[1]),
            count(s.ops[2]),
            count(s.blobs),
            count(s.run.pages),
            count(s.overflow_pages),
            size(s.keyops_bytes),
            size(s.blob_bytes),
            s.filter_bits_per_key,
            s.filter_hashes,
            s.filter_fpr * 100.0,
            format!("{:?}", s.index).to_lowercase(),
            size(s.index_bytes),
        );
    }
    out!(
        "false-positive rates measured on {} keys per run that are not in it",
        count(sample)
    );
    Ok(0)
}

fn import(
    dir: &Path,
    name: &str,
    source: &Path,
    no_verify: bool,
    json: bool,
) -> Result<u8, Failure> {
    let session = open_writable(dir)?;
    session.import_snapshot(name, source)?;
    if !no_verify {
        let mut bar = VerifyBar::new(name);
        let report =
            session.verify_snapshot(name, VerifyOptions::default(), &mut |p| bar.update(p));
        bar.finish();
        let report = report?;
        if !report.is_sound() {
            session.delete_snapshot(name)?;
            let first = &report.problems[0];
            return Err(Failure::new(
                DAMAGED,
                format!(
                    "the imported snapshot is damaged and was removed again: {first} ({} \
                     problem{} in all)",
                    report.problems.len(),
                    if report.problems.len() == 1 { "" } else { "s" }
                ),
            ));
        }
    }
    done(json, "imported", name, source)
}
