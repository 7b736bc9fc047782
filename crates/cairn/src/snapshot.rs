//! Snapshots: durable, named copies of a table, saved in O(runs) file operations.
//!
//! Owns: the snapshot directory layout, the snapshot metadata format (`docs/format/snapshot.md`),
//! name validation, and save / open / list / delete / export / import. May call: `fs`, `run`,
//! `sorted` (a table's sorted runs and their parts),
//! `schedule` (the level structure as [`LevelShape`]s), `write_buffer` and `page`
//! (reading a saved write buffer back), `union` (a pending union's views), `session` (its
//! directories, run numbers and file removals), `pagelog` (an authenticated table's segments
//! and manifest). Must never touch: page,
//! filter or index bytes (runs are linked or copied whole and verified by `Run::open`).
//!
//! Layout of `snapshots/<name>/`: `metadata`, the five files of every run as `<i>.<ext>` (hard
//! links to the table's run files, numbered from 0), and the write buffer written as one more run.
//!
//! Saving writes into `snapshots/.tmp-<name>-<n>/`, fsyncs every file and the directory, then
//! renames it to `snapshots/<name>` and fsyncs `snapshots/`: a crash leaves either no snapshot (a
//! temporary directory removed when the session is next opened) or a complete one. Cost: 5 hard
//! links and one fsync per run, the write buffer (at most B entries) written once, one metadata
//! file: O(log n) file operations for n entries.
//!
//! Opening links every file into `active/` under fresh run numbers and opens each run with
//! `Run::open`, which checks every file's size and CRC32C, so any corruption of any file is found
//! before the table is returned (O(table size) reads).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::config::{
    AuthConfig, BloomAlloc, DiskCachePolicy, HashKind, IndexType, MergeSchedule, Resolve,
    TableConfig, RESOLVE_NAME_BYTES_MAX,
};
use crate::error::{Error, Result};
use crate::fs::{copy_file, read_all, FileSystem, FileWriter};
use crate::page::Op;
use crate::pagelog::{self, Manifest, Segments, TrieFiles};
use crate::run::{run_file_path, Run, RunCursor, RunFile, RunParams, RunWriter};
use crate::schedule::{IncomingShape, LevelShape, Levels, MergeContext};
use crate::session::SessionInner;
use crate::sorted::SortedRun;
use crate::union::{TableView, UnionContents, UnionLevel};
use crate::write_buffer::WriteBuffer;

pub(crate) const MAGIC: &[u8; 8] = b"CRNSNAPM";
pub(crate) const VERSION: u32 = 3;
/// The version written when every sorted run is a single part: version 3 without its table of
/// sorted runs, readable by builds that predate parts.
pub(crate) const VERSION_SINGLE_PARTS: u32 = 2;
/// Longest snapshot label, in bytes.
pub const SNAPSHOT_LABEL_BYTES_MAX: usize = 4096;
const LEVELS_MAX: u32 = 64;
const RUNS_MAX: u32 = 1 << 16;
/// Most extension sections a snapshot's metadata may hold.
const EXTENSIONS_MAX: u32 = 16;

/// Checks a snapshot name: 1 to 64 characters from `[a-z0-9_-]`, not a name Windows reserves.
pub(crate) fn validate_name(name: &str) -> Result<()> {
    let bad = |why: &str| Error::InvalidSnapshotName(format!("{name:?}: {why}"));
    if name.is_empty() || name.len() > 64 {
        return Err(bad("must be 1 to 64 characters long"));
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
    {
        return Err(bad("may only contain a-z, 0-9, '_' and '-'"));
    }
    let reserved = ["con", "prn", "aux", "nul"];
    let numbered = ["com", "lpt"];
    let is_numbered = numbered
        .iter()
        .any(|p| name.len() == 4 && name.starts_with(p) && name.as_bytes()[3].is_ascii_digit());
    if reserved.contains(&name) || is_numbered {
        return Err(bad("is a reserved device name"));
    }
    Ok(())
}

/// The name of a durable table's checkpoint, `ckpt.<table>.<checkpoint>`: not a valid snapshot
/// name, so users never see, open or delete it (the `durable` module owns it).
pub(crate) fn checkpoint_name(table: u32, checkpoint: u64) -> String {
    format!("ckpt.{table}.{checkpoint}")
}

/// Whether `name` is a checkpoint's name.
pub(crate) fn is_checkpoint_name(name: &str) -> bool {
    name.strip_prefix("ckpt.").is_some_and(|rest| {
        rest.split_once('.').is_some_and(|(t, c)| {
            !t.is_empty()
                && !c.is_empty()
                && (t.bytes().chain(c.bytes())).all(|b| b.is_ascii_digit())
        })
    })
}

/// Which resolve function a snapshot was saved with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ResolveTag {
    KeepNewest,
    AddU64Le,
    /// A custom function, with its name (`None` in snapshots saved before names were recorded).
    Custom(Option<String>),
}

impl ResolveTag {
    fn of(resolve: &Resolve) -> ResolveTag {
        match resolve {
            Resolve::KeepNewest => ResolveTag::KeepNewest,
            Resolve::AddU64Le => ResolveTag::AddU64Le,
            Resolve::Custom(custom) => ResolveTag::Custom(Some(custom.name().to_string())),
        }
    }
}

/// The extension that records a custom resolve function's name (a UTF-8 string).
const EXTENSION_RESOLVE_NAME: u32 = 1;
/// The extension of an authenticated table: its trie's hash kind, retention budget, version
/// and root node (its page log segments and manifest are saved in the snapshot's `trie/` directory).
const EXTENSION_AUTH: u32 = 2;
/// The extension that records `TableConfig::last_level_bloom` when it is set: the Bloom
/// allocation's code and value, as the config's own `bloom` field encodes them (9 bytes).
const EXTENSION_LAST_LEVEL_BLOOM: u32 = 3;
/// Extension type: `TableConfig::part_entries` (u64), when set.
const EXTENSION_PART_ENTRIES: u32 = 4;
/// The directory of a snapshot holding an authenticated table's trie: its page log segments
/// and their manifest.
pub(crate) const TRIE_DIR: &str = "trie";

/// What a snapshot records of an authenticated table's trie besides its configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct AuthMeta {
    /// The trie's version (commits that changed it).
    pub(crate) version: u64,
    /// The root node, encoded by the trie (`docs/format/trie.md`, "Root node"); at most 129
    /// bytes.
    pub(crate) root: Vec<u8>,
}

/// Longest encoded root node an auth extension may carry.
const AUTH_ROOT_BYTES_MAX: usize = 1 + 32 + 96;

/// A pending union as a snapshot records it: its inputs' views and the credits spent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct UnionShape {
    pub(crate) inputs: Vec<ViewShape>,
    pub(crate) produced: u64,
}

/// One input of a pending union: its write buffer (as a run), its runs, its own union.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ViewShape {
    pub(crate) buffer: Option<usize>,
    pub(crate) runs: Vec<usize>,
    pub(crate) union: Option<Box<UnionShape>>,
}

/// Deepest nesting of unions a snapshot may record.
const UNION_DEPTH_MAX: usize = 16;

/// The decoded contents of a snapshot's `metadata` file.
#[derive(Clone, Debug)]
pub(crate) struct SnapshotMeta {
    pub(crate) label: String,
    /// The table's configuration; its resolve is `KeepNewest` when `resolve` is `Custom` (the
    /// function itself cannot be stored).
    pub(crate) config: TableConfig,
    pub(crate) resolve: ResolveTag,
    pub(crate) run_count: usize,
    /// The CRC32C of each run's checksums file, which names the size and CRC32C of every other
    /// file of the run: it ties each run index to exactly the files saved under it, so runs
    /// swapped with each other, or a stale checksums file, are caught.
    pub(crate) run_sums: Vec<u32>,
    /// The sorted runs: each a list of run indices (its parts, in key order). The levels and
    /// unions name sorted runs by their index here; the write buffer names a run.
    pub(crate) sorted: Vec<Vec<usize>>,
    pub(crate) write_buffer: Option<usize>,
    pub(crate) levels: Vec<LevelShape>,
    /// A union still in progress below the levels.
    pub(crate) union: Option<UnionShape>,
    /// The trie of an authenticated table (its `AuthConfig` is in `config`).
    pub(crate) auth: Option<AuthMeta>,
}

struct Writer(Vec<u8>);

impl Writer {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn run(&mut self, i: usize) {
        self.u32(i as u32);
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.bytes.len() < n {
            return Err(Error::corrupt("snapshot metadata", "truncated"));
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }
    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64(&mut self) -> Result<u64> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(a))
    }
    fn count(&mut self, max: u32) -> Result<usize> {
        let n = self.u32()?;
        if n > max {
            return Err(Error::corrupt(
                "snapshot metadata",
                format!("count {n} > {max}"),
            ));
        }
        Ok(n as usize)
    }
    fn run(&mut self, run_count: usize) -> Result<usize> {
        let i = self.u32()? as usize;
        if i >= run_count {
            return Err(Error::corrupt(
                "snapshot metadata",
                format!("run {i} out of range"),
            ));
        }
        Ok(i)
    }
}

