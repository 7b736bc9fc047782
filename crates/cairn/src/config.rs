//! Table configuration and its validation.
//!
//! Owns: [`TableConfig`] and the enums it is made of, and the rules that reject an invalid config
//! with [`Error::InvalidConfig`]. May call: `bloom` (filter sizing), `index` (the index kinds).
//! Must never touch: files, runs or tables (pure data).

use std::fmt;
use std::sync::Arc;

use crate::bloom::BloomParams;
use crate::error::{Error, Result};
pub use crate::index::IndexType;
pub use cairn_proof::HashKind;

/// The size ratio of the merge policy (lazy levelling, T = 4).
pub const SIZE_RATIO: u64 = 4;

/// Largest accepted write-buffer size in entries.
pub const WRITE_BUFFER_ENTRIES_MAX: usize = 1 << 26;

/// When merge work is done.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum MergeSchedule {
    /// Merge work is spread over updates with credits, so that no update does more than a fixed
    /// bound of merge steps (derived in `docs/design.md`, "Merges").
    Incremental,
    /// A merge is done completely as soon as it is created (simple, but an update may pay for a
    /// merge of the whole table).
    OneShot,
}

/// How much memory the Bloom filters get.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub enum BloomAlloc {
    /// A fixed number of bits per entry (1.0 ..= 64.0).
    BitsPerEntry(f64),
    /// The bits per entry needed for this false-positive rate (1e-6 ..= 0.5).
    TargetFpr(f64),
    /// No filter: every lookup that reaches the run reads a page of it. Meant for the deepest
    /// level ([`TableConfig::last_level_bloom`]) of a table whose lookups are for keys it holds,
    /// where that level's filter answers "maybe" for nearly every key that reaches it anyway.
    None,
    /// A false-positive rate per level, proportional to the level's run size (Monkey; Dayan,
    /// Athanassoulis and Idreos, SIGMOD 2017): runs on the deepest level this allocation covers
    /// get this rate (1e-6 ..= 0.5), and each level above it a rate [`SIZE_RATIO`] times lower
    /// (at least 1e-6). The deepest level it covers is the table's last level, or the one above
    /// it when [`TableConfig::last_level_bloom`] is set; the depth is the table's when the run
    /// is written. A lookup of a key on the deepest levels probes the filters of every run
    /// above, so what it pays in false reads is about the sum of their rates; since most entries
    /// sit on the deepest levels, the same sum costs fewer bits per entry when the deep levels
    /// get the higher rates. Measured on the UTxO benchmark at 10M entries (four filtered
    /// levels, the deepest unfiltered): `LevelScaledFpr(5e-3)` gives 11.55, 14.95, 18.66 and
    /// 22.71 bits per entry from the deepest filtered level up, where `TargetFpr(1e-3)` gives
    /// 15.5 on all; the runs read 0.4% more bytes and peak RSS fell by 2.1 MiB. Not allowed
    /// as [`TableConfig::last_level_bloom`].
    LevelScaledFpr(f64),
}

/// Which runs are read through the operating system's page cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DiskCachePolicy {
    /// Every run is read through the page cache.
    All,
    /// Runs on levels `1..=l` are cached; deeper levels are read with `O_DIRECT`.
    LevelsUpTo(u32),
    /// No run is cached: lookups read with `O_DIRECT` into aligned buffers.
    None,
}

impl DiskCachePolicy {
    /// Whether runs created at `level` (1-based) use the page cache.
    pub fn caches_level(self, level: usize) -> bool {
        match self {
            DiskCachePolicy::All => true,
            DiskCachePolicy::LevelsUpTo(l) => level <= l as usize,
            DiskCachePolicy::None => false,
        }
    }
}

/// A user-supplied resolve function: `resolve(newer, older)` returns the combined value.
pub type ResolveFn = dyn Fn(&[u8], &[u8]) -> Vec<u8> + Send + Sync;

/// Longest name of a custom resolve function, in bytes.
pub const RESOLVE_NAME_BYTES_MAX: usize = 255;

/// A user-supplied resolve function with the name that identifies it (see [`Resolve::custom`]).
#[derive(Clone)]
pub struct CustomResolve {
    name: Arc<str>,
    f: Arc<ResolveFn>,
}

