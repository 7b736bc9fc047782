//! The index decoder (compact and ordinary): accepted indexes can be searched and re-encode to
//! the same bytes.
#![no_main]
use cairn::index::Index;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(index) = Index::decode(data) {
        for key in [&b""[..], b"a", b"key-050", &[0xff; 40]] {
            let _ = index.search(key);
        }
        assert_eq!(index.encode(), data);
    }
});
