//! `cairn wal`: a session's write-ahead log, read without replaying it: the durable tables its
//! catalog lists, its segments, its records (with `--records`), and whether its chain holds.
//!
//! Owns: this command's output and exit code. May call: `commands` (opening the session,
//! failures, `out!`), `output`, `cairn` (`Session::read_log`). Must never touch: the log's
//! files directly.

use std::collections::BTreeMap;
use std::io::Write;
use std::ops::ControlFlow;
use std::path::Path;

use cairn::inspect::{LogRecord, LogRecordKind, LogView};
use serde_json::{json, Value};

use crate::commands::{open_read_only, out, write_failed, Failure, DAMAGED};
use crate::output::{self, count, size};

fn record_text(r: &LogRecord, names: &BTreeMap<u32, String>) -> String {
    let name = |id: &u32| {
        names
            .get(id)
            .cloned()
            .unwrap_or_else(|| format!("table {id}"))
    };
    let what = match &r.kind {
        LogRecordKind::Batch { parts } => {
            let parts: Vec<String> = (parts.iter())
                .map(|(id, n)| format!("{} {}", name(id), output::plural(*n, "update")))
                .collect();
            format!("batch: {}", parts.join(", "))
        }
        LogRecordKind::Commit { table } => format!("commit of {}", name(table)),
        LogRecordKind::Dirty { table, keys } => {
            format!("uncommitted keys of {}: {}", name(table), count(*keys))
        }
        LogRecordKind::Undecodable { reason } => format!("UNDECODABLE: {reason}"),
        _ => "a record of a newer kind".to_string(),
    };
    format!(
        "record {} (segment {}, {}): {what}",
        r.seq,
        r.segment,
        size(r.payload_bytes as u64)
    )
}

fn record_json(r: &LogRecord) -> Value {
    let mut doc = json!({ "seq": r.seq, "segment": r.segment, "payload_bytes": r.payload_bytes });
    match &r.kind {
        LogRecordKind::Batch { parts } => {
            doc["kind"] = json!("batch");
            doc["parts"] = json!(parts
                .iter()
                .map(|(t, n)| json!({ "table": t, "updates": n }))
                .collect::<Vec<_>>());
        }
        LogRecordKind::Commit { table } => {
            doc["kind"] = json!("commit");
            doc["table"] = json!(table);
        }
        LogRecordKind::Dirty { table, keys } => {
            doc["kind"] = json!("dirty");
            doc["table"] = json!(table);
            doc["keys"] = json!(keys);
        }
        LogRecordKind::Undecodable { reason } => {
            doc["kind"] = json!("undecodable");
            doc["error"] = json!(reason);
        }
        _ => doc["kind"] = json!("unknown"),
    }
    doc
}

fn view_json(dir: &Path, v: &LogView) -> Value {
    json!({
        "dir": dir.display().to_string(),
        "log_id": format!("{:016x}", v.log_id),
        "tables": v.tables.iter().map(|t| json!({
            "id": t.id,
            "name": t.name,
            "checkpoint": t.checkpoint,
            "covered_to": t.covered_to,
        })).collect::<Vec<_>>(),
        "segments": v.segments.iter().map(|s| json!({
            "number": s.number,
            "first_seq": s.first_seq,
            "file_bytes": s.file_bytes,
            "records": s.records,
        })).collect::<Vec<_>>(),
        "records": v.records,
        "last_seq": v.last_seq,
        "replay_from": v.replay_from,
        "sound": v.damage.is_none(),
        "damage": v.damage.as_ref().map(|e| e.with_causes()),
    })
}

pub fn wal(dir: &Path, records: bool, limit: Option<u64>, json: bool) -> Result<u8, Failure> {
    let session = open_read_only(dir)?;
    let mut names = BTreeMap::new();
    let mut failed = None;
    let mut shown = 0u64;
    let limit = limit.unwrap_or(u64::MAX);
    let stdout = std::io::stdout();
    let mut lines = std::io::BufWriter::with_capacity(1 << 16, stdout.lock());
    if records && !json {
        // The tables' names, for the records' lines: from the catalog alone.
        names = (session.log_tables()?.iter())
            .map(|t| (t.id, t.name.clone()))
            .collect();
    }
    let view = session.read_log(&mut |r| {
        if !records {
            return ControlFlow::Continue(());
        }
        if shown == limit {
            return ControlFlow::Break(());
        }
        shown += 1;
        let line = match json {
            true => record_json(r).to_string(),
            false => record_text(r, &names),
        };
        match writeln!(lines, "{line}") {
            Ok(()) => ControlFlow::Continue(()),
            Err(e) => {
                failed = Some(e);
                ControlFlow::Break(())
            }
        }
    })?;
    if let Some(e) = failed {
        return Err(write_failed(e));
    }
    lines.flush().map_err(write_failed)?;
    drop(lines);
    let code = if view.damage.is_some() { DAMAGED } else { 0 };
    if json {
        let mut doc = view_json(dir, &view);
        doc["complete"] = json!(view.records == shown || !records);
        out!("{doc}");
        return Ok(code);
    }
    out!(
        "log {:016x} of {}: {}",
        view.log_id,
        dir.display(),
        output::plural(view.tables.len() as u64, "durable table")
    );
    for t in &view.tables {
        out!(
            "  table {:?} (id {}): checkpoint {} holds records up to {}",
            t.name,
            t.id,
            t.checkpoint,
            t.covered_to
        );
    }
    out!(
        "  {}",
        output::plural(view.segments.len() as u64, "segment")
    );
    for s in &view.segments {
        out!(
            "  segment {}: from record {}, {} read, file of {}",
            s.number,
            s.first_seq,
            output::plural(s.records, "record"),
            size(s.file_bytes)
        );
    }
    if records && view.records > shown {
        out!(
            "  stopped at --limit after record {}: the rest of the log was not read",
            view.last_seq.saturating_sub(1)
        );
        return Ok(code);
    }
    out!(
        "  {} read, the last {}",
        output::plural(view.records, "record"),
        view.last_seq
    );
    match view.replay_from {
        Some(from) if from <= view.last_seq => {
            out!("  a recovery replays records {from} to {}", view.last_seq)
        }
        Some(_) => out!("  the checkpoints hold every record: a recovery replays none"),
        None => {}
    }
    match &view.damage {
        None => out!("  chain: sound (every segment and record follows the one before)"),
        Some(e) => out!("  chain: DAMAGED: {}", e.with_causes()),
    }
    Ok(code)
}