impl SnapshotMeta {
    /// The version [`SnapshotMeta::encode`] writes: 2 when every sorted run is one part.
    pub(crate) fn version(&self) -> u32 {
        if self.sorted.iter().all(|parts| parts.len() == 1) {
            VERSION_SINGLE_PARTS
        } else {
            VERSION
        }
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        let version = self.version();
        let mut w = Writer(Vec::new());
        w.0.extend_from_slice(MAGIC);
        w.u32(version);
        w.u32(self.label.len() as u32);
        w.0.extend_from_slice(self.label.as_bytes());
        encode_config(&mut w, &self.config, &self.resolve);
        w.u32(self.run_count as u32);
        self.run_sums.iter().for_each(|&crc| w.u32(crc));
        // Version 2 names each sorted run by its one part; version 3 lists the sorted runs.
        let sorted = |i: usize| -> usize {
            if version == VERSION_SINGLE_PARTS {
                self.sorted
                    .get(i)
                    .and_then(|p| p.first())
                    .copied()
                    .unwrap_or(i)
            } else {
                i
            }
        };
        if version == VERSION {
            w.u32(self.sorted.len() as u32);
            for parts in &self.sorted {
                w.u32(parts.len() as u32);
                parts.iter().for_each(|&i| w.run(i));
            }
        }
        match self.write_buffer {
            Some(i) => {
                w.u8(1);
                w.run(i);
            }
            None => w.u8(0),
        }
        w.u32(self.levels.len() as u32);
        for level in &self.levels {
            match &level.incoming {
                IncomingShape::Single(i) => {
                    w.u8(0);
                    w.run(sorted(*i));
                }
                IncomingShape::Merging {
                    last_level,
                    nominal_debt,
                    nominal_credits,
                    inputs,
                } => {
                    w.u8(1);
                    w.u8(u8::from(*last_level));
                    w.u64(*nominal_debt);
                    w.u64(*nominal_credits);
                    w.u32(inputs.len() as u32);
                    inputs.iter().for_each(|&i| w.run(sorted(i)));
                }
                IncomingShape::Empty => w.u8(2),
            }
            w.u32(level.resident.len() as u32);
            level.resident.iter().for_each(|&i| w.run(sorted(i)));
        }
        match &self.union {
            Some(union) => {
                w.u8(1);
                encode_union(&mut w, union, &sorted);
            }
            None => w.u8(0),
        }
        // Extensions: typed sections (u32 type, u32 length, bytes), each type at most once.
        let mut extensions: Vec<(u32, Vec<u8>)> = Vec::new();
        if let ResolveTag::Custom(Some(name)) = &self.resolve {
            extensions.push((EXTENSION_RESOLVE_NAME, name.as_bytes().to_vec()));
        }
        if let (Some(auth), Some(config)) = (&self.auth, &self.config.auth) {
            let mut bytes = vec![config.hash.code()];
            bytes.extend_from_slice(&(config.retained_bytes as u64).to_le_bytes());
            bytes.extend_from_slice(&auth.version.to_le_bytes());
            bytes.extend_from_slice(&auth.root);
            extensions.push((EXTENSION_AUTH, bytes));
        }
        if let Some(alloc) = self.config.last_level_bloom {
            let (kind, value) = encode_bloom_alloc(alloc);
            let mut bytes = vec![kind];
            bytes.extend_from_slice(&value.to_bits().to_le_bytes());
            extensions.push((EXTENSION_LAST_LEVEL_BLOOM, bytes));
        }
        if let Some(part_entries) = self.config.part_entries {
            extensions.push((EXTENSION_PART_ENTRIES, part_entries.to_le_bytes().to_vec()));
        }
        w.u32(extensions.len() as u32);
        for (kind, bytes) in extensions {
            w.u32(kind);
            w.u32(bytes.len() as u32);
            w.0.extend_from_slice(&bytes);
        }
        let crc = crc32c::crc32c(&w.0);
        w.u32(crc);
        w.0
    }

    /// Total decoder: any bytes give metadata or an error.
    pub(crate) fn decode(bytes: &[u8]) -> Result<SnapshotMeta> {
        let bad = |d: &str| Error::corrupt("snapshot metadata", d.to_string());
        if bytes.len() < 16 || &bytes[..8] != MAGIC {
            return Err(bad("bad magic"));
        }
        let (body, crc) = bytes.split_at(bytes.len() - 4);
        let version = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
        if crc32c::crc32c(body) != u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]) {
            return Err(bad("checksum mismatch"));
        }
        if version != VERSION && version != VERSION_SINGLE_PARTS {
            return Err(Error::UnsupportedVersion {
                what: "snapshot metadata",
                found: version,
                supported: VERSION,
            });
        }
        let mut r = Reader { bytes: &body[12..] };
        let label_len = r.count(SNAPSHOT_LABEL_BYTES_MAX as u32)?;
        let label = std::str::from_utf8(r.take(label_len)?)
            .map_err(|_| bad("label is not UTF-8"))?
            .to_string();
        let (config, resolve) = decode_config(&mut r)?;
        let run_count = r.count(RUNS_MAX)?;
        let run_sums = (0..run_count).map(|_| r.u32()).collect::<Result<_>>()?;
        let sorted: Vec<Vec<usize>> = if version == VERSION_SINGLE_PARTS {
            (0..run_count).map(|i| vec![i]).collect()
        } else {
            let n = r.count(RUNS_MAX)?;
            let mut sorted = Vec::with_capacity(n.min(1024));
            for _ in 0..n {
                let parts = r.count(RUNS_MAX)?;
                if parts == 0 {
                    return Err(bad("a sorted run without parts"));
                }
                sorted.push(
                    (0..parts)
                        .map(|_| r.run(run_count))
                        .collect::<Result<_>>()?,
                );
            }
            if sorted.iter().all(|parts: &Vec<usize>| parts.len() == 1) {
                return Err(bad("version 3 without a sorted run of several parts"));
            }
            sorted
        };
        let sorted_count = sorted.len();
        let write_buffer = match r.u8()? {
            0 => None,
            1 => Some(r.run(run_count)?),
            _ => return Err(bad("bad write-buffer flag")),
        };
        let level_count = r.count(LEVELS_MAX)?;
        let mut levels = Vec::with_capacity(level_count);
        for _ in 0..level_count {
            let incoming = match r.u8()? {
                0 => IncomingShape::Single(r.run(sorted_count)?),
                1 => {
                    let last_level = match r.u8()? {
                        0 => false,
                        1 => true,
                        _ => return Err(bad("bad merge kind")),
                    };
                    let nominal_debt = r.u64()?;
                    let nominal_credits = r.u64()?;
                    let n = r.count(RUNS_MAX)?;
                    let inputs = (0..n).map(|_| r.run(sorted_count)).collect::<Result<_>>()?;
                    IncomingShape::Merging {
                        last_level,
                        nominal_debt,
                        nominal_credits,
                        inputs,
                    }
                }
                2 => IncomingShape::Empty,
                _ => return Err(bad("bad incoming kind")),
            };
            let n = r.count(RUNS_MAX)?;
            let resident = (0..n).map(|_| r.run(sorted_count)).collect::<Result<_>>()?;
            levels.push(LevelShape { incoming, resident });
        }
        let union = match r.u8()? {
            0 => None,
            1 => Some(decode_union(&mut r, run_count, sorted_count, 0)?),
            _ => return Err(bad("bad union flag")),
        };
        let mut resolve = resolve;
        let mut config = config;
        let mut auth = None;
        let extensions = r.count(EXTENSIONS_MAX)?;
        for _ in 0..extensions {
            let kind = r.u32()?;
            let len = r.count(RESOLVE_NAME_BYTES_MAX as u32)?;
            let bytes = r.take(len)?;
            if kind == EXTENSION_AUTH {
                if auth.is_some() {
                    return Err(bad("two auth extensions"));
                }
                let (config_auth, meta) = decode_auth(bytes)?;
                config.auth = Some(config_auth);
                auth = Some(meta);
                continue;
            }
            if kind == EXTENSION_LAST_LEVEL_BLOOM {
                if config.last_level_bloom.is_some() {
                    return Err(bad("two last-level Bloom extensions"));
                }
                let [code, value @ ..] = bytes else {
                    return Err(bad("last-level Bloom extension of 0 bytes"));
                };
                let value: [u8; 8] = value
                    .try_into()
                    .map_err(|_| bad("last-level Bloom extension is not 9 bytes"))?;
                config.last_level_bloom = Some(decode_bloom_alloc(
                    *code,
                    f64::from_bits(u64::from_le_bytes(value)),
                )?);
                config
                    .validate()
                    .map_err(|e| bad(&format!("invalid config: {e}")))?;
                continue;
            }
            if kind == EXTENSION_PART_ENTRIES {
                if config.part_entries.is_some() {
                    return Err(bad("two part-entries extensions"));
                }
                let value: [u8; 8] = bytes
                    .try_into()
                    .map_err(|_| bad("part-entries extension is not 8 bytes"))?;
                config.part_entries = Some(u64::from_le_bytes(value));
                config
                    .validate()
                    .map_err(|e| bad(&format!("invalid config: {e}")))?;
                continue;
            }
            match (kind, &mut resolve) {
                (EXTENSION_RESOLVE_NAME, ResolveTag::Custom(name @ None)) => {
                    let text = std::str::from_utf8(bytes)
                        .map_err(|_| bad("resolve function name is not UTF-8"))?;
                    *name = Some(text.to_string());
                }
                (EXTENSION_RESOLVE_NAME, _) => {
                    return Err(bad(
                        "a resolve function name without a custom resolve function",
                    ))
                }
                _ => return Err(bad("unknown extension")),
            }
        }
        if !r.bytes.is_empty() {
            return Err(bad("trailing bytes"));
        }
        let meta = SnapshotMeta {
            label,
            config,
            resolve,
            run_count,
            run_sums,
            sorted,
            write_buffer,
            levels,
            union,
            auth,
        };
        meta.check_runs_used(version)?;
        Ok(meta)
    }

    /// The level (1-based) each run lives on, for its caching policy; the write buffer's run is
    /// counted as level 1.
    pub(crate) fn run_levels(&self) -> Vec<usize> {
        let mut levels = vec![1; self.run_count];
        for (idx, level) in self.levels.iter().enumerate() {
            let mut set = |s: usize| {
                for &i in self.sorted.get(s).map(Vec::as_slice).unwrap_or_default() {
                    if let Some(l) = levels.get_mut(i) {
                        *l = idx + 1;
                    }
                }
            };
            match &level.incoming {
                IncomingShape::Single(i) => set(*i),
                IncomingShape::Merging { inputs, .. } => inputs.iter().for_each(|&i| set(i)),
                IncomingShape::Empty => {}
            }
            level.resident.iter().for_each(|&i| set(i));
        }
        levels
    }

    /// Every run is used: exactly once in the levels (through the sorted runs) and write
    /// buffer; runs of a pending union's inputs may be shared between inputs (a union of a table
    /// with its duplicate). In version 3, every sorted run is named too.
    fn check_runs_used(&self, version: u32) -> Result<()> {
        let mut seen = vec![false; self.run_count];
        let mut named = vec![false; self.sorted.len()];
        let mut mark_run = |i: usize, shared: bool| -> Result<()> {
            match seen.get_mut(i) {
                Some(s) if shared || !*s => {
                    *s = true;
                    Ok(())
                }
                _ => Err(Error::corrupt(
                    "snapshot metadata",
                    format!("run {i} used twice"),
                )),
            }
        };
        for i in self.write_buffer.iter() {
            mark_run(*i, false)?;
        }
        let mut stack: Vec<&UnionShape> = self.union.iter().collect();
        while let Some(union) = stack.pop() {
            for view in &union.inputs {
                if let Some(i) = view.buffer {
                    mark_run(i, true)?;
                }
                stack.extend(view.union.as_deref());
            }
        }
        let mut mark = |s: usize, shared: bool| -> Result<()> {
            let Some(parts) = self.sorted.get(s) else {
                return Err(Error::corrupt(
                    "snapshot metadata",
                    format!("sorted run {s} does not exist"),
                ));
            };
            if named[s] && !shared {
                return Err(Error::corrupt(
                    "snapshot metadata",
                    format!("sorted run {s} used twice"),
                ));
            }
            named[s] = true;
            parts.iter().try_for_each(|&i| mark_run(i, shared))
        };
        for level in &self.levels {
            match &level.incoming {
                IncomingShape::Single(i) => mark(*i, false)?,
                IncomingShape::Merging { inputs, .. } => {
                    inputs.iter().try_for_each(|&i| mark(i, false))?
                }
                IncomingShape::Empty => {}
            }
            level.resident.iter().try_for_each(|&i| mark(i, false))?;
        }
        let mut stack: Vec<&UnionShape> = self.union.iter().collect();
        while let Some(union) = stack.pop() {
            for view in &union.inputs {
                view.runs.iter().try_for_each(|&i| mark(i, true))?;
                stack.extend(view.union.as_deref());
            }
        }
        if seen.iter().any(|s| !s) {
            return Err(Error::corrupt("snapshot metadata", "a run is not used"));
        }
        if version == VERSION && named.iter().any(|n| !n) {
            return Err(Error::corrupt(
                "snapshot metadata",
                "a sorted run is not used",
            ));
        }
        Ok(())
    }
}

