//! The `cairn-server` command: serve the ledgers of a configuration file, check one, or make
//! a token or a development certificate (`docs/server.md`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Cairn's verifiable ledger over HTTP, secure by default (docs/server.md).
#[derive(Parser, Debug)]
#[command(name = "cairn-server", version)]
struct Cli {
    /// The configuration file (TOML).
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// Listen here instead of the file's `listen`.
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// Serve plain HTTP on 127.0.0.1 only (and without tokens when none are configured):
    /// development on this host only.
    #[arg(long)]
    insecure_loopback: bool,
    /// Serve this ledger (NAME=DIR:TABLE,TABLE...) besides the file's; with no file, the
    /// only one.
    #[arg(long, value_name = "NAME=DIR:TABLES")]
    ledger: Vec<String>,
    /// Check the configuration and exit (0 when it would serve).
    #[arg(long)]
    check_config: bool,
    /// Run as one node of a replicated cluster, as the configuration's [cluster] section
    /// says (docs/server.md, "Cluster").
    #[arg(long)]
    raft: bool,
    /// Log lines as JSON.
    #[arg(long)]
    log_json: bool,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Set up a server directory in one step: a development certificate and key, an admin
    /// token (written to `DIR/token`, readable by its owner only), and `DIR/server.toml`
    /// serving one ledger in `DIR/<name>` on 127.0.0.1:7443 with TLS and that token.
    Init {
        /// The directory to create.
        #[arg(long)]
        dir: PathBuf,
        /// The ledger: NAME:TABLE,TABLE...
        #[arg(long, default_value = "bank:checking,savings")]
        ledger: String,
        /// Where it will listen.
        #[arg(long, default_value = "127.0.0.1:7443")]
        listen: SocketAddr,
    },
    /// Make a new token: prints it once (give it to the client) and the [[tokens]] entry to
    /// paste in the configuration (which keeps only its hash).
    Token {
        /// Who will hold it.
        #[arg(long, default_value = "client")]
        name: String,
        /// The ledger it is granted on (`*`: all).
        #[arg(long, default_value = "*")]
        ledger: String,
        /// Its rights: read, write, admin (comma-separated).
        #[arg(long, default_value = "read,write")]
        rights: String,
    },
    /// Make a self-signed certificate and key (PEM) for development, and print the
    /// certificate's SHA-256 fingerprint.
    Cert {
        /// The names it is for (DNS names or IP addresses).
        #[arg(long, default_values = ["localhost", "127.0.0.1"])]
        name: Vec<String>,
        /// Where to write `cert.pem` and `key.pem`.
        #[arg(long, default_value = ".")]
        out: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cairn-server: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `NAME=DIR:TABLE,TABLE`.
fn parse_ledger(text: &str) -> Result<cairn_server::config::LedgerConfig, String> {
    let (name, rest) = text
        .split_once('=')
        .ok_or_else(|| format!("--ledger {text:?}: expected NAME=DIR:TABLE,TABLE"))?;
    let (dir, tables) = rest
        .rsplit_once(':')
        .ok_or_else(|| format!("--ledger {text:?}: expected NAME=DIR:TABLE,TABLE"))?;
    Ok(cairn_server::config::LedgerConfig {
        name: name.into(),
        dir: dir.into(),
        tables: tables.split(',').map(str::to_string).collect(),
        ordered: Vec::new(),
        history: 0,
        group: 64,
    })
}

fn run(cli: Cli) -> Result<(), String> {
    match cli.command {
        Some(Command::Token {
            name,
            ledger,
            rights,
        }) => {
            let token = cairn_server::auth::new_token()
                .map_err(|e| format!("the system's random source: {e}"))?;
            let rights: Vec<String> = rights
                .split(',')
                .map(|r| format!("{:?}", r.trim()))
                .collect();
            println!("token (give it to the client; it is not stored anywhere):\n  {token}\n");
            println!("configuration entry (keeps only the token's SHA-256):\n");
            println!("[[tokens]]");
            println!("name = {name:?}");
            println!("sha256 = {:?}", cairn_server::auth::token_hash(&token));
            println!(
                "grants = [{{ ledger = {ledger:?}, rights = [{}] }}]",
                rights.join(", ")
            );
            return Ok(());
        }
        Some(Command::Init {
            dir,
            ledger,
            listen,
        }) => return init(&dir, &ledger, listen),
        Some(Command::Cert { name, out }) => {
            let made = cairn_server::net::self_signed(&name)?;
            std::fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
            let cert = out.join("cert.pem");
            let key = out.join("key.pem");
            std::fs::write(&cert, &made.cert_pem)
                .map_err(|e| format!("{}: {e}", cert.display()))?;
            write_private(&key, made.key_pem.as_bytes())?;
            let tls = cairn_server::net::Tls::from_pem(
                made.cert_pem.as_bytes(),
                made.key_pem.as_bytes(),
            )?;
            println!("wrote {} and {}", cert.display(), key.display());
            println!("SHA-256 fingerprint: {}", tls.fingerprint);
            return Ok(());
        }
        None => {}
    }
    let mut config = match &cli.config {
        Some(path) => cairn_server::Config::load(path)?,
        None => cairn_server::Config::default(),
    };
    if let Some(listen) = cli.listen {
        config.listen = listen;
    }
    if cli.insecure_loopback {
        config.insecure_loopback = true;
        if cli.listen.is_none() && cli.config.is_none() {
            config.listen = SocketAddr::from(([127, 0, 0, 1], 7443));
        }
    }
    config.log_json |= cli.log_json;
    for l in &cli.ledger {
        config.ledgers.push(parse_ledger(l)?);
    }
    if cli.raft && config.router.is_some() {
        return Err("a router ([router]) is not a Raft node: start it without --raft".into());
    }
    match (cli.raft, config.cluster.is_some()) {
        (true, false) => {
            return Err("--raft needs a [cluster] section in the configuration".into());
        }
        (false, true) => {
            return Err(
                "the configuration has a [cluster] section: start the node with --raft".into(),
            );
        }
        _ => {}
    }
    if cli.check_config {
        config.check()?;
        if let Some(c) = &config.cluster {
            println!(
                "cluster node {} (peers on {}, api {}, Raft log in {})",
                c.id,
                c.listen,
                config.cluster_api(),
                c.dir.display()
            );
        }
        if let Some(r) = &config.router {
            println!(
                "router of ledger {:?} over {} shard(s), {} node(s) in all",
                r.ledger,
                r.shards.len(),
                r.shards.iter().map(Vec::len).sum::<usize>()
            );
        }
        println!(
            "configuration is valid: {} ledger(s), {} token(s), listening on {}",
            config.ledgers.len(),
            config.tokens.len(),
            config.listen
        );
        return Ok(());
    }
    init_logs(config.log_json);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("starting the runtime: {e}"))?;
    runtime.block_on(async move {
        let running = cairn_server::start(config, signal()).await?;
        match &running.fingerprint {
            Some(f) => eprintln!(
                "cairn-server: serving https://{} (certificate SHA-256 {f})",
                running.addr
            ),
            None => eprintln!(
                "cairn-server: serving http://{} (insecure loopback)",
                running.addr
            ),
        }
        let mut running = running;
        running.wait().await
    })
}

/// SIGTERM or SIGINT.
async fn signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let term = signal(SignalKind::terminate());
    let int = signal(SignalKind::interrupt());
    match (term, int) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {},
                _ = int.recv() => {},
            }
        }
        _ => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

