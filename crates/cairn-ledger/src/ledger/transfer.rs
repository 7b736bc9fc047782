//! A whole ledger as one stream of bytes and back: [`Ledger::export_view`] and
//! [`LedgerExport::write_to`] write every stored entry of the ledger's tables as of one version,
//! [`Ledger::import_with`] rebuilds a ledger from such a stream in a new directory and proves it
//! before answering it, [`check_export`] checks a stream's framing and checksum alone. Replicas
//! use them to copy a ledger between nodes (`cairn-raft`'s snapshots).
//!
//! Owns: the export stream's format (`docs/format/ledger-export.md`), [`LedgerExport`],
//! [`ExportSummary`], [`ImportChecks`]. May call: `ledger` (its parent: tables, records and
//! opening), `audit` (the proof of an import), `records`, the engine (sessions, tables,
//! cursors). Must never touch: the engine's files.
//!
//! **What an import proves.** The stream's SHA-256 (its last frame) covers every byte before
//! it, so a stream damaged anywhere is refused. Then the ledger built from it is opened (each
//! table's root checked against the newest version's record) and audited whole
//! ([`Ledger::audit`]): every table's root recomputed from its contents, the kept versions
//! rebuilt from their undo records, every version record and history node rebuilt from the
//! leaves; its digest must be the one the stream's header names, and the digests the caller
//! already trusts ([`ImportChecks::digests`]) must be prefixes of its history. A stream that
//! passes is a ledger whose every version extends what the caller trusted: a sender cannot
//! rewrite history the receiver had, nor hand over tables whose contents differ from the roots
//! the history commits to.
//!
//! **Bounds.** Export: O(1) to take the view (one duplicate per table, under the ledger's state
//! lock, so the view is one version whatever commits run beside it); writing it reads every
//! stored entry once, holding one frame (at most [`FRAME_BYTES_TARGET`] plus one entry) in
//! memory. Import: every entry written once through the new session's log and checkpointed,
//! one trie commit per table, then the audit's cost (`audit`'s header); memory one frame of
//! at most [`FRAME_BYTES_MAX`]. The stream is about the size of the stored entries.

use std::io::{Read, Write};
use std::path::Path;
use std::sync::Arc;

use cairn::fs::FileSystem;
use cairn::{Session, SessionOptions, Table, TableConfig, Update};
use cairn_proof::Digest;
use sha2::{Digest as _, Sha256};

use super::{table_config, Ledger, LedgerConfig, HISTORY_TABLE};
use crate::audit::AuditOptions;
use crate::error::{Error, Result};
use crate::records::{LedgerMeta, KEY_META};

/// The first bytes of an export stream: `CRNLEXP` and the format version.
pub const EXPORT_MAGIC: [u8; 8] = *b"CRNLEXP\x01";
/// An entries frame is closed once its body reaches this many bytes.
pub const FRAME_BYTES_TARGET: usize = 1 << 20;
/// The largest frame body a reader accepts (a frame of entries holds one entry past
/// [`FRAME_BYTES_TARGET`], and the engine's keys and values are far smaller than this).
pub const FRAME_BYTES_MAX: usize = 64 << 20;

const TAG_HEADER: u8 = 1;
const TAG_TABLE: u8 = 2;
const TAG_ENTRIES: u8 = 3;
const TAG_END: u8 = 4;

/// A ledger as of one version, ready to be written as an export stream
/// ([`Ledger::export_view`]). It holds a duplicate of each table: the files of that version stay
/// while it lives.
pub struct LedgerExport {
    version: u64,
    digest: Digest,
    /// `_history` first, then the data tables in name order.
    tables: Vec<(String, Table)>,
}

/// What an export wrote, or an import read.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ExportSummary {
    /// The ledger's newest version in the stream.
    pub version: u64,
    /// Its digest.
    pub digest: Digest,
    /// Stored entries, every table's (the ledger's own records included).
    pub entries: u64,
    /// Bytes of the stream.
    pub bytes: u64,
}

/// What an import must prove besides the stream's own claims.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct ImportChecks {
    /// Digests the importer already trusts (say, of the ledger it had): each must be a prefix
    /// of the imported ledger's history (rebuilt from its version records, root for root).
    pub digests: Vec<Digest>,
}

impl ImportChecks {
    /// Checks that hold `digests` as prefixes of the imported history.
    pub fn trusting(digests: impl IntoIterator<Item = Digest>) -> ImportChecks {
        ImportChecks {
            digests: digests.into_iter().collect(),
        }
    }
}

