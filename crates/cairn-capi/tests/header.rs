//! The committed header, `include/cairn.h`, is what cbindgen generates from the source now
//! (`build.rs`), so it never goes stale. After changing the API, rewrite it with
//! `CAIRN_UPDATE_HEADER=1 cargo test -p cairn-capi --test header` and commit it.

#[test]
fn committed_header_is_current() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("include/cairn.h");
    let generated = cairn_capi::GENERATED_HEADER;
    if std::env::var_os("CAIRN_UPDATE_HEADER").is_some() {
        std::fs::write(&path, generated).expect("include/cairn.h is writable");
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "{} is stale: run `CAIRN_UPDATE_HEADER=1 cargo test -p cairn-capi --test header` \
         and commit it",
        path.display()
    );
}