impl CustomResolve {
    /// The function's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// How an upsert combines a new value with the value already stored for its key.
///
/// The function must be associative (`r(a, r(b, c)) == r(r(a, b), c)`) because merges combine
/// entries in whatever grouping the levels happen to hold them in. It sees serialised bytes.
///
/// Two resolve functions are the same when they are the same built-in or custom functions of
/// the same name: tables can be unioned only if their resolve functions are the same, and a
/// snapshot saved with a custom function opens only with a function of the same name.
#[derive(Clone)]
pub enum Resolve {
    /// The newer value replaces the older one: an upsert behaves like an insert.
    KeepNewest,
    /// Both values are little-endian `u64`s and are added (wrapping). Upserts on such a table
    /// must carry exactly 8 bytes ([`crate::Error::InvalidUpdate`] otherwise); if an older
    /// inserted value is not 8 bytes long, the newer value replaces it.
    AddU64Le,
    /// A user-supplied function, identified by its name.
    Custom(CustomResolve),
}

impl PartialEq for Resolve {
    /// Built-ins are equal to themselves; custom functions are equal when their names are.
    fn eq(&self, other: &Resolve) -> bool {
        match (self, other) {
            (Resolve::KeepNewest, Resolve::KeepNewest) | (Resolve::AddU64Le, Resolve::AddU64Le) => {
                true
            }
            (Resolve::Custom(a), Resolve::Custom(b)) => a.name == b.name,
            _ => false,
        }
    }
}

impl Eq for Resolve {}

impl Resolve {
    /// Wraps a user function under `name`, its identity: give the same name only to functions
    /// that compute the same thing (a new name for a changed function), because a snapshot
    /// records the name and unions compare names. A name longer than
    /// [`RESOLVE_NAME_BYTES_MAX`] bytes is refused when a table is created
    /// ([`crate::Error::InvalidConfig`]).
    ///
    /// The function runs while the engine holds a table's, a merge's, a union's or a cursor's
    /// lock: it must not call back into Cairn (that would deadlock). If it panics, the panic
    /// reaches the caller and the table it was working on is broken (see
    /// [`crate::Error::TableBroken`]).
    ///
    /// ```
    /// use cairn::Resolve;
    /// let max = Resolve::custom("max-v1", |newer, older| newer.max(older).to_vec());
    /// assert_eq!(max.apply(b"a", b"b"), b"b");
    /// assert_eq!(max, Resolve::custom("max-v1", |n, _| n.to_vec()));
    /// ```
    pub fn custom(
        name: impl Into<String>,
        f: impl Fn(&[u8], &[u8]) -> Vec<u8> + Send + Sync + 'static,
    ) -> Resolve {
        Resolve::Custom(CustomResolve {
            name: Arc::from(name.into()),
            f: Arc::new(f),
        })
    }

    /// Combines `newer` with `older`.
    pub fn apply(&self, newer: &[u8], older: &[u8]) -> Vec<u8> {
        match self {
            Resolve::KeepNewest => newer.to_vec(),
            Resolve::AddU64Le => match (<[u8; 8]>::try_from(newer), <[u8; 8]>::try_from(older)) {
                (Ok(n), Ok(o)) => u64::from_le_bytes(n)
                    .wrapping_add(u64::from_le_bytes(o))
                    .to_le_bytes()
                    .to_vec(),
                _ => newer.to_vec(),
            },
            Resolve::Custom(custom) => (custom.f)(newer, older),
        }
    }
}

impl fmt::Debug for Resolve {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Resolve::KeepNewest => write!(f, "KeepNewest"),
            Resolve::AddU64Le => write!(f, "AddU64Le"),
            Resolve::Custom(custom) => write!(f, "Custom({:?})", custom.name),
        }
    }
}

