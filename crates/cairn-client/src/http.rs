//! The transport: HTTP/1.1 or HTTP/2 through `reqwest`, TLS through rustls with the `ring`
//! provider, protobuf bodies, bearer tokens, and the server's error answers.
//!
//! Owns: [`Http`] (the endpoint's URLs, the token, the TLS roots), the bound on an answer's
//! size, and the decoding of answers and error bodies. May call: `error`, `reqwest`, `rustls`,
//! `prost`, `cairn_wire`. Must never touch: the verifier, the trusted digest (an answer
//! leaves here decoded, not checked).
//!
//! **TLS.** With a root certificate given (PEM: the server's self-signed one, or a private
//! CA's), only those roots are trusted; without one, the platform's verifier and roots. ALPN
//! offers `h2` then `http/1.1`, so a TLS connection speaks HTTP/2 when the server does. Plain
//! `http://` is refused unless the host is a loopback one (`localhost`, `127.0.0.0/8`, `::1`),
//! which is all the server serves plain HTTP on, so a token never crosses a network in the
//! clear.
//!
//! **Bounds.** Each request is held to the timeout, and each answer to `max_response_bytes`
//! (read a chunk at a time, refused once past it), so a hostile server cannot hold the client
//! or fill its memory.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use cairn_wire::ErrorBody;
use reqwest::header::{ACCEPT, CONTENT_TYPE};
use reqwest::Url;
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::CertificateDer;

use crate::error::Error;

/// The media type of every body this client sends and asks for.
const PROTOBUF: &str = "application/x-protobuf";
/// The longest error message kept from a body that is no error message, in bytes.
const ERROR_TEXT_BYTES_MAX: usize = 512;

/// How to reach one ledger of a server (no `Debug`: it holds the token).
pub(crate) struct Http {
    client: reqwest::Client,
    /// `<base>/v1/ledgers/<ledger>/`.
    ledger_url: Url,
    token: Option<String>,
    max_response_bytes: usize,
}

/// What [`Http::new`] takes.
pub(crate) struct HttpOptions<'a> {
    pub(crate) url: &'a str,
    pub(crate) ledger: &'a str,
    pub(crate) token: Option<String>,
    pub(crate) ca_pem: Option<&'a [u8]>,
    pub(crate) timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) max_response_bytes: usize,
    /// A shard behind a router: the ledger's `shards/<shard>/` endpoints.
    pub(crate) shard: Option<u32>,
}

impl Http {
    /// A transport for `options.ledger` at `options.url`. Errors: [`Error::Config`] for a URL
    /// that is not `https://` (or `http://` to a loopback host), a ledger name that is not 1
    /// to 64 of `[A-Za-z0-9_-]`, a root certificate that does not parse.
    pub(crate) fn new(options: HttpOptions<'_>) -> Result<Http, Error> {
        let base = parse_base(options.url)?;
        check_ledger_name(options.ledger)?;
        let path = match options.shard {
            Some(s) => format!("v1/ledgers/{}/shards/{s}/", options.ledger),
            None => format!("v1/ledgers/{}/", options.ledger),
        };
        let ledger_url = base
            .join(&path)
            .map_err(|e| Error::Config(format!("the URL {:?}: {e}", options.url)))?;
        let tls = tls_config(options.ca_pem, base.scheme() == "https")?;
        let client = reqwest::Client::builder()
            .tls_backend_preconfigured(tls)
            .timeout(options.timeout)
            .connect_timeout(options.connect_timeout)
            .build()
            .map_err(|e| Error::Config(format!("the HTTP client: {e}")))?;
        Ok(Http {
            client,
            ledger_url,
            token: options.token,
            max_response_bytes: options.max_response_bytes,
        })
    }

    /// POSTs `request` to the ledger's `endpoint` and decodes the answer.
    pub(crate) async fn post<Q, A>(&self, endpoint: &str, request: &Q) -> Result<A, Error>
    where
        Q: prost::Message,
        A: prost::Message + Default,
    {
        let url = self.url(endpoint, &[])?;
        let builder = self
            .client
            .post(url)
            .header(CONTENT_TYPE, PROTOBUF)
            .body(request.encode_to_vec());
        self.send(builder).await
    }

