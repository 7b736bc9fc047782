//! What the verifier targets share: writing their honest seed inputs, once at start-up, into
//! the directory `CAIRN_FUZZ_SEEDS` names (`run-all.sh` sets it), so that the corpus starts
//! from inputs the target accepts.

/// Writes each `(name, input)` that `seeds` makes into `$CAIRN_FUZZ_SEEDS`, if set; nothing
/// otherwise (then `seeds` is not called).
pub fn write_if_asked(seeds: impl FnOnce() -> Vec<(String, Vec<u8>)>) {
    if let Some(dir) = std::env::var_os("CAIRN_FUZZ_SEEDS") {
        let dir = std::path::PathBuf::from(dir);
        std::fs::create_dir_all(&dir).expect("the seed directory");
        for (name, input) in seeds() {
            std::fs::write(dir.join(name), input).expect("a seed file");
        }
    }
}
