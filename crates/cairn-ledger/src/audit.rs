//! The audit: everything the ledger stores checked against everything else it stores, and
//! against digests a client published (`docs/ledger.md`, "Audit").
//!
//! Owns: [`AuditOptions`], [`AuditReport`], [`AuditProblem`], [`AuditProgress`] and the audit's
//! passes. May call: `ledger` (its tables, records and history, through crate-private
//! accessors), `history` (an in-memory tree rebuilt from the records), `records`,
//! `cairn_proof` (ledger roots, proofs). Must never write.
//!
//! The passes, on the ledger as of the audit's start (commits go on meanwhile):
//!
//! 1. **Tables**: each table's state root recomputed from its contents alone
//!    ([`cairn::Table::contents_root`]) must be the newest version's recorded root; where it is
//!    not, every key's stored value is checked against the trie (one multiproof per 1,024 keys)
//!    and the keys whose value the trie does not vouch for are reported.
//!    An ordered table's chain of links is walked whole: the head names the first key, each key
//!    the next, the last none.
//! 2. **Kept versions**: from the tables as of the newest version, each undo record stored
//!    (newest first) is applied to a duplicate and committed ([`Ledger::undo_step`]): the
//!    rebuilt tables of the version before must have the roots its record holds. This is how
//!    the versions the window keeps provable are rebuilt from stored data.
//! 3. **Versions**: every version's record is read in order: its leaf names its version, its
//!    ledger root is the root of its tables' roots, its metadata hashes to the leaf's; its leaf
//!    is appended to a tree rebuilt in memory, and every history node the version completed must
//!    be stored as rebuilt.
//! 4. **Digests**: the rebuilt tree at each published size must have the published root; the
//!    first published digest that disagrees bounds the first version that differs.
//!
//! Cost: pass 1 as `contents_root` (a count and `2^d` passes per table) plus, for a table that
//! fails, one proof per key; pass 2 one undo record's updates and trie commits per kept
//! version; pass 3 reads every version record and history node once (batched
//! lookups of 1,024), one leaf hash and about one node hash per version; pass 4 no I/O. Memory:
//! the rebuilt tree's right edge, one batch, and pass 1's budget.

use cairn::inspect::VerifyProgress;
use cairn::Table;
use cairn_proof::ledger::ledger_root;
use cairn_proof::{Claim, Digest, Hash, Root};

use crate::error::Result;
use crate::history::History;
use crate::ledger::{meta_hash, Ledger};
use crate::records::{decode_hash, node_key, version_key, VersionRecord};

/// Keys and versions read per batched lookup.
const BATCH: usize = 1024;
/// Keys reported per table whose contents disagree with its trie.
const KEYS_REPORTED_MAX: usize = 100;

/// How to audit.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct AuditOptions {
    /// Digests a client published, checked against the rebuilt history (any order).
    pub digests: Vec<Digest>,
    /// Memory for recomputing a table's root from its contents (less memory, more passes).
    pub root_memory_bytes: usize,
}

impl Default for AuditOptions {
    fn default() -> Self {
        AuditOptions {
            digests: Vec::new(),
            root_memory_bytes: 256 << 20,
        }
    }
}

impl AuditOptions {
    /// Sets [`AuditOptions::digests`].
    #[must_use]
    pub fn digests(mut self, digests: Vec<Digest>) -> AuditOptions {
        self.digests = digests;
        self
    }

    /// Sets [`AuditOptions::root_memory_bytes`].
    #[must_use]
    pub fn root_memory_bytes(mut self, bytes: usize) -> AuditOptions {
        self.root_memory_bytes = bytes;
        self
    }
}

/// Where an audit is.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AuditProgress {
    /// Recomputing table `table`'s root: `done` of `total` passes.
    Table {
        /// The table.
        table: String,
        /// Passes done.
        done: u64,
        /// Passes in all.
        total: u64,
    },
    /// Checking keys of a table whose root disagrees: keys checked so far.
    Keys {
        /// The table.
        table: String,
        /// Keys checked.
        done: u64,
    },
    /// Kept versions rebuilt from the undo records so far, of `total` undo records stored.
    Undo {
        /// Versions rebuilt.
        done: u64,
        /// Undo records stored.
        total: u64,
    },
    /// Versions checked so far, of `total`.
    Versions {
        /// Versions checked.
        done: u64,
        /// Versions in all.
        total: u64,
    },
}

