//! End to end: the client against the real server started in-process on 127.0.0.1 port 0,
//! over plain HTTP (insecure loopback) and over TLS with a self-signed certificate and a
//! token; every client call, the digest file, the blocking client, and the refusals that need
//! no lying server (a forked or rolled-back digest file, a wrong certificate, no token).

mod common;

use cairn_client::{Batch, Client, Digest, Error, Lie};
use common::exercise::exercise;
use common::{plain_server, tls_server, v, ORDERED, PLAIN};

fn builder(url: &str, ledger: &str) -> cairn_client::ClientBuilder {
    Client::builder(url, ledger)
        .plain_tables(PLAIN)
        .ordered_tables([ORDERED])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_verifies_over_plain_http_and_the_digest_persists() {
    let dir = tempfile::tempdir().unwrap();
    let running = plain_server(dir.path(), &["bank"]).await;
    let url = format!("http://{}", running.addr);
    let file = dir.path().join("bank.digest");
    let client = builder(&url, "bank").digest_file(&file).build().unwrap();
    assert_eq!(client.trusted(), None);
    exercise(&client).await;
    let trusted = client.trusted().unwrap();

    // A new client starts from the file, and goes on from it.
    let again = builder(&url, "bank").digest_file(&file).build().unwrap();
    assert_eq!(again.trusted(), Some(trusted));
    let mut b = Batch::new();
    b.insert("savings", "bob", "5");
    let made = again.put(&b).await.unwrap();
    assert_eq!(made.version, trusted.size + 1);
    let reloaded = builder(&url, "bank").digest_file(&file).build().unwrap();
    assert_eq!(reloaded.trusted(), Some(made.digest));

    // A digest given by the caller is trusted from the start (no file).
    let given = builder(&url, "bank").trust(trusted).build().unwrap();
    let r = given.get(&[("savings", &["bob"][..])]).await.unwrap();
    assert_eq!(r.values, vec![vec![v("5")]]);
    assert_eq!(given.trusted(), Some(made.digest));

    // A trusted digest of another history of the same size: a fork.
    let forged = Digest {
        size: made.digest.size,
        root: [7; 32],
    };
    let forked = builder(&url, "bank").trust(forged).build().unwrap();
    let e = forked.digest().await.unwrap_err();
    assert!(matches!(e, Error::Lie(Lie::ForkedHistory { .. })), "{e}");
    // Of a smaller size: the consistency proof fails, a fork too.
    let forged = Digest {
        size: 2,
        root: [7; 32],
    };
    let forked = builder(&url, "bank").trust(forged).build().unwrap();
    let e = forked.get(&[("savings", &["bob"][..])]).await.unwrap_err();
    assert!(matches!(e, Error::Lie(Lie::ForkedHistory { .. })), "{e}");
    assert_eq!(forked.trusted(), Some(forged));
    // Of a larger size than the server has: the server went back.
    let ahead = Digest {
        size: made.digest.size + 10,
        root: [7; 32],
    };
    let behind = builder(&url, "bank").trust(ahead).build().unwrap();
    let e = behind.get(&[("savings", &["bob"][..])]).await.unwrap_err();
    assert!(matches!(e, Error::Lie(Lie::RolledBack { .. })), "{e}");

    // The blocking client, on a thread of its own (outside any runtime).
    let blocking_file = file.clone();
    let last = std::thread::spawn(move || {
        let c = builder(&url, "bank")
            .digest_file(&blocking_file)
            .build_blocking()
            .unwrap();
        let mut b = Batch::new();
        b.insert("checking", "carol", "1");
        let made = c.put(&b).unwrap();
        let r = c.get(&[("checking", &["carol"][..])]).unwrap();
        assert_eq!(r.values, vec![vec![v("1")]]);
        let p = c.get_promise(&[("checking", &["carol"][..])]).unwrap();
        c.verify_promises(&[p]).unwrap();
        let mut t = Batch::new();
        t.expect("checking", "carol", "1")
            .insert("checking", "carol", "2");
        c.transact(&t).unwrap();
        assert_eq!(
            c.get_at(made.version, &[("checking", &["carol"][..])])
                .unwrap()
                .values,
            vec![vec![v("1")]]
        );
        assert!(c.range(ORDERED, "a", "z").unwrap().entries.len() >= 4);
        assert!(c.range_at(made.version, ORDERED, "a", "z").is_ok());
        c.digest().unwrap()
    })
    .join()
    .unwrap();
    let reloaded = builder("http://127.0.0.1:1", "bank")
        .digest_file(&file)
        .build()
        .unwrap();
    assert_eq!(reloaded.trusted(), Some(last));
    // Inside a runtime the blocking client is refused, not a panic.
    assert!(matches!(
        builder("http://127.0.0.1:1", "bank").build_blocking(),
        Err(Error::Config(_))
    ));
    running.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_verifies_over_tls_with_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let (running, token) = tls_server(dir.path(), "vault").await;
    let pem = running
        .self_signed_pem
        .clone()
        .expect("a self-signed certificate");
    let url = format!("https://localhost:{}", running.addr.port());
    let client = builder(&url, "vault")
        .token(&token)
        .root_certificate_pem(pem.clone())
        .build()
        .unwrap();
    exercise(&client).await;

    // No token, a wrong token: the server's 401.
    let anonymous = builder(&url, "vault")
        .root_certificate_pem(pem.clone())
        .build()
        .unwrap();
    let e = anonymous.digest().await.unwrap_err();
    assert!(matches!(e, Error::Server { status: 401, .. }), "{e}");
    let wrong = builder(&url, "vault")
        .token("cairn_wrong")
        .root_certificate_pem(pem)
        .build()
        .unwrap();
    assert!(matches!(
        wrong.digest().await,
        Err(Error::Server { status: 401, .. })
    ));
    // Another certificate than the server's: the TLS handshake fails.
    let other = cairn_server::net::self_signed(&["localhost".to_string()]).unwrap();
    let stranger = builder(&url, "vault")
        .token(&token)
        .root_certificate_pem(other.cert_pem)
        .build()
        .unwrap();
    let e = stranger.digest().await.unwrap_err();
    assert!(matches!(e, Error::Transport(_)), "{e}");
    running.shutdown().await.unwrap();
}
