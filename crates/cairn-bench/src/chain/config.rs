//! The configurations `chain` compares: which engine, which tables (or column families), and
//! which keys get a block-group prefix.
//!
//! Owns: [`ChainConfig`] and its layout ([`ChainConfig::tables`], [`ChainConfig::table_of`],
//! [`ChainConfig::key`]). Must never touch: an engine (the stores in [`super::cairn`] and
//! `super::rocks` only see table indexes and finished keys).
//!
//! | configuration | tables | prefixed |
//! |---|---|---|
//! | `cairn-hashed`, `rocksdb-hashed` | one: everything | nothing |
//! | `cairn-block`, `rocksdb-block` | `blocks` (h, h..n, b, r), `lookups` (l, H), `state` (a, o) | `blocks` |
//! | `cairn-block-onetable` | `blocks` (h, h..n, b, r, l, H), `state` (a, o) | h, h..n, b, r |
//!
//! The prefix is [`cairn::BlockKeys`]'s (8 bytes, big-endian group number), for RocksDB too,
//! so that both engines see the same keys.

use super::stream::Kind;
use crate::options::ChainConfig;

/// Table names of the one-table layout.
const ONE: &[&str] = &["all"];
/// Table names of the block layout.
const BLOCK: &[&str] = &["blocks", "lookups", "state"];
/// Table names of the block layout with lookups among the block data.
const BLOCK_ONETABLE: &[&str] = &["blocks", "state"];

impl ChainConfig {
    /// Whether block data gets the block-group prefix.
    pub fn prefixed(self) -> bool {
        !matches!(self, ChainConfig::CairnHashed | ChainConfig::RocksdbHashed)
    }

    /// The tables (column families), by name.
    pub fn tables(self) -> &'static [&'static str] {
        match self {
            ChainConfig::CairnHashed | ChainConfig::RocksdbHashed => ONE,
            ChainConfig::CairnBlock | ChainConfig::RocksdbBlock => BLOCK,
            ChainConfig::CairnBlockOnetable => BLOCK_ONETABLE,
        }
    }

    /// The index in [`ChainConfig::tables`] of the table that holds pairs of `kind`.
    pub fn table_of(self, kind: Kind) -> usize {
        let tables = self.tables();
        if tables.len() == 1 {
            return 0;
        }
        match kind {
            Kind::Header | Kind::Canonical | Kind::Body | Kind::Receipts => 0,
            Kind::TxLookup | Kind::Number => 1.min(tables.len() - 2),
            Kind::Account | Kind::Storage => tables.len() - 1,
        }
    }

    /// Whether pairs of `kind` get the block prefix: the block data of a block layout.
    pub fn prefixes(self, kind: Kind) -> bool {
        self.prefixed()
            && matches!(
                kind,
                Kind::Header | Kind::Canonical | Kind::Body | Kind::Receipts
            )
    }

    /// The key a pair of `kind` with Geth's key `key`, written at block `block`, is stored
    /// under.
    pub fn key(self, keys: &cairn::BlockKeys, kind: Kind, block: u64, key: Vec<u8>) -> Vec<u8> {
        if self.prefixes(kind) {
            keys.key(block, &key)
        } else {
            key
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts() {
        use ChainConfig::*;
        use Kind::*;
        let keys = cairn::BlockKeys::new(10).unwrap();
        for config in ChainConfig::ALL {
            assert_eq!(ChainConfig::from_name(config.name()), Some(config));
            for kind in Kind::ALL {
                assert!(config.table_of(kind) < config.tables().len());
            }
        }
        let table = |c: ChainConfig, k| c.tables()[c.table_of(k)];
        assert_eq!(table(CairnBlock, Body), "blocks");
        assert_eq!(table(CairnBlock, TxLookup), "lookups");
        assert_eq!(table(CairnBlock, Number), "lookups");
        assert_eq!(table(RocksdbBlock, Storage), "state");
        assert_eq!(table(CairnBlockOnetable, TxLookup), "blocks");
        assert_eq!(table(CairnBlockOnetable, Account), "state");
        assert_eq!(table(CairnHashed, Account), "all");
        assert_eq!(
            CairnBlock.key(&keys, Header, 25, b"hx".to_vec()),
            keys.key(25, b"hx")
        );
        assert_eq!(CairnBlock.key(&keys, TxLookup, 25, b"lx".to_vec()), b"lx");
        assert_eq!(
            CairnBlockOnetable.key(&keys, Storage, 25, b"ox".to_vec()),
            b"ox"
        );
        assert_eq!(RocksdbHashed.key(&keys, Header, 25, b"hx".to_vec()), b"hx");
    }
}