/// The auth extension's body: hash kind code, retention budget (u64), version (u64), root node.
fn decode_auth(bytes: &[u8]) -> Result<(AuthConfig, AuthMeta)> {
    let bad =
        |detail: &str| Error::corrupt("snapshot metadata", format!("auth extension: {detail}"));
    if bytes.len() < 17 || bytes.len() > 17 + AUTH_ROOT_BYTES_MAX {
        return Err(bad("wrong length"));
    }
    let hash = HashKind::from_code(bytes[0]).ok_or_else(|| bad("unknown hash kind"))?;
    let retained = u64::from_le_bytes(bytes[1..9].try_into().expect("8 bytes"));
    let retained_bytes = usize::try_from(retained).map_err(|_| bad("retention budget"))?;
    let version = u64::from_le_bytes(bytes[9..17].try_into().expect("8 bytes"));
    Ok((
        AuthConfig {
            hash,
            retained_bytes,
        },
        AuthMeta {
            version,
            root: bytes[17..].to_vec(),
        },
    ))
}

fn encode_union(w: &mut Writer, union: &UnionShape, sorted: &dyn Fn(usize) -> usize) {
    w.u64(union.produced);
    w.u32(union.inputs.len() as u32);
    for view in &union.inputs {
        match view.buffer {
            Some(i) => {
                w.u8(1);
                w.run(i);
            }
            None => w.u8(0),
        }
        w.u32(view.runs.len() as u32);
        view.runs.iter().for_each(|&i| w.run(sorted(i)));
        match &view.union {
            Some(nested) => {
                w.u8(1);
                encode_union(w, nested, sorted);
            }
            None => w.u8(0),
        }
    }
}

fn decode_union(
    r: &mut Reader<'_>,
    run_count: usize,
    sorted_count: usize,
    depth: usize,
) -> Result<UnionShape> {
    let bad = |d: &str| Error::corrupt("snapshot metadata", d.to_string());
    if depth >= UNION_DEPTH_MAX {
        return Err(bad("unions nested too deeply"));
    }
    let produced = r.u64()?;
    let n = r.count(RUNS_MAX)?;
    let mut inputs = Vec::with_capacity(n.min(64));
    for _ in 0..n {
        let buffer = match r.u8()? {
            0 => None,
            1 => Some(r.run(run_count)?),
            _ => return Err(bad("bad buffer flag")),
        };
        let k = r.count(RUNS_MAX)?;
        let runs = (0..k).map(|_| r.run(sorted_count)).collect::<Result<_>>()?;
        let union = match r.u8()? {
            0 => None,
            1 => Some(Box::new(decode_union(
                r,
                run_count,
                sorted_count,
                depth + 1,
            )?)),
            _ => return Err(bad("bad union flag")),
        };
        inputs.push(ViewShape {
            buffer,
            runs,
            union,
        });
    }
    if inputs.is_empty() {
        return Err(bad("a union without inputs"));
    }
    Ok(UnionShape { inputs, produced })
}

/// A Bloom allocation's code and value: 0 bits per entry, 1 target FPR, 2 none (value 0).
fn encode_bloom_alloc(alloc: BloomAlloc) -> (u8, f64) {
    match alloc {
        BloomAlloc::BitsPerEntry(b) => (0, b),
        BloomAlloc::TargetFpr(f) => (1, f),
        BloomAlloc::None => (2, 0.0),
        BloomAlloc::LevelScaledFpr(f) => (3, f),
    }
}

/// The inverse of [`encode_bloom_alloc`] (the value's range is checked with the config).
fn decode_bloom_alloc(code: u8, value: f64) -> Result<BloomAlloc> {
    match code {
        0 => Ok(BloomAlloc::BitsPerEntry(value)),
        1 => Ok(BloomAlloc::TargetFpr(value)),
        2 if value.to_bits() == 0 => Ok(BloomAlloc::None),
        3 => Ok(BloomAlloc::LevelScaledFpr(value)),
        _ => Err(Error::corrupt("snapshot metadata", "bloom allocation")),
    }
}

fn encode_config(w: &mut Writer, c: &TableConfig, resolve: &ResolveTag) {
    w.u64(c.write_buffer_entries as u64);
    w.u8(match c.merge_schedule {
        MergeSchedule::Incremental => 0,
        MergeSchedule::OneShot => 1,
    });
    let (kind, value) = encode_bloom_alloc(c.bloom);
    w.u8(kind);
    w.u64(value.to_bits());
    w.u8(match c.index {
        IndexType::Compact => 0,
        IndexType::Ordinary => 1,
    });
    let (kind, levels) = match c.disk_cache {
        DiskCachePolicy::All => (0, 0),
        DiskCachePolicy::LevelsUpTo(l) => (1, l),
        DiskCachePolicy::None => (2, 0),
    };
    w.u8(kind);
    w.u32(levels);
    w.u64(c.merge_batch_size as u64);
    w.u8(match resolve {
        ResolveTag::KeepNewest => 0,
        ResolveTag::AddU64Le => 1,
        ResolveTag::Custom(_) => 2,
    });
}

fn decode_config(r: &mut Reader<'_>) -> Result<(TableConfig, ResolveTag)> {
    let bad = |d: &str| Error::corrupt("snapshot metadata", d.to_string());
    let write_buffer_entries = usize::try_from(r.u64()?).map_err(|_| bad("write buffer"))?;
    let merge_schedule = match r.u8()? {
        0 => MergeSchedule::Incremental,
        1 => MergeSchedule::OneShot,
        _ => return Err(bad("merge schedule")),
    };
    let bloom = decode_bloom_alloc(r.u8()?, f64::from_bits(r.u64()?))?;
    let index = match r.u8()? {
        0 => IndexType::Compact,
        1 => IndexType::Ordinary,
        _ => return Err(bad("index type")),
    };
    let disk_cache = match (r.u8()?, r.u32()?) {
        (0, 0) => DiskCachePolicy::All,
        (1, l) => DiskCachePolicy::LevelsUpTo(l),
        (2, 0) => DiskCachePolicy::None,
        _ => return Err(bad("disk cache policy")),
    };
    let merge_batch_size = usize::try_from(r.u64()?).map_err(|_| bad("merge batch"))?;
    let resolve = match r.u8()? {
        0 => ResolveTag::KeepNewest,
        1 => ResolveTag::AddU64Le,
        2 => ResolveTag::Custom(None),
        _ => return Err(bad("resolve")),
    };
    let config = TableConfig {
        write_buffer_entries,
        merge_schedule,
        bloom,
        last_level_bloom: None,
        index,
        disk_cache,
        merge_batch_size,
        resolve: match resolve {
            ResolveTag::AddU64Le => Resolve::AddU64Le,
            _ => Resolve::KeepNewest,
        },
        auth: None,
        part_entries: None,
    };
    config
        .validate()
        .map_err(|e| bad(&format!("invalid config: {e}")))?;
    Ok((config, resolve))
}

