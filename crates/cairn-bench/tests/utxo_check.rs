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

/// `utxo setup` of a 20,000-entry table for `engine` in `db`, with a small write buffer so the
/// runs after it merge often.
fn small_setup(engine: &str, db: &str) {
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
}

/// The arguments of a checked `utxo run` of `batches` batches in `mode` on `small_setup`'s table.
fn checked_run<'a>(engine: &'a str, db: &'a str, mode: &'a str, batches: &'a str) -> Vec<&'a str> {
    vec![
        "utxo",
        "run",
        "--engine",
        engine,
        "--db",
        db,
        "--mode",
        mode,
        "--batches",
        batches,
        "--check",
        "--write-buffer",
        "1000",
        "--cached",
    ]
}

#[test]
fn every_mode_passes_the_check_on_a_small_table() {
    let engines = std::env::var("CAIRN_BENCH_ENGINES").unwrap_or_else(|_| "cairn".into());
    let db = tempfile::tempdir().unwrap();
    let db = db.path().to_str().unwrap();
    for engine in engines.split(',') {
        small_setup(engine, db);
        // Pipelined at several depths: each batch's lookups are corrected with every update
        // applied after its view was taken. Once with a small read budget the concurrent
        // lookups share (Cairn's `SessionOptions::read_budget`; other engines ignore it).
        for (mode, depth, budget) in [
            ("serial", "1", "0"),
            ("pipelined", "1", "0"),
            ("pipelined", "2", "0"),
            ("pipelined", "4", "0"),
            ("pipelined", "4", "8"),
            ("lookup-only", "1", "0"),
        ] {
            let mut args = checked_run(engine, db, mode, "60");
            args.extend(["--pipeline-depth", depth, "--read-budget", budget]);
            let table = bench(&args);
            assert!(
                table.contains("yes, 0 mismatches"),
                "{engine} {mode}:\n{table}"
            );
        }
    }
}

/// `--max-run-seconds` ends a run after the batch during which the limit passed (pipelined:
/// once the batches in flight are applied and checked); the record gives the batches that ran
/// and the ones asked for, and a peer's next run, replaying exactly the batches that ran, still
/// finds every lookup's value.
#[test]
fn a_time_limit_ends_a_run_and_later_runs_still_check() {
    let engines = std::env::var("CAIRN_BENCH_ENGINES").unwrap_or_else(|_| "cairn".into());
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().to_str().unwrap();
    for engine in engines.split(',') {
        small_setup(engine, db);
        for (mode, batches, limit) in [
            ("pipelined", "1000000", Some("1")),
            ("serial", "1000000", Some("1")),
            ("pipelined", "40", None),
        ] {
            let json = dir.path().join(format!("{engine}-{mode}-{batches}.json"));
            let mut args = checked_run(engine, db, mode, batches);
            args.extend(["--json", json.to_str().unwrap()]);
            if let Some(limit) = limit {
                args.extend(["--max-run-seconds", limit]);
            }
            bench(&args);
            let record: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
            assert_eq!(record["mismatches"], 0, "{engine} {mode}: {record}");
            let ran = record["batches"].as_u64().unwrap();
            match limit {
                Some(limit) => {
                    assert!(ran > 0 && ran < 1_000_000, "{engine} {mode}: {record}");
                    assert_eq!(record["planned_batches"], 1_000_000, "{record}");
                    assert_eq!(record["time_limit_s"], limit.parse::<u64>().unwrap());
                    let seconds = record["seconds"].as_f64().unwrap();
                    assert!((1.0..30.0).contains(&seconds), "{engine} {mode}: {record}");
                }
                None => {
                    assert_eq!(ran, 40, "{record}");
                    assert!(record.get("planned_batches").is_none(), "{record}");
                }
            }
        }
    }
}

/// `text` with every run of spaces in a table row (a line starting with `|`) cut to one.
fn squeezed(text: &str) -> String {
    let squeeze = |line: &str| {
        let mut out = String::new();
        for c in line.chars() {
            if !(c == ' ' && out.ends_with(' ')) {
                out.push(c);
            }
        }
        out
    };
    let lines = text.lines().map(|line| {
        if line.starts_with('|') {
            squeeze(line)
        } else {
            line.to_string()
        }
    });
    lines.collect::<Vec<_>>().join("\n")
}

