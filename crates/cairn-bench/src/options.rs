//! The choices the command line offers that the modules below it act on: which engine
//! ([`EngineKind`]), which `chain` configuration ([`ChainConfig`]), which block I/O backend
//! ([`IoArg`]) and which runs are read through the page cache ([`DiskCacheArg`]).
//!
//! Owns: these value enums, their names in records and whether this build has them. Below both
//! [`crate::cli`], which offers them, and the modules that act on them ([`crate::engines`] opens
//! an [`EngineKind`], [`crate::chain`] lays out a [`ChainConfig`]), so that neither imports the
//! other. Must never touch: an engine or a file.

use clap::ValueEnum;

use crate::failure::Failure;

/// The engines `--engine` can name (a peer is available only when built with its feature).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum EngineKind {
    /// Cairn.
    Cairn,
    /// RocksDB (feature `rocksdb`).
    Rocksdb,
    /// LMDB through heed (feature `lmdb`).
    Lmdb,
    /// fjall (feature `fjall`).
    Fjall,
}

impl EngineKind {
    /// The name in reports.
    pub fn name(self) -> &'static str {
        match self {
            EngineKind::Cairn => "cairn",
            EngineKind::Rocksdb => "rocksdb",
            EngineKind::Lmdb => "lmdb",
            EngineKind::Fjall => "fjall",
        }
    }

    /// Every engine, in report order.
    pub fn all() -> [EngineKind; 4] {
        [
            EngineKind::Cairn,
            EngineKind::Rocksdb,
            EngineKind::Lmdb,
            EngineKind::Fjall,
        ]
    }

    /// Whether this binary was built with the engine (its cargo feature).
    pub fn available(self) -> bool {
        match self {
            EngineKind::Cairn => true,
            EngineKind::Rocksdb => cfg!(feature = "rocksdb"),
            EngineKind::Lmdb => cfg!(feature = "lmdb"),
            EngineKind::Fjall => cfg!(feature = "fjall"),
        }
    }

    /// Fails unless this binary was built with the engine.
    pub fn require_available(self) -> Result<(), Failure> {
        if self.available() {
            Ok(())
        } else {
            Err(self.unavailable())
        }
    }

    /// The failure of naming an engine this binary was built without.
    pub fn unavailable(self) -> Failure {
        Failure(format!(
            "this cairn-bench was built without the `{0}` feature: rebuild with `--features {0}`",
            self.name()
        ))
    }
}

/// `chain --configs`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ChainConfig {
    /// One Cairn table, Geth's keys as they are.
    CairnHashed,
    /// Block data block-prefixed in one table; lookup entries and header numbers in a second,
    /// state in a third.
    CairnBlock,
    /// Block data block-prefixed, lookup entries and header numbers unprefixed in the same
    /// table; state in a second.
    CairnBlockOnetable,
    /// One RocksDB column family (the default one), Geth's keys as they are.
    RocksdbHashed,
    /// Three RocksDB column families laid out as `cairn-block`.
    RocksdbBlock,
}

impl ChainConfig {
    /// Every configuration, in the order they run by default.
    pub const ALL: [ChainConfig; 5] = [
        ChainConfig::CairnHashed,
        ChainConfig::CairnBlock,
        ChainConfig::CairnBlockOnetable,
        ChainConfig::RocksdbHashed,
        ChainConfig::RocksdbBlock,
    ];

    /// The configuration's name in records.
    pub fn name(self) -> &'static str {
        match self {
            ChainConfig::CairnHashed => "cairn-hashed",
            ChainConfig::CairnBlock => "cairn-block",
            ChainConfig::CairnBlockOnetable => "cairn-block-onetable",
            ChainConfig::RocksdbHashed => "rocksdb-hashed",
            ChainConfig::RocksdbBlock => "rocksdb-block",
        }
    }

    /// The configuration named `name`.
    pub fn from_name(name: &str) -> Option<ChainConfig> {
        ChainConfig::ALL.into_iter().find(|c| c.name() == name)
    }

    /// Whether this is a RocksDB configuration.
    pub fn is_rocksdb(self) -> bool {
        matches!(self, ChainConfig::RocksdbHashed | ChainConfig::RocksdbBlock)
    }

    /// Whether this binary has the configuration's engine.
    pub fn available(self) -> bool {
        !self.is_rocksdb() || cfg!(feature = "rocksdb")
    }
}

/// `--io`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum IoArg {
    /// io_uring if it works, else pread.
    Auto,
    /// io_uring.
    Uring,
    /// One pread per page read.
    Pread,
}

/// `--disk-cache`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DiskCacheArg {
    /// No run is cached: lookups use O_DIRECT.
    None,
    /// Every run is read through the page cache.
    All,
}

impl DiskCacheArg {
    /// The name used in the report.
    pub fn name(self) -> &'static str {
        match self {
            DiskCacheArg::None => "none",
            DiskCacheArg::All => "all",
        }
    }
}
