//! Connections: the listener, TLS, HTTP/1.1 and HTTP/2 on each connection, the connection
//! limits, and the graceful shutdown.
//!
//! Owns: [`Tls`] (a rustls acceptor from PEM files or a self-signed certificate), [`serve`]
//! (the accept loop), [`TlsListener`] (TLS connections for `axum::serve`: the peer listener). May call: `config` (limits), `hyper`, `hyper-util`, `tokio-rustls`,
//! `rcgen`. Must never touch: the ledger or the API (it serves whatever router it is given).
//!
//! Slow clients cannot hold the server: a TLS handshake, a request's headers and the wait
//! between two requests of a kept-alive connection each end after the idle timeout (the
//! connection is closed); a request whose body trickles in ends at the request timeout (408,
//! the router's layer); at most `connections` are served at once (more wait in the kernel's
//! listen queue, costing the server nothing).

use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls_pki_types::pem::PemObject;
use sha2::{Digest as _, Sha256};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::config::Limits;

/// A TLS acceptor and the certificate it presents.
#[derive(Clone)]
pub struct Tls {
    acceptor: TlsAcceptor,
    /// SHA-256 of the leaf certificate's DER, hex: what a client pinning it compares.
    pub fingerprint: String,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("fingerprint", &self.fingerprint)
            .finish_non_exhaustive()
    }
}

/// A self-signed certificate and its key, PEM.
#[derive(Debug)]
pub struct SelfSigned {
    /// The certificate.
    pub cert_pem: String,
    /// The private key (PKCS#8).
    pub key_pem: String,
}

/// A new self-signed certificate for `names` (DNS names or IP addresses). Errors: rcgen's.
pub fn self_signed(names: &[String]) -> Result<SelfSigned, String> {
    let certified = rcgen::generate_simple_self_signed(names.to_vec())
        .map_err(|e| format!("making a self-signed certificate: {e}"))?;
    Ok(SelfSigned {
        cert_pem: certified.cert.pem(),
        key_pem: certified.signing_key.serialize_pem(),
    })
}

impl Tls {
    /// An acceptor presenting the certificate chain and key in these PEM files.
    pub fn from_files(cert: &Path, key: &Path) -> Result<Tls, String> {
        let cert_pem = std::fs::read(cert).map_err(|e| format!("{}: {e}", cert.display()))?;
        let key_pem = std::fs::read(key).map_err(|e| format!("{}: {e}", key.display()))?;
        Tls::from_pem(&cert_pem, &key_pem)
    }

    /// An acceptor presenting this PEM certificate chain and key, offering HTTP/2 and
    /// HTTP/1.1 (ALPN), with rustls' defaults (TLS 1.2 and 1.3, no client certificate).
    pub fn from_pem(cert_pem: &[u8], key_pem: &[u8]) -> Result<Tls, String> {
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem)
            .collect::<Result<_, _>>()
            .map_err(|e| format!("reading the certificate PEM: {e}"))?;
        let Some(leaf) = certs.first() else {
            return Err("the certificate file holds no certificate".into());
        };
        let fingerprint = hex::encode(Sha256::digest(leaf.as_ref()));
        let key = PrivateKeyDer::from_pem_slice(key_pem)
            .map_err(|e| format!("reading the private key PEM: {e}"))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS setup: {e}"))?
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .map_err(|e| format!("the certificate and key do not make a TLS identity: {e}"))?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Tls {
            acceptor: TlsAcceptor::from(Arc::new(config)),
            fingerprint,
        })
    }
}

/// A listener whose connections are TLS, for `axum::serve` (the peer listener of a cluster
/// node): TCP connections are accepted by a task of its own, each handshake runs on its own
/// task within `idle` (at most [`HANDSHAKES_MAX`] at once; more wait in the kernel's listen
/// queue), and only completed handshakes come out of [`axum::serve::Listener::accept`]. A
/// failed or slow handshake costs the others nothing. Dropping it stops the accepting task.
pub struct TlsListener {
    local: std::net::SocketAddr,
    ready: tokio::sync::mpsc::Receiver<(TlsStream, std::net::SocketAddr)>,
    accepting: tokio::task::JoinHandle<()>,
}

type TlsStream = tokio_rustls::server::TlsStream<tokio::net::TcpStream>;

/// Handshakes a [`TlsListener`] runs at once.
pub const HANDSHAKES_MAX: usize = 64;