#[test]
fn suite_runs_every_mode_in_its_own_cgroup_and_writes_the_report() {
    let dir = tempfile::tempdir().unwrap();
    let (db, out) = (dir.path().join("db"), dir.path().join("out"));
    bench(&[
        "utxo",
        "suite",
        "--db",
        db.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--engines",
        "cairn",
        "--entries",
        "5000",
        "--batches",
        "20",
        "--pipelined-batches",
        "30",
        "--lookup-only-batches",
        "10",
        "--check",
        "--memory-limit",
        "512M",
        "--keep-page-cache",
        "--write-buffer",
        "1000",
        "--cached",
        "--background-merges-modes",
        "serial",
        "--settle-after-setup-s",
        "1",
    ]);
    // The cells' padding squeezed to one space: the report's tables pad their columns.
    let report = squeezed(&std::fs::read_to_string(out.join("README.md")).unwrap());
    assert!(
        report.contains("started 1 s after it, its writes flushed"),
        "{report}"
    );
    // Each mode's batches, in the record and the report.
    let suite: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("suite.json")).unwrap()).unwrap();
    assert_eq!(
        suite["mode_batches"],
        serde_json::json!({"serial": 20, "pipelined": 30, "lookup-only": 10})
    );
    assert_eq!(suite["batches"], 20);
    assert!(
        report.contains("timed batches per run: serial 20, pipelined 30, lookup-only 10."),
        "{report}"
    );
    // The throughput over time and Cairn's merge work per level.
    assert!(report.contains("## Throughput over time"), "{report}");
    assert!(report.contains("## Merge work per level"), "{report}");
    for (mode, batches) in [("serial", 20), ("pipelined", 30), ("lookup-only", 10)] {
        assert!(report.contains(&format!("| cairn | {mode} |")), "{report}");
        let path = out.join(format!("run-cairn-{mode}.json"));
        let record = std::fs::read_to_string(&path).unwrap();
        assert!(record.contains("\"mismatches\": 0"), "{record}");
        let json: serde_json::Value = serde_json::from_str(&record).unwrap();
        assert_eq!(json["batches"], batches, "{record}");
        assert!(
            json["throughput_window_s"].as_f64().unwrap() >= 1.0,
            "{record}"
        );
        // Every timed batch is in the series: its ops over the windows' time.
        let ops: f64 = json["throughput"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["ops_per_sec"].as_f64().unwrap() * p["seconds"].as_f64().unwrap())
            .sum();
        let per_batch = if mode == "lookup-only" { 256.0 } else { 768.0 };
        assert!(
            (ops - per_batch * batches as f64).abs() < 1e-3,
            "{mode}: {ops}"
        );
        assert!(json["level_work"]["levels"].is_array(), "{record}");
        assert!(
            out.join(format!("throughput-{mode}.svg")).exists(),
            "{mode}"
        );
        // Background merges in the serial run only, as asked.
        assert_eq!(
            record.contains(", background merges"),
            mode == "serial",
            "{mode}: {record}"
        );
        // The cgroup fields are present (null on a machine without a memory controller).
        assert!(record.contains("\"cgroup_peak_bytes\""), "{record}");
    }
    for chart in ["ops.svg", "latency.svg", "memory.svg"] {
        assert!(out.join(chart).exists(), "{chart}");
    }
    assert!(out.join("suite.json").exists());
}

#[test]
fn a_run_that_did_not_finish_makes_the_peer_table_unusable() {
    let Some(engine) = std::env::var("CAIRN_BENCH_ENGINES")
        .ok()
        .and_then(|e| e.split(',').find(|e| *e != "cairn").map(str::to_string))
    else {
        return; // Only peers change their table in place.
    };
    let db = tempfile::tempdir().unwrap();
    let db_path = db.path().to_str().unwrap();
    bench(&[
        "utxo",
        "setup",
        "--engine",
        &engine,
        "--db",
        db_path,
        "--entries",
        "2000",
    ]);
    std::fs::write(
        db.path().join(&engine).join("run-state.json"),
        r#"{"in_progress": true, "history": []}"#,
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_cairn-bench"))
        .args([
            "utxo",
            "run",
            "--engine",
            &engine,
            "--db",
            db_path,
            "--batches",
            "5",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("did not finish"));
}

/// `--protocol lsm-tree` fixes every mode's batches: a batch flag beside it is a usage error,
/// refused before anything runs.
#[test]
fn the_protocol_preset_refuses_batch_flags_beside_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let out = Command::new(env!("CARGO_BIN_EXE_cairn-bench"))
        .args(["utxo", "suite", "--db"])
        .arg(&db)
        .args(["--out"])
        .arg(dir.path().join("out"))
        .args(["--protocol", "lsm-tree", "--pipelined-batches", "5"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "a usage error");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("'--protocol <PROTOCOL>' cannot be used with '--pipelined-batches"),
        "{stderr}"
    );
    assert!(!db.exists(), "nothing ran");
    let help = bench(&["utxo", "suite", "--help"]);
    assert!(
        help.contains("--protocol <PROTOCOL>") && help.contains("lsm-tree"),
        "{help}"
    );
}

/// Every subcommand's `--help` is for a user: it names no internal issue number. And the
/// results table of a run says what its ops/s counts.
#[test]
fn help_texts_name_no_issue_and_the_table_explains_ops() {
    let top = bench(&["--help"]);
    let subcommands: Vec<String> = top
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next().map(String::from))
        .filter(|c| c != "help")
        .collect();
    assert!(subcommands.len() > 10, "{top}");
    let mut texts = vec![top];
    for sub in &subcommands {
        texts.push(bench(&[sub, "--help"]));
    }
    for sub in ["setup", "run", "quick", "suite"] {
        texts.push(bench(&["utxo", sub, "--help"]));
    }
    for text in &texts {
        let lower = text.to_lowercase();
        assert!(
            !lower.contains("issue 1")
                && !lower.contains("issue 2")
                && !lower.contains("issue 3")
                && !lower.contains("issue 4")
                && !lower.contains("issue 5"),
            "{text}"
        );
    }
    let out = bench(&["utxo", "quick", "--entries", "5000", "--batches", "20"]);
    assert!(
        out.contains("ops/s counts lookups, inserts and deletes"),
        "{out}"
    );
    assert!(
        out.contains("merge steps bound/update is the bound"),
        "{out}"
    );
}