impl Ledger {
    /// The ledger as of its newest version, to be written with [`LedgerExport::write_to`] while
    /// commits go on. Cost: one O(1) duplicate per table, under the state lock (commits wait
    /// for it as they wait for a read).
    pub fn export_view(&self) -> Result<LedgerExport> {
        let state = self.read_state();
        let mut tables = vec![(HISTORY_TABLE.to_string(), self.history.duplicate()?)];
        for (name, table) in self.meta.tables.iter().zip(&self.tables) {
            tables.push((name.clone(), table.duplicate()?));
        }
        Ok(LedgerExport {
            version: state.history.size(),
            digest: state.history.digest(),
            tables,
        })
    }

    /// Builds a ledger in `dir` (absent or empty) from the export stream `input`, proves it
    /// (see the module's header: the stream's checksum, every table's root against the
    /// records, the whole audit, the header's digest and `checks`), and answers it opened.
    /// The tables, hash and ordering come from the stream; `config`'s other settings (the
    /// window, group commit, the engine's table settings) are the new ledger's, and its
    /// `tables`, when not empty, must name the stream's.
    ///
    /// On an error the directory holds a partial ledger, to be removed by the caller.
    ///
    /// Errors: [`Error::BadExport`] for a stream that does not decode, whose checksum fails or
    /// whose contents do not prove what it claims; [`Error::InvalidConfig`] for a `dir` that is
    /// not empty or a `config` that disagrees; the engine's.
    pub fn import_with(
        fs: Arc<dyn FileSystem>,
        dir: impl AsRef<Path>,
        config: LedgerConfig,
        options: SessionOptions,
        input: &mut dyn Read,
        checks: &ImportChecks,
    ) -> Result<(Ledger, ExportSummary)> {
        let dir = dir.as_ref();
        if fs
            .list_dir(dir)
            .map(|names| !names.is_empty())
            .unwrap_or(false)
        {
            return Err(Error::InvalidConfig(format!(
                "{} is not empty: a ledger is imported into a new directory",
                dir.display()
            )));
        }
        let session = Session::open_with(Arc::clone(&fs), dir, options.clone())?;
        let loaded = load(&session, &config, input);
        session.close();
        drop(session);
        let summary = loaded?;
        let ledger = Ledger::open_with(fs, dir, config, options)?;
        let proven = prove(&ledger, &summary, checks);
        if let Err(e) = proven {
            ledger.close();
            return Err(e);
        }
        Ok((ledger, summary))
    }
}

impl LedgerExport {
    /// The version the view holds.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Its digest.
    pub fn digest(&self) -> Digest {
        self.digest
    }

    /// Writes the stream (`docs/format/ledger-export.md`) to `out`, reading every stored entry
    /// of the view once. Errors: the engine's, and `out`'s as [`cairn::Error::Io`].
    pub fn write_to(self, out: &mut dyn Write) -> Result<ExportSummary> {
        let mut w = FrameWriter {
            out,
            hash: Sha256::new(),
            bytes: 0,
        };
        w.raw(&EXPORT_MAGIC)?;
        let mut header = Vec::with_capacity(40);
        header.extend_from_slice(&self.version.to_le_bytes());
        header.extend_from_slice(&self.digest.root);
        w.frame(TAG_HEADER, &header)?;
        let mut entries = 0u64;
        let mut body = Vec::with_capacity(FRAME_BYTES_TARGET + 4096);
        for (name, table) in &self.tables {
            w.frame(TAG_TABLE, name.as_bytes())?;
            for entry in table.cursor()? {
                let entry = entry?;
                put_bytes(&mut body, &entry.key);
                put_bytes(&mut body, &entry.value);
                entries += 1;
                if body.len() >= FRAME_BYTES_TARGET {
                    w.frame(TAG_ENTRIES, &body)?;
                    body.clear();
                }
            }
            if !body.is_empty() {
                w.frame(TAG_ENTRIES, &body)?;
                body.clear();
            }
        }
        let sum: [u8; 32] = w.hash.clone().finalize().into();
        let mut end = entries.to_le_bytes().to_vec();
        end.extend_from_slice(&sum);
        w.frame(TAG_END, &end)?;
        w.out.flush().map_err(io_error)?;
        self.tables.iter().for_each(|(_, t)| t.close());
        Ok(ExportSummary {
            version: self.version,
            digest: self.digest,
            entries,
            bytes: w.bytes,
        })
    }
}