/// The configuration of one table.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct TableConfig {
    /// Entries the write buffer holds before it is written out as a run (`B`). 1 ..= 2^26.
    /// A full buffer is written out over the next `B / 2` updates while a fresh one fills, so
    /// up to two buffers' entries are held in memory.
    pub write_buffer_entries: usize,
    /// Incremental (bounded work per update) or one-shot merges.
    pub merge_schedule: MergeSchedule,
    /// Bloom filter memory.
    pub bloom: BloomAlloc,
    /// Bloom filter memory of the runs that merges into the deepest level write, when it should
    /// differ from `bloom`; `None` (the default) gives them `bloom` too.
    ///
    /// The deepest level holds most of the entries (about `(T-1)/T` of them), so its filters are
    /// most of the filter memory, and while a merge into it runs, its output's filter (sized for
    /// the whole output) is held beside its inputs' filters: at `10^8` entries and FPR `1e-3`
    /// about 185 MiB of filters plus up to 160 MiB for the output being built. Yet a lookup of a
    /// key the table holds only reaches that level when the key is there, where any filter says
    /// "maybe": the filter pays off only for keys the table does not hold. A table whose lookups
    /// are mostly hits (a UTxO set, whose lookups are of outputs being spent) can give that
    /// level [`BloomAlloc::None`] (RocksDB's `optimize_filters_for_hits` makes the same trade):
    /// filter memory falls to that of the upper levels, merges into the deepest level set no
    /// filter bits, and a lookup of an absent key costs one more page read (instead of one per
    /// `1/fpr`). Runs keep the filter they were written with: changing this on a snapshot's
    /// table affects only merges that start afterwards.
    pub last_level_bloom: Option<BloomAlloc>,
    /// Fence-pointer index kind: compact for uniformly distributed keys, ordinary for any keys.
    pub index: IndexType,
    /// Which levels are read through the page cache.
    pub disk_cache: DiskCachePolicy,
    /// Merge work is done in batches of at least this many steps (1 ..= 2^24), trading latency
    /// smoothness for fewer, larger batches. Default 1,000 (lsm-tree's default is the write
    /// buffer size; a smaller batch keeps the per-update worst case, which grows with it, low).
    pub merge_batch_size: usize,
    /// How upserts combine values.
    pub resolve: Resolve,
    /// Authentication: `Some` keeps a Merkle trie over the table's contents, so that it has a
    /// state root and answers proofs (see [`AuthConfig`]); `None` (the default) costs nothing.
    pub auth: Option<AuthConfig>,
    /// Cuts every run the table writes into parts (files) of at most this many entries
    /// (1 ..= 2^40); `None` (the default) writes each run as one file.
    ///
    /// Merges link an input's part that overlaps no other input's part into their output
    /// instead of rewriting it, whatever this setting. For data written in key order
    /// ([`crate::BlockKeys`]), a run then overlaps older runs only where its first keys meet
    /// their last ones (a block whose entries two write buffers share), and with parts a merge
    /// rewrites only the few parts there instead of whole runs: set it to a fraction of the
    /// write buffer (an eighth, say) for such tables. For random keys every part overlaps and
    /// parts only add files: leave it `None`. Costs: a snapshot links the files of every part
    /// (O(parts) file operations rather than O(levels)); a lookup finds the part of a key by a
    /// binary search over the run's parts.
    pub part_entries: Option<u64>,
}

/// How an authenticated table keeps its Merkle trie (`docs/format/trie.md`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct AuthConfig {
    /// The hash function of the trie, its root and its proofs. Default SHA-256.
    pub hash: HashKind,
    /// Memory for the top levels of the trie, kept in memory so that a commit or a proof reads
    /// only the pages below them. Whole page levels are kept while they fit: level `l` holds up
    /// to `64^l` pages of about 4.2 KB, so the default, 20 MiB, keeps three levels (18 trie
    /// levels, about 17 MiB once a table has a few hundred thousand keys), which leaves two page
    /// reads per key to a commit at 10⁸ keys. At least the first level is always kept, and at
    /// most four.
    pub retained_bytes: usize,
    /// Trie levels in the top page, 1 to 6 (default 6); every other page holds six, so the
    /// page levels begin at depths 0, `t`, `t + 6`, `t + 12`, … Fixed when the table is
    /// created (a table opened from disk keeps its own). Choose it with
    /// [`AuthConfig::retained_bytes`] so that the first page level below the retained ones
    /// begins where a subtree holds about 16 keys (depth `log₂ n − 4` for `n` keys): each of
    /// its pages then fits one 4 KiB block and a commit or proof reads about one page per key
    /// (two, with the first of them two blocks, when that level begins at `log₂ n − 7`). The
    /// retained levels then hold about `2^(depth + 1)` nodes (64 MiB per 2^20 of them). For
    /// example at 2^25 keys: 3, with 160 MiB retained (four levels, down to depth 21);
    /// the default, 6 with 20 MiB, stops at depth 18.
    pub top_page_depth: u8,
}

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig {
            hash: HashKind::Sha256,
            retained_bytes: 20 << 20,
            top_page_depth: 6,
        }
    }
}

