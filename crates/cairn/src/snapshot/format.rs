//! The snapshot metadata file (`docs/format/snapshot.md`): what a snapshot holds, encoded and
//! checked; decoding is total (any bytes give a value or an error).

use crate::config::{
    AuthConfig, BloomAlloc, DiskCachePolicy, HashKind, IndexType, MergeSchedule, Resolve,
    TableConfig, RESOLVE_NAME_BYTES_MAX,
};
use crate::error::{Error, Result};
use crate::schedule::{IncomingShape, LevelShape, ShapeProgress};

pub(crate) const MAGIC: &[u8; 8] = b"CRNSNAPM";
pub(crate) const VERSION: u32 = 3;
/// The version written when every sorted run is a single part: version 3 without its table of
/// sorted runs, readable by builds that predate parts.
pub(crate) const VERSION_SINGLE_PARTS: u32 = 2;
/// Longest snapshot label, in bytes.
pub const SNAPSHOT_LABEL_BYTES_MAX: usize = 4096;
pub(super) const LEVELS_MAX: u32 = 64;
pub(super) const RUNS_MAX: u32 = 1 << 16;
/// Most extension sections a snapshot's metadata may hold.
const EXTENSIONS_MAX: u32 = 16;

/// Which resolve function a snapshot was saved with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ResolveTag {
    KeepNewest,
    AddU64Le,
    /// A custom function, with its name (`None` in snapshots saved before names were recorded).
    Custom(Option<String>),
}

impl ResolveTag {
    pub(super) fn of(resolve: &Resolve) -> ResolveTag {
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
/// Extension: the progress of merges in progress (`docs/format/snapshot.md`); a build without
/// it refuses the snapshot (an unknown extension) rather than restart those merges silently.
const EXTENSION_MERGE_PROGRESS: u32 = 5;
/// Extension: an authenticated table's top page depth (`AuthConfig::top_page_depth`, u8, 1 to
/// 5), when it is not the default 6 (with which every trie was made before it existed).
const EXTENSION_AUTH_TOP_PAGE: u32 = 6;
/// Most bytes of the merge-progress extension: a record per level, each with a key.
const MERGE_PROGRESS_BYTES_MAX: u32 = LEVELS_MAX * (24 + crate::page::KEY_SIZE_MAX as u32);

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
pub(super) const UNION_DEPTH_MAX: usize = 16;

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
        self.encode_with_extra(Vec::new())
    }