/// The files of a snapshot being saved, in index order: runs to hard-link, or buffers to write
/// as runs. Runs shared between several places get one index.
#[derive(Default)]
pub(crate) struct SnapshotPlan {
    items: Vec<PlanItem>,
    linked: std::collections::HashMap<*const Run, usize>,
    /// The sorted runs named so far: their parts' indices, in key order.
    sorted: Vec<Vec<usize>>,
    sorted_names: std::collections::HashMap<*const SortedRun, usize>,
}

enum PlanItem {
    Link(Arc<Run>),
    /// A write buffer (an O(1) clone of the persistent map) to write out as a run.
    Write(WriteBuffer),
}

impl SnapshotPlan {
    /// The index of part `run` (the same index every time it is named).
    fn name_part(&mut self, run: &Arc<Run>) -> usize {
        let items = &mut self.items;
        *self.linked.entry(Arc::as_ptr(run)).or_insert_with(|| {
            items.push(PlanItem::Link(run.clone()));
            items.len() - 1
        })
    }

    /// The index of sorted run `run` (the same index every time it is named); its parts are
    /// named too.
    pub(crate) fn name(&mut self, run: &Arc<SortedRun>) -> usize {
        if let Some(&i) = self.sorted_names.get(&Arc::as_ptr(run)) {
            return i;
        }
        let parts = run.parts().iter().map(|p| self.name_part(p)).collect();
        self.sorted.push(parts);
        self.sorted_names
            .insert(Arc::as_ptr(run), self.sorted.len() - 1);
        self.sorted.len() - 1
    }

    /// The index of a write buffer to be written as a run (`None` if it is empty).
    pub(crate) fn buffer(&mut self, entries: WriteBuffer) -> Option<usize> {
        if entries.is_empty() {
            return None;
        }
        self.items.push(PlanItem::Write(entries));
        Some(self.items.len() - 1)
    }

    /// Records a pending union (its inputs' views and the credits it was paid): each input's
    /// buffer and runs, a finished nested union as the input's oldest run, a pending one
    /// recursively. Each union's state is read once, as it may finish concurrently.
    pub(crate) fn union(&mut self, views: &[Arc<TableView>], produced: u64) -> UnionShape {
        let inputs = views
            .iter()
            .map(|view| {
                let buffer = self.buffer(view.buffer.clone());
                let mut runs: Vec<usize> = view.runs.iter().map(|r| self.name(r)).collect();
                let nested = match view.union.as_ref().map(|u| u.state()) {
                    Some((UnionContents::Pending(views), produced)) => {
                        Some(Box::new(self.union(&views, produced)))
                    }
                    Some((UnionContents::Done(Some(run)), _)) => {
                        runs.push(self.name(&run));
                        None
                    }
                    Some((UnionContents::Done(None), _)) | None => None,
                };
                ViewShape {
                    buffer,
                    runs,
                    union: nested,
                }
            })
            .collect();
        UnionShape { inputs, produced }
    }

    fn len(&self) -> usize {
        self.items.len()
    }
}

/// What a table hands to [`save`]: its contents at one instant.
pub(crate) struct SnapshotContents {
    pub(crate) config: TableConfig,
    pub(crate) plan: SnapshotPlan,
    pub(crate) levels: Vec<LevelShape>,
    pub(crate) write_buffer: Option<usize>,
    pub(crate) union: Option<UnionShape>,
    /// The trie of an authenticated table (set by the table before saving).
    pub(crate) auth: Option<AuthMeta>,
}

impl SnapshotContents {
    /// Refuses, before anything is written, contents that the decoder would refuse: every limit
    /// [`SnapshotMeta::decode`] enforces (label size, runs, levels, union inputs and nesting) is
    /// checked here against what would be encoded, so a snapshot that saves always opens.
    ///
    /// Errors: [`Error::InvalidConfig`] for a label over [`SNAPSHOT_LABEL_BYTES_MAX`] bytes,
    /// [`Error::TableTooLarge`] for contents over a format limit.
    pub(crate) fn check_limits(&self, label: &str) -> Result<()> {
        if label.len() > SNAPSHOT_LABEL_BYTES_MAX {
            return Err(Error::InvalidConfig(format!(
                "snapshot label of {} bytes exceeds {SNAPSHOT_LABEL_BYTES_MAX}",
                label.len()
            )));
        }
        let too_large = |what: String| Err(Error::TableTooLarge(what));
        if self.plan.len() > RUNS_MAX as usize || self.plan.sorted.len() > RUNS_MAX as usize {
            return too_large(format!(
                "a snapshot holds at most {RUNS_MAX} runs; this table has {}",
                self.plan.len().max(self.plan.sorted.len())
            ));
        }
        if self.levels.len() > LEVELS_MAX as usize {
            return too_large(format!(
                "a snapshot holds at most {LEVELS_MAX} levels; this table has {}",
                self.levels.len()
            ));
        }
        for level in &self.levels {
            let merging = match &level.incoming {
                IncomingShape::Merging { inputs, .. } => inputs.len(),
                _ => 0,
            };
            let runs = merging.max(level.resident.len());
            if runs > RUNS_MAX as usize {
                return too_large(format!("a level of {runs} runs exceeds {RUNS_MAX}"));
            }
        }
        if let Some(union) = &self.union {
            check_union_limits(union, 0)?;
        }
        Ok(())
    }
}

/// The limits [`decode_union`] enforces, checked on a union about to be saved at `depth`.
fn check_union_limits(union: &UnionShape, depth: usize) -> Result<()> {
    if depth >= UNION_DEPTH_MAX {
        return Err(Error::TableTooLarge(format!(
            "a snapshot holds unions nested at most {UNION_DEPTH_MAX} deep; this table's are deeper"
        )));
    }
    if union.inputs.len() > RUNS_MAX as usize {
        return Err(Error::TableTooLarge(format!(
            "a snapshot holds unions of at most {RUNS_MAX} tables; this one has {}",
            union.inputs.len()
        )));
    }
    for input in &union.inputs {
        if input.runs.len() > RUNS_MAX as usize {
            return Err(Error::TableTooLarge(format!(
                "a union input of {} runs exceeds {RUNS_MAX}",
                input.runs.len()
            )));
        }
        if let Some(nested) = &input.union {
            check_union_limits(nested, depth + 1)?;
        }
    }
    Ok(())
}

/// The directory of snapshot `name`.
pub(crate) fn snapshot_dir(snapshots: &Path, name: &str) -> PathBuf {
    snapshots.join(name)
}

/// A fresh temporary directory under `snapshots/` (removed by the session on open if left over).
pub(crate) fn temp_dir(snapshots: &Path, name: &str, n: u64) -> PathBuf {
    snapshots.join(format!(".tmp-{name}-{n}"))
}

/// A table's contents at one instant, as a snapshot plan (the table holds its read lock): O(runs)
/// reference counts and an O(1) clone of each write buffer, no I/O.
pub(crate) fn plan(
    config: &TableConfig,
    levels: &Levels,
    write_buffer: &WriteBuffer,
    union: Option<&Arc<UnionLevel>>,
) -> SnapshotContents {
    let mut plan = SnapshotPlan::default();
    let mut levels = levels.shape(&mut |run| plan.name(run));
    let write_buffer = plan.buffer(write_buffer.clone());
    // The union's state is read once: it may finish concurrently (through a duplicate).
    let union = match union.map(|u| u.state()) {
        Some((UnionContents::Done(Some(run)), _)) => {
            // A finished union is saved as the last level it migrates to.
            levels.push(LevelShape {
                incoming: IncomingShape::Single(plan.name(&run)),
                resident: Vec::new(),
            });
            None
        }
        Some((UnionContents::Pending(views), produced)) => Some(plan.union(&views, produced)),
        Some((UnionContents::Done(None), _)) | None => None,
    };
    SnapshotContents {
        config: config.clone(),
        plan,
        levels,
        write_buffer,
        union,
        auth: None,
    }
}

/// Saves planned `contents` as snapshot `name` of `session`, with an authenticated table's trie
/// (its segments, linked, and their manifest) in `trie/` beside it: refuses contents over a
/// format limit and an existing name before writing anything, then writes into a temporary
/// directory that is renamed into place (see [`save`]), so a crash leaves the whole snapshot or
/// none of it; a failed save removes it where it can.
pub(crate) fn save_table(
    session: &SessionInner,
    params: &RunParams,
    name: &str,
    label: &str,
    contents: SnapshotContents,
    trie: Option<TrieFiles>,
) -> Result<()> {
    contents.check_limits(label)?;
    let fs = session.fs();
    let target = snapshot_dir(session.snapshots_dir(), name);
    if fs.exists(&target)? {
        return Err(Error::SnapshotExists(name.to_string()));
    }
    let tmp = temp_dir(session.snapshots_dir(), name, session.next_run_number());
    fs.create_dir_all(&tmp)?;
    let result = (|| {
        if let Some(trie) = trie {
            write_trie(fs, &tmp.join(TRIE_DIR), trie)?;
        }
        save(fs, params, &tmp, &target, label, contents)
    })();
    if result.is_err() {
        // Best effort: a leftover temporary directory is removed when the session reopens.
        let _ = fs.remove_dir_all(&tmp);
    }
    result
}

/// Writes a trie's `trie/` directory: each segment of the page log linked (and fsynced: its
/// writer never syncs), the snapshot's own segment, the manifest, then the directory.
fn write_trie(fs: &Arc<dyn FileSystem>, dir: &Path, trie: TrieFiles) -> Result<()> {
    fs.create_dir_all(dir)?;
    for segment in &trie.segments {
        let link = dir.join(pagelog::segment_file_name(segment.file_id()));
        fs.hard_link(segment.path(), &link)?;
        fs.sync_file(&link)?;
    }
    if let Some((id, bytes)) = &trie.own {
        let mut file = FileWriter::create(&**fs, &dir.join(pagelog::segment_file_name(*id)))?;
        file.write(bytes)?;
        file.finish(true)?;
    }
    let mut file = FileWriter::create(&**fs, &dir.join(pagelog::MANIFEST_NAME))?;
    file.write(&trie.manifest.encode())?;
    file.finish(true)?;
    fs.sync_dir(dir)
}

