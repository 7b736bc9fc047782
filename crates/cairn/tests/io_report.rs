//! The I/O report of a session tells the truth about every fallback: the backend in use and why
//! io_uring is not, and whether `O_DIRECT` is in effect, checked against what the file system
//! itself answers.
//!
//! The refusal test needs a file system that refuses `O_DIRECT`: `/dev/shm` (tmpfs refuses it
//! before Linux 6.6), or the directory named by `CAIRN_NO_O_DIRECT_DIR` (a ramfs mount, say:
//! `mount -t ramfs none /mnt/ramfs`). It is skipped, with a message, when that directory is
//! missing or accepts `O_DIRECT`.
#![cfg(target_os = "linux")]

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use cairn::fs::MemFs;
use cairn::{DirectIo, DiskCachePolicy, IoBackendKind, Session, SessionOptions, TableConfig};

/// Keeps every message logged through the `log` facade.
struct Capture;

static LOGGED: Mutex<Vec<(log::Level, String)>> = Mutex::new(Vec::new());
static CAPTURE: Capture = Capture;

impl log::Log for Capture {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }

    fn log(&self, record: &log::Record<'_>) {
        let message = (record.level(), record.args().to_string());
        LOGGED
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(message);
    }

    fn flush(&self) {}
}

fn capture_logs() {
    let _ = log::set_logger(&CAPTURE);
    log::set_max_level(log::LevelFilter::Debug);
}

fn logged(level: log::Level, needle: &str) -> usize {
    let logged = LOGGED.lock().unwrap_or_else(|p| p.into_inner());
    logged
        .iter()
        .filter(|(l, message)| *l == level && message.contains(needle))
        .count()
}

/// Whether the file system of `dir` accepts `O_DIRECT`, asked directly.
fn accepts_o_direct(dir: &Path) -> bool {
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.join("o-direct-check");
    std::fs::write(&path, b"").unwrap();
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(&path);
    std::fs::remove_file(&path).unwrap();
    match opened {
        Ok(_) => true,
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => false,
        Err(e) => panic!("opening {} with O_DIRECT: {e}", path.display()),
    }
}

/// A table that asks for direct reads works either way, and finds its keys.
fn lookups_work_without_the_disk_cache(session: &Session) {
    let config = TableConfig::default()
        .disk_cache(DiskCachePolicy::None)
        .write_buffer_entries(100);
    let table = session.new_table(config).unwrap();
    let pairs: Vec<([u8; 8], [u8; 8])> = (0..1000u64)
        .map(|i| (i.to_be_bytes(), (i * 3).to_le_bytes()))
        .collect();
    table.inserts(&pairs).unwrap();
    assert!(
        table.stats().unwrap().runs > 0,
        "the lookups must read runs"
    );
    let keys: Vec<[u8; 8]> = (0..2000u64).map(u64::to_be_bytes).collect();
    for (i, result) in table.lookups(&keys).unwrap().iter().enumerate() {
        let expected = (i < 1000).then(|| (i as u64 * 3).to_le_bytes());
        assert_eq!(result.value(), expected.as_ref().map(|v| &v[..]), "key {i}");
    }
}

#[test]
fn direct_io_is_reported_refused_where_the_file_system_refuses_it() {
    let root = std::env::var_os("CAIRN_NO_O_DIRECT_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/dev/shm"));
    if !root.is_dir() {
        eprintln!("skipped: {} does not exist", root.display());
        return;
    }
    capture_logs();
    let dir = tempfile::tempdir_in(&root).unwrap();
    let accepts = accepts_o_direct(dir.path());
    let session = Session::open(dir.path()).unwrap();
    let report = session.io_report();
    eprintln!("I/O report in {}: {report}", root.display());
    lookups_work_without_the_disk_cache(&session);
    if accepts {
        assert!(report.direct_io.is_available(), "{report}");
        eprintln!(
            "skipped: {} accepts O_DIRECT (tmpfs does since Linux 6.6); set \
             CAIRN_NO_O_DIRECT_DIR to a directory that refuses it (a ramfs mount)",
            root.display()
        );
        return;
    }
    match &report.direct_io {
        DirectIo::Refused {
            dir: probed,
            reason,
        } => {
            assert_eq!(probed, &dir.path().join("active"));
            assert!(reason.contains("O_DIRECT"), "{reason}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert!(!report.direct_io.is_available());
    assert!(report
        .to_string()
        .contains("reads go through the page cache"));
    // Logged once, when the session opened, not for every file or read.
    let refused_here = format!("direct I/O refused in {}", dir.path().display());
    assert_eq!(logged(log::Level::Warn, &refused_here), 1);
}

#[test]
fn report_agrees_with_the_file_system_and_the_backend() {
    let dir = tempfile::tempdir().unwrap();
    let accepts = accepts_o_direct(dir.path());
    let session = Session::open(dir.path()).unwrap();
    let report = session.io_report();
    eprintln!("I/O report in {}: {report}", dir.path().display());
    assert_eq!(report.direct_io.is_available(), accepts, "{report}");
    assert_eq!(report.direct_io.is_refused(), !accepts, "{report}");
    assert_eq!(report.backend, session.io_backend());
    assert_eq!(
        report.uring_unavailable.is_none(),
        report.backend == IoBackendKind::Uring,
        "{report}"
    );
    assert_eq!(report.pread_fallback_batches, 0);
    // The probe leaves nothing behind.
    assert_eq!(
        std::fs::read_dir(dir.path().join("active"))
            .unwrap()
            .count(),
        0
    );
    lookups_work_without_the_disk_cache(&session);
    drop(session);

    let options = SessionOptions::default().io_backend(IoBackendKind::Pread);
    let session = Session::open_with(Arc::new(cairn::fs::RealFs), dir.path(), options).unwrap();
    let report = session.io_report();
    assert_eq!(report.backend, IoBackendKind::Pread);
    assert!(report.uring_unavailable.is_some(), "{report}");
    assert!(
        report
            .to_string()
            .starts_with("pread (io_uring unavailable: "),
        "{report}"
    );
}

#[test]
fn simulated_file_system_reports_direct_io_unknown() {
    let fs = Arc::new(MemFs::new());
    cairn::fs::FileSystem::create_dir_all(&*fs, Path::new("/s")).unwrap();
    let session = Session::open_with(fs, "/s", SessionOptions::default()).unwrap();
    let report = session.io_report();
    assert!(
        matches!(report.direct_io, DirectIo::Unknown { .. }),
        "{report}"
    );
    assert!(!report.direct_io.is_available() && !report.direct_io.is_refused());
}
