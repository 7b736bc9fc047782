//! `cairn-bench history`: the history tree of the verifiable ledger (issue 45,
//! `cairn_proof::history`, `docs/format/history.md`): the encoded size of inclusion and
//! consistency proofs at a tree size, and how many of each one core verifies per second.
//!
//! Owns: the measurement and its record. Must never touch: the engine (the tree is
//! `cairn_proof::reference::MemHistory`, in memory; its proofs are byte for byte those any
//! correct tree of the same leaves makes, so their sizes and verification cost are the ledger's).
//!
//! Method: `--leaves` leaves (each the hash of a `HistoryLeaf` with version `i` and roots drawn
//! from the seed) appended to one tree; proofs of `--samples` indices (inclusion, into the whole
//! tree) and old sizes (consistency, from that size to the whole tree) drawn uniformly, encoded
//! (sizes: minimum, mean, maximum), then decoded and verified in a loop on one thread for
//! `--seconds` each, every verification checked to succeed. Cost of the setup: one SHA-256 per
//! leaf and per internal node, 64 bytes of memory per leaf.

use std::time::Instant;

use cairn_proof::history::HistoryLeaf;
use cairn_proof::reference::MemHistory;
use cairn_proof::{verify_consistency, verify_inclusion, ConsistencyProof, InclusionProof};

use crate::cli::HistoryArgs;
use crate::failure::{Context, Failure};
use crate::keys::SplitMix64;
use crate::report::table::Markdown;

/// Sizes of the encoded proofs of one kind: (minimum, mean, maximum) bytes.
fn sizes(encoded: &[Vec<u8>]) -> (usize, f64, usize) {
    let lens = encoded.iter().map(Vec::len);
    let min = lens.clone().min().unwrap_or(0);
    let max = lens.clone().max().unwrap_or(0);
    let mean = lens.sum::<usize>() as f64 / encoded.len().max(1) as f64;
    (min, mean, max)
}

/// Runs `verify(i)` round-robin over `n` proofs for `seconds`; returns verifications per second.
fn rate(n: usize, seconds: f64, mut verify: impl FnMut(usize) -> bool) -> Result<f64, Failure> {
    let start = Instant::now();
    let mut done = 0u64;
    while start.elapsed().as_secs_f64() < seconds {
        for i in 0..n {
            if !verify(i) {
                return Err(Failure(format!("proof {i} did not verify")));
            }
        }
        done += n as u64;
    }
    Ok(done as f64 / start.elapsed().as_secs_f64())
}

pub fn run(args: &HistoryArgs) -> Result<(), Failure> {
    if args.leaves == 0 || args.samples == 0 {
        return Err(Failure(
            "--leaves and --samples must be at least 1".to_string(),
        ));
    }
    let mut rng = SplitMix64::new(args.seed);
    let start = Instant::now();
    let mut tree = MemHistory::new();
    for version in 1..=args.leaves {
        let mut root = [0u8; 32];
        for chunk in root.chunks_mut(8) {
            chunk.copy_from_slice(&rng.next_u64().to_le_bytes());
        }
        let leaf = HistoryLeaf {
            version,
            ledger_root: root,
            meta: [0; 32],
        };
        tree.append(leaf.hash());
        if version % (args.leaves / 10).max(1) == 0 {
            eprintln!(
                "history: {version} of {} leaves, {:.1} s",
                args.leaves,
                start.elapsed().as_secs_f64()
            );
        }
    }
    let build_s = start.elapsed().as_secs_f64();
    let digest = tree.digest();
    let n = args.leaves;
    let inclusion: Vec<(cairn_proof::Hash, Vec<u8>)> = (0..args.samples)
        .map(|_| {
            let index = rng.below(n);
            let proof = tree
                .prove_inclusion(index, n)
                .context(|| format!("proving leaf {index}"))?;
            let leaf = tree
                .leaf_hash(index)
                .ok_or_else(|| Failure(format!("no leaf {index}")))?;
            Ok((leaf, proof.encode()))
        })
        .collect::<Result<_, Failure>>()?;
    let consistency: Vec<(cairn_proof::Digest, Vec<u8>)> = (0..args.samples)
        .map(|_| {
            let old = 1 + rng.below(n);
            let proof = tree
                .prove_consistency(old, n)
                .context(|| format!("proving {old} to {n}"))?;
            let old_digest = tree
                .digest_at(old)
                .context(|| format!("the digest at {old}"))?;
            Ok((old_digest, proof.encode()))
        })
        .collect::<Result<_, Failure>>()?;
    let inclusion_sizes = sizes(&inclusion.iter().map(|(_, p)| p.clone()).collect::<Vec<_>>());
    let consistency_sizes = sizes(
        &consistency
            .iter()
            .map(|(_, p)| p.clone())
            .collect::<Vec<_>>(),
    );
    let inclusion_rate = rate(inclusion.len(), args.seconds, |i| {
        let (leaf, bytes) = &inclusion[i];
        InclusionProof::decode(bytes)
            .ok()
            .is_some_and(|p| verify_inclusion(leaf, &p, &digest).is_ok())
    })?;
    let consistency_rate = rate(consistency.len(), args.seconds, |i| {
        let (old, bytes) = &consistency[i];
        ConsistencyProof::decode(bytes)
            .ok()
            .is_some_and(|p| verify_consistency(old, &digest, &p).is_ok())
    })?;
    let mut table = Markdown::left(&[
        "proof",
        "bytes min",
        "bytes mean",
        "bytes max",
        "decoded and verified per s (one core)",
    ]);
    table.row([
        "inclusion".to_string(),
        inclusion_sizes.0.to_string(),
        format!("{:.1}", inclusion_sizes.1),
        inclusion_sizes.2.to_string(),
        format!("{inclusion_rate:.0}"),
    ]);
    table.row([
        "consistency".to_string(),
        consistency_sizes.0.to_string(),
        format!("{:.1}", consistency_sizes.1),
        consistency_sizes.2.to_string(),
        format!("{consistency_rate:.0}"),
    ]);
    println!(
        "history tree (RFC 9162, SHA-256) of {n} leaves, built in {build_s:.1} s; {} proofs of each kind",
        args.samples
    );
    print!("{}", table.render());
    if let Some(path) = &args.json {
        let doc = serde_json::json!({
            "benchmark": "history",
            "leaves": n,
            "samples": args.samples,
            "seconds": args.seconds,
            "seed": args.seed,
            "build_s": build_s,
            "inclusion": {
                "bytes_min": inclusion_sizes.0,
                "bytes_mean": inclusion_sizes.1,
                "bytes_max": inclusion_sizes.2,
                "verified_per_s": inclusion_rate,
            },
            "consistency": {
                "bytes_min": consistency_sizes.0,
                "bytes_mean": consistency_sizes.1,
                "bytes_max": consistency_sizes.2,
                "verified_per_s": consistency_rate,
            },
        });
        std::fs::write(path, serde_json::to_string_pretty(&doc).unwrap_or_default())
            .context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}
