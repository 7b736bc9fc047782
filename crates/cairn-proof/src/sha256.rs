//! SHA-256, once for the whole crate: the trie's SHA-256 domain hashes (`hash`), the RFC 9162
//! hashes of the history tree and the ledger root (`history`, `ledger`) all call it, so that one
//! choice of implementation serves every verifier and the engine's trie alike.
//!
//! Owns: the choice of implementation and how inputs reach it. May call `ring` or `sha2`,
//! nothing else.
//!
//! **Implementation.** With the `ring` feature (on by default) on x86_64 and aarch64, `ring`'s
//! SHA-256: OpenSSL's assembly, which picks SHA-NI, AVX2 or SSSE3 code (ARMv8's SHA-2
//! instructions on aarch64) at run time. Otherwise the `sha2` crate (portable Rust, or SHA-NI and
//! ARMv8's instructions where the CPU has them), which needs no C compiler. Both compute SHA-256
//! (FIPS 180-4); `tests::backend_is_sha2` checks every input length up to 300 bytes against
//! `sha2`, and the golden files pin the roots either way.
//!
//! Measured on the project's machine (Xeon @ 2.5 GHz with AVX2 and AVX-512, no SHA-NI), one core,
//! CPU time per hash of a 65-byte node: `ring` 0.17 424 ns, `sha2` 0.10 702 ns (its `asm`
//! feature 618 ns); 35 to 48 bytes (one block): 242 to 248 against 364 to 365 ns
//! (`docs/benchmarks/2026-11-29-receipt-verify/`).
//!
//! Inputs of at most [`STACK_BYTES`] are gathered in a stack buffer and hashed in one call (one
//! call into `ring` costs about 60 ns besides the blocks, and each extra `update` about 7 ns);
//! longer ones are streamed.

use crate::hash::Hash;

/// Inputs up to this many bytes are hashed from one stack buffer.
const STACK_BYTES: usize = 128;

/// `SHA-256(prefix ‖ parts[0] ‖ parts[1] ‖ …)`: a domain-separated hash.
pub(crate) fn digest_prefixed(prefix: u8, parts: &[&[u8]]) -> Hash {
    let len = 1 + parts.iter().map(|p| p.len()).sum::<usize>();
    if len <= STACK_BYTES {
        let mut buf = [0u8; STACK_BYTES];
        buf[0] = prefix;
        let mut at = 1;
        for part in parts {
            buf[at..at + part.len()].copy_from_slice(part);
            at += part.len();
        }
        return backend::digest(&buf[..len]);
    }
    let mut h = backend::Hasher::new();
    h.update(&[prefix]);
    for part in parts {
        h.update(part);
    }
    h.finish()
}

/// `SHA-256(prefix ‖ left ‖ right)`: a node of a binary tree (65 bytes, two compressions).
#[inline]
pub(crate) fn node(prefix: u8, left: &Hash, right: &Hash) -> Hash {
    let mut buf = [0u8; 65];
    buf[0] = prefix;
    buf[1..33].copy_from_slice(left);
    buf[33..].copy_from_slice(right);
    backend::digest(&buf)
}

#[cfg(all(feature = "ring", any(target_arch = "x86_64", target_arch = "aarch64")))]
mod backend {
    use crate::hash::Hash;
    use ring::digest::{Context, SHA256};

    fn out(d: &ring::digest::Digest) -> Hash {
        let mut h = [0u8; 32];
        h.copy_from_slice(d.as_ref());
        h
    }

    pub(super) fn digest(data: &[u8]) -> Hash {
        out(&ring::digest::digest(&SHA256, data))
    }

    pub(super) struct Hasher(Context);

    impl Hasher {
        pub(super) fn new() -> Hasher {
            Hasher(Context::new(&SHA256))
        }

        pub(super) fn update(&mut self, data: &[u8]) {
            self.0.update(data);
        }

        pub(super) fn finish(self) -> Hash {
            out(&self.0.finish())
        }
    }
}

#[cfg(not(all(feature = "ring", any(target_arch = "x86_64", target_arch = "aarch64"))))]
mod backend {
    use crate::hash::Hash;
    use sha2::{Digest as _, Sha256};

    pub(super) fn digest(data: &[u8]) -> Hash {
        Sha256::digest(data).into()
    }

    pub(super) struct Hasher(Sha256);

    impl Hasher {
        pub(super) fn new() -> Hasher {
            Hasher(Sha256::new())
        }

        pub(super) fn update(&mut self, data: &[u8]) {
            self.0.update(data);
        }

        pub(super) fn finish(self) -> Hash {
            self.0.finalize().into()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;
    use sha2::{Digest as _, Sha256};

    fn sha2(data: &[u8]) -> Hash {
        Sha256::digest(data).into()
    }

    /// Whatever the backend, it is `sha2`'s SHA-256: every length to 300 bytes (one, two, three
    /// and more blocks, the padding's edges at 55/56 and 119/120 bytes), whole, prefixed, split
    /// into parts on either side of the stack buffer's size, and as a node.
    #[test]
    fn backend_is_sha2() {
        let bytes: Vec<u8> = (0..300u32).map(|i| (i * 167 + 13) as u8).collect();
        for len in 0..=bytes.len() {
            let data = &bytes[..len];
            assert_eq!(backend::digest(data), sha2(data), "{len} bytes");
            if len == 0 {
                continue;
            }
            let (prefix, rest) = (data[0], &data[1..]);
            let third = rest.len() / 3;
            let parts = [&rest[..third], &rest[third..2 * third], &rest[2 * third..]];
            assert_eq!(digest_prefixed(prefix, &parts), sha2(data), "{len} bytes");
            assert_eq!(digest_prefixed(prefix, &[rest]), sha2(data), "{len} bytes");
        }
        assert_eq!(digest_prefixed(7, &[]), sha2(&[7]));
        let (l, r) = ([1u8; 32], [2u8; 32]);
        let mut joined = alloc::vec![5u8];
        joined.extend_from_slice(&l);
        joined.extend_from_slice(&r);
        assert_eq!(node(5, &l, &r), sha2(&joined));
        // FIPS 180-4's example "abc".
        assert_eq!(
            backend::digest(b"abc")[..4],
            [0xba, 0x78, 0x16, 0xbf],
            "SHA-256(\"abc\") starts ba7816bf"
        );
    }
}
