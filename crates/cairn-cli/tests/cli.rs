//! The `cairn` command on real directories made by the engine: sound ones, damaged ones (a
//! flipped bit, a missing file, a truncated file), a directory that is not Cairn's, and a
//! session locked by a live owner. Every subcommand, in text and JSON.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use cairn::{AuthConfig, Session, SessionOptions, TableConfig, Update};
use serde_json::Value;

/// Runs the `cairn` command. (A child that another test thread is spawning shares this
/// process's descriptors until it execs, the lock of a session this thread just dropped among
/// them; the command's own `Session::open` waits that moment out, see `fs::LOCK_WAIT`.)
fn cairn(args: &[&dyn AsRef<std::ffi::OsStr>]) -> Output {
    let output = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(args.iter().map(|a| a.as_ref()))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    output
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).unwrap()
}

fn code(o: &Output) -> i32 {
    o.status.code().unwrap()
}

/// A session with snapshot `plain` (blobs, deletes, long values, merges in progress) and
/// `auth` (an authenticated table); returns the contents of `plain` and the root of `auth`.
/// Key to value and blob.
type Model = BTreeMap<Vec<u8>, (Vec<u8>, Option<Vec<u8>>)>;

fn make(dir: &Path) -> (Model, cairn::Root) {
    let session = Session::open(dir).unwrap();
    let config = TableConfig::default()
        .write_buffer_entries(64)
        .merge_batch_size(8);
    let plain = session.new_table(config.clone()).unwrap();
    let mut model = BTreeMap::new();
    for i in 0..2000u32 {
        let key = format!("key{:05}", i * 7 % 3000).into_bytes();
        let value = format!("value {i}").into_bytes();
        match i % 9 {
            0 => {
                plain.delete(&key).unwrap();
                model.remove(&key);
            }
            3 => {
                let blob = vec![i as u8; 100];
                plain
                    .updates(&[(&key, Update::InsertWithBlob(&value, &blob))])
                    .unwrap();
                model.insert(key, (value, Some(blob)));
            }
            7 => {
                let long = vec![b'x'; 6000];
                plain.insert(&key, &long).unwrap();
                model.insert(key, (long, None));
            }
            _ => {
                plain.insert(&key, &value).unwrap();
                model.insert(key, (value, None));
            }
        }
    }
    plain.save_snapshot("plain", "ledger").unwrap();
    let auth = session
        .new_table(config.auth(Some(AuthConfig::default())))
        .unwrap();
    for i in 0..500u32 {
        auth.insert(format!("account{i}"), i.to_le_bytes()).unwrap();
    }
    auth.save_snapshot("auth", "accounts").unwrap();
    (model, auth.root().unwrap().root)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Every file under `dir` and its bytes.
fn tree(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.push((path.clone(), Vec::new()));
            out.extend(tree(&path));
        } else {
            let bytes = std::fs::read(&path).unwrap();
            out.push((path, bytes));
        }
    }
    out.sort();
    out
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        let target = to.join(path.file_name().unwrap());
        if path.is_dir() {
            copy_tree(&path, &target);
        } else {
            std::fs::copy(&path, &target).unwrap();
        }
    }
}

#[test]
fn every_subcommand_has_help() {
    let o = cairn(&[&"--help"]);
    assert_eq!(code(&o), 0);
    assert!(stdout(&o).contains("Exit codes"), "{}", stdout(&o));
    for sub in [
        "info",
        "verify",
        "dump",
        "scan",
        "get",
        "root",
        "prove",
        "diff",
        "load",
        "checkpoint",
        "compact",
        "wal",
        "repair",
        "stats",
        "export",
        "import",
        "delete",
        "audit",
    ] {
        let o = cairn(&[&sub, &"--help"]);
        assert_eq!(code(&o), 0, "{sub}");
        assert!(stdout(&o).contains("Usage: cairn"), "{sub}: {}", stdout(&o));
    }
    // A usage error is exit code 2.
    assert_eq!(code(&cairn(&[&"info"])), 2);
    assert_eq!(code(&cairn(&[&"frobnicate"])), 2);
}