/// Links the runs into `tmp`, writes the metadata, fsyncs everything and renames `tmp` to the
/// snapshot's directory.
pub(crate) fn save(
    fs: &Arc<dyn FileSystem>,
    params: &RunParams,
    tmp: &Path,
    target: &Path,
    label: &str,
    contents: SnapshotContents,
) -> Result<()> {
    write_files(fs, params, tmp, label, contents)?;
    publish(fs, tmp, target)
}

/// Renames a fully written and synced `tmp` to `target` and syncs the parent.
fn publish(fs: &Arc<dyn FileSystem>, tmp: &Path, target: &Path) -> Result<()> {
    fs.rename(tmp, target)?;
    if let Some(parent) = target.parent() {
        fs.sync_dir(parent)?;
    }
    Ok(())
}

/// Links the runs into `tmp`, writes the metadata, fsyncs every file and the directory.
fn write_files(
    fs: &Arc<dyn FileSystem>,
    params: &RunParams,
    tmp: &Path,
    label: &str,
    contents: SnapshotContents,
) -> Result<()> {
    contents.check_limits(label)?;
    let run_count = contents.plan.len();
    let sorted = contents.plan.sorted;
    let mut run_sums = Vec::with_capacity(run_count);
    // The linked runs by index, to blame one whose fsync fails.
    let mut linked: Vec<Option<Arc<Run>>> = Vec::with_capacity(run_count);
    for (i, item) in contents.plan.items.into_iter().enumerate() {
        let sum = match item {
            PlanItem::Link(run) => {
                if run.sync_failed() {
                    copy_run(&**fs, &run, tmp, i as u64)?;
                } else {
                    run.share_files();
                    for file in RunFile::ALL {
                        fs.hard_link(&run.file_path(file), &run_file_path(tmp, i as u64, file))?;
                    }
                }
                let sum = run.checksums_crc();
                linked.push(Some(run));
                sum
            }
            PlanItem::Write(buffer) => {
                linked.push(None);
                write_buffer_run(fs, params, tmp, i as u64, &buffer)?
            }
        };
        run_sums.push(sum);
    }
    let meta = SnapshotMeta {
        label: label.to_string(),
        resolve: ResolveTag::of(&contents.config.resolve),
        config: contents.config,
        run_count,
        run_sums,
        sorted,
        write_buffer: contents.write_buffer,
        levels: contents.levels,
        union: contents.union,
        auth: contents.auth,
    };
    let mut file = FileWriter::create(&**fs, &tmp.join("metadata"))?;
    file.write(&meta.encode())?;
    file.finish(false)?; // synced below with every other file
                         // Every file, in name order, then the directory: only then is the rename published.
    for name in fs.list_dir(tmp)? {
        if fs.is_dir(&tmp.join(&name))? {
            continue; // an authenticated table's `trie/`, synced by its own save
        }
        if let Err(e) = fs.sync_file(&tmp.join(&name)) {
            // A later save must not trust a later fsync of the same file: copy it instead.
            let index = name.split('.').next().and_then(|i| i.parse::<usize>().ok());
            if let Some(Some(run)) = index.and_then(|i| linked.get(i)) {
                run.mark_sync_failed();
            }
            return Err(e);
        }
    }
    fs.sync_dir(tmp)
}

/// Copies the files of `run` into `dir` as run `number` (for a run whose fsync failed once, whose
/// files a hard link would share), checking each copied file against the run's recorded size and
/// CRC32C so that pages the kernel dropped and re-read wrong are not saved.
fn copy_run(fs: &dyn FileSystem, run: &Run, dir: &Path, number: u64) -> Result<()> {
    for file in RunFile::ALL {
        let source = run.file_path(file);
        let target = run_file_path(dir, number, file);
        let Some((size, crc)) = run.recorded_checksum(file) else {
            // The checksums file: written from the run's own record.
            let mut out = FileWriter::create(fs, &target)?;
            out.write(&run.checksums_bytes())?;
            out.finish(false)?;
            continue;
        };
        let (copied_size, actual) = copy_file(fs, &source, &target)?;
        if copied_size != size || actual != crc {
            return Err(Error::ChecksumMismatch {
                path: source,
                expected: crc,
                actual,
            });
        }
    }
    Ok(())
}

/// Writes a write buffer's entries as run `number` in `dir` (files kept when the run is dropped);
/// returns the CRC32C of its checksums file.
fn write_buffer_run(
    fs: &Arc<dyn FileSystem>,
    params: &RunParams,
    dir: &Path,
    number: u64,
    entries: &WriteBuffer,
) -> Result<u32> {
    let params = RunParams {
        dir: dir.to_path_buf(),
        ..params.clone()
    };
    let mut writer = RunWriter::new(fs.clone(), &params, number, entries.len() as u64, true)?;
    for entry in entries.iter() {
        let blob = entry.blob().map(|blob| &blob[..]);
        writer.push(entry.key(), entry.op(), entry.value(), blob)?;
    }
    match writer.finish()? {
        Some(run) => {
            run.keep_files();
            Ok(run.checksums_crc())
        }
        None => Err(Error::corrupt(
            "snapshot",
            "an empty write buffer was planned as a run",
        )),
    }
}

/// Reads and checks a snapshot's metadata, naming the file in any error.
pub(crate) fn read_meta(fs: &dyn FileSystem, dir: &Path) -> Result<SnapshotMeta> {
    let path = dir.join("metadata");
    let bytes = read_all(fs, &path)?;
    SnapshotMeta::decode(&bytes).map_err(|e| e.in_file(&path))
}

/// Copies every file of `from` into a new directory `to` (through `tmp`, renamed at the end),
/// fsyncing each file and the directory.
pub(crate) fn copy_dir(fs: &dyn FileSystem, from: &Path, tmp: &Path, to: &Path) -> Result<()> {
    let result = copy_dir_via(fs, from, tmp, to);
    if result.is_err() && fs.exists(tmp).unwrap_or(false) {
        // Best effort; a leftover `.tmp-*` under `snapshots/` is removed when the session opens.
        let _ = fs.remove_dir_all(tmp);
    }
    result
}

fn copy_dir_via(fs: &dyn FileSystem, from: &Path, tmp: &Path, to: &Path) -> Result<()> {
    copy_tree(fs, from, tmp)?;
    fs.rename(tmp, to)?;
    fs.sync_dir(&parent_dir(to))?;
    Ok(())
}

/// Copies every file of `from` into a new directory `into`, and every subdirectory (an
/// authenticated table's `trie/`) the same way, fsyncing each file and directory.
fn copy_tree(fs: &dyn FileSystem, from: &Path, into: &Path) -> Result<()> {
    fs.create_dir_all(into)?;
    for name in fs.list_dir(from)? {
        let source = from.join(&name);
        let target = into.join(&name);
        if fs.is_dir(&source)? {
            copy_tree(fs, &source, &target)?;
            continue;
        }
        copy_file(fs, &source, &target)?;
        fs.sync_file(&target)?;
    }
    fs.sync_dir(into)
}

/// The directory holding `path`: `.` for a relative path of one component (whose
/// [`Path::parent`] is empty), `/` for the root.
pub(crate) fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(parent) if parent.as_os_str().is_empty() => PathBuf::from("."),
        Some(parent) => parent.to_path_buf(),
        None => PathBuf::from("/"),
    }
}

// ------------------------------------------------------------------------------------------------
// The snapshots of a session (the session has checked that it is open)

/// Names of the saved snapshots, sorted: every directory of `snapshots/` whose name is a valid
/// snapshot name (anything else there is not a snapshot and is ignored).
pub(crate) fn list(session: &SessionInner) -> Result<Vec<String>> {
    let fs = session.fs();
    let mut names = Vec::new();
    for name in fs.list_dir(session.snapshots_dir())? {
        if validate_name(&name).is_ok() && fs.is_dir(&session.snapshots_dir().join(&name))? {
            names.push(name);
        }
    }
    Ok(names)
}

/// Whether snapshot `name` exists.
pub(crate) fn exists(session: &SessionInner, name: &str) -> Result<bool> {
    if !is_checkpoint_name(name) {
        validate_name(name)?;
    }
    session
        .fs()
        .is_dir(&snapshot_dir(session.snapshots_dir(), name))
}

/// Deletes snapshot `name`: renamed out of the way first, so a crash never leaves a
/// half-deleted snapshot under its name (a leftover `.tmp-*` directory is removed when the
/// session opens).
pub(crate) fn delete(session: &SessionInner, name: &str) -> Result<()> {
    if !exists(session, name)? {
        return Err(Error::SnapshotMissing(name.to_string()));
    }
    let fs = session.fs();
    let doomed = temp_dir(session.snapshots_dir(), name, session.next_run_number());
    fs.rename(&snapshot_dir(session.snapshots_dir(), name), &doomed)?;
    fs.sync_dir(session.snapshots_dir())?;
    fs.remove_dir_all(&doomed)
}