impl AuthConfig {
    /// Page levels kept in memory under [`AuthConfig::retained_bytes`] (1 to 4), counting
    /// full pages: one top page, then `2^t · 64^(l−1)` pages at level `l` for a top page of
    /// `t` trie levels.
    pub fn retained_levels(&self) -> usize {
        let top = u32::from(self.top_page_depth.clamp(1, 6));
        let mut total = 0usize;
        let mut levels = 0usize;
        while levels < 4 {
            let pages = match levels {
                0 => 1,
                l => (1usize << top).saturating_mul(64usize.pow(l as u32 - 1)),
            };
            let level_bytes = pages.saturating_mul(PAGE_MEMORY_BYTES);
            total = total.saturating_add(level_bytes);
            if total > self.retained_bytes {
                break;
            }
            levels += 1;
        }
        levels.max(1)
    }
}

/// Memory of one full trie page in the retained levels, for [`AuthConfig::retained_levels`].
const PAGE_MEMORY_BYTES: usize = 4_200;

setters!(TableConfig {
    write_buffer_entries: usize,
    merge_schedule: MergeSchedule,
    bloom: BloomAlloc,
    last_level_bloom: Option<BloomAlloc>,
    index: IndexType,
    disk_cache: DiskCachePolicy,
    merge_batch_size: usize,
    resolve: Resolve,
    auth: Option<AuthConfig>,
    part_entries: Option<u64>,
});

setters!(AuthConfig {
    hash: HashKind,
    retained_bytes: usize,
    top_page_depth: u8,
});

impl Default for TableConfig {
    fn default() -> Self {
        TableConfig {
            write_buffer_entries: 20_000,
            merge_schedule: MergeSchedule::Incremental,
            bloom: BloomAlloc::TargetFpr(1e-3),
            last_level_bloom: None,
            index: IndexType::Ordinary,
            disk_cache: DiskCachePolicy::All,
            merge_batch_size: 1_000,
            resolve: Resolve::KeepNewest,
            auth: None,
            part_entries: None,
        }
    }
}

impl TableConfig {
    /// Checks every field: `Ok` exactly when [`crate::Session::new_table`] accepts the config.
    ///
    /// Errors: [`Error::InvalidConfig`] naming the first field out of range.
    pub fn validate(&self) -> Result<()> {
        self.bloom_params()?;
        self.bloom_above_params()?;
        self.last_level_bloom_params().map(drop)
    }

    /// The Bloom parameters of runs written by merges into the deepest level.
    pub(crate) fn last_level_bloom_params(&self) -> Result<BloomParams> {
        match self.last_level_bloom {
            Some(BloomAlloc::LevelScaledFpr(_)) => Err(Error::InvalidConfig(
                "last_level_bloom cannot be LevelScaledFpr (the deepest level has one rate)".into(),
            )),
            Some(alloc) => alloc_params(alloc),
            None => alloc_params(self.bloom),
        }
    }

    /// Under [`BloomAlloc::LevelScaledFpr`], the Bloom parameters of runs 1, 2, ...,
    /// [`SCALED_LEVELS_MAX`] levels above the deepest level it covers; empty otherwise.
    pub(crate) fn bloom_above_params(&self) -> Result<Vec<BloomParams>> {
        let BloomAlloc::LevelScaledFpr(fpr) = self.bloom else {
            return Ok(Vec::new());
        };
        let mut rate = fpr;
        (1..=SCALED_LEVELS_MAX)
            .map(|_| {
                rate = (rate / SIZE_RATIO as f64).max(crate::bloom::FPR_MIN);
                BloomParams::for_fpr(rate)
            })
            .collect()
    }

