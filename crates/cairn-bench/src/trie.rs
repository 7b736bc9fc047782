//! `cairn-bench trie`: what an authenticated Cairn table costs (issue 11's measurements): proof
//! sizes, and the time of a commit of `k` random updates, with and without a prefetch first.
//!
//! Owns: the trie workload (32-byte random keys, 60-byte values, like `utxo`), its figures and
//! their printout. Uses the `cairn` crate directly: the trie API has no peer behind the
//! [`crate::engines::Engine`] interface yet (the side-by-side race is `auth`, to come).
//!
//! 1. **Load**: `--keys` keys in batches of `--load-batch`, each batch committed.
//! 2. **Proofs**: `--samples` single-key proofs of present keys (inclusion) and of absent keys
//!    (exclusion), and one multiproof of 256 random present keys; sizes in bytes (encoded, full
//!    form) and every proof verified against the root.
//! 3. **Commits**: `--commits` rounds of `--commit-keys` updates (half change present keys, a
//!    quarter insert fresh keys, a quarter delete present keys), then a commit, timed; every
//!    other round prefetches the round's keys first (the prefetch timed apart): commit time per
//!    updated key, with and without the prefetch, medians over the rounds.
//!
//! With `--keep`, the table is saved as snapshot `bench` at the end and the directory kept (for
//! `cairn verify` to check, root included).

use std::path::Path;
use std::time::Instant;

use cairn::cairn_proof::Claim;
use cairn::{AuthConfig, Session, TableConfig};

use crate::cli::TrieArgs;
use crate::failure::{Context, Failure};
use crate::keys::SplitMix64;
use crate::stats::median;

const KEY_BYTES: usize = 32;
const VALUE_BYTES: usize = 60;

fn key(i: u64, seed: u64) -> [u8; KEY_BYTES] {
    let mut rng = SplitMix64::new(i.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ seed);
    let mut key = [0u8; KEY_BYTES];
    for chunk in key.chunks_mut(8) {
        chunk.copy_from_slice(&rng.next_u64().to_le_bytes());
    }
    key
}

fn value(i: u64, round: u64) -> [u8; VALUE_BYTES] {
    let mut v = [0u8; VALUE_BYTES];
    v[..8].copy_from_slice(&i.to_le_bytes());
    v[8..16].copy_from_slice(&round.to_le_bytes());
    v
}

/// Runs the benchmark and prints its figures.
pub fn run(args: &TrieArgs) -> Result<(), Failure> {
    crate::in_temp_dir(args.common.dir.as_deref(), args.common.keep, |dir| {
        bench_in(dir, args)
    })
}