/// Copies snapshot `name` into `target` (which must not exist; its parent must), fsynced.
pub(crate) fn export(session: &SessionInner, name: &str, target: &Path) -> Result<()> {
    if !exists(session, name)? {
        return Err(Error::SnapshotMissing(name.to_string()));
    }
    let fs = session.fs();
    if fs.exists(target)? {
        return Err(Error::SnapshotDirectory {
            path: target.to_path_buf(),
            reason: "the export directory already exists".into(),
        });
    }
    // The parent must exist: creating it here would leave it without an fsync of its own.
    if !fs.is_dir(&parent_dir(target))? {
        return Err(Error::SnapshotDirectory {
            path: target.to_path_buf(),
            reason: "the export directory's parent does not exist".into(),
        });
    }
    // Run numbers restart in every process: a leftover of an earlier crash may be in the way.
    let tmp = target.with_file_name(format!(".tmp-export-{}", session.next_run_number()));
    if fs.exists(&tmp)? {
        fs.remove_dir_all(&tmp)?;
    }
    copy_dir(
        &**fs,
        &snapshot_dir(session.snapshots_dir(), name),
        &tmp,
        target,
    )
}

/// Copies the snapshot exported in `source` into the session as snapshot `name`, atomically.
pub(crate) fn import(session: &SessionInner, name: &str, source: &Path) -> Result<()> {
    if exists(session, name)? {
        return Err(Error::SnapshotExists(name.to_string()));
    }
    let fs = session.fs();
    if !fs.is_dir(source)? {
        return Err(Error::SnapshotDirectory {
            path: source.to_path_buf(),
            reason: "the import directory does not exist".into(),
        });
    }
    let tmp = temp_dir(session.snapshots_dir(), name, session.next_run_number());
    let target = snapshot_dir(session.snapshots_dir(), name);
    let result = (|| {
        copy_tree(&**fs, source, &tmp)?;
        rename_trie_files(fs, &tmp.join(TRIE_DIR))?;
        fs.rename(&tmp, &target)?;
        fs.sync_dir(&parent_dir(&target))
    })();
    if result.is_err() {
        let _ = fs.remove_dir_all(&tmp);
    }
    result
}

/// Gives the segment files of an imported snapshot's `trie/` fresh names (and says so in its
/// manifest), so that they never stand in for the files of another snapshot that names the
/// same segments: two copies of one segment may differ if a copy was damaged. Pointers keep
/// naming segments by their own ids. A trie directory whose manifest does not decode is left
/// as it is (opening the snapshot reports it).
fn rename_trie_files(fs: &Arc<dyn FileSystem>, dir: &Path) -> Result<()> {
    if !fs.is_dir(dir)? {
        return Ok(());
    }
    let manifest_path = dir.join(pagelog::MANIFEST_NAME);
    let Ok(mut manifest) = read_all(&**fs, &manifest_path).and_then(|b| Manifest::decode(&b))
    else {
        return Ok(());
    };
    for entry in &mut manifest.segments {
        let from = dir.join(pagelog::segment_file_name(entry.file_id));
        if !fs.exists(&from)? {
            continue; // reported when the snapshot is opened
        }
        let file_id = loop {
            let id = pagelog::random_id(dir)?;
            if !fs.exists(&dir.join(pagelog::segment_file_name(id)))? {
                break id;
            }
        };
        fs.rename(&from, &dir.join(pagelog::segment_file_name(file_id)))?;
        entry.file_id = file_id;
    }
    fs.remove_file(&manifest_path)?;
    let mut file = FileWriter::create(&**fs, &manifest_path)?;
    file.write(&manifest.encode())?;
    file.finish(true)?;
    fs.sync_dir(dir)
}

// ------------------------------------------------------------------------------------------------
// Restoring a table

/// What may differ from a snapshot's saved configuration when it is opened.
#[derive(Clone, Debug, Default)]
pub struct SnapshotOverrides {
    /// The resolve function: required when the snapshot was saved with a custom one (functions
    /// cannot be stored; the snapshot records the name, which must match); for a snapshot saved
    /// with a built-in one, `None` or that same built-in (another is refused: stored upserts
    /// would combine under other semantics).
    pub resolve: Option<Resolve>,
    /// A different disk-cache policy.
    pub disk_cache: Option<DiskCachePolicy>,
    /// A different merge batch size.
    pub merge_batch_size: Option<usize>,
}

/// A table's contents rebuilt from a snapshot, for [`crate::Table`] to wrap.
pub(crate) struct Restored {
    /// The trie of an authenticated table.
    pub(crate) auth: Option<AuthMeta>,
    pub(crate) config: TableConfig,
    pub(crate) params: RunParams,
    pub(crate) write_buffer: WriteBuffer,
    pub(crate) levels: Levels,
    pub(crate) union: Option<Arc<UnionLevel>>,
}

/// Opens snapshot `name` of `session`: checks name and label, links every run into `active/`
/// under fresh numbers and opens it (verifying every file's CRC32C), rebuilds the write buffer,
/// the levels (merges restart from their inputs and are caught up with their credits) and a
/// pending union (which replays the credits it was paid). On error, the links made so far are
/// removed where possible.
pub(crate) fn restore(
    session: &SessionInner,
    name: &str,
    label: &str,
    overrides: SnapshotOverrides,
) -> Result<Restored> {
    if !is_checkpoint_name(name) {
        validate_name(name)?;
    }
    let dir = snapshot_dir(session.snapshots_dir(), name);
    let result = restore_parts(session, name, &dir, label, overrides);
    if result.is_err() {
        // Runs opened before the failure were released: free their links now if possible.
        session.try_remove_released();
    }
    result
}

/// What an error met while opening snapshot `name` becomes: damage (corruption, or a missing or
/// short file) is [`Error::SnapshotCorrupted`] blamed on `path`, the file it is in; any other
/// I/O error is the disk's, returned as it is.
pub(crate) fn blame_in(name: &str, path: &Path) -> impl Fn(Error) -> Error {
    let (name, path) = (name.to_string(), path.to_path_buf());
    move |e: Error| {
        let short = matches!(&e, Error::Io { source, .. } if matches!(
            source.kind(),
            std::io::ErrorKind::NotFound | std::io::ErrorKind::UnexpectedEof
        ));
        if short || matches!(e, Error::Corrupt { .. } | Error::CorruptFile { .. }) {
            Error::SnapshotCorrupted {
                name: name.clone(),
                path: path.clone(),
                source: Box::new(e),
            }
        } else {
            e
        }
    }
}

/// Opens the trie of authenticated snapshot `name` (its `trie/` directory): its manifest, and
/// each segment it lists adopted by the session's page log (linked into `active/`, or read in
/// place by a read-only session). Cost: one small file read, one link and one 4 KiB header
/// read per segment not open already.
pub(crate) fn restore_trie(session: &SessionInner, name: &str) -> Result<(Manifest, Segments)> {
    let fs = session.fs();
    let dir = snapshot_dir(session.snapshots_dir(), name).join(TRIE_DIR);
    if !fs.is_dir(&dir)? {
        return Err(Error::SnapshotCorrupted {
            name: name.to_string(),
            path: dir.clone(),
            source: Box::new(Error::corrupt("snapshot", "its trie directory is missing")),
        });
    }
    let blame = |path: &Path| blame_in(name, path);
    let result = (|| {
        let manifest_path = dir.join(pagelog::MANIFEST_NAME);
        let manifest = read_all(&**fs, &manifest_path)
            .and_then(|b| Manifest::decode(&b))
            .map_err(blame(&manifest_path))?;
        let mut segments = Segments::default();
        for entry in &manifest.segments {
            let source = dir.join(pagelog::segment_file_name(entry.file_id));
            let segment = session
                .page_log()
                .adopt(entry.id, entry.file_id, &source, !session.read_only())
                .map_err(blame(&source))?;
            segments.add_bytes(&segment, entry.bytes);
        }
        Ok((manifest, segments))
    })();
    if result.is_err() {
        session.try_remove_released();
    }
    result
}

fn restore_parts(
    session: &SessionInner,
    name: &str,
    dir: &Path,
    label: &str,
    overrides: SnapshotOverrides,
) -> Result<Restored> {
    let fs = session.fs().clone();
    let dir = dir.to_path_buf();
    if !fs.is_dir(&dir)? {
        return Err(Error::SnapshotMissing(name.to_string()));
    }
    // A missing or short file is corruption; any other I/O error is the disk's, not the
    // snapshot's, and is returned as it is (opening again may succeed).
    let corrupted = |path: PathBuf, e: Error| match e {
        Error::Io { ref source, .. }
            if !matches!(
                source.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::UnexpectedEof
            ) =>
        {
            e
        }
        e => Error::SnapshotCorrupted {
            name: name.to_string(),
            path,
            source: Box::new(e),
        },
    };
    let meta = read_meta(&*fs, &dir).map_err(|e| corrupted(dir.join("metadata"), e))?;
    let drops_deletes = meta.levels.iter().any(|l| {
        matches!(
            l.incoming,
            IncomingShape::Merging {
                last_level: true,
                ..
            }
        )
    });
    if meta.union.is_some() && drops_deletes {
        let e = Error::corrupt(
            "snapshot metadata",
            "a merge drops deletes above a union in progress",
        );
        return Err(corrupted(dir.join("metadata"), e));
    }
    if meta.label != label {
        return Err(Error::SnapshotLabelMismatch {
            expected: label.to_string(),
            found: meta.label,
        });
    }
    let mut config = meta.config.clone();
    config.resolve = match (meta.resolve.clone(), overrides.resolve) {
        (ResolveTag::Custom(Some(saved)), Some(given)) => match &given {
            Resolve::Custom(custom) if custom.name() == saved => given,
            _ => {
                return Err(Error::InvalidConfig(format!(
                    "snapshot {name:?} was saved with the custom resolve function {saved:?}, \
                     not {given:?}"
                )))
            }
        },
        (ResolveTag::Custom(None), Some(given @ Resolve::Custom(_))) => given,
        (saved @ (ResolveTag::KeepNewest | ResolveTag::AddU64Le), Some(given))
            if ResolveTag::of(&given) == saved =>
        {
            given
        }
        (saved, Some(given)) => {
            // Stored upserts would combine under other semantics.
            return Err(Error::InvalidConfig(format!(
                "snapshot {name:?} was saved with the resolve function {saved:?}, not {given:?}"
            )));
        }
        (ResolveTag::Custom(saved), None) => {
            let named = saved.map(|n| format!(" {n:?}")).unwrap_or_default();
            return Err(Error::InvalidConfig(format!(
                "snapshot {name:?} was saved with the custom resolve function{named}: pass it \
                 in the overrides"
            )));
        }
        (ResolveTag::AddU64Le, None) => Resolve::AddU64Le,
        (ResolveTag::KeepNewest, None) => Resolve::KeepNewest,
    };
    if let Some(policy) = overrides.disk_cache {
        config.disk_cache = policy;
    }
    if let Some(batch) = overrides.merge_batch_size {
        config.merge_batch_size = batch;
    }
    let params = RunParams::for_table(
        session.active_dir(),
        session.removals().clone(),
        session.salt(),
        &config,
    )?;
    let runs = open_snapshot_runs(session, &dir, &meta, &config, &params).map_err(
        |(path, e)| match path {
            Some(path) => corrupted(path, e),
            None => e,
        },
    )?;
    let write_buffer = match meta.write_buffer {
        Some(i) => write_buffer_from_run(&runs[i], &config.resolve)?,
        None => WriteBuffer::default(),
    };
    let sorted = sorted_runs(&meta, &runs).map_err(|e| corrupted(dir.join("metadata"), e))?;
    let union = match &meta.union {
        Some(shape) => Some(Arc::new(
            union_from_shape(session, &config, &params, shape, &runs, &sorted)
                .map_err(|e| corrupted(dir.join("metadata"), e))?,
        )),
        None => None,
    };
    let levels = with_merge_context(session, &config, &params, union.is_some(), |ctx| {
        Levels::from_shape(ctx, &meta.levels, &sorted)
    })
    .map_err(|e| corrupted(dir.join("metadata"), e))?;
    drop((runs, sorted));
    Ok(Restored {
        auth: meta.auth.clone(),
        config,
        params,
        write_buffer,
        levels,
        union,
    })
}

