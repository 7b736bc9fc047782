//! `utxo setup` then `utxo run --check` in every mode, on a small Cairn table: every lookup result
//! must match the model (the command fails otherwise). Peers are checked the same way when the
//! binary is built with their features (`CAIRN_BENCH_ENGINES=cairn,lmdb,fjall`).

use std::process::Command;

fn bench(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_cairn-bench"))
        .args(args)
        .output()
        .expect("runs cairn-bench");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "cairn-bench {args:?} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn every_mode_passes_the_check_on_a_small_table() {
    let engines = std::env::var("CAIRN_BENCH_ENGINES").unwrap_or_else(|_| "cairn".into());
    let db = tempfile::tempdir().unwrap();
    let db = db.path().to_str().unwrap();
    for engine in engines.split(',') {
        bench(&[
            "utxo",
            "setup",
            "--engine",
            engine,
            "--db",
            db,
            "--entries",
            "20000",
            "--write-buffer",
            "1000",
            "--cached",
        ]);
        for mode in ["serial", "pipelined", "lookup-only"] {
            let table = bench(&[
                "utxo",
                "run",
                "--engine",
                engine,
                "--db",
                db,
                "--batches",
                "60",
                "--mode",
                mode,
                "--check",
                "--write-buffer",
                "1000",
                "--cached",
            ]);
            assert!(
                table.contains("yes, 0 mismatches"),
                "{engine} {mode}:\n{table}"
            );
        }
    }
}