fn bench_in(dir: &Path, args: &TrieArgs) -> Result<(), Failure> {
    let seed = args.common.seed;
    let session = Session::open(dir).context(|| "opening the session".to_string())?;
    let table = session
        .new_table(TableConfig::default().auth(Some(AuthConfig::default())))
        .context(|| "creating the table".to_string())?;
    let ctx = |what: &'static str| move || what.to_string();

    // 1. Load.
    let timer = Instant::now();
    let mut loaded = 0u64;
    while loaded < args.keys {
        let end = (loaded + args.load_batch).min(args.keys);
        let keys: Vec<[u8; KEY_BYTES]> = (loaded..end).map(|i| key(i, seed)).collect();
        let values: Vec<[u8; VALUE_BYTES]> = (loaded..end).map(|i| value(i, 0)).collect();
        let pairs: Vec<(&[u8], &[u8])> = keys
            .iter()
            .zip(&values)
            .map(|(k, v)| (&k[..], &v[..]))
            .collect();
        table.inserts(&pairs).context(ctx("loading"))?;
        table.commit().context(ctx("committing the load"))?;
        loaded = end;
        eprintln!(
            "loaded {loaded} of {} keys, {:.1} s",
            args.keys,
            timer.elapsed().as_secs_f64()
        );
    }
    let load_s = timer.elapsed().as_secs_f64();
    let root = table.root().context(ctx("root"))?.root;

    // 2. Proofs.
    let mut rng = SplitMix64::new(seed ^ 0x5EED);
    let mut inclusion = Vec::new();
    let mut exclusion = Vec::new();
    for _ in 0..args.samples {
        let i = rng.next_u64() % args.keys;
        let (k, v) = (key(i, seed), value(i, 0));
        let proof = table.prove(&[k]).context(ctx("proving"))?.proof;
        proof
            .verify(&root, &[Claim::present(&k, &v)])
            .map_err(|e| Failure(format!("an inclusion proof does not verify: {e}")))?;
        inclusion.push(proof.encoded_len() as f64);
        let absent = key(args.keys + 1_000_000 + rng.next_u64() % 1_000_000_000, seed);
        let proof = table.prove(&[absent]).context(ctx("proving"))?.proof;
        proof
            .verify(&root, &[Claim::absent(&absent)])
            .map_err(|e| Failure(format!("an exclusion proof does not verify: {e}")))?;
        exclusion.push(proof.encoded_len() as f64);
    }
    let multi_ids: Vec<u64> = (0..256).map(|_| rng.next_u64() % args.keys).collect();
    let multi_keys: Vec<[u8; KEY_BYTES]> = multi_ids.iter().map(|&i| key(i, seed)).collect();
    let multi_values: Vec<[u8; VALUE_BYTES]> = multi_ids.iter().map(|&i| value(i, 0)).collect();
    let timer = Instant::now();
    let multi = table.prove(&multi_keys).context(ctx("proving"))?.proof;
    let multi_ms = timer.elapsed().as_secs_f64() * 1e3;
    let claims: Vec<Claim<'_>> = multi_keys
        .iter()
        .zip(&multi_values)
        .map(|(k, v)| Claim::present(k, v))
        .collect();
    multi
        .verify(&root, &claims)
        .map_err(|e| Failure(format!("the multiproof does not verify: {e}")))?;

    // 3. Commits.
    let mut live: Vec<u64> = (0..args.keys).collect();
    let mut next_fresh = args.keys;
    let mut plain_us = Vec::new();
    let mut prefetched_us = Vec::new();
    let mut prefetch_us = Vec::new();
    let mut update_us = Vec::new();
    for round in 0..args.commits {
        let k = args.commit_keys as usize;
        let mut sets: Vec<([u8; KEY_BYTES], Option<[u8; VALUE_BYTES]>)> = Vec::with_capacity(k);
        for j in 0..k {
            match j % 4 {
                0 | 1 => {
                    let i = live[(rng.next_u64() % live.len() as u64) as usize];
                    sets.push((key(i, seed), Some(value(i, round + 1))));
                }
                2 => {
                    live.push(next_fresh);
                    sets.push((key(next_fresh, seed), Some(value(next_fresh, round + 1))));
                    next_fresh += 1;
                }
                _ => {
                    let at = (rng.next_u64() % live.len() as u64) as usize;
                    let i = live.swap_remove(at);
                    sets.push((key(i, seed), None));
                }
            }
        }
        let with_prefetch = round % 2 == 1;
        if with_prefetch {
            let keys: Vec<&[u8]> = sets.iter().map(|(k, _)| &k[..]).collect();
            let timer = Instant::now();
            table.prefetch(&keys).context(ctx("prefetching"))?;
            prefetch_us.push(timer.elapsed().as_secs_f64() * 1e6 / k as f64);
        }
        let timer = Instant::now();
        let updates: Vec<(&[u8], cairn::Update<'_>)> = sets
            .iter()
            .map(|(k, v)| match v {
                Some(v) => (&k[..], cairn::Update::Insert(&v[..])),
                None => (&k[..], cairn::Update::Delete),
            })
            .collect();
        table.updates(&updates).context(ctx("updating"))?;
        update_us.push(timer.elapsed().as_secs_f64() * 1e6 / k as f64);
        let timer = Instant::now();
        table.commit().context(ctx("committing"))?;
        let us = timer.elapsed().as_secs_f64() * 1e6 / k as f64;
        if with_prefetch {
            prefetched_us.push(us);
        } else {
            plain_us.push(us);
        }
        eprintln!(
            "commit {} of {}: {us:.2} µs/key{}",
            round + 1,
            args.commits,
            if with_prefetch { " (prefetched)" } else { "" }
        );
    }
    let stats = table.auth_stats().context(ctx("stats"))?;

    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    let max = |v: &[f64]| v.iter().cloned().fold(0.0, f64::max);
    println!("cairn-bench trie: {} keys ({KEY_BYTES}-byte keys, {VALUE_BYTES}-byte values), SHA-256, retained {} pages ({:.1} MiB)",
        args.keys, stats.retained_pages, stats.retained_bytes as f64 / (1 << 20) as f64);
    println!(
        "load: {load_s:.1} s in batches of {} ({:.2} µs/key)",
        args.load_batch,
        load_s * 1e6 / args.keys as f64
    );
    println!(
        "inclusion proof: mean {:.0} B, max {:.0} B ({} samples)",
        mean(&inclusion),
        max(&inclusion),
        args.samples
    );
    println!(
        "exclusion proof: mean {:.0} B, max {:.0} B",
        mean(&exclusion),
        max(&exclusion)
    );
    println!(
        "multiproof of 256 random keys: {} B ({:.0} B/key), made in {multi_ms:.1} ms",
        multi.encoded_len(),
        multi.encoded_len() as f64 / 256.0
    );
    println!("commit of {} keys: median {:.2} µs/key without prefetch, {:.2} µs/key after a prefetch (prefetch {:.2} µs/key); updates {:.2} µs/key",
        args.commit_keys, median(&plain_us), median(&prefetched_us), median(&prefetch_us), median(&update_us));
    println!(
        "trie pages read {}, written {}",
        stats.pages_read, stats.pages_written
    );
    if args.common.keep {
        table
            .save_snapshot("bench", "cairn-bench trie")
            .context(ctx("saving the table"))?;
        eprintln!("saved the table as snapshot bench in {}", dir.display());
    }
    Ok(())
}