/// Links every run of the snapshot in `dir` into `active/` under fresh numbers and opens it,
/// verifying every file. On error, returns the snapshot file to blame (none when the error is
/// not the snapshot's); runs opened so far are
/// released (their links removed) when the vector is dropped.
fn open_snapshot_runs(
    session: &SessionInner,
    dir: &Path,
    meta: &SnapshotMeta,
    config: &TableConfig,
    params: &RunParams,
) -> std::result::Result<Vec<Arc<Run>>, (Option<PathBuf>, Error)> {
    let fs = session.fs();
    let mut runs = Vec::with_capacity(meta.run_count);
    if session.read_only() {
        // Opened in place: the snapshot's own files, never removed when the runs are dropped.
        let in_place = RunParams {
            dir: dir.to_path_buf(),
            ..params.clone()
        };
        for (i, level) in meta.run_levels().into_iter().enumerate() {
            let caching = config.disk_cache.caches_level(level);
            let run = Run::open(fs.clone(), &in_place, i as u64, caching).map_err(|e| {
                let file = RunFile::from_path(e.path()).unwrap_or(RunFile::Checksums);
                (Some(run_file_path(dir, i as u64, file)), e)
            })?;
            run.keep_files();
            if run.checksums_crc() != meta.run_sums[i] {
                let e = Error::corrupt(
                    "snapshot",
                    format!("run {i} is not the run the snapshot saved (checksums file differs)"),
                );
                return Err((Some(run_file_path(dir, i as u64, RunFile::Checksums)), e));
            }
            runs.push(run);
        }
        return Ok(runs);
    }
    for (i, level) in meta.run_levels().into_iter().enumerate() {
        let number = session.next_run_number();
        let snapshot_file = |file: RunFile| run_file_path(dir, i as u64, file);
        // Removed by the session (the open fails, then removes what it can; the rest is retried
        // and reported by the next operation).
        let remove_links = || {
            params.removals.defer(
                RunFile::ALL
                    .into_iter()
                    .map(|file| run_file_path(&params.dir, number, file)),
            )
        };
        for file in RunFile::ALL {
            if let Err(e) = fs.hard_link(
                &snapshot_file(file),
                &run_file_path(&params.dir, number, file),
            ) {
                remove_links();
                // A missing snapshot file is corruption; a link that failed for another reason
                // (into `active/`) is the disk's error, not the snapshot's.
                return match fs.exists(&snapshot_file(file)) {
                    Ok(false) => Err((Some(snapshot_file(file)), e)),
                    Ok(true) => Err((None, e)),
                    Err(stat) => Err((None, stat)),
                };
            }
        }
        let caching = config.disk_cache.caches_level(level);
        match Run::open(fs.clone(), params, number, caching) {
            Ok(run) if run.checksums_crc() != meta.run_sums[i] => {
                // Dropping the run queues its links for removal.
                let e = Error::corrupt(
                    "snapshot",
                    format!("run {i} is not the run the snapshot saved (checksums file differs)"),
                );
                return Err((Some(snapshot_file(RunFile::Checksums)), e));
            }
            Ok(run) => runs.push(run),
            Err(e) => {
                remove_links();
                let file = RunFile::from_path(e.path()).unwrap_or(RunFile::Checksums);
                return Err((Some(snapshot_file(file)), e));
            }
        }
    }
    Ok(runs)
}