    /// GETs the ledger's `endpoint` with `query` and decodes the answer.
    pub(crate) async fn get<A>(&self, endpoint: &str, query: &[(&str, u64)]) -> Result<A, Error>
    where
        A: prost::Message + Default,
    {
        let url = self.url(endpoint, query)?;
        self.send(self.client.get(url)).await
    }

    fn url(&self, endpoint: &str, query: &[(&str, u64)]) -> Result<Url, Error> {
        let mut url = self
            .ledger_url
            .join(endpoint)
            .map_err(|e| Error::Config(format!("endpoint {endpoint:?}: {e}")))?;
        if !query.is_empty() {
            let mut pairs = url.query_pairs_mut();
            for (name, value) in query {
                pairs.append_pair(name, &value.to_string());
            }
        }
        Ok(url)
    }

    async fn send<A>(&self, builder: reqwest::RequestBuilder) -> Result<A, Error>
    where
        A: prost::Message + Default,
    {
        let mut builder = builder.header(ACCEPT, PROTOBUF);
        if let Some(token) = &self.token {
            builder = builder.bearer_auth(token);
        }
        let response = builder.send().await.map_err(Error::Transport)?;
        let status = response.status();
        let media = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_ascii_lowercase();
        let bytes = read_body(response, self.max_response_bytes).await?;
        if !status.is_success() {
            return Err(server_error(status.as_u16(), &media, &bytes));
        }
        if essence(&media) != PROTOBUF {
            return Err(Error::Decode(format!(
                "the answer is {media:?}, not {PROTOBUF}"
            )));
        }
        A::decode(&bytes[..]).map_err(|e| Error::Decode(format!("protobuf: {e}")))
    }
}

/// A media type without its parameters.
fn essence(media: &str) -> &str {
    media.split(';').next().unwrap_or("").trim()
}