    /// Checks every field, returning the Bloom parameters it implies.
    pub(crate) fn bloom_params(&self) -> Result<BloomParams> {
        if let Resolve::Custom(custom) = &self.resolve {
            if custom.name.len() > RESOLVE_NAME_BYTES_MAX {
                return Err(Error::InvalidConfig(format!(
                    "a custom resolve function's name may be at most {RESOLVE_NAME_BYTES_MAX} \
                     bytes, got {}",
                    custom.name.len()
                )));
            }
        }
        if self.write_buffer_entries == 0 || self.write_buffer_entries > WRITE_BUFFER_ENTRIES_MAX {
            return Err(Error::InvalidConfig(format!(
                "write_buffer_entries must be in 1..={WRITE_BUFFER_ENTRIES_MAX}, got {}",
                self.write_buffer_entries
            )));
        }
        if self.part_entries.is_some_and(|n| n == 0 || n > 1 << 40) {
            return Err(Error::InvalidConfig(format!(
                "part_entries must be in 1..=2^40, got {:?}",
                self.part_entries
            )));
        }
        if self.merge_batch_size == 0 || self.merge_batch_size > (1 << 24) {
            return Err(Error::InvalidConfig(format!(
                "merge_batch_size must be in 1..=2^24, got {}",
                self.merge_batch_size
            )));
        }
        if let Some(auth) = &self.auth {
            if !(1..=6).contains(&auth.top_page_depth) {
                return Err(Error::InvalidConfig(format!(
                    "auth.top_page_depth must be in 1..=6, got {}",
                    auth.top_page_depth
                )));
            }
        }
        if let DiskCachePolicy::LevelsUpTo(0) = self.disk_cache {
            return Err(Error::InvalidConfig(
                "DiskCachePolicy::LevelsUpTo needs at least one level; use None instead".into(),
            ));
        }
        alloc_params(self.bloom)
    }
}

/// The filter sizing an allocation asks for.
fn alloc_params(alloc: BloomAlloc) -> Result<BloomParams> {
    match alloc {
        BloomAlloc::BitsPerEntry(bits) => BloomParams::for_bits_per_entry(bits),
        BloomAlloc::TargetFpr(fpr) | BloomAlloc::LevelScaledFpr(fpr) => BloomParams::for_fpr(fpr),
        BloomAlloc::None => Ok(BloomParams::NONE),
    }
}

/// Levels above the deepest one that [`BloomAlloc::LevelScaledFpr`] scales the rate for; runs
/// further up get the rate of this many levels up.
pub(crate) const SCALED_LEVELS_MAX: usize = 8;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_config_is_valid() {
        TableConfig::default().validate().unwrap();
    }

    #[test]
    fn invalid_configs_are_rejected() {
        let bad = [
            TableConfig {
                write_buffer_entries: 0,
                ..TableConfig::default()
            },
            TableConfig {
                merge_batch_size: 0,
                ..TableConfig::default()
            },
            TableConfig {
                bloom: BloomAlloc::TargetFpr(0.0),
                ..TableConfig::default()
            },
            TableConfig {
                bloom: BloomAlloc::TargetFpr(f64::NAN),
                ..TableConfig::default()
            },
            TableConfig {
                bloom: BloomAlloc::BitsPerEntry(-1.0),
                ..TableConfig::default()
            },
            TableConfig {
                disk_cache: DiskCachePolicy::LevelsUpTo(0),
                ..TableConfig::default()
            },
        ];
        for config in bad {
            assert!(
                matches!(config.validate(), Err(Error::InvalidConfig(_))),
                "{config:?}"
            );
        }
    }

    #[test]
    fn resolve_functions() {
        let add = Resolve::AddU64Le;
        assert_eq!(
            add.apply(&5u64.to_le_bytes(), &7u64.to_le_bytes()),
            12u64.to_le_bytes()
        );
        assert_eq!(add.apply(b"short", &7u64.to_le_bytes()), b"short");
        assert_eq!(Resolve::KeepNewest.apply(b"n", b"o"), b"n");
        let concat = Resolve::custom("concat", |n, o| [n, o].concat());
        assert_eq!(concat.apply(b"n", b"o"), b"no");
    }
}
