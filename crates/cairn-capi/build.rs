//! Generates the C header from the crate's `extern "C"` items with cbindgen, into
//! `$OUT_DIR/cairn.h`. The committed copy, `include/cairn.h`, is checked against it by
//! `tests/header.rs`; `CAIRN_UPDATE_HEADER=1 cargo test -p cairn-capi --test header` rewrites it.

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let out = std::env::var("OUT_DIR").expect("cargo sets OUT_DIR");
    println!("cargo:rerun-if-changed=src");
    println!("cargo:rerun-if-changed=cbindgen.toml");
    let config = cbindgen::Config::from_file(format!("{dir}/cbindgen.toml"))
        .expect("crates/cairn-capi/cbindgen.toml is valid");
    cbindgen::Builder::new()
        .with_crate(&dir)
        .with_config(config)
        .generate()
        .expect("cbindgen generates the header")
        .write_to_file(format!("{out}/cairn.h"));
}