/// Checks an export stream's framing and checksum without building anything: its header, its
/// tables named once each in order (the ledger's `_history` first), its entries in key order
/// within each table, and its last frame's count and SHA-256. Cost: one pass over the stream,
/// one frame in memory. It does not prove the contents (that is [`Ledger::import_with`]'s
/// audit). Errors: [`Error::BadExport`].
pub fn check_export(input: &mut dyn Read) -> Result<ExportSummary> {
    let mut r = FrameReader::new(input);
    let (version, digest) = r.header()?;
    let mut tables = Tables::default();
    let mut entries = 0u64;
    loop {
        match r.next()? {
            Frame::Table(name) => tables.start(&r, name)?,
            Frame::Entries(body) => tables.entries(&r, &body, |_, _| {
                entries += 1;
                Ok(())
            })?,
            Frame::End => break,
        }
    }
    r.end(entries)?;
    Ok(ExportSummary {
        version,
        digest,
        entries,
        bytes: r.offset,
    })
}

/// Reads the stream into `session`'s new tables: the ledger's records first (whose
/// configuration names the data tables and their hash), then each data table, its trie
/// committed. Then syncs and checkpoints the session.
fn load(session: &Session, config: &LedgerConfig, input: &mut dyn Read) -> Result<ExportSummary> {
    let mut r = FrameReader::new(input);
    let (version, digest) = r.header()?;
    let mut tables = Tables::default();
    let mut meta: Option<LedgerMeta> = None;
    let mut open: Option<Table> = None;
    let mut entries = 0u64;
    loop {
        let frame = r.next()?;
        if matches!(frame, Frame::Table(_) | Frame::End) {
            if let Some(table) = open.take() {
                finish_table(&table, tables.current() != Some(HISTORY_TABLE))?;
            }
        }
        match frame {
            Frame::Table(name) => {
                tables.start(&r, name)?;
                let name = tables.current().unwrap_or_default().to_string();
                let table_config = if name == HISTORY_TABLE {
                    TableConfig::default()
                } else {
                    let m = match &meta {
                        Some(m) => m,
                        None => meta.insert(read_meta(&r, session, config)?),
                    };
                    if !m.tables.contains(&name) {
                        return Err(r.bad(format!("table {name:?} is not one of the ledger's")));
                    }
                    table_config(&config.table, m.hash)
                };
                open = Some(session.table(&name, table_config)?);
            }
            Frame::Entries(body) => {
                let table = open
                    .as_ref()
                    .ok_or_else(|| r.bad("entries before any table"))?;
                // The frame's entries written as they lie in its body, without copies.
                let mut updates: Vec<(&[u8], Update<'_>)> = Vec::new();
                tables.entries(&r, &body, |k, v| {
                    updates.push((k, Update::Insert(v)));
                    Ok(())
                })?;
                entries += updates.len() as u64;
                table.write(&updates)?.release();
            }
            Frame::End => break,
        }
    }
    r.end(entries)?;
    let meta = match meta {
        Some(m) => m,
        None => read_meta(&r, session, config)?,
    };
    if tables.seen != 1 + meta.tables.len() {
        return Err(r.bad(format!(
            "{} tables, the ledger's configuration names {}",
            tables.seen.saturating_sub(1),
            meta.tables.len()
        )));
    }
    session.sync_log()?;
    session.checkpoint()?;
    Ok(ExportSummary {
        version,
        digest,
        entries,
        bytes: r.offset,
    })
}

/// A table's last step of an import: its trie committed (data tables), its writes released to
/// the session's final sync.
fn finish_table(table: &Table, authenticated: bool) -> Result<()> {
    if authenticated {
        let (_, durability) = table.commit_logged()?;
        durability.into_iter().for_each(cairn::Durability::release);
    }
    Ok(())
}

/// The configuration record from the imported `_history` table, checked as a new ledger's
/// configuration is, and against `config`'s tables when it names some.
fn read_meta(r: &FrameReader<'_>, session: &Session, config: &LedgerConfig) -> Result<LedgerMeta> {
    let history = session
        .durable_table(HISTORY_TABLE)
        .ok_or_else(|| r.bad(format!("no {HISTORY_TABLE} table before the data tables")))?;
    let bytes = history
        .get(KEY_META)?
        .ok_or_else(|| r.bad("no configuration record"))?;
    let meta = LedgerMeta::decode(&bytes).map_err(|e| r.bad(e.to_string()))?;
    let sorted = meta.tables.windows(2).all(|w| w[0] < w[1]);
    let named = (meta.tables.iter()).all(|n| !n.is_empty() && n.len() <= 64 && !n.starts_with('_'));
    if !sorted || !named || meta.ordered.len() != meta.tables.len() {
        return Err(r.bad("the configuration record's tables are not a ledger's"));
    }
    let mut want = config.tables.clone();
    want.sort();
    if !want.is_empty() && want != meta.tables {
        return Err(Error::InvalidConfig(format!(
            "the stream's ledger holds tables {:?}, not {want:?}",
            meta.tables
        )));
    }
    Ok(meta)
}

/// The proof of an imported ledger (the module's header).
fn prove(ledger: &Ledger, summary: &ExportSummary, checks: &ImportChecks) -> Result<()> {
    let bad = |detail: String| Error::BadExport {
        offset: summary.bytes,
        detail,
    };
    if ledger.version() != summary.version || ledger.digest() != summary.digest {
        return Err(bad(format!(
            "the ledger built holds version {} with digest root {}, the header names version \
             {} with root {}",
            ledger.version(),
            hex(&ledger.digest().root),
            summary.version,
            hex(&summary.digest.root)
        )));
    }
    let mut digests = checks.digests.clone();
    digests.push(summary.digest);
    let options = AuditOptions {
        digests,
        ..AuditOptions::default()
    };
    let report = ledger.audit(&options, &mut |_| {})?;
    if let Some(problem) = report.problems.first() {
        return Err(bad(format!(
            "the audit of the ledger built found {} problem(s), the first: {problem:?}",
            report.problems.len()
        )));
    }
    Ok(())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(bytes);
}

/// An I/O error of the stream (not of a file the engine knows).
fn io_error(source: std::io::Error) -> Error {
    Error::Engine(cairn::Error::Io {
        op: "stream",
        path: "(export stream)".into(),
        source,
    })
}

struct FrameWriter<'a> {
    out: &'a mut dyn Write,
    hash: Sha256,
    bytes: u64,
}