impl TlsListener {
    /// Accepts TLS connections on `listener` with `tls`'s identity, each handshake within
    /// `idle`. Errors: the listener's address cannot be read.
    pub fn new(listener: TcpListener, tls: Tls, idle: Duration) -> std::io::Result<TlsListener> {
        let local = listener.local_addr()?;
        let (tx, ready) = tokio::sync::mpsc::channel(HANDSHAKES_MAX);
        let handshakes = Arc::new(tokio::sync::Semaphore::new(HANDSHAKES_MAX));
        let accepting = tokio::spawn(async move {
            loop {
                let Ok(permit) = handshakes.clone().acquire_owned().await else {
                    return;
                };
                let (stream, peer) = match listener.accept().await {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::warn!(error = %e, "peer accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                let (acceptor, tx) = (tls.acceptor.clone(), tx.clone());
                tokio::spawn(async move {
                    let _permit = permit;
                    match tokio::time::timeout(idle, acceptor.accept(stream)).await {
                        Ok(Ok(stream)) => {
                            let _ = tx.send((stream, peer)).await;
                        }
                        Ok(Err(e)) => {
                            tracing::debug!(%peer, error = %e, "peer TLS handshake failed")
                        }
                        Err(_) => tracing::debug!(%peer, "peer TLS handshake timed out"),
                    }
                });
            }
        });
        Ok(TlsListener {
            local,
            ready,
            accepting,
        })
    }
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(accepted) => accepted,
            // The accepting task ended (only when aborted): nothing more will come.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}

/// Serves `service` on `listener` until `shutdown` completes, then stops accepting, lets the
/// requests in flight finish for up to `grace`, and returns (closing what is left).
pub async fn serve(
    listener: TcpListener,
    tls: Option<Tls>,
    service: crate::service::Limited,
    limits: Limits,
    grace: Duration,
    shutdown: impl Future<Output = ()>,
) {
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let connections = Arc::new(tokio::sync::Semaphore::new(limits.connections));
    let idle = limits.idle_timeout();
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            permit = connections.clone().acquire_owned() => match permit {
                Ok(p) => p,
                Err(_) => break,
            },
            () = &mut shutdown => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of descriptors and the like: pause instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let service = hyper_util::service::TowerToHyperService::new(service.clone());
        let watcher = graceful.watcher();
        let tls = tls.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let mut builder = auto::Builder::new(TokioExecutor::new());
            builder
                .http1()
                .timer(TokioTimer::new())
                .header_read_timeout(idle)
                .keep_alive(true);
            builder
                .http2()
                .timer(TokioTimer::new())
                .keep_alive_interval(Some(idle / 2))
                .keep_alive_timeout(idle / 2)
                .max_concurrent_streams(256);
            let result = match tls {
                Some(tls) => {
                    let stream = idle_closing(stream, idle);
                    match tokio::time::timeout(idle, tls.acceptor.accept(stream)).await {
                        Ok(Ok(stream)) => {
                            let conn = builder
                                .serve_connection_with_upgrades(TokioIo::new(stream), service);
                            watcher.watch(conn.into_owned()).await
                        }
                        Ok(Err(e)) => {
                            tracing::debug!(%peer, error = %e, "TLS handshake failed");
                            return;
                        }
                        Err(_) => {
                            tracing::debug!(%peer, "TLS handshake timed out");
                            return;
                        }
                    }
                }
                None => {
                    let stream = idle_closing(stream, idle);
                    let conn =
                        builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
                    watcher.watch(conn.into_owned()).await
                }
            };
            if let Err(e) = result {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    tracing::info!("stopped accepting; waiting for requests in flight");
    tokio::select! {
        () = graceful.shutdown() => tracing::info!("every connection closed"),
        () = tokio::time::sleep(grace) => tracing::warn!(
            seconds = grace.as_secs_f64(),
            "connections still open after the shutdown's grace period: closing them"
        ),
    }
}

/// The stream, with every read that waits longer than `idle` failing (which closes the
/// connection): a client that neither sends nor closes is let go.
fn idle_closing(
    stream: tokio::net::TcpStream,
    idle: Duration,
) -> std::pin::Pin<Box<tokio_io_timeout::TimeoutStream<tokio::net::TcpStream>>> {
    let mut stream = tokio_io_timeout::TimeoutStream::new(stream);
    stream.set_read_timeout(Some(idle));
    stream.set_write_timeout(Some(idle));
    Box::pin(stream)
}
