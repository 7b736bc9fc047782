//! The `cairn-client` command: verified reads and writes of one ledger from a shell.
//!
//! ```text
//! cairn-client --url https://localhost:7443 --ledger bank --ca cert.pem \
//!     --digest-file bank.digest get checking alice bob
//! CAIRN_TOKEN=cairn_... cairn-client ... put checking alice=70 bob=20
//! cairn-client ... digest
//! ```
//!
//! Keys and values are UTF-8 text, or hex with `--hex`. Every answer is verified (see the
//! library's doc); a refuted one exits with status 3 and says which lie it caught. Without
//! `--digest-file`, each run trusts the first digest it is shown.

use std::path::PathBuf;
use std::process::ExitCode;

use cairn_client::{blocking, Batch, Client, Error};
use clap::{Parser, Subcommand};

/// A verifying client of a Cairn ledger server: every answer checked against the trusted
/// digest.
#[derive(Parser, Debug)]
#[command(name = "cairn-client", version)]
struct Cli {
    /// The server, `https://host:port` (or `http://` to a loopback host).
    #[arg(long)]
    url: String,
    /// The ledger.
    #[arg(long)]
    ledger: String,
    /// The bearer token (better in the environment: CAIRN_TOKEN).
    #[arg(long, env = "CAIRN_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Trust only this root certificate (PEM), say the server's self-signed one.
    #[arg(long, value_name = "cert.pem")]
    ca: Option<PathBuf>,
    /// Keep the trusted digest in this file (loaded at start, replaced at each adoption).
    #[arg(long, value_name = "FILE")]
    digest_file: Option<PathBuf>,
    /// Keys and values are hex, not text.
    #[arg(long)]
    hex: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Read keys of a table, verified as of the newest version.
    Get {
        /// The table.
        table: String,
        /// The keys.
        #[arg(required = true)]
        keys: Vec<String>,
    },
    /// Write keys of a table as one version, verified.
    Put {
        /// The table.
        table: String,
        /// KEY=VALUE pairs.
        #[arg(required = true, value_name = "KEY=VALUE")]
        pairs: Vec<String>,
    },
    /// The newest digest, checked consistent with the trusted one and adopted.
    Digest,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cairn-client: {e}");
            match e {
                Failure::Client(Error::Lie(_)) => ExitCode::from(3),
                _ => ExitCode::FAILURE,
            }
        }
    }
}

/// Why a run failed.
#[derive(Debug, thiserror::Error)]
enum Failure {
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Client(#[from] Error),
}

fn run(cli: Cli) -> Result<(), Failure> {
    let client = connect(&cli)?;
    match &cli.command {
        Command::Get { table, keys } => {
            let keys: Vec<Vec<u8>> = keys
                .iter()
                .map(|k| parse(k, cli.hex))
                .collect::<Result<_, _>>()?;
            let read = client.get(&[(table.as_str(), &keys[..])])?;
            let values = read.values.first().map(Vec::as_slice).unwrap_or(&[]);
            for (key, value) in keys.iter().zip(values) {
                let shown = match value {
                    Some(v) => show(v, cli.hex),
                    None => "(absent)".to_string(),
                };
                println!("{}\t{shown}", show(key, cli.hex));
            }
            eprintln!("verified at version {}", read.version);
        }
        Command::Put { table, pairs } => {
            let mut batch = Batch::new();
            for pair in pairs {
                let (k, v) = pair
                    .split_once('=')
                    .ok_or_else(|| Failure::Usage(format!("{pair:?} is not KEY=VALUE")))?;
                batch.insert(table, parse(k, cli.hex)?, parse(v, cli.hex)?);
            }
            let made = client.put(&batch)?;
            println!("version {}", made.version);
            eprintln!("verified: the writes hold at version {}", made.version);
        }
        Command::Digest => {
            let d = client.digest()?;
            println!("size {} root {}", d.size, hex::encode(d.root));
        }
    }
    Ok(())
}

fn connect(cli: &Cli) -> Result<blocking::Client, Failure> {
    let mut builder = Client::builder(&cli.url, &cli.ledger);
    if let Some(token) = &cli.token {
        builder = builder.token(token);
    }
    if let Some(ca) = &cli.ca {
        let pem = std::fs::read(ca)
            .map_err(|e| Failure::Usage(format!("reading {}: {e}", ca.display())))?;
        builder = builder.root_certificate_pem(pem);
    }
    match &cli.digest_file {
        Some(path) => builder = builder.digest_file(path),
        None => {
            eprintln!("cairn-client: no --digest-file: trusting the first digest the server shows")
        }
    }
    Ok(builder.build_blocking()?)
}

fn parse(text: &str, hex: bool) -> Result<Vec<u8>, Failure> {
    if hex {
        hex::decode(text).map_err(|e| Failure::Usage(format!("{text:?} is not hex: {e}")))
    } else {
        Ok(text.as_bytes().to_vec())
    }
}

/// Bytes for a terminal: hex with `--hex`, else the text (escaped where it is not printable
/// UTF-8).
fn show(bytes: &[u8], hex: bool) -> String {
    if hex {
        return hex::encode(bytes);
    }
    match std::str::from_utf8(bytes) {
        Ok(s) if !s.chars().any(char::is_control) => s.to_string(),
        _ => bytes.escape_ascii().to_string(),
    }
}