/// The sorted runs of a snapshot over its opened runs. A sorted run whose parts overlap or are
/// out of key order is `Corrupt`. (Version 2's list names every run, the write buffer's too.)
pub(crate) fn sorted_runs(meta: &SnapshotMeta, runs: &[Arc<Run>]) -> Result<Vec<Arc<SortedRun>>> {
    meta.sorted
        .iter()
        .map(|parts| {
            let parts = parts
                .iter()
                .map(|&i| {
                    runs.get(i).cloned().ok_or_else(|| {
                        Error::corrupt("snapshot metadata", format!("run {i} does not exist"))
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            SortedRun::new(parts)?
                .ok_or_else(|| Error::corrupt("snapshot metadata", "a sorted run without parts"))
        })
        .collect()
}

/// Rebuilds a pending union from a snapshot and replays the credits it had been paid, so its
/// remaining debt is at most what it was when saved.
fn union_from_shape(
    session: &SessionInner,
    config: &TableConfig,
    params: &RunParams,
    shape: &UnionShape,
    runs: &[Arc<Run>],
    sorted: &[Arc<SortedRun>],
) -> Result<UnionLevel> {
    let run = |i: usize| {
        runs.get(i)
            .cloned()
            .ok_or_else(|| Error::corrupt("snapshot metadata", format!("run {i} does not exist")))
    };
    let sorted_run = |i: usize| {
        sorted.get(i).cloned().ok_or_else(|| {
            Error::corrupt(
                "snapshot metadata",
                format!("sorted run {i} does not exist"),
            )
        })
    };
    let mut views = Vec::with_capacity(shape.inputs.len());
    for input in &shape.inputs {
        let buffer = match input.buffer {
            Some(i) => write_buffer_from_run(&run(i)?, &config.resolve)?,
            None => WriteBuffer::default(),
        };
        let union = match &input.union {
            Some(nested) => Some(Arc::new(union_from_shape(
                session, config, params, nested, runs, sorted,
            )?)),
            None => None,
        };
        let runs = input
            .runs
            .iter()
            .map(|&i| sorted_run(i))
            .collect::<Result<Vec<_>>>()?;
        views.push(Arc::new(TableView {
            buffer,
            runs,
            union,
            epoch: 0,
        }));
    }
    let union = UnionLevel::for_table(session.fs().clone(), config, params, views);
    // A read-only session reads the union's inputs as they are: replaying its work would write.
    if shape.produced > 0 && !session.read_only() {
        union.supply_credits(shape.produced, || session.next_run_number())?;
    }
    Ok(union)
}

/// Reads a snapshot's write-buffer run back into a write buffer (blobs into memory).
fn write_buffer_from_run(run: &Arc<Run>, resolve: &Resolve) -> Result<WriteBuffer> {
    let mut write_buffer = WriteBuffer::default();
    let mut cursor = RunCursor::new(run.clone())?;
    while let Some(e) = cursor.peek()? {
        let blob = match (e.op, e.blob) {
            (Op::Insert, Some(span)) => Some(Arc::from(cursor.run().read_blob(span)?)),
            _ => None,
        };
        write_buffer.apply(e.key, e.op, e.value, blob, resolve);
        cursor.advance()?;
    }
    Ok(write_buffer)
}

/// Runs `f` with the context merges need for a table with this config. `union_below` keeps
/// deletes in every merge (older entries still live in the union below the levels).
pub(crate) fn with_merge_context<T>(
    session: &SessionInner,
    config: &TableConfig,
    params: &RunParams,
    union_below: bool,
    f: impl FnOnce(&MergeContext<'_>) -> Result<T>,
) -> Result<T> {
    let next_run_number = || session.next_run_number();
    let ctx = MergeContext {
        fs: session.fs(),
        params,
        next_run_number: &next_run_number,
        resolve: &config.resolve,
        disk_cache: config.disk_cache,
        schedule: config.merge_schedule,
        write_buffer_entries: config.write_buffer_entries as u64,
        merge_batch_size: config.merge_batch_size as u64,
        union_below,
        read_only: session.read_only(),
        background: session.background(),
        part_entries: config.part_entries,
    };
    f(&ctx)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> SnapshotMeta {
        SnapshotMeta {
            label: "utxo-v1".into(),
            config: TableConfig {
                write_buffer_entries: 64,
                index: IndexType::Compact,
                ..TableConfig::default()
            },
            resolve: ResolveTag::AddU64Le,
            run_count: 9,
            run_sums: (0..9).map(|i| 0x1111_1111 * i).collect(),
            sorted: (0..9).map(|i| vec![i]).collect(),
            write_buffer: Some(5),
            levels: vec![
                LevelShape {
                    incoming: IncomingShape::Single(0),
                    resident: vec![1, 2],
                },
                LevelShape {
                    incoming: IncomingShape::Merging {
                        last_level: true,
                        nominal_debt: 256,
                        nominal_credits: 17,
                        inputs: vec![3, 4],
                    },
                    resident: vec![],
                },
                LevelShape {
                    incoming: IncomingShape::Empty,
                    resident: vec![],
                },
            ],
            union: Some(UnionShape {
                produced: 3,
                inputs: vec![
                    ViewShape {
                        buffer: Some(6),
                        runs: vec![7, 3],
                        union: None,
                    },
                    ViewShape {
                        buffer: None,
                        runs: vec![],
                        union: Some(Box::new(UnionShape {
                            produced: 0,
                            inputs: vec![ViewShape {
                                buffer: None,
                                runs: vec![8],
                                union: None,
                            }],
                        })),
                    },
                ],
            }),
            auth: None,
        }
    }

    #[test]
    fn names_are_validated() {
        for good in ["a", "snap-1", "x_y", &"z".repeat(64), "com", "lpt10"] {
            validate_name(good).unwrap();
        }
        for bad in [
            "",
            "A",
            "a.b",
            "a/b",
            "..",
            &"z".repeat(65),
            "con",
            "nul",
            "com1",
            "lpt9",
            "é",
        ] {
            assert!(
                matches!(validate_name(bad), Err(Error::InvalidSnapshotName(_))),
                "{bad}"
            );
        }
    }

    /// Every truncation and every flipped bit of `bytes` (valid metadata) is refused.
    fn assert_every_damage_refused(bytes: &[u8]) {
        for len in 0..bytes.len() {
            assert!(SnapshotMeta::decode(&bytes[..len]).is_err());
        }
        for bit in 0..bytes.len() * 8 {
            let mut b = bytes.to_vec();
            b[bit / 8] ^= 1 << (bit % 8);
            assert!(SnapshotMeta::decode(&b).is_err(), "bit {bit}");
        }
    }

    /// Version 3: sorted runs of several parts, named by the levels and the union.
    fn sample_with_parts() -> SnapshotMeta {
        let mut meta = sample();
        meta.config.part_entries = Some(5_000);
        // Runs 0 and 1 are the parts of sorted run 0; the others are single parts.
        meta.sorted = vec![vec![0, 1], vec![2], vec![3], vec![4], vec![7], vec![8]];
        meta.levels[0] = LevelShape {
            incoming: IncomingShape::Single(0),
            resident: vec![1],
        };
        meta.levels[1].incoming = IncomingShape::Merging {
            last_level: true,
            nominal_debt: 256,
            nominal_credits: 17,
            inputs: vec![2, 3],
        };
        let union = meta.union.as_mut().unwrap();
        union.inputs[0].runs = vec![4, 2];
        union.inputs[1].union.as_mut().unwrap().inputs[0].runs = vec![5];
        meta
    }

    #[test]
    fn metadata_with_parts_is_version_3_golden_and_total() {
        let meta = sample_with_parts();
        assert_eq!(meta.version(), 3);
        let bytes = meta.encode();
        let golden = crate::golden::check_golden("snapshot-metadata-v3-parts.bin", &bytes);
        let back = SnapshotMeta::decode(&golden).unwrap();
        assert_eq!(back.encode(), bytes);
        assert_eq!(back.sorted, meta.sorted);
        assert_eq!(back.config.part_entries, Some(5_000));
        assert_eq!(back.levels, meta.levels);
        assert_eq!(back.union, meta.union);
        assert_eq!(back.run_levels()[..5], [1, 1, 1, 2, 2]);
        assert_every_damage_refused(&bytes);
        // Every sorted run must be named, and a part used once.
        let mut unused = sample_with_parts();
        unused.sorted.push(vec![6]);
        assert!(SnapshotMeta::decode(&unused.encode()).is_err());
        let mut twice = sample_with_parts();
        twice.sorted[1] = vec![1];
        assert!(SnapshotMeta::decode(&twice.encode()).is_err());
        // Version 2 is written whenever every sorted run is one part.
        assert_eq!(sample().version(), 2);
    }

    #[test]
    fn metadata_round_trip_golden_and_totality() {
        let meta = sample();
        let bytes = meta.encode();
        let golden = crate::golden::check_golden("snapshot-metadata-v2.bin", &bytes);
        let back = SnapshotMeta::decode(&golden).unwrap();
        assert_eq!(back.encode(), bytes);
        assert_eq!(back.levels, meta.levels);
        assert_eq!(back.union, meta.union);
        assert_eq!(back.label, "utxo-v1");
        assert_every_damage_refused(&bytes);
    }

    #[test]
    fn a_custom_resolve_name_is_an_extension() {
        let mut meta = sample();
        meta.resolve = ResolveTag::Custom(Some("max-v1".into()));
        let bytes = meta.encode();
        let golden = crate::golden::check_golden("snapshot-metadata-v2-custom.bin", &bytes);
        let back = SnapshotMeta::decode(&golden).unwrap();
        assert_eq!(back.resolve, meta.resolve);
        assert_eq!(back.encode(), bytes);
        for bit in 0..bytes.len() * 8 {
            let mut b = bytes.clone();
            b[bit / 8] ^= 1 << (bit % 8);
            assert!(SnapshotMeta::decode(&b).is_err(), "bit {bit}");
        }
        // Snapshots saved before names were recorded say only "custom".
        meta.resolve = ResolveTag::Custom(None);
        let back = SnapshotMeta::decode(&meta.encode()).unwrap();
        assert_eq!(back.resolve, ResolveTag::Custom(None));
    }

    #[test]
    fn an_authenticated_table_is_an_extension() {
        let mut meta = sample();
        meta.config.auth = Some(AuthConfig {
            hash: HashKind::Blake3,
            retained_bytes: 1 << 20,
        });
        // An internal root node: kind 1 and its hash.
        let mut root = vec![1u8];
        root.extend_from_slice(&[0xAB; 32]);
        meta.auth = Some(AuthMeta { version: 42, root });
        let bytes = meta.encode();
        let golden = crate::golden::check_golden("snapshot-metadata-v2-auth.bin", &bytes);
        let back = SnapshotMeta::decode(&golden).unwrap();
        assert_eq!(back.auth, meta.auth);
        assert_eq!(back.config.auth, meta.config.auth);
        assert_eq!(back.encode(), bytes);
        for bit in 0..bytes.len() * 8 {
            let mut b = bytes.clone();
            b[bit / 8] ^= 1 << (bit % 8);
            assert!(SnapshotMeta::decode(&b).is_err(), "bit {bit}");
        }
    }

    #[test]
    fn a_last_level_bloom_is_an_extension() {
        for (alloc, golden_name) in [
            (
                BloomAlloc::None,
                Some("snapshot-metadata-v2-last-level-bloom.bin"),
            ),
            (BloomAlloc::BitsPerEntry(5.0), None),
            (BloomAlloc::TargetFpr(0.01), None),
        ] {
            let mut meta = sample();
            meta.config.last_level_bloom = Some(alloc);
            let bytes = meta.encode();
            let bytes = match golden_name {
                Some(name) => crate::golden::check_golden(name, &bytes),
                None => bytes,
            };
            let back = SnapshotMeta::decode(&bytes).unwrap();
            assert_eq!(back.config.last_level_bloom, Some(alloc));
            assert_eq!(back.encode(), bytes);
            for bit in 0..bytes.len() * 8 {
                let mut b = bytes.clone();
                b[bit / 8] ^= 1 << (bit % 8);
                assert!(SnapshotMeta::decode(&b).is_err(), "bit {bit}");
            }
        }
        // A value out of range is refused even behind a valid checksum.
        let mut meta = sample();
        meta.config.last_level_bloom = Some(BloomAlloc::BitsPerEntry(0.5));
        assert!(SnapshotMeta::decode(&meta.encode()).is_err());
        // Without the extension the deepest level gets `bloom` like the others.
        let back = SnapshotMeta::decode(&sample().encode()).unwrap();
        assert_eq!(back.config.last_level_bloom, None);
    }

    /// `BloomAlloc::LevelScaledFpr` (allocation code 3) round-trips, pinned by a golden file;
    /// a rate out of range is refused behind a valid checksum.
    #[test]
    fn a_level_scaled_bloom_round_trips() {
        let mut meta = sample();
        meta.config.bloom = BloomAlloc::LevelScaledFpr(5e-3);
        meta.config.last_level_bloom = Some(BloomAlloc::None);
        let bytes = crate::golden::check_golden(
            "snapshot-metadata-v2-level-scaled-bloom.bin",
            &meta.encode(),
        );
        let back = SnapshotMeta::decode(&bytes).unwrap();
        assert_eq!(back.config.bloom, BloomAlloc::LevelScaledFpr(5e-3));
        assert_eq!(back.encode(), bytes);
        meta.config.bloom = BloomAlloc::LevelScaledFpr(0.9);
        assert!(SnapshotMeta::decode(&meta.encode()).is_err());
    }

    proptest::proptest! {
        #[test]
        fn decoder_is_total(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..400)) {
            let _ = SnapshotMeta::decode(&bytes);
            // Also behind a valid magic, version and checksum, so the body parser runs.
            let mut framed = MAGIC.to_vec();
            framed.extend_from_slice(&VERSION.to_le_bytes());
            framed.extend_from_slice(&bytes);
            let crc = crc32c::crc32c(&framed);
            framed.extend_from_slice(&crc.to_le_bytes());
            let _ = SnapshotMeta::decode(&framed);
        }
    }
}