impl FrameWriter<'_> {
    fn raw(&mut self, bytes: &[u8]) -> Result<()> {
        self.out.write_all(bytes).map_err(io_error)?;
        self.hash.update(bytes);
        self.bytes += bytes.len() as u64;
        Ok(())
    }

    fn frame(&mut self, tag: u8, body: &[u8]) -> Result<()> {
        self.raw(&[tag])?;
        self.raw(&(body.len() as u32).to_le_bytes())?;
        self.raw(body)
    }
}

enum Frame {
    Table(Vec<u8>),
    Entries(Vec<u8>),
    End,
}

/// Reads frames, hashing every byte before the last frame, and keeps the last frame's body.
struct FrameReader<'a> {
    input: &'a mut dyn Read,
    hash: Sha256,
    /// Bytes read so far (where an error is reported).
    offset: u64,
    /// The end frame's body.
    end: Vec<u8>,
}

impl<'a> FrameReader<'a> {
    fn new(input: &'a mut dyn Read) -> FrameReader<'a> {
        FrameReader {
            input,
            hash: Sha256::new(),
            offset: 0,
            end: Vec::new(),
        }
    }

    fn bad(&self, detail: impl Into<String>) -> Error {
        Error::BadExport {
            offset: self.offset,
            detail: detail.into(),
        }
    }

    fn read(&mut self, buf: &mut [u8], hashed: bool) -> Result<()> {
        self.input.read_exact(buf).map_err(|e| match e.kind() {
            std::io::ErrorKind::UnexpectedEof => self.bad("the stream ends early"),
            _ => io_error(e),
        })?;
        if hashed {
            self.hash.update(&*buf);
        }
        self.offset += buf.len() as u64;
        Ok(())
    }

    fn header(&mut self) -> Result<(u64, Digest)> {
        let mut magic = [0u8; 8];
        self.read(&mut magic, true)?;
        if magic[..7] != EXPORT_MAGIC[..7] {
            return Err(self.bad("not a Cairn ledger export"));
        }
        if magic[7] != EXPORT_MAGIC[7] {
            return Err(self.bad(format!(
                "export format version {}; this build reads {}",
                magic[7], EXPORT_MAGIC[7]
            )));
        }
        let (tag, body) = self.frame()?;
        if tag != TAG_HEADER || body.len() != 40 {
            return Err(self.bad("no header frame first"));
        }
        let version = u64::from_le_bytes(body[..8].try_into().expect("8 bytes"));
        let root: [u8; 32] = body[8..].try_into().expect("32 bytes");
        Ok((
            version,
            Digest {
                size: version,
                root,
            },
        ))
    }

    fn frame(&mut self) -> Result<(u8, Vec<u8>)> {
        let mut head = [0u8; 5];
        self.read(&mut head[..1], false)?;
        let hashed = head[0] != TAG_END;
        if hashed {
            self.hash.update(&head[..1]);
        }
        let mut len = [0u8; 4];
        self.read(&mut len, hashed)?;
        let len = u32::from_le_bytes(len) as usize;
        if len > FRAME_BYTES_MAX {
            return Err(self.bad(format!(
                "a frame of {len} bytes (at most {FRAME_BYTES_MAX})"
            )));
        }
        let mut body = vec![0u8; len];
        self.read(&mut body, hashed)?;
        Ok((head[0], body))
    }

    fn next(&mut self) -> Result<Frame> {
        let (tag, body) = self.frame()?;
        match tag {
            TAG_TABLE => Ok(Frame::Table(body)),
            TAG_ENTRIES => Ok(Frame::Entries(body)),
            TAG_END => {
                self.end = body;
                Ok(Frame::End)
            }
            other => Err(self.bad(format!("unknown frame tag {other}"))),
        }
    }

    /// Checks the end frame (already read) against `entries` and the bytes hashed, and that
    /// nothing follows it.
    fn end(&mut self, entries: u64) -> Result<()> {
        if self.end.len() != 40 {
            return Err(self.bad("the end frame is not 40 bytes"));
        }
        let count = u64::from_le_bytes(self.end[..8].try_into().expect("8 bytes"));
        if count != entries {
            return Err(self.bad(format!(
                "the end frame counts {count} entries, the stream holds {entries}"
            )));
        }
        let sum: [u8; 32] = self.hash.clone().finalize().into();
        if sum[..] != self.end[8..] {
            return Err(self.bad("the stream's SHA-256 differs from its end frame's"));
        }
        let mut more = [0u8; 1];
        match self.input.read(&mut more) {
            Ok(0) => Ok(()),
            Ok(_) => Err(self.bad("bytes after the end frame")),
            Err(e) => Err(io_error(e)),
        }
    }
}

/// The tables a stream names: once each, `_history` first, the rest in name order; entries in
/// key order within each.
#[derive(Default)]
struct Tables {
    current: Option<String>,
    last_key: Option<Vec<u8>>,
    seen: usize,
}

impl Tables {
    fn current(&self) -> Option<&str> {
        self.current.as_deref()
    }

