//! Nanoseconds of thread CPU time per SHA-256 of 35, 48, 65, 74 and 97 bytes (the trie's key
//! path, a ledger entry, a node, a history leaf, a trie leaf), by implementation: `sha2` 0.10
//! (what `cairn-proof` used: portable Rust on a CPU without SHA-NI), the same through
//! `compress256` on a padded block, `sha2` 0.11, `sha2-asm` 0.6 (`sha2`'s `asm` feature), `ring`
//! 0.17 one-shot and streamed in three parts, and BLAKE3 keyed for scale. Each hash's output
//! feeds the next input (latency, as a proof's path is). 21 rounds of 20,000 hashes, the
//! implementations interleaved in each round so that the machine's noise hits all; min and
//! median of the rounds.

use std::hint::black_box;

fn thread_cpu_s() -> f64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid, writable timespec for the call.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
}

const IV: [u32; 8] = [
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
];

/// `d` padded to one or two blocks (inputs up to 119 bytes).
fn padded(d: &[u8]) -> ([[u8; 64]; 2], usize) {
    let mut flat = [0u8; 128];
    let n = if d.len() <= 55 { 1 } else { 2 };
    flat[..d.len()].copy_from_slice(d);
    flat[d.len()] = 0x80;
    flat[n * 64 - 8..n * 64].copy_from_slice(&((d.len() as u64) * 8).to_be_bytes());
    let mut b = [[0u8; 64]; 2];
    b[0].copy_from_slice(&flat[..64]);
    b[1].copy_from_slice(&flat[64..]);
    (b, n)
}

fn out(st: [u32; 8]) -> [u8; 32] {
    let mut o = [0u8; 32];
    for (c, w) in o.chunks_mut(4).zip(st) {
        c.copy_from_slice(&w.to_be_bytes());
    }
    o
}

type F = fn(&[u8]) -> [u8; 32];

fn sha2_digest(d: &[u8]) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(d).into()
}
fn sha2_parts(d: &[u8]) -> [u8; 32] {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    h.update(&d[..1]);
    h.update(&d[1..33]);
    h.update(&d[33..]);
    h.finalize().into()
}
fn sha2_compress(d: &[u8]) -> [u8; 32] {
    let (blocks, n) = padded(d);
    let mut st = IV;
    let b: [sha2::digest::generic_array::GenericArray<u8, _>; 2] =
        [blocks[0].into(), blocks[1].into()];
    sha2::compress256(&mut st, &b[..n]);
    out(st)
}
fn sha2_011(d: &[u8]) -> [u8; 32] {
    use sha2_011::Digest;
    sha2_011::Sha256::digest(d).into()
}
fn sha2_asm(d: &[u8]) -> [u8; 32] {
    let (blocks, n) = padded(d);
    let mut st = IV;
    sha2_asm::compress256(&mut st, &blocks[..n]);
    out(st)
}
fn ring_digest(d: &[u8]) -> [u8; 32] {
    ring::digest::digest(&ring::digest::SHA256, d)
        .as_ref()
        .try_into()
        .unwrap()
}
fn ring_parts(d: &[u8]) -> [u8; 32] {
    let mut c = ring::digest::Context::new(&ring::digest::SHA256);
    c.update(&d[..1]);
    c.update(&d[1..33]);
    c.update(&d[33..]);
    c.finish().as_ref().try_into().unwrap()
}
fn blake3_keyed(d: &[u8]) -> [u8; 32] {
    *blake3::keyed_hash(&[1; 32], d).as_bytes()
}

fn main() {
    let cands: [(&str, F, bool); 8] = [
        ("sha2 0.10 digest", sha2_digest, true),
        ("sha2 0.10, 3 updates", sha2_parts, true),
        ("sha2 0.10 compress256", sha2_compress, true),
        ("sha2 0.11 digest", sha2_011, true),
        ("sha2-asm 0.6 compress256", sha2_asm, true),
        ("ring 0.17 digest", ring_digest, true),
        ("ring 0.17, 3 updates", ring_parts, true),
        ("blake3 keyed", blake3_keyed, false),
    ];
    let lens = [35usize, 48, 65, 74, 97];
    for (name, f, sha) in &cands {
        for len in lens {
            let d: Vec<u8> = (0..len as u8).collect();
            if *sha {
                assert_eq!(f(&d), sha2_digest(&d), "{name} at {len} bytes is not SHA-256");
            }
        }
    }
    let (rounds, n) = (21, 20_000);
    println!("| bytes | implementation | min ns | median ns |");
    println!("|--:|---|--:|--:|");
    for len in lens {
        let mut res: Vec<Vec<f64>> = vec![vec![]; cands.len()];
        for _ in 0..rounds {
            for (i, (_, f, _)) in cands.iter().enumerate() {
                let mut data = vec![7u8; len];
                let c = thread_cpu_s();
                for _ in 0..n {
                    let h = f(black_box(&data));
                    data[..32].copy_from_slice(&h);
                }
                res[i].push((thread_cpu_s() - c) / n as f64 * 1e9);
            }
        }
        for (i, (name, _, _)) in cands.iter().enumerate() {
            let v = &mut res[i];
            v.sort_by(f64::total_cmp);
            println!("| {len} | {name} | {:.1} | {:.1} |", v[0], v[v.len() / 2]);
        }
    }
}