/// The body, up to `max` bytes. Errors: the transport's, [`Error::Decode`] beyond `max`.
async fn read_body(mut response: reqwest::Response, max: usize) -> Result<Vec<u8>, Error> {
    let too_large = || Error::Decode(format!("the answer is larger than {max} bytes"));
    if response.content_length().is_some_and(|n| n > max as u64) {
        return Err(too_large());
    }
    let mut out = Vec::new();
    // Bounded by `max` bytes (each chunk adds to `out`) and the request's timeout.
    while let Some(chunk) = response.chunk().await.map_err(Error::Transport)? {
        if out.len() + chunk.len() > max {
            return Err(too_large());
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

/// The error a refusal's body tells: the server's [`ErrorBody`] in protobuf or JSON, or else
/// the body's text (cut short).
fn server_error(status: u16, media: &str, bytes: &[u8]) -> Error {
    let body = match essence(media) {
        PROTOBUF => prost::Message::decode(bytes).ok(),
        "application/json" => serde_json::from_slice::<ErrorBody>(bytes).ok(),
        _ => None,
    };
    let (code, message) = match body {
        Some(b) => (b.code, b.message),
        None => {
            let cut = &bytes[..bytes.len().min(ERROR_TEXT_BYTES_MAX)];
            (
                String::new(),
                String::from_utf8_lossy(cut).trim().to_string(),
            )
        }
    };
    Error::Server {
        status,
        code,
        message,
    }
}

/// The server's base URL, ending in `/`. See the module doc for what is refused.
fn parse_base(url: &str) -> Result<Url, Error> {
    let mut base = Url::parse(url).map_err(|e| Error::Config(format!("the URL {url:?}: {e}")))?;
    match base.scheme() {
        "https" => {}
        "http" if is_loopback(&base) => {}
        "http" => {
            return Err(Error::Config(format!(
                "{url}: plain http:// only to a loopback host (the token would cross the \
                 network in the clear): use https://"
            )))
        }
        other => {
            return Err(Error::Config(format!(
                "{url}: scheme {other:?} (https:// or, to a loopback host, http://)"
            )))
        }
    }
    if base.host_str().is_none() || base.query().is_some() || base.fragment().is_some() {
        return Err(Error::Config(format!(
            "{url}: a base URL has a host and no query or fragment"
        )));
    }
    if !base.path().ends_with('/') {
        let path = format!("{}/", base.path());
        base.set_path(&path);
    }
    Ok(base)
}

fn is_loopback(url: &Url) -> bool {
    let Some(host) = url.host_str() else {
        return false;
    };
    if host.eq_ignore_ascii_case("localhost") {
        return true;
    }
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<IpAddr>()
        .is_ok_and(|ip| ip.is_loopback())
}

/// Refuses a ledger name the server could not have (`docs/server.md`): 1 to 64 of
/// `[A-Za-z0-9_-]`, which also keeps it one path segment with nothing to escape.
pub(crate) fn check_ledger_name(name: &str) -> Result<(), Error> {
    let valid = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if valid {
        Ok(())
    } else {
        Err(Error::Config(format!(
            "ledger name {name:?}: 1 to 64 of letters, digits, '_' and '-'"
        )))
    }
}

/// rustls with the `ring` provider: the given roots only, else (for `https`) the platform's;
/// ALPN `h2`, `http/1.1`. A configuration is built even for plain HTTP, where it is never
/// used, because reqwest without a process-wide provider needs one.
fn tls_config(ca_pem: Option<&[u8]>, https: bool) -> Result<rustls::ClientConfig, Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Config(format!("TLS: {e}")))?;
    let mut config = match ca_pem {
        Some(pem) => {
            let mut roots = rustls::RootCertStore::empty();
            let mut count = 0usize;
            for cert in CertificateDer::pem_slice_iter(pem) {
                let cert =
                    cert.map_err(|e| Error::Config(format!("the root certificate PEM: {e}")))?;
                roots
                    .add(cert)
                    .map_err(|e| Error::Config(format!("the root certificate: {e}")))?;
                count += 1;
            }
            if count == 0 {
                return Err(Error::Config(
                    "the root certificate PEM holds no certificate".into(),
                ));
            }
            builder.with_root_certificates(roots).with_no_client_auth()
        }
        None if https => {
            use rustls_platform_verifier::BuilderVerifierExt as _;
            builder
                .with_platform_verifier()
                .map_err(|e| Error::Config(format!("the platform's TLS verifier: {e}")))?
                .with_no_client_auth()
        }
        None => builder
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_names_are_checked() {
        assert!(parse_base("https://example.com").is_ok());
        assert!(parse_base("http://127.0.0.1:7443").is_ok());
        assert!(parse_base("http://localhost:1/").is_ok());
        assert!(parse_base("http://[::1]:1/").is_ok());
        assert!(matches!(
            parse_base("http://example.com"),
            Err(Error::Config(_))
        ));
        assert!(parse_base("ftp://localhost").is_err());
        assert!(parse_base("not a url").is_err());
        assert_eq!(
            parse_base("https://h/prefix").unwrap().as_str(),
            "https://h/prefix/"
        );
        assert!(check_ledger_name("bank-1_a").is_ok());
        for bad in ["", "a/b", "a?b", "..", &"x".repeat(65)] {
            assert!(check_ledger_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn error_bodies_decode_in_every_form() {
        let body = ErrorBody {
            code: "forbidden".into(),
            message: "no".into(),
        };
        let pb = prost::Message::encode_to_vec(&body);
        let e = server_error(403, "application/x-protobuf", &pb);
        assert!(matches!(e, Error::Server { status: 403, ref code, .. } if code == "forbidden"));
        let json = br#"{"code":"too_many_requests","message":"later"}"#;
        let e = server_error(429, "application/json; charset=utf-8", json);
        assert!(matches!(e, Error::Server { ref code, .. } if code == "too_many_requests"));
        let e = server_error(502, "text/html", &[0xff; 2000]);
        assert!(matches!(e, Error::Server { ref code, ref message, .. }
            if code.is_empty() && message.len() <= 3 * ERROR_TEXT_BYTES_MAX));
    }

    #[test]
    fn bad_roots_are_refused() {
        assert!(tls_config(Some(b"no pem here"), true).is_err());
        assert!(tls_config(None, false).is_ok());
    }
}
