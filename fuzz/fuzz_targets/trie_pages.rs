//! The trie's storage decoders (manifest, page log segment, pages): any bytes give a value or
//! an error, never a panic; accepted values re-encode to the same bytes.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = cairn::fuzzing::trie_pages(data);
});