/// One disagreement the audit found.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AuditProblem {
    /// A table's contents do not hash to the root the newest version recorded: its data (or its
    /// trie) was changed outside the ledger.
    TableRoot {
        /// The table.
        table: String,
        /// The version whose record holds `recorded`.
        version: u64,
        /// The root the version recorded.
        recorded: Root,
        /// The root of the table's contents.
        computed: Root,
        /// Keys (at most 100) whose stored value the table's trie does not vouch for.
        keys: Vec<Vec<u8>>,
    },
    /// An ordered table's chain of links is broken at `key`: a range proof could then leave
    /// out keys the table holds.
    Chain {
        /// The table.
        table: String,
        /// Where the chain breaks (the empty key: the head).
        key: Vec<u8>,
        /// How.
        detail: String,
    },
    /// A version kept provable could not be rebuilt from the undo records: the undo record of
    /// the version after it does not decode, or applying it does not give the roots the
    /// version recorded (`table`: the first table that differs). The window stops there.
    Undo {
        /// The version that could not be rebuilt.
        version: u64,
        /// The table whose rebuilt root differs (`None`: the record itself is damaged).
        table: Option<String>,
        /// What is wrong.
        detail: String,
    },
    /// A version's record is missing, does not decode or disagrees with itself.
    Record {
        /// The version.
        version: u64,
        /// What is wrong.
        detail: String,
    },
    /// A stored history node is missing or differs from the node rebuilt from the records.
    Node {
        /// The node's level.
        level: u32,
        /// Its index at that level.
        index: u64,
    },
    /// A published digest the stored history does not match.
    Digest {
        /// The published digest.
        published: Digest,
        /// The stored history's digest at that size (`None`: the ledger holds fewer versions:
        /// rolled back or truncated).
        stored: Option<Digest>,
    },
}

/// What an audit found.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct AuditReport {
    /// Versions audited (the newest when the audit started).
    pub versions: u64,
    /// The digest rebuilt from the version records.
    pub digest: Digest,
    /// Published digests checked.
    pub digests_checked: usize,
    /// Versions before the newest rebuilt from the undo records and checked against their
    /// records (the versions the window keeps provable, [`crate::LedgerConfig::history`]).
    pub versions_rebuilt: u64,
    /// Every disagreement, in the order found.
    pub problems: Vec<AuditProblem>,
    /// The first version known to differ from what was committed: the lowest version with a
    /// bad record or node, or the newest when a table's data differs; from a published digest
    /// that disagrees, the first version after the last published size that agrees (the
    /// difference lies between it and the disagreeing digest's size). `None`: nothing differs.
    pub first_bad_version: Option<u64>,
}

impl AuditReport {
    /// Whether the audit found nothing wrong.
    pub fn is_clean(&self) -> bool {
        self.problems.is_empty()
    }

    fn bad(&mut self, version: u64, problem: AuditProblem) {
        self.first_bad_version = Some(self.first_bad_version.map_or(version, |v| v.min(version)));
        self.problems.push(problem);
    }
}

impl Ledger {
    /// Audits the ledger (see the module `audit` doc and `docs/ledger.md`): each table's
    /// contents against the newest version's recorded root (naming the keys that differ),
    /// every version's record and history nodes against a tree rebuilt from them, and
    /// `options.digests` against that tree. Commits go on meanwhile; the audit covers the
    /// versions up to the newest at its start.
    ///
    /// Errors: the engine's (an I/O error, corruption the engine detects itself); what the
    /// audit finds is in the report, not an error.
    pub fn audit(
        &self,
        options: &AuditOptions,
        progress: &mut dyn FnMut(AuditProgress),
    ) -> Result<AuditReport> {
        let (versions, tables, head_roots) = self.audit_view()?;
        let mut report = AuditReport {
            versions,
            digest: Digest::EMPTY,
            digests_checked: 0,
            versions_rebuilt: 0,
            problems: Vec::new(),
            first_bad_version: None,
        };
        if let Some(roots) = head_roots {
            for ((name, table), recorded) in self.tables().iter().zip(&tables).zip(roots) {
                self.audit_table(
                    name,
                    table,
                    versions,
                    recorded,
                    options,
                    &mut report,
                    progress,
                )?;
            }
        }
        for (t, (name, table)) in self.tables().iter().zip(&tables).enumerate() {
            if !self.is_ordered(t) {
                continue;
            }
            if let Some((key, detail)) = crate::links::check_chain(table)? {
                report.bad(
                    versions.max(1),
                    AuditProblem::Chain {
                        table: name.clone(),
                        key,
                        detail,
                    },
                );
            }
        }
        self.audit_undo(versions, &tables, &mut report, progress)?;
        tables.iter().for_each(Table::close);
        let mut published = options.digests.clone();
        published.sort_by_key(|d| d.size);
        published.dedup();
        self.audit_versions(versions, &published, &mut report, progress)?;
        Ok(report)
    }