fn init_logs(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("CAIRN_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
}

/// Writes a private key readable by its owner only.
fn write_private(path: &std::path::Path, bytes: &[u8]) -> Result<(), String> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    f.write_all(bytes)
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// `cairn-server init`.
fn init(dir: &std::path::Path, ledger: &str, listen: SocketAddr) -> Result<(), String> {
    let (name, tables) = ledger
        .split_once(':')
        .ok_or_else(|| format!("--ledger {ledger:?}: expected NAME:TABLE,TABLE"))?;
    let tables: Vec<String> = tables
        .split(',')
        .map(|t| format!("{:?}", t.trim()))
        .collect();
    if dir.join("server.toml").exists() {
        return Err(format!("{} already holds a server.toml", dir.display()));
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let dir = dir
        .canonicalize()
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut names = vec!["localhost".to_string()];
    names.push(listen.ip().to_string());
    let made = cairn_server::net::self_signed(&names)?;
    let tls = cairn_server::net::Tls::from_pem(made.cert_pem.as_bytes(), made.key_pem.as_bytes())?;
    let write = |file: &str, text: &str| {
        let path = dir.join(file);
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))
    };
    write("cert.pem", &made.cert_pem)?;
    write_private(&dir.join("key.pem"), made.key_pem.as_bytes())?;
    let token =
        cairn_server::auth::new_token().map_err(|e| format!("the system's random source: {e}"))?;
    write_private(&dir.join("token"), format!("{token}\n").as_bytes())?;
    let config = format!(
        "listen = \"{listen}\"\n\n[tls]\ncert = {cert:?}\nkey = {key:?}\n\n[[ledgers]]\n\
         name = {name:?}\ndir = {ldir:?}\ntables = [{tables}]\n\n[[tokens]]\nname = \"admin\"\n\
         sha256 = {hash:?}\ngrants = [{{ ledger = {name:?}, rights = [\"admin\"] }}]\n",
        cert = dir.join("cert.pem"),
        key = dir.join("key.pem"),
        ldir = dir.join(name),
        tables = tables.join(", "),
        hash = cairn_server::auth::token_hash(&token),
    );
    cairn_server::Config::parse(&config)
        .and_then(|c| c.check())
        .map_err(|e| format!("the configuration made does not check (a bug): {e}"))?;
    write("server.toml", &config)?;
    println!(
        "wrote {}/{{server.toml, cert.pem, key.pem, token}}",
        dir.display()
    );
    println!("certificate SHA-256 fingerprint: {}", tls.fingerprint);
    println!(
        "start:  cairn-server --config {}",
        dir.join("server.toml").display()
    );
    Ok(())
}