    /// [`SnapshotMeta::encode`] with `extra` extensions after the table's own (tests forge
    /// metadata with them).
    fn encode_with_extra(&self, extra: Vec<(u32, Vec<u8>)>) -> Vec<u8> {
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
                    progress: _,
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
            if config.top_page_depth != 6 {
                extensions.push((EXTENSION_AUTH_TOP_PAGE, vec![config.top_page_depth]));
            }
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
        let progress: Vec<(usize, &ShapeProgress)> = (self.levels.iter().enumerate())
            .filter_map(|(i, level)| match &level.incoming {
                IncomingShape::Merging {
                    progress: Some(p), ..
                } => Some((i, p)),
                _ => None,
            })
            .collect();
        if !progress.is_empty() {
            let mut b = Writer(Vec::new());
            b.u32(progress.len() as u32);
            for (level, p) in progress {
                b.u32(level as u32);
                match p.output {
                    Some(i) => {
                        b.u8(1);
                        b.run(sorted(i));
                    }
                    None => b.u8(0),
                }
                b.u64(p.steps_done);
                match &p.next_key {
                    Some(key) => {
                        b.u8(1);
                        b.u32(key.len() as u32);
                        b.0.extend_from_slice(key);
                    }
                    None => b.u8(0),
                }
            }
            extensions.push((EXTENSION_MERGE_PROGRESS, b.0));
        }
        extensions.extend(extra);
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
                        progress: None,
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
        let mut top_page_depth = None;
        let extensions = r.count(EXTENSIONS_MAX)?;
        let mut progress_seen = false;
        for _ in 0..extensions {
            let kind = r.u32()?;
            let len = r.count(if kind == EXTENSION_MERGE_PROGRESS {
                MERGE_PROGRESS_BYTES_MAX
            } else {
                RESOLVE_NAME_BYTES_MAX as u32
            })?;
            let bytes = r.take(len)?;
            if kind == EXTENSION_MERGE_PROGRESS {
                if progress_seen {
                    return Err(bad("two merge-progress extensions"));
                }
                progress_seen = true;
                decode_progress(bytes, &mut levels, sorted_count)?;
                continue;
            }
            if kind == EXTENSION_AUTH {
                if auth.is_some() {
                    return Err(bad("two auth extensions"));
                }
                let (config_auth, meta) = decode_auth(bytes)?;
                config.auth = Some(config_auth);
                auth = Some(meta);
                continue;
            }
            if kind == EXTENSION_AUTH_TOP_PAGE {
                if top_page_depth.is_some() {
                    return Err(bad("two top-page extensions"));
                }
                match bytes {
                    [depth @ 1..=5] => top_page_depth = Some(*depth),
                    _ => return Err(bad("top-page extension is not one byte in 1..=5")),
                }
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
        if let Some(depth) = top_page_depth {
            match &mut config.auth {
                Some(auth) => auth.top_page_depth = depth,
                None => return Err(bad("a top-page extension without an auth extension")),
            }
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
                IncomingShape::Merging {
                    inputs, progress, ..
                } => {
                    inputs.iter().for_each(|&i| set(i));
                    progress.iter().filter_map(|p| p.output).for_each(&mut set);
                }
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
        // `output`: a merge's output so far, whose parts may be its inputs' (linked), marked
        // after them.
        let mut mark_named = |s: usize, shared: bool, output: bool| -> Result<()> {
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
            parts
                .iter()
                .try_for_each(|&i| mark_run(i, shared || output))
        };
        for level in &self.levels {
            match &level.incoming {
                IncomingShape::Single(i) => mark_named(*i, false, false)?,
                IncomingShape::Merging {
                    inputs, progress, ..
                } => {
                    inputs
                        .iter()
                        .try_for_each(|&i| mark_named(i, false, false))?;
                    // The output so far shares the parts its merge linked with the inputs.
                    if let Some(i) = progress.as_ref().and_then(|p| p.output) {
                        mark_named(i, false, true)?;
                    }
                }
                IncomingShape::Empty => {}
            }
            level
                .resident
                .iter()
                .try_for_each(|&i| mark_named(i, false, false))?;
        }
        let mut stack: Vec<&UnionShape> = self.union.iter().collect();
        while let Some(union) = stack.pop() {
            for view in &union.inputs {
                view.runs
                    .iter()
                    .try_for_each(|&i| mark_named(i, true, false))?;
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

/// Decodes the merge-progress extension into `levels` (each record names a level whose
/// incoming run is a merge without progress yet). Total: every malformed body is `Corrupt`.
fn decode_progress(bytes: &[u8], levels: &mut [LevelShape], sorted_count: usize) -> Result<()> {
    let bad = |what: &str| Error::corrupt("snapshot metadata", format!("merge progress: {what}"));
    let mut r = Reader { bytes };
    let n = r.count(LEVELS_MAX)?;
    for _ in 0..n {
        let level = r.u32()? as usize;
        let output = match r.u8()? {
            0 => None,
            1 => Some(r.run(sorted_count)?),
            _ => return Err(bad("bad output flag")),
        };
        let steps_done = r.u64()?;
        let next_key = match r.u8()? {
            0 => None,
            1 => {
                let len = r.count(crate::page::KEY_SIZE_MAX as u32)?;
                Some(r.take(len)?.to_vec())
            }
            _ => return Err(bad("bad key flag")),
        };
        match levels.get_mut(level).map(|l| &mut l.incoming) {
            Some(IncomingShape::Merging { progress, .. }) if progress.is_none() => {
                *progress = Some(ShapeProgress {
                    output,
                    next_key,
                    steps_done,
                });
            }
            _ => return Err(bad("a record for a level without a merge (or two)")),
        }
    }
    if !r.bytes.is_empty() {
        return Err(bad("trailing bytes"));
    }
    Ok(())
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
            top_page_depth: 6,
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

#[cfg(test)]
mod tests {
    use super::super::validate_name;
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
                        progress: None,
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
            progress: None,
        };
        let union = meta.union.as_mut().unwrap();
        union.inputs[0].runs = vec![4, 2];
        union.inputs[1].union.as_mut().unwrap().inputs[0].runs = vec![5];
        meta
    }

    /// A merge's progress is an extension: its output so far (here a part linked from an
    /// input, 4, and a part of its own, 9), steps and next key.
    #[test]
    fn merge_progress_is_an_extension_golden_and_total() {
        let mut meta = sample_with_parts();
        meta.run_count = 10;
        meta.run_sums.push(0x9999_9999);
        meta.sorted.push(vec![4, 9]);
        let IncomingShape::Merging { progress, .. } = &mut meta.levels[1].incoming else {
            unreachable!()
        };
        *progress = Some(ShapeProgress {
            output: Some(6),
            next_key: Some(b"utxo-4711".to_vec()),
            steps_done: 99,
        });
        let bytes = meta.encode();
        let golden = crate::golden::check_golden("snapshot-metadata-v3-progress.bin", &bytes);
        let back = SnapshotMeta::decode(&golden).unwrap();
        assert_eq!(back.levels, meta.levels);
        assert_eq!(back.encode(), bytes);
        assert_every_damage_refused(&bytes);
        // Without a key (every entry consumed) or an output (nothing written) too.
        for (output, next_key) in [(Some(6), None), (None, Some(b"k".to_vec()))] {
            let mut m = meta.clone();
            if output.is_none() {
                m.sorted.pop();
                m.run_count = 9;
                m.run_sums.pop();
            }
            let IncomingShape::Merging { progress, .. } = &mut m.levels[1].incoming else {
                unreachable!()
            };
            *progress = Some(ShapeProgress {
                output,
                next_key,
                steps_done: 3,
            });
            let back = SnapshotMeta::decode(&m.encode()).unwrap();
            assert_eq!(back.levels, m.levels);
        }
        // The output's own part used elsewhere too is refused.
        let mut twice = meta.clone();
        twice.sorted[6] = vec![4, 8];
        assert!(SnapshotMeta::decode(&twice.encode()).is_err());
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

    /// The sample's metadata as an authenticated table's, of `auth`, at `version`, its root an
    /// internal node (kind 1) whose hash is `byte` repeated.
    fn authenticated(auth: AuthConfig, version: u64, byte: u8) -> SnapshotMeta {
        let mut meta = sample();
        meta.config.auth = Some(auth);
        let mut root = vec![1u8];
        root.extend_from_slice(&[byte; 32]);
        meta.auth = Some(AuthMeta { version, root });
        meta
    }

    /// `meta`'s bytes match golden file `name`, read back as `meta`, and refuse every bit flip.
    fn pinned_and_checked(meta: &SnapshotMeta, name: &str) -> Vec<u8> {
        let bytes = meta.encode();
        let golden = crate::golden::check_golden(name, &bytes);
        let back = SnapshotMeta::decode(&golden).unwrap();
        assert_eq!(back.auth, meta.auth);
        assert_eq!(back.config.auth, meta.config.auth);
        assert_eq!(back.encode(), bytes);
        for bit in 0..bytes.len() * 8 {
            let mut b = bytes.clone();
            b[bit / 8] ^= 1 << (bit % 8);
            assert!(SnapshotMeta::decode(&b).is_err(), "bit {bit}");
        }
        bytes
    }

    #[test]
    fn an_authenticated_table_is_an_extension() {
        let auth = AuthConfig {
            hash: HashKind::Blake3,
            retained_bytes: 1 << 20,
            top_page_depth: 6,
        };
        pinned_and_checked(
            &authenticated(auth, 42, 0xAB),
            "snapshot-metadata-v2-auth.bin",
        );
    }

    /// A top page of fewer than six trie levels is an extension of its own (type 6), read
    /// back; one of six is not written (every older snapshot has six), and the extension is
    /// refused without the auth extension, twice, or out of 1..=5.
    #[test]
    fn a_top_page_depth_is_an_extension() {
        let auth = AuthConfig {
            hash: HashKind::Sha256,
            retained_bytes: 160 << 20,
            top_page_depth: 3,
        };
        let meta = authenticated(auth, 7, 0xCD);
        let bytes = pinned_and_checked(&meta, "snapshot-metadata-v3-top-page.bin");
        // The default depth writes no extension: the bytes of before.
        let mut six = meta.clone();
        six.config.auth.as_mut().unwrap().top_page_depth = 6;
        assert!(six.encode().len() < bytes.len());
        assert_eq!(
            SnapshotMeta::decode(&six.encode()).unwrap().config.auth,
            six.config.auth
        );
        // Depths outside 1..=5, the extension twice or without auth: refused (the checksum
        // recomputed, so that only the extension is wrong).
        let with_extensions =
            |meta: &SnapshotMeta, extra: &[(u32, Vec<u8>)]| meta.encode_with_extra(extra.to_vec());
        for bad in [vec![0u8], vec![6], vec![3, 3], vec![]] {
            let b = with_extensions(&six, &[(EXTENSION_AUTH_TOP_PAGE, bad.clone())]);
            assert!(SnapshotMeta::decode(&b).is_err(), "{bad:?}");
        }
        let b = with_extensions(&meta, &[(EXTENSION_AUTH_TOP_PAGE, vec![2])]);
        assert!(SnapshotMeta::decode(&b).is_err(), "twice");
        let plain = sample();
        let b = with_extensions(&plain, &[(EXTENSION_AUTH_TOP_PAGE, vec![2])]);
        assert!(SnapshotMeta::decode(&b).is_err(), "without auth");
        let b = with_extensions(&six, &[(EXTENSION_AUTH_TOP_PAGE, vec![2])]);
        assert_eq!(
            SnapshotMeta::decode(&b)
                .unwrap()
                .config
                .auth
                .unwrap()
                .top_page_depth,
            2
        );
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
