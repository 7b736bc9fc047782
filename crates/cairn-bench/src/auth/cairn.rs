//! Cairn under `auth`: an authenticated durable table in a session with a write-ahead log. A
//! commit logs its updates as one record, fsyncs the log (`Session::sync_log`), then computes
//! the root (`Table::commit`), so that, like NOMT's commit, it returns only once the updates
//! survive a crash. The warm-up is `Table::prefetch`; proofs are `Table::prove`, verified by
//! `cairn-proof`.
//!
//! `cairn-plain` is the same table without authentication: a commit logs and fsyncs its updates
//! and has no root (all zeros), there is no warm-up and no proof. It is the baseline of the
//! UTxO phase.

use std::path::Path;
use std::time::{Duration, Instant};

use cairn::cairn_proof::Claim;
use cairn::{
    AuthConfig, HashKind, LogOptions, Proof, Root, Session, SessionOptions, Table, TableConfig,
    Update,
};

use super::{AuthEngine, AuthProof, Breakdown, Change, KeyPath, Value};
use crate::cli::{AuthArgs, AuthHashArg};
use crate::failure::{Context, Failure};

/// A session in `dir` with a write-ahead log (default options): what every adapter keeping its
/// data in Cairn opens.
#[cfg_attr(not(any(feature = "jmt", feature = "alloy-trie")), allow(dead_code))]
pub fn logged_session(dir: &Path) -> Result<Session, Failure> {
    logged_session_with(dir, SessionOptions::default())
}

/// [`logged_session`] with `options` otherwise.
fn logged_session_with(dir: &Path, options: SessionOptions) -> Result<Session, Failure> {
    Session::open_with_options(dir, options.log(Some(LogOptions::default())))
        .context(|| format!("opening a Cairn session in {}", dir.display()))
}