#[test]
fn read_only_commands_on_a_sound_session_held_by_its_owner() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (model, root) = make(dir);
    // The owner is alive and holds the lock: the read-only commands need none.
    let _owner = Session::open(dir).unwrap();
    let before = tree(dir);

    let o = cairn(&[&"info", &dir]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let text = stdout(&o);
    assert!(
        text.contains("2 snapshots") && text.contains("\"plain\"") && text.contains("\"auth\"")
    );
    assert!(text.contains(&hex(&root.hash)), "{text}");
    assert!(!text.contains("salt"));
    let o = cairn(&[&"info", &dir, &"--salt", &"--json"]);
    let doc: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(doc["salt"].is_u64());
    let snaps = doc["snapshots"].as_array().unwrap();
    assert_eq!(snaps.len(), 2);
    assert_eq!(snaps[0]["name"], "auth");
    assert_eq!(snaps[0]["auth"]["root"], hex(&root.hash));
    assert!(snaps[1]["stored_entries"].as_u64().unwrap() >= model.len() as u64);
    assert!(snaps[1].get("live_entries").is_none());
    // Live entries apart from stored ones (the table has deletes and overwritten keys).
    let o = cairn(&[&"info", &dir, &"--live", &"--json"]);
    let doc: Value = serde_json::from_slice(&o.stdout).unwrap();
    let plain = &doc["snapshots"][1];
    assert_eq!(plain["live_entries"], model.len() as u64);
    assert!(plain["stored_entries"].as_u64().unwrap() > model.len() as u64);
    let o = cairn(&[&"info", &dir, &"--live"]);
    let n = model.len();
    let shown = format!("{},{:03} entries live", n / 1000, n % 1000);
    assert!(stdout(&o).contains(&shown), "{}", stdout(&o));
    assert!(!snaps[1]["runs"].as_array().unwrap().is_empty());

    let o = cairn(&[&"verify", &dir]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    assert!(
        stdout(&o).contains("0 of 2 snapshots damaged"),
        "{}",
        stdout(&o)
    );
    assert!(stdout(&o).contains(&format!("sha256:{}", hex(&root.hash))));
    let o = cairn(&[&"verify", &dir, &"plain", &"--json"]);
    let doc: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(doc["snapshots"][0]["sound"], true);
    assert_eq!(doc["snapshots"][0]["entries"], model.len() as u64);

    // dump, in each format, whole and by range.
    let o = cairn(&[&"dump", &dir, &"plain", &"--blobs"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let expected: String = model
        .iter()
        .map(|(k, (v, b))| {
            let blob = b.as_deref().map_or("-".to_string(), hex);
            format!("{} {} {blob}\n", hex(k), hex(v))
        })
        .collect();
    assert_eq!(stdout(&o), expected);
    let o = cairn(&[
        &"dump",
        &dir,
        &"plain",
        &"--from",
        &"key01000",
        &"--to",
        &"hex:6b65793031313030",
        &"--format",
        &"json",
    ]);
    let lines: Vec<Value> = stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let in_range: Vec<_> = model
        .range(b"key01000".to_vec()..b"key01100".to_vec())
        .collect();
    assert_eq!(lines.len(), in_range.len());
    for (line, (k, (v, b))) in lines.iter().zip(in_range) {
        assert_eq!(line["key"], hex(k));
        assert_eq!(line["value"], hex(v));
        assert_eq!(
            line["blob_bytes"].as_u64(),
            b.as_ref().map(|b| b.len() as u64)
        );
    }
    let o = cairn(&[
        &"dump",
        &dir,
        &"plain",
        &"--format",
        &"raw",
        &"--limit",
        &"10",
    ]);
    let mut raw = &o.stdout[..];
    let mut field = || {
        let len = u32::from_le_bytes(raw[..4].try_into().unwrap()) as usize;
        let bytes = raw[4..4 + len].to_vec();
        raw = &raw[4 + len..];
        bytes
    };
    for (k, (v, _)) in model.iter().take(10) {
        assert_eq!((&field(), &field()), (k, v));
    }
    assert!(raw.is_empty());
    assert_eq!(
        code(&cairn(&[&"dump", &dir, &"plain", &"--from", &"hex:zz"])),
        2
    );
    let o = cairn(&[
        &"dump",
        &dir,
        &"plain",
        &"--format",
        &"text",
        &"--limit",
        &"1",
    ]);
    let (k, (v, _)) = model.iter().next().unwrap();
    let text = String::from_utf8_lossy(v).replace(' ', "\\x20");
    assert_eq!(
        stdout(&o),
        format!("{} {text}\n", String::from_utf8_lossy(k))
    );

    let o = cairn(&[&"stats", &dir, &"plain"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(stdout(&o).contains("bits/key"), "{}", stdout(&o));
    let o = cairn(&[&"stats", &dir, &"plain", &"--json", &"--sample", &"5000"]);
    let doc: Value = serde_json::from_slice(&o.stdout).unwrap();
    let runs = doc["runs"].as_array().unwrap();
    assert!(runs.iter().any(|r| r["overflow_pages"].as_u64() > Some(0)));
    assert!(runs.iter().any(|r| r["blob_bytes"].as_u64() > Some(0)));
    for r in runs {
        assert!(r["filter_fpr_measured"].as_f64().unwrap() < 0.05, "{r}");
    }

    // Nothing changed, and the owner's lock still stops the commands that write.
    assert_eq!(tree(dir), before);
    let o = cairn(&[&"delete", &dir, &"plain"]);
    assert_eq!(code(&o), 4, "{}", stderr(&o));
    assert!(stderr(&o).contains("locked"), "{}", stderr(&o));
    assert_eq!(tree(dir), before);
}

#[test]
fn export_import_and_delete() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    std::fs::create_dir(&dir).unwrap();
    let (model, _) = make(&dir);
    let target = tmp.path().join("backup");
    let o = cairn(&[&"export", &dir, &"plain", &target]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    // Into another session with the same salt.
    let salt = Session::open(&dir).unwrap().salt();
    let other = tmp.path().join("other");
    std::fs::create_dir(&other).unwrap();
    let options = SessionOptions::default().salt(Some(salt));
    drop(Session::open_with_options(&other, options).unwrap());
    let o = cairn(&[&"import", &other, &"restored", &target, &"--json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let o = cairn(&[&"dump", &other, &"restored"]);
    assert_eq!(stdout(&o).lines().count(), model.len());
    // A damaged export is refused and leaves nothing behind.
    let keyops = target.join("0.keyops");
    let mut bytes = std::fs::read(&keyops).unwrap();
    bytes[100] ^= 1;
    std::fs::write(&keyops, bytes).unwrap();
    let o = cairn(&[&"import", &other, &"bad", &target]);
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    assert!(stderr(&o).contains("0.keyops"), "{}", stderr(&o));
    assert!(!other.join("snapshots").join("bad").exists());
    // Delete, then the snapshot is gone.
    let o = cairn(&[&"delete", &other, &"restored"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let o = cairn(&[&"delete", &other, &"restored"]);
    assert_eq!(code(&o), 3);
    assert!(stderr(&o).contains("does not exist"), "{}", stderr(&o));
    // A directory that is not a session is never made one.
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    assert_eq!(code(&cairn(&[&"import", &empty, &"x", &target])), 3);
    assert!(std::fs::read_dir(&empty).unwrap().next().is_none());
}

#[test]
fn damaged_and_foreign_directories() {
    let tmp = tempfile::tempdir().unwrap();
    let pristine = tmp.path().join("pristine");
    std::fs::create_dir(&pristine).unwrap();
    make(&pristine);
    let snapshot = |root: &Path| root.join("snapshots").join("plain");
    let mut case = 0;
    let mut damaged = |file: &str, f: &dyn Fn(&Path)| {
        case += 1;
        let root = tmp.path().join(format!("case{case}"));
        copy_tree(&pristine, &root);
        let path = snapshot(&root).join(file);
        f(&path);
        let o = cairn(&[&"verify", &root]);
        assert_eq!(code(&o), 1, "{file}: {}", stdout(&o));
        let text = stdout(&o);
        assert!(text.contains(&path.display().to_string()), "{file}: {text}");
        assert!(text.contains("1 of 2 snapshots damaged"), "{text}");
        let o = cairn(&[&"verify", &root, &"plain", &"--json"]);
        let doc: Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(doc["snapshots"][0]["sound"], false);
        // The others refuse cleanly, in one line.
        for args in [vec!["dump", "plain"], vec!["stats", "plain"]] {
            let mut full: Vec<&dyn AsRef<std::ffi::OsStr>> = vec![&args[0], &root];
            full.extend(args[1..].iter().map(|a| a as &dyn AsRef<std::ffi::OsStr>));
            let o = cairn(&full);
            assert!(
                matches!(code(&o), 1 | 3),
                "{args:?} on {file}: {}",
                stderr(&o)
            );
            assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
        }
        let o = cairn(&[&"info", &root]);
        assert!(matches!(code(&o), 0 | 1), "{}", stderr(&o));
        std::fs::remove_dir_all(&root).unwrap();
    };
    damaged("0.keyops", &|p| {
        let mut bytes = std::fs::read(p).unwrap();
        bytes[5000] ^= 4;
        std::fs::write(p, bytes).unwrap();
    });
    damaged("metadata", &|p| {
        let mut bytes = std::fs::read(p).unwrap();
        bytes[20] ^= 1;
        std::fs::write(p, bytes).unwrap();
    });
    damaged("1.index", &|p| std::fs::remove_file(p).unwrap());
    damaged("0.filter", &|p| {
        let bytes = std::fs::read(p).unwrap();
        std::fs::write(p, &bytes[..bytes.len() / 2]).unwrap();
    });

    // Not a session: every command says so in one line, exit code 3.
    let foreign = tmp.path().join("foreign");
    std::fs::create_dir(&foreign).unwrap();
    std::fs::write(foreign.join("notes.txt"), "hello").unwrap();
    let missing = tmp.path().join("missing");
    let file = tmp.path().join("a-file");
    std::fs::write(&file, "not a directory").unwrap();
    let hollow = tmp.path().join("hollow");
    std::fs::create_dir(&hollow).unwrap();
    for (dir, says) in [
        (&foreign, "not a Cairn session"),
        (&missing, "does not exist"),
        (&file, "is a file"),
        (&hollow, "is an empty directory"),
    ] {
        for args in [
            vec!["info"],
            vec!["verify"],
            vec!["dump", "s"],
            vec!["stats", "s"],
            vec!["delete", "s"],
            vec!["export", "s", "/tmp/never"],
        ] {
            let mut full: Vec<&dyn AsRef<std::ffi::OsStr>> = vec![&args[0], dir];
            full.extend(args[1..].iter().map(|a| a as &dyn AsRef<std::ffi::OsStr>));
            let o = cairn(&full);
            assert_eq!(code(&o), 3, "{args:?}: {}", stderr(&o));
            assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
            assert!(stderr(&o).contains(says), "{args:?}: {}", stderr(&o));
        }
    }
    assert_eq!(tree(&foreign).len(), 1);
    assert_eq!(std::fs::read_dir(&hollow).unwrap().count(), 0);
    // A missing snapshot.
    let o = cairn(&[&"verify", &pristine, &"nope"]);
    assert_eq!(code(&o), 3);
    assert!(stderr(&o).contains("does not exist"));
}

/// `cairn audit` on a verifiable ledger: clean against the digests it published (text and
/// JSON), damaged (exit 1, the problem named) against a forged digest and one beyond its
/// versions, a usage error for a malformed digests file, a failure for a plain session.
#[test]
fn audit_a_ledger_against_published_digests() {
    use cairn_ledger::{Ledger, LedgerBatch, LedgerConfig};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger");
    let mut lines = String::from("# size root\n");
    {
        let config = LedgerConfig::new(["accounts"]).history(4);
        let ledger = Ledger::open(&path, config).unwrap();
        for i in 0..10u32 {
            let c = ledger
                .write(LedgerBatch::new().insert("accounts", format!("k{i}"), "v"))
                .unwrap()
                .unwrap();
            c.durability.wait().unwrap();
            lines.push_str(&format!("{} {}\n", c.digest.size, hex(&c.digest.root)));
        }
        ledger.close();
    }
    let digests = dir.path().join("digests");
    std::fs::write(&digests, &lines).unwrap();
    let o = cairn(&[&"audit", &path, &"--digests", &digests]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).contains("10 versions"), "{}", stdout(&o));
    assert!(stdout(&o).contains("clean"), "{}", stdout(&o));
    let o = cairn(&[&"--json", &"audit", &path, &"--digests", &digests]);
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["clean"], true);
    assert_eq!(v["digests_checked"], 10);
    assert_eq!(
        v["versions_rebuilt"], 4,
        "the kept versions, from their undo records"
    );

    lines.push_str(&format!("4 {}\n", "ab".repeat(32)));
    lines.push_str(&format!("12 {}\n", "cd".repeat(32)));
    std::fs::write(&digests, &lines).unwrap();
    let o = cairn(&[&"--json", &"audit", &path, &"--digests", &digests]);
    assert_eq!(code(&o), 1, "{}{}", stdout(&o), stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["clean"], false);
    assert_eq!(v["first_bad_version"], 4);
    assert_eq!(v["problems"].as_array().unwrap().len(), 2, "{v}");

    std::fs::write(&digests, "ten 00\n").unwrap();
    let o = cairn(&[&"audit", &path, &"--digests", &digests]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("line 1"), "{}", stderr(&o));

    let plain = dir.path().join("plain");
    Session::open(&plain).unwrap().close();
    let o = cairn(&[&"audit", &plain]);
    assert_eq!(code(&o), 3, "{}", stderr(&o));
}

/// Every command that prints, its output going to a reader that closed before reading
/// (`cairn info DIR | head -0`): it ends quietly, with its usual exit code or 0, never a
/// panic (exit 101).
#[test]
fn a_closed_pipe_ends_every_command_quietly() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    make(dir);
    let d = dir.as_os_str();
    let commands: Vec<Vec<&std::ffi::OsStr>> = vec![
        vec!["info".as_ref(), d, "--salt".as_ref()],
        vec!["info".as_ref(), d, "--json".as_ref()],
        vec!["verify".as_ref(), d],
        vec!["verify".as_ref(), d, "plain".as_ref(), "--json".as_ref()],
        vec!["dump".as_ref(), d, "plain".as_ref()],
        vec!["dump".as_ref(), d, "plain".as_ref(), "--json".as_ref()],
        vec!["stats".as_ref(), d, "plain".as_ref()],
        vec!["stats".as_ref(), d, "plain".as_ref(), "--json".as_ref()],
        vec!["scan".as_ref(), d, "plain".as_ref(), "--reverse".as_ref()],
        vec!["get".as_ref(), d, "plain".as_ref(), "key00007".as_ref()],
        vec!["root".as_ref(), d, "auth".as_ref()],
        vec!["prove".as_ref(), d, "auth".as_ref(), "account1".as_ref()],
        vec!["diff".as_ref(), d, "plain".as_ref(), "auth".as_ref()],
        vec!["wal".as_ref(), d, "--records".as_ref()],
        vec!["checkpoint".as_ref(), d],
        vec!["compact".as_ref(), d, "--json".as_ref()],
        vec!["repair".as_ref(), d],
        vec![
            "repair".as_ref(),
            d,
            "--salvage".as_ref(),
            "plain".as_ref(),
            "--dry-run".as_ref(),
        ],
    ];
    for args in commands {
        let mut child = Command::new(env!("CARGO_BIN_EXE_cairn"))
            .args(&args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // The reader goes away before the command has written anything.
        drop(child.stdout.take());
        let o = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert_eq!(o.status.code(), Some(0), "{args:?}: {err}");
    }
}

/// The lines `dump` prints in hex (with blobs) for `model`.
fn hex_lines(model: &Model) -> String {
    model
        .iter()
        .map(|(k, (v, b))| {
            let blob = b.as_deref().map_or("-".to_string(), hex);
            format!("{} {} {blob}\n", hex(k), hex(v))
        })
        .collect()
}

#[test]
fn get_scan_and_diff_read_a_snapshot_as_its_model_says() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (model, _) = make(dir);

    // get: present, absent (exit code 5), by hex, in JSON.
    let (present, (value, _)) = model.iter().nth(10).unwrap();
    let key = String::from_utf8(present.clone()).unwrap();
    let o = cairn(&[&"get", &dir, &"plain", &key]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(stdout(&o).starts_with(&format!("{key} ")), "{}", stdout(&o));
    let o = cairn(&[&"get", &dir, &"plain", &key, &"nokey", &"--json"]);
    assert_eq!(code(&o), 5, "{}", stderr(&o));
    let doc: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(doc["keys"][0]["value"], hex(value));
    assert_eq!(doc["keys"][1]["value"], Value::Null);
    let o = cairn(&[
        &"get",
        &dir,
        &"plain",
        &format!("hex:{}", hex(present)),
        &"--format",
        &"hex",
    ]);
    assert_eq!(stdout(&o), format!("{} {}\n", hex(present), hex(value)));
    let o = cairn(&[&"get", &dir, &"plain", &"nokey"]);
    assert_eq!((code(&o), stdout(&o).as_str()), (5, "nokey absent\n"));

    // scan is dump; a prefix, a reverse order, a limit.
    let o = cairn(&[&"scan", &dir, &"plain", &"--blobs"]);
    assert_eq!(stdout(&o), hex_lines(&model));
    let prefixed: Model = (model.iter())
        .filter(|(k, _)| k.starts_with(b"key010"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    assert!(prefixed.len() > 5);
    let o = cairn(&[&"scan", &dir, &"plain", &"--prefix", &"key010", &"--blobs"]);
    assert_eq!(stdout(&o), hex_lines(&prefixed));
    let o = cairn(&[
        &"scan",
        &dir,
        &"plain",
        &"--prefix",
        &"key010",
        &"--reverse",
        &"--limit",
        &"3",
    ]);
    let want: Vec<String> = (prefixed.iter().rev().take(3))
        .map(|(k, (v, _))| format!("{} {}", hex(k), hex(v)))
        .collect();
    assert_eq!(stdout(&o).lines().collect::<Vec<_>>(), want);
    let o = cairn(&[&"scan", &dir, &"plain", &"--reverse", &"--json"]);
    let keys: Vec<String> = (stdout(&o).lines())
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["key"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    let want: Vec<String> = model.keys().rev().map(|k| hex(k)).collect();
    assert_eq!(keys, want);

    // diff against a changed copy: exactly the changes, in key order.
    let mut changed = model.clone();
    {
        let session = Session::open(dir).unwrap();
        let table = session
            .open_snapshot("plain", "ledger", Default::default())
            .unwrap();
        let keys: Vec<Vec<u8>> = model.keys().cloned().collect();
        table.delete(&keys[3]).unwrap();
        changed.remove(&keys[3]);
        table.insert(&keys[5], "changed").unwrap();
        changed.insert(keys[5].clone(), (b"changed".to_vec(), None));
        table.insert("zz-new", "added").unwrap();
        changed.insert(b"zz-new".to_vec(), (b"added".to_vec(), None));
        table.save_snapshot("plain2", "ledger").unwrap();
        let o = cairn(&[&"diff", &dir, &"plain", &"plain2"]);
        assert_eq!(code(&o), 0, "{}", stderr(&o));
        let text = stdout(&o);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{text}");
        assert!(lines[0].starts_with(&format!("- {}", String::from_utf8_lossy(&keys[3]))));
        assert!(lines[1].starts_with(&format!("~ {}", String::from_utf8_lossy(&keys[5]))));
        assert!(lines[1].ends_with("-> changed"), "{}", lines[1]);
        assert_eq!(lines[2], "+ zz-new added");
        assert!(
            lines[3].starts_with("1 removed, 1 added, 1 changed"),
            "{}",
            lines[3]
        );
        let o = cairn(&[&"diff", &dir, &"plain", &"plain2", &"--json"]);
        let last: Value = serde_json::from_str(stdout(&o).lines().last().unwrap()).unwrap();
        assert_eq!(last["same"], (model.len() - 2) as u64);
        let o = cairn(&[&"diff", &dir, &"plain", &"plain"]);
        assert!(stdout(&o).starts_with("0 removed, 0 added, 0 changed"));
        // A blob of the same length with other bytes, under the same value, is a change.
        let (key, (value, blob)) = (changed.iter())
            .find(|(_, (_, blob))| blob.is_some())
            .unwrap();
        let other = vec![!blob.as_ref().unwrap()[0]; blob.as_ref().unwrap().len()];
        table
            .updates(&[(key, Update::InsertWithBlob(value, &other))])
            .unwrap();
        table.save_snapshot("plain3", "ledger").unwrap();
        let o = cairn(&[&"diff", &dir, &"plain2", &"plain3"]);
        let text = stdout(&o);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(lines[0].starts_with(&format!("~ {}", String::from_utf8_lossy(key))));
        assert!(
            lines[1].starts_with("0 removed, 0 added, 1 changed"),
            "{text}"
        );
    }
    let o = cairn(&[&"dump", &dir, &"plain2", &"--blobs"]);
    assert_eq!(stdout(&o), hex_lines(&changed));
}

#[test]
fn root_and_prove_an_authenticated_snapshot() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (_, root) = make(dir);
    let o = cairn(&[&"root", &dir, &"auth"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        stdout(&o).contains(&format!("sha256:{}", hex(&root.hash))),
        "{}",
        stdout(&o)
    );
    let o = cairn(&[&"root", &dir, &"plain"]);
    assert_eq!(code(&o), 3);
    assert!(
        stderr(&o).contains("not an authenticated table"),
        "{}",
        stderr(&o)
    );

    let o = cairn(&[&"prove", &dir, &"auth", &"account7", &"nobody"]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    let text = stdout(&o);
    assert!(
        text.contains("account7 present") && text.contains("nobody absent"),
        "{text}"
    );
    assert!(text.contains("verified against the root"), "{text}");
    // The proof printed verifies, by itself, against the root the test knows.
    let o = cairn(&[
        &"prove",
        &dir,
        &"auth",
        &"account7",
        &"nobody",
        &"--encoded",
        &"--json",
    ]);
    let doc: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(doc["verified"], true);
    assert_eq!(doc["root"], hex(&root.hash));
    let proof: Vec<u8> = (0..doc["proof"].as_str().unwrap().len() / 2)
        .map(|i| u8::from_str_radix(&doc["proof"].as_str().unwrap()[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    let seven = 7u32.to_le_bytes();
    let claims = [
        cairn_proof::Claim::present(b"account7", &seven),
        cairn_proof::Claim::absent(b"nobody"),
    ];
    cairn_proof::verify(&root, &proof, &claims).unwrap();
    // A forged claim against it fails: the proof binds the value.
    let eight = 8u32.to_le_bytes();
    let forged = [
        cairn_proof::Claim::present(b"account7", &eight),
        cairn_proof::Claim::absent(b"nobody"),
    ];
    assert!(cairn_proof::verify(&root, &proof, &forged).is_err());
}

#[test]
fn load_reads_back_what_dump_wrote() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (model, root) = make(dir);
    let files = tempfile::tempdir().unwrap();
    for (format, blobs, name) in [
        ("hex", true, "fromhex"),
        ("json", true, "fromjson"),
        ("raw", false, "fromraw"),
    ] {
        let mut args: Vec<&dyn AsRef<std::ffi::OsStr>> =
            vec![&"dump", &dir, &"plain", &"--format", &format];
        if blobs {
            args.push(&"--blobs");
        }
        let o = cairn(&args);
        let file = files.path().join(name);
        std::fs::write(&file, &o.stdout).unwrap();
        let o = cairn(&[&"load", &dir, &name, &file, &"--format", &format]);
        assert_eq!(code(&o), 0, "{format}: {}", stderr(&o));
        let n = model.len();
        let shown = format!("loaded {},{:03} pairs", n / 1000, n % 1000);
        assert!(stdout(&o).contains(&shown), "{}", stdout(&o));
        let o = cairn(&[&"dump", &dir, &name, &"--blobs"]);
        let want: Model = match blobs {
            true => model.clone(),
            false => model
                .iter()
                .map(|(k, (v, _))| (k.clone(), (v.clone(), None)))
                .collect(),
        };
        assert_eq!(stdout(&o), hex_lines(&want), "{format}");
    }
    // From standard input, as an authenticated table: the same root as the one dumped.
    let o = cairn(&[&"dump", &dir, &"auth"]);
    let mut child = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(
            [
                dir.as_os_str(),
                "auth2".as_ref(),
                "--auth".as_ref(),
                "sha256".as_ref(),
            ]
            .iter()
            .fold(vec![std::ffi::OsString::from("load")], |mut v, a| {
                v.push(a.into());
                v
            }),
        )
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write as _;
    child.stdin.take().unwrap().write_all(&o.stdout).unwrap();
    let loaded = child.wait_with_output().unwrap();
    assert_eq!(loaded.status.code(), Some(0));
    let o = cairn(&[&"root", &dir, &"auth2", &"--json"]);
    let doc: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(doc["root"], hex(&root.hash));

    // Refusals: a name in use, a line that is not hex (named), the text format.
    let file = files.path().join("fromhex");
    let o = cairn(&[&"load", &dir, &"plain", &file]);
    assert_eq!(code(&o), 3);
    assert!(stderr(&o).contains("exists"), "{}", stderr(&o));
    let bad = files.path().join("bad");
    std::fs::write(&bad, "6b6579 76616c\n6b6579 zz\n").unwrap();
    let o = cairn(&[&"load", &dir, &"badload", &bad]);
    assert_eq!(code(&o), 3);
    assert!(stderr(&o).contains("input line 2"), "{}", stderr(&o));
    let o = cairn(&[&"info", &dir, &"--json"]);
    assert!(
        !stdout(&o).contains("badload"),
        "a failed load leaves no snapshot"
    );
    let o = cairn(&[&"load", &dir, &"t", &bad, &"--format", &"text"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
}

#[test]
fn checkpoint_and_compact_the_durable_tables() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let config = TableConfig::default()
        .write_buffer_entries(32)
        .merge_batch_size(4);
    let mut model = BTreeMap::new();
    {
        let session = Session::open(dir).unwrap();
        let table = session.table("accounts", config.clone()).unwrap();
        for i in 0..3000u32 {
            let key = format!("acct{:05}", i * 13 % 2000);
            table.insert(&key, i.to_le_bytes()).unwrap();
            model.insert(key, i);
        }
        drop(table);
        session.close();
    }
    let o = cairn(&[&"checkpoint", &dir]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        stdout(&o).contains("checkpointed 1 durable table"),
        "{}",
        stdout(&o)
    );
    let o = cairn(&[&"compact", &dir, &"--json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let doc: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(doc["tables"][0]["table"], "accounts");
    let o = cairn(&[&"compact", &dir, &"nosuch"]);
    assert_eq!(code(&o), 3);
    assert!(
        stderr(&o).contains("no durable table \"nosuch\""),
        "{}",
        stderr(&o)
    );
    // Everything is still there, and a second compaction has nothing left to do.
    let session = Session::open(dir).unwrap();
    let table = session.table("accounts", config).unwrap();
    for (key, i) in &model {
        assert_eq!(
            table.get(key).unwrap(),
            Some(i.to_le_bytes().to_vec()),
            "{key}"
        );
    }
    drop(table);
    session.close();
    let o = cairn(&[&"compact", &dir]);
    assert!(
        stdout(&o).contains("accounts: merges completed in 0 steps"),
        "{}",
        stdout(&o)
    );

    // A session without a log has no durable tables.
    let plain = tempfile::tempdir().unwrap();
    Session::open_with_options(plain.path(), SessionOptions::default().log(None))
        .unwrap()
        .close();
    let o = cairn(&[&"checkpoint", &plain.path()]);
    assert_eq!(code(&o), 3);
    assert!(stderr(&o).contains("no write-ahead log"), "{}", stderr(&o));
}

/// A session with durable tables `accounts` and `fees` whose log holds `batches` records (the
/// session is dropped without the checkpoint a close takes).
fn logged(dir: &Path, batches: u32) {
    let session = Session::open(dir).unwrap();
    let config = TableConfig::default().write_buffer_entries(64);
    let accounts = session.table("accounts", config.clone()).unwrap();
    let fees = session.table("fees", config).unwrap();
    for i in 0..batches {
        let key = format!("acct{i:04}");
        let fee = format!("fee{i:04}");
        let a: &[(&str, Update<'_>)] = &[
            (&key, Update::Insert(b"100")),
            (&key, Update::Insert(b"90")),
        ];
        let f: &[(&str, Update<'_>)] = &[(&fee, Update::Insert(b"10"))];
        session.write(&[(&accounts, a), (&fees, f)]).unwrap();
    }
    session.sync_log().unwrap();
    drop((accounts, fees));
    drop(session);
}

#[test]
fn wal_lists_the_log_and_finds_damage_in_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    logged(dir, 50);
    let o = cairn(&[&"wal", &dir]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    let text = stdout(&o);
    assert!(text.contains("2 durable tables"), "{text}");
    assert!(text.contains("table \"accounts\" (id 0)"), "{text}");
    assert!(text.contains("chain: sound"), "{text}");
    let o = cairn(&[&"wal", &dir, &"--json"]);
    let doc: Value = serde_json::from_slice(&o.stdout).unwrap();
    let records = doc["records"].as_u64().unwrap();
    assert!(records >= 50, "{doc}");
    assert_eq!(doc["sound"], true);
    // Every record, and the batches in them: two tables, two and one updates.
    let o = cairn(&[&"wal", &dir, &"--records"]);
    let text = stdout(&o);
    let batches: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("accounts 2 updates, fees 1 update"))
        .collect();
    assert_eq!(batches.len(), 50, "{text}");
    let o = cairn(&[&"wal", &dir, &"--records", &"--json", &"--limit", &"3"]);
    let lines: Vec<Value> = stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 4, "three records and the summary");
    assert_eq!(lines[0]["kind"], "batch");
    assert_eq!(lines[3]["complete"], false);

    // A damaged record with good ones after it: exit code 1, the segment and offset named.
    let log = dir.join("log");
    let segment = std::fs::read_dir(&log)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "seg"))
        .max_by_key(|p| std::fs::metadata(p).unwrap().len())
        .unwrap();
    let mut bytes = std::fs::read(&segment).unwrap();
    // Inside the tenth record or so: past the header, well before the last record.
    bytes[64 + 600] ^= 0x40;
    std::fs::write(&segment, &bytes).unwrap();
    let o = cairn(&[&"wal", &dir]);
    assert_eq!(code(&o), 1, "{}", stdout(&o));
    let text = stdout(&o);
    assert!(text.contains("chain: DAMAGED"), "{text}");
    assert!(
        text.contains(segment.file_name().unwrap().to_str().unwrap()),
        "{text}"
    );
    let o = cairn(&[&"wal", &dir, &"--json"]);
    let doc: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(doc["sound"], false);
    assert!(doc["records"].as_u64().unwrap() < records);

    // A session without a log.
    let plain = tempfile::tempdir().unwrap();
    Session::open_with_options(plain.path(), SessionOptions::default().log(None))
        .unwrap()
        .close();
    let o = cairn(&[&"wal", &plain.path()]);
    assert_eq!(code(&o), 3);
    assert!(stderr(&o).contains("no write-ahead log"), "{}", stderr(&o));
}

#[test]
fn get_and_scan_read_a_live_durable_table() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    logged(dir, 30);
    // The owner is back and holds the lock, with one more write synced to its log.
    let owner = Session::open(dir).unwrap();
    let accounts = owner.table("accounts", TableConfig::default()).unwrap();
    accounts.save_snapshot("before", "accounts").unwrap();
    accounts.insert("acct0005", "55").unwrap();
    accounts.delete("acct0006").unwrap();
    owner.sync_log().unwrap();

    let o = cairn(&[
        &"get",
        &dir,
        &"accounts",
        &"acct0001",
        &"acct0005",
        &"--table",
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(stdout(&o), "acct0001 90\nacct0005 55\n");
    let o = cairn(&[
        &"get",
        &dir,
        &"accounts",
        &"acct0006",
        &"--table",
        &"--json",
    ]);
    assert_eq!(code(&o), 5);
    let doc: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(doc["keys"][0]["value"], Value::Null);
    let o = cairn(&[
        &"scan",
        &dir,
        &"fees",
        &"--table",
        &"--format",
        &"text",
        &"--limit",
        &"2",
    ]);
    assert_eq!(stdout(&o), "fee0000 10\nfee0001 10\n");
    let o = cairn(&[
        &"scan",
        &dir,
        &"accounts",
        &"--table",
        &"--format",
        &"text",
        &"--reverse",
    ]);
    let text = stdout(&o);
    let keys: Vec<&str> = text.lines().map(|l| l.split(' ').next().unwrap()).collect();
    assert_eq!(keys.len(), 29, "30 accounts, one deleted");
    assert_eq!(keys[0], "acct0029");
    assert!(!keys.contains(&"acct0006"));
    // A version diff: the snapshot against the live table, both ways.
    let o = cairn(&[&"diff", &dir, &"before", &"@accounts"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let text = stdout(&o);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(
        lines[0].starts_with("~ acct0005 ") && lines[0].ends_with(" -> 55"),
        "{text}"
    );
    assert!(lines[1].starts_with("- acct0006 "), "{text}");
    assert_eq!(lines[2], "1 removed, 0 added, 1 changed, 28 the same");
    let o = cairn(&[&"--json", &"diff", &dir, &"@accounts", &"before"]);
    let last: Value = serde_json::from_str(stdout(&o).lines().last().unwrap()).unwrap();
    assert_eq!(
        (last["added"].as_u64(), last["changed"].as_u64()),
        (Some(1), Some(1))
    );
    assert_eq!(code(&cairn(&[&"diff", &dir, &"before", &"@nosuch"])), 3);
    let o = cairn(&[&"get", &dir, &"nosuch", &"k", &"--table"]);
    assert_eq!(code(&o), 3);
    assert!(
        stderr(&o).contains("it has: accounts, fees"),
        "{}",
        stderr(&o)
    );
    drop(accounts);
    owner.close();
}

#[test]
fn repair_rebuilds_a_lost_or_damaged_metadata_file() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (model, _) = make(dir);
    let salt = Session::open(dir).unwrap().salt();
    let o = cairn(&[&"repair", &dir]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(stdout(&o).contains("sound"), "{}", stdout(&o));

    // Lost: the session does not open, the runs' salt brings it back.
    std::fs::remove_file(dir.join("metadata")).unwrap();
    assert_eq!(code(&cairn(&[&"info", &dir])), 3);
    let o = cairn(&[&"repair", &dir, &"--dry-run", &"--json"]);
    let doc: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (doc["salt"].as_u64(), &doc["written"]),
        (Some(salt), &Value::Bool(false))
    );
    assert!(!dir.join("metadata").exists(), "a dry run writes nothing");
    let o = cairn(&[&"repair", &dir]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        stdout(&o).contains(&format!("{salt:#018x}")),
        "{}",
        stdout(&o)
    );
    let o = cairn(&[&"verify", &dir]);
    assert_eq!(code(&o), 0, "{}", stdout(&o));
    let o = cairn(&[&"dump", &dir, &"plain", &"--blobs"]);
    assert_eq!(stdout(&o), hex_lines(&model));

    // Damaged: one bit.
    let mut bytes = std::fs::read(dir.join("metadata")).unwrap();
    bytes[14] ^= 1;
    std::fs::write(dir.join("metadata"), &bytes).unwrap();
    let o = cairn(&[&"repair", &dir]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(Session::open(dir).unwrap().salt(), salt);

    // Runs of another session (another salt) beside these: refused, the salts named.
    let other = tempfile::tempdir().unwrap();
    make(other.path());
    copy_tree(
        &other.path().join("snapshots/plain"),
        &dir.join("snapshots/foreign"),
    );
    std::fs::remove_file(dir.join("metadata")).unwrap();
    let o = cairn(&[&"repair", &dir]);
    assert_eq!(code(&o), 3);
    assert!(
        stderr(&o).contains("disagree on the salt"),
        "{}",
        stderr(&o)
    );
    assert!(!dir.join("metadata").exists());

    // Held by a live owner: refused.
    let live = tempfile::tempdir().unwrap();
    make(live.path());
    let _owner = Session::open(live.path()).unwrap();
    assert_eq!(code(&cairn(&[&"repair", &live.path()])), 4);
}

#[test]
fn repair_salvages_what_is_intact_of_a_damaged_snapshot() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (model, root) = make(dir);
    // A sound snapshot: everything salvaged, exit code 0; an authenticated one keeps its root.
    let o = cairn(&[&"repair", &dir, &"--salvage", &"plain", &"--into", &"copy"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(stdout(&o).contains("nothing lost"), "{}", stdout(&o));
    let o = cairn(&[&"dump", &dir, &"copy", &"--blobs"]);
    assert_eq!(stdout(&o), hex_lines(&model));
    let o = cairn(&[
        &"--json",
        &"repair",
        &dir,
        &"--salvage",
        &"auth",
        &"--into",
        &"auth2",
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let doc: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(doc["complete"], Value::Bool(true));
    assert_eq!(doc["keys"].as_u64(), Some(500));
    assert_eq!(
        doc["root"].as_str().unwrap(),
        format!("sha256:{}", hex(&root.hash))
    );

    // Usage: --into is needed (but for a dry run), and must be a new snapshot.
    assert_eq!(code(&cairn(&[&"repair", &dir, &"--salvage", &"plain"])), 2);
    let o = cairn(&[&"repair", &dir, &"--salvage", &"plain", &"--into", &"copy"]);
    assert_eq!(code(&o), 3);
    assert!(stderr(&o).contains("copy"), "{}", stderr(&o));
    assert_eq!(
        code(&cairn(&[
            &"repair",
            &dir,
            &"--salvage",
            &"none",
            &"--dry-run"
        ])),
        3
    );

    // One page of the largest key/ops file damaged.
    let snapshot = dir.join("snapshots/plain");
    let largest = (std::fs::read_dir(&snapshot).unwrap())
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "keyops"))
        .max_by_key(|p| std::fs::metadata(p).unwrap().len())
        .unwrap();
    let mut bytes = std::fs::read(&largest).unwrap();
    assert!(bytes.len() >= 3 * 4096, "{}", bytes.len());
    bytes[4096 + 100] ^= 0x40;
    std::fs::write(&largest, &bytes).unwrap();
    assert_eq!(code(&cairn(&[&"verify", &dir, &"plain"])), 1);
    // A dry run reports and writes nothing.
    let o = cairn(&[&"repair", &dir, &"--salvage", &"plain", &"--dry-run"]);
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    let text = stdout(&o);
    assert!(
        text.contains("dry run") && text.contains("lost: "),
        "{text}"
    );
    assert!(
        text.contains(&format!("{} page", largest.display())),
        "{text}"
    );
    assert!(!dir.join("snapshots/salvaged").exists());
    let o = cairn(&[
        &"--json",
        &"repair",
        &dir,
        &"--salvage",
        &"plain",
        &"--into",
        &"salvaged",
    ]);
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    let doc: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(doc["complete"], Value::Bool(false));
    let losses = doc["losses"].as_array().unwrap();
    assert_eq!(losses.len(), 1, "{doc:#}");
    let loss = &losses[0];
    assert_eq!(
        loss["path"].as_str().unwrap(),
        largest.display().to_string()
    );
    assert_eq!(loss["first_page"].as_u64(), Some(1));
    let bound = |b: &Value| {
        b.as_str().map(|h| {
            (0..h.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&h[i..i + 2], 16).unwrap())
                .collect::<Vec<u8>>()
        })
    };
    let (after, before) = (bound(&loss["after"]), bound(&loss["before"]));
    assert!(after.is_some() && before.is_some(), "{loss:#}");
    // The salvaged snapshot is sound, and every key outside the loss has its value.
    assert_eq!(code(&cairn(&[&"verify", &dir, &"salvaged"])), 0);
    let o = cairn(&[&"dump", &dir, &"salvaged", &"--blobs"]);
    let outside: Model = (model.iter())
        .filter(|(k, _)| {
            after.as_deref().is_some_and(|a| k.as_slice() <= a)
                || before.as_deref().is_some_and(|b| k.as_slice() >= b)
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let dumped = stdout(&o);
    let dumped: std::collections::HashSet<&str> = dumped.lines().collect();
    let expected = hex_lines(&outside);
    for line in expected.lines() {
        assert!(dumped.contains(&line), "{line} is missing");
    }
    assert!(
        dumped.len() < model.len(),
        "the damaged page's keys are lost"
    );
}
