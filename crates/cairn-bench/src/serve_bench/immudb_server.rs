//! immudb v1.11.1's own server (the `immudb` binary, built from the pinned Go module by
//! `peers/immudb/build-server.sh`) under SmallBank: the server started as its own process on a
//! loopback port with a fresh data directory, then the Go peer in server mode
//! (`peers/immudb/README.md`, "Server mode") runs the clients over gRPC through immudb's Go
//! client, each client its own session and its own trusted state, every read a `VerifiedGet`
//! and every write a verified `VerifiableSet` with preconditions.
//!
//! Owns: finding or building the server binary, its process in a run. May call:
//! `ledger_bench::immudb` (the peer and its protocol), `cairn_http` (ports, readiness, SIGTERM).
//! Must never touch: Cairn.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::cairn_http::{free_port, terminate};
use crate::failure::{Context, Failure};

/// Most client sessions the server is started with (its default, 100, is below the 256
/// clients of the largest cell).
pub const MAX_SESSIONS: u32 = 4_200;

/// The `immudb` server binary: `given`, or `target/immudb-peer/immudb`, built by
/// `peers/immudb/build-server.sh` when missing (Go needed; the error says so).
pub fn server_binary(given: Option<&Path>) -> Result<PathBuf, Failure> {
    static BUILDING: Mutex<()> = Mutex::new(());
    if let Some(path) = given {
        return if path.is_file() {
            Ok(path.to_path_buf())
        } else {
            Err(Failure(format!(
                "--immudb {}: no such file",
                path.display()
            )))
        };
    }
    let _building = BUILDING.lock().unwrap_or_else(|e| e.into_inner());
    let out = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/immudb-peer");
    let binary = out.join("immudb");
    if binary.is_file() {
        return Ok(binary);
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("peers/immudb/build-server.sh");
    eprintln!("immudb's server is not built: building it (Go; a few minutes the first time)");
    crate::ledger_bench::immudb::run_build_script(&script, &out, &binary)?;
    Ok(binary)
}

/// immudb's server in its own process.
pub struct ImmudbServer {
    child: Child,
    /// `127.0.0.1:PORT`, what the peer's config takes.
    pub address: String,
    /// The server's data directory.
    pub data: PathBuf,
    log: PathBuf,
}

impl ImmudbServer {
    /// Starts the server with a fresh data directory `dir/immudb-server` on a free loopback
    /// port: its defaults (synced, the `defaultdb` database, user `immudb`), the PostgreSQL,
    /// metrics and web servers off, [`MAX_SESSIONS`] sessions.
    pub fn start(binary: &Path, dir: &Path) -> Result<ImmudbServer, Failure> {
        let port = free_port()?;
        let data = dir.join("immudb-server");
        let log = dir.join("immudb-server.log");
        let stderr = std::fs::File::create(&log).context(|| "creating immudb's log".into())?;
        let stdout = stderr
            .try_clone()
            .context(|| "creating immudb's log".into())?;
        let child = Command::new(binary)
            .arg("--dir")
            .arg(&data)
            .args(["--address", "127.0.0.1", "--port", &port.to_string()])
            .args([
                "--pgsql-server=false",
                "--metrics-server=false",
                "--web-server=false",
            ])
            .arg(format!("--max-sessions={MAX_SESSIONS}"))
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
            .context(|| format!("starting {}", binary.display()))?;
        let mut server = ImmudbServer {
            child,
            address: format!("127.0.0.1:{port}"),
            data,
            log,
        };
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let started = Instant::now();
        while std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
            if let Ok(Some(status)) = server.child.try_wait() {
                return Err(Failure(format!(
                    "immudb's server exited with {status} at start (its log: {})",
                    server.log.display()
                )));
            }
            if started.elapsed() > Duration::from_secs(60) {
                return Err(Failure(format!(
                    "immudb's server did not listen within 60 s (its log: {})",
                    server.log.display()
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(server)
    }

    /// Stops the server (SIGTERM, its own graceful shutdown).
    pub fn stop(mut self) -> Result<(), Failure> {
        let status = terminate(&mut self.child, Duration::from_secs(60))?;
        if !status.success() {
            eprintln!(
                "immudb's server exited with {status} at SIGTERM (its log: {})",
                self.log.display()
            );
        }
        Ok(())
    }
}

impl Drop for ImmudbServer {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