/// Writes `changes` to `table` as one logged write and fsyncs the log, so that they survive a
/// crash when this returns; returns the time the fsync took. Nothing for no changes.
pub fn write_durably(
    session: &Session,
    table: &Table,
    changes: &[Change],
) -> Result<Duration, Failure> {
    if changes.is_empty() {
        return Ok(Duration::ZERO);
    }
    let updates: Vec<(&[u8], Update<'_>)> = changes
        .iter()
        .map(|(k, v)| match v {
            Some(v) => (&k[..], Update::Insert(&v[..])),
            None => (&k[..], Update::Delete),
        })
        .collect();
    session
        .write(&[(table, &updates[..])])
        .context(|| "writing a commit's updates".to_string())?;
    let started = Instant::now();
    session
        .sync_log()
        .context(|| "syncing the log".to_string())?;
    Ok(started.elapsed())
}

/// The values of `keys` in `table`, by one batched lookup (`None`: absent).
pub fn lookup_values(table: &Table, keys: &[KeyPath]) -> Result<Vec<Option<Vec<u8>>>, Failure> {
    let found = table.lookups(keys).context(|| "looking up".to_string())?;
    Ok(found
        .into_iter()
        .map(|r| r.value().map(<[u8]>::to_vec))
        .collect())
}

/// The engine.
pub struct CairnAuth {
    session: Session,
    table: Table,
    /// The trie's hash function; `None`: a plain table.
    kind: Option<HashKind>,
    /// Time spent in [`write_durably`] by commits (the breakdown's `log_ms`).
    log_time: Duration,
    /// Of `log_time`, the log's fsyncs (the breakdown's `log_sync_ms`).
    log_sync_time: Duration,
    /// Whether warm-ups load the pages before returning (`Table::prefetch`) rather than on a
    /// thread of their own (`Table::warm_up`).
    inline_warm_up: bool,
    /// Whether the session reads trie pages with `O_DIRECT` (`SessionOptions::direct_page_reads`).
    direct_page_reads: bool,
}

impl CairnAuth {
    /// A new session in `dir` with one durable table, default settings but the trie's
    /// retained memory and top page depth (`args`): authenticated with `hash`, or plain
    /// without one.
    pub fn open(
        dir: &Path,
        hash: Option<AuthHashArg>,
        args: &AuthArgs,
    ) -> Result<CairnAuth, Failure> {
        let kind = hash.map(|hash| match hash {
            AuthHashArg::Sha256 => HashKind::Sha256,
            AuthHashArg::Blake3 => HashKind::Blake3,
        });
        let session = logged_session_with(
            dir,
            SessionOptions::default().direct_page_reads(args.cairn_direct_page_reads),
        )?;
        let table = session
            .create_durable_table(
                "state",
                TableConfig::default().auth(kind.map(|hash| {
                    AuthConfig::default()
                        .hash(hash)
                        .retained_bytes(args.cairn_retained_mib << 20)
                        .top_page_depth(args.cairn_top_page_depth)
                })),
            )
            .context(|| "creating the authenticated table".to_string())?;
        Ok(CairnAuth {
            session,
            table,
            kind,
            log_time: Duration::ZERO,
            log_sync_time: Duration::ZERO,
            inline_warm_up: args.cairn_inline_warm_up,
            direct_page_reads: args.cairn_direct_page_reads,
        })
    }
}

impl AuthEngine for CairnAuth {
    fn name(&self) -> &'static str {
        if self.kind.is_some() {
            "cairn"
        } else {
            "cairn-plain"
        }
    }

    fn proves(&self) -> bool {
        self.kind.is_some()
    }

    fn status(&self) -> Option<String> {
        let stats = self.table.auth_stats().ok()?;
        let mb = |b: u64| b as f64 / 1e6;
        Some(format!(
            "page log: {} segments, {:.0} MB of files for {:.0} MB live (deep stream {:.0} for \
             {:.0}); {} segments cleaned ({} deep, {} read by pointer), {} pages moved of {} \
             written",
            stats.segments,
            mb(stats.file_bytes),
            mb(stats.live_bytes),
            mb(stats.deep_file_bytes),
            mb(stats.deep_live_bytes),
            stats.segments_cleaned,
            stats.deep_segments_cleaned,
            stats.segments_cleaned_by_pointer,
            stats.pages_moved,
            stats.pages_written
        ))
    }

    fn breakdown(&self) -> Option<Breakdown> {
        let stats = self.table.auth_stats().ok()?;
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        Some(Breakdown {
            values_ms: ms(stats.time.values),
            update_ms: ms(stats.time.update),
            page_reads_ms: ms(stats.time.page_reads),
            write_ms: ms(stats.time.write),
            clean_ms: ms(stats.time.clean),
            warm_up_ms: ms(stats.time.prefetch),
            page_bytes_read: stats.page_bytes_read as f64,
            clean_bytes_read: stats.clean_bytes_read as f64,
            log_ms: ms(self.log_time),
            log_sync_ms: ms(self.log_sync_time),
        })
    }

    fn settings(&self) -> String {
        let config = self.table.config();
        if self.kind.is_none() {
            return format!(
                "plain durable table (write-ahead log fsynced at each commit), no root, write \
                 buffer {} entries, defaults otherwise",
                config.write_buffer_entries
            );
        }
        format!(
            "authenticated durable table (write-ahead log fsynced at each commit), binary trie \
             in 4 KiB pages, top {} page levels kept in memory ({} MiB){}{}, write buffer {} \
             entries, defaults otherwise",
            config.auth.as_ref().map_or(0, |a| a.retained_levels()),
            config.auth.as_ref().map_or(0, |a| a.retained_bytes >> 20),
            match config.auth.as_ref() {
                // The depth where the retained levels end: the top page's, then 6 per level.
                Some(a) => format!(
                    ", down to trie depth {}{}",
                    a.top_page_depth as usize + 6 * (a.retained_levels() - 1),
                    match a.top_page_depth {
                        6 => String::new(),
                        top => format!(", a top page of {top} trie levels"),
                    }
                ),
                None => String::new(),
            },
            if self.direct_page_reads {
                ", pages read with O_DIRECT"
            } else {
                ""
            },
            config.write_buffer_entries
        )
    }

    fn warm_up(&mut self, keys: &[KeyPath]) -> Result<(), Failure> {
        if self.kind.is_none() {
            return Ok(());
        }
        match self.inline_warm_up {
            true => self.table.prefetch(keys),
            false => self.table.warm_up(keys),
        }
        .context(|| "warming up".to_string())
    }

    fn commit(&mut self, changes: &[Change]) -> Result<[u8; 32], Failure> {
        let started = Instant::now();
        self.log_sync_time += write_durably(&self.session, &self.table, changes)?;
        self.log_time += started.elapsed();
        if self.kind.is_none() {
            return Ok([0; 32]);
        }
        let commit = self.table.commit().context(|| "committing".to_string())?;
        Ok(commit.root.hash)
    }

    fn lookups(&mut self, keys: &[KeyPath]) -> Result<Vec<Option<Vec<u8>>>, Failure> {
        lookup_values(&self.table, keys)
    }

    fn prove(&mut self, key: &KeyPath) -> Result<Box<dyn AuthProof>, Failure> {
        self.prove_many(std::slice::from_ref(key))
    }

    fn prove_many(&mut self, keys: &[KeyPath]) -> Result<Box<dyn AuthProof>, Failure> {
        let Some(kind) = self.kind else {
            return Err(Failure("cairn-plain makes no proofs".to_string()));
        };
        let proof = self
            .table
            .prove(keys)
            .context(|| "proving".to_string())?
            .proof;
        Ok(Box::new(CairnProof { proof, kind }))
    }
}

struct CairnProof {
    proof: Proof,
    kind: HashKind,
}

impl AuthProof for CairnProof {
    fn encoded_len(&self) -> usize {
        self.proof.encoded_len()
    }

    fn verify(&self, root: &[u8; 32], claims: &[(KeyPath, Option<Value>)]) -> Result<(), String> {
        let root = Root {
            kind: self.kind,
            hash: *root,
        };
        let claims: Vec<Claim<'_>> = claims
            .iter()
            .map(|(k, v)| match v {
                Some(v) => Claim::present(k, v),
                None => Claim::absent(k),
            })
            .collect();
        self.proof.verify(&root, &claims).map_err(|e| e.to_string())
    }
}