    fn start(&mut self, r: &FrameReader<'_>, name: Vec<u8>) -> Result<()> {
        let name = String::from_utf8(name).map_err(|_| r.bad("a table name is not UTF-8"))?;
        let in_order = match &self.current {
            None => name == HISTORY_TABLE,
            Some(prev) if prev == HISTORY_TABLE => name != HISTORY_TABLE,
            Some(prev) => *prev < name,
        };
        if !in_order {
            return Err(r.bad(format!(
                "table {name:?} out of order ({HISTORY_TABLE} first, then the tables by name, \
                 each once)"
            )));
        }
        self.current = Some(name);
        self.last_key = None;
        self.seen += 1;
        Ok(())
    }

    /// Walks the entries of `body`, each in key order after the last, calling `each`.
    /// The key kept across frames is copied once per frame, not per entry.
    fn entries<'b>(
        &mut self,
        r: &FrameReader<'_>,
        body: &'b [u8],
        mut each: impl FnMut(&'b [u8], &'b [u8]) -> Result<()>,
    ) -> Result<()> {
        if self.current.is_none() {
            return Err(r.bad("entries before any table"));
        }
        let mut last: Option<&[u8]> = self.last_key.as_deref();
        let mut rest = body;
        let mut frame_last: Option<&'b [u8]> = None;
        while !rest.is_empty() {
            let (key, after) = take_bytes(r, rest)?;
            let (value, after) = take_bytes(r, after)?;
            if last.is_some_and(|last| last >= key) {
                return Err(r.bad("entries out of key order"));
            }
            each(key, value)?;
            last = Some(key);
            frame_last = Some(key);
            rest = after;
        }
        if let Some(key) = frame_last {
            self.last_key = Some(key.to_vec());
        }
        Ok(())
    }
}

fn take_bytes<'b>(r: &FrameReader<'_>, bytes: &'b [u8]) -> Result<(&'b [u8], &'b [u8])> {
    if bytes.len() < 4 {
        return Err(r.bad("an entry is cut short"));
    }
    let len = u32::from_le_bytes(bytes[..4].try_into().expect("4 bytes")) as usize;
    let rest = &bytes[4..];
    if rest.len() < len {
        return Err(r.bad("an entry is cut short"));
    }
    Ok(rest.split_at(len))
}