    /// Pass 2: the kept versions rebuilt from `tables` (as of `newest`) by the undo records.
    fn audit_undo(
        &self,
        newest: u64,
        tables: &[Table],
        report: &mut AuditReport,
        progress: &mut dyn FnMut(AuditProgress),
    ) -> Result<()> {
        let total = self.undo_records()?.records;
        let mut newer: Vec<Table> = Vec::new();
        let mut after = newest;
        while after > 1 {
            let from = if newer.is_empty() { tables } else { &newer[..] };
            let step = match self.undo_step(from, after) {
                Ok(Some(step)) => step,
                Ok(None) => break,
                Err(crate::Error::Corrupted { what, detail }) => {
                    report.bad(
                        after - 1,
                        AuditProblem::Undo {
                            version: after - 1,
                            table: None,
                            detail: format!("{what}: {detail}"),
                        },
                    );
                    break;
                }
                Err(e) => return Err(e),
            };
            newer.iter().for_each(Table::close);
            newer = step.tables;
            if let Some(&t) = step.mismatched.first() {
                report.bad(
                    after - 1,
                    AuditProblem::Undo {
                        version: after - 1,
                        table: Some(self.tables()[t].clone()),
                        detail: format!(
                            "rebuilt with the undo record of version {after}, its root is not \
                             the one it recorded"
                        ),
                    },
                );
                break;
            }
            report.versions_rebuilt += 1;
            progress(AuditProgress::Undo {
                done: report.versions_rebuilt,
                total,
            });
            after -= 1;
        }
        newer.iter().for_each(Table::close);
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn audit_table(
        &self,
        name: &str,
        table: &Table,
        version: u64,
        recorded: Root,
        options: &AuditOptions,
        report: &mut AuditReport,
        progress: &mut dyn FnMut(AuditProgress),
    ) -> Result<()> {
        let computed =
            table.contents_root(options.root_memory_bytes, &mut |p: VerifyProgress| {
                progress(AuditProgress::Table {
                    table: name.to_string(),
                    done: p.done,
                    total: p.total,
                })
            })?;
        if computed == recorded {
            return Ok(());
        }
        // Which keys: each stored value checked against the trie, a batch at a time.
        let mut keys = Vec::new();
        let mut done = 0u64;
        let mut batch: Vec<(Vec<u8>, Vec<u8>)> = Vec::with_capacity(BATCH);
        let check = |batch: &mut Vec<(Vec<u8>, Vec<u8>)>, keys: &mut Vec<Vec<u8>>| -> Result<()> {
            let names: Vec<&[u8]> = batch.iter().map(|(k, _)| &k[..]).collect();
            let proved = table.prove(&names)?;
            for (key, value) in batch.drain(..) {
                let claim = [Claim::present(&key, &value)];
                if proved.proof.verify(&recorded, &claim).is_err() && keys.len() < KEYS_REPORTED_MAX
                {
                    keys.push(key);
                }
            }
            Ok(())
        };
        for entry in table.cursor()? {
            let entry = entry?;
            batch.push((entry.key, entry.value));
            if batch.len() == BATCH {
                check(&mut batch, &mut keys)?;
                done += BATCH as u64;
                progress(AuditProgress::Keys {
                    table: name.to_string(),
                    done,
                });
            }
        }
        check(&mut batch, &mut keys)?;
        report.bad(
            version,
            AuditProblem::TableRoot {
                table: name.to_string(),
                version,
                recorded,
                computed,
                keys,
            },
        );
        Ok(())
    }

    fn audit_versions(
        &self,
        versions: u64,
        published: &[Digest],
        report: &mut AuditReport,
        progress: &mut dyn FnMut(AuditProgress),
    ) -> Result<()> {
        let names: Vec<&[u8]> = self.tables().iter().map(|n| n.as_bytes()).collect();
        let mut tree = History::default();
        let mut next_published = published.iter().peekable();
        // The largest published size that agrees so far, and the largest below the size being
        // checked (two digests of one size may disagree with each other).
        let mut agreed = 0u64;
        let mut agreed_below = 0u64;
        let mut check_published = |tree: &History, report: &mut AuditReport, agreed: &mut u64| {
            while let Some(d) = next_published.next_if(|d| d.size <= tree.size()) {
                report.digests_checked += 1;
                if *agreed < d.size {
                    agreed_below = *agreed;
                }
                // Sizes are reached in order: `tree` is exactly at `d.size` here.
                let stored = tree.digest();
                if stored == *d {
                    *agreed = d.size;
                } else {
                    report.bad(
                        agreed_below + 1,
                        AuditProblem::Digest {
                            published: *d,
                            stored: Some(stored),
                        },
                    );
                }
            }
        };
        check_published(&tree, report, &mut agreed);
        let mut version = 1u64;
        while version <= versions {
            let end = (version + BATCH as u64 - 1).min(versions);
            let keys: Vec<[u8; 9]> = (version..=end).map(version_key).collect();
            let records = self.history_table().lookups(&keys)?;
            let mut leaves: Vec<(u64, Option<Hash>)> = Vec::with_capacity(keys.len());
            for (v, found) in (version..=end).zip(records) {
                let leaf = match found.value() {
                    None => {
                        report.bad(v, record_problem(v, "missing"));
                        None
                    }
                    Some(bytes) => match VersionRecord::decode(bytes) {
                        Err(e) => {
                            report.bad(v, record_problem(v, &e.to_string()));
                            None
                        }
                        Ok(record) => check_record(v, &record, &names, report),
                    },
                };
                leaves.push((v, leaf));
            }
            // The nodes each leaf completes, rebuilt, against those stored.
            let mut rebuilt = Vec::new();
            for &(v, leaf) in &leaves {
                // A version whose leaf cannot be rebuilt is taken as stored (its stored leaf
                // node stands in), so that the nodes above it are still checked.
                let leaf = match leaf {
                    Some(leaf) => leaf,
                    None => self.stored_node(0, v - 1)?.unwrap_or([0; 32]),
                };
                rebuilt.extend(tree.append(leaf));
                check_published(&tree, report, &mut agreed);
            }
            let node_keys: Vec<[u8; 10]> =
                rebuilt.iter().map(|&((l, i), _)| node_key(l, i)).collect();
            let stored = self.history_table().lookups(&node_keys)?;
            for (&((level, index), hash), found) in rebuilt.iter().zip(stored) {
                let what = format!("history node ({level}, {index})");
                let ok = found
                    .value()
                    .is_some_and(|b| decode_hash(&what, b).is_ok_and(|h| h == hash));
                if !ok {
                    // The node's first leaf is the first version it covers.
                    report.bad((index << level) + 1, AuditProblem::Node { level, index });
                }
            }
            progress(AuditProgress::Versions {
                done: end,
                total: versions,
            });
            version = end + 1;
        }
        for d in next_published {
            report.digests_checked += 1;
            report.bad(
                versions + 1,
                AuditProblem::Digest {
                    published: *d,
                    stored: None,
                },
            );
        }
        report.digest = tree.digest();
        Ok(())
    }

    fn stored_node(&self, level: u32, index: u64) -> Result<Option<Hash>> {
        let what = format!("history node ({level}, {index})");
        match self.history_table().get(node_key(level, index))? {
            Some(b) => Ok(decode_hash(&what, &b).ok()),
            None => Ok(None),
        }
    }
}

fn record_problem(version: u64, detail: &str) -> AuditProblem {
    AuditProblem::Record {
        version,
        detail: detail.to_string(),
    }
}

/// Checks a version record against itself; returns its leaf hash if it holds together.
fn check_record(
    version: u64,
    record: &VersionRecord,
    names: &[&[u8]],
    report: &mut AuditReport,
) -> Option<Hash> {
    let mut bad = |detail: &str| report.bad(version, record_problem(version, detail));
    if record.leaf.version != version {
        bad(&format!("its leaf names version {}", record.leaf.version));
    }
    if record.roots.len() != names.len() {
        bad(&format!(
            "{} table roots for {} tables",
            record.roots.len(),
            names.len()
        ));
        return Some(record.leaf.hash());
    }
    let pairs: Vec<(&[u8], Root)> = names
        .iter()
        .copied()
        .zip(record.roots.iter().copied())
        .collect();
    match ledger_root(&pairs) {
        Ok(root) if root == record.leaf.ledger_root => {}
        Ok(_) => bad("its ledger root is not the root of its tables' roots"),
        Err(e) => bad(&format!("its tables have no ledger root: {e}")),
    }
    if meta_hash(&record.meta) != record.leaf.meta {
        bad("its metadata does not hash to its leaf's");
    }
    Some(record.leaf.hash())
}
