//! The Bloom filter decoder: accepted filters can be probed and re-encode to the same bytes.
#![no_main]
use cairn::bloom::BloomFilter;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(filter) = BloomFilter::decode(data) {
        for hash in [0u64, 1, u64::MAX, 0x9E37_79B9_7F4A_7C15] {
            filter.prefetch(hash);
            let _ = filter.contains_hash(hash);
        }
        assert_eq!(filter.encode(), data);
    }
});
