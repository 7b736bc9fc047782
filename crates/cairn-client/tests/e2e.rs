//! End to end: the client against the real server started in-process on 127.0.0.1 port 0,
//! over plain HTTP (insecure loopback) and over TLS with a self-signed certificate and a
//! token; every client call, the digest file, the blocking client, and the refusals that need
//! no lying server (a forked or rolled-back digest file, a wrong certificate, no token).

mod common;

use cairn_client::{Batch, Client, Digest, Error, Lie};
use common::{kv, plain_server, tls_server, v, ORDERED, PLAIN};

/// Every call of the client on a fresh ledger, checking the answers (the client verified each).
async fn exercise(client: &Client) {
    // An empty ledger: no version to read; a promise at version 0 holds every key absent.
    let e = client
        .get(&[("checking", &["alice"][..])])
        .await
        .unwrap_err();
    assert!(
        matches!(e, Error::Server { status: 404, ref code, .. } if code == "no_such_version"),
        "{e}"
    );
    let empty = client
        .get_promise(&[("checking", &["alice"][..])])
        .await
        .unwrap();
    assert_eq!((empty.version, &empty.values), (0, &vec![vec![None]]));
    client.verify_promises(&[empty]).await.unwrap();

    // Version 1: a put, with its write receipt.
    let mut b = Batch::new();
    b.insert("checking", "alice", "50")
        .insert("savings", "alice", "1000")
        .insert(ORDERED, "alice", "Alice")
        .insert(ORDERED, "bob", "Bob")
        .meta("open");
    let v1 = client.put(&b).await.unwrap();
    assert_eq!(v1.version, 1);
    assert_eq!(client.trusted(), Some(v1.digest));

    // Fresh reads, plain and ordered, present and absent.
    let r = client
        .get(&[
            ("checking", &["alice", "bob"][..]),
            (ORDERED, &["alice", "carol"][..]),
        ])
        .await
        .unwrap();
    assert_eq!(r.version, 1);
    assert_eq!(r.values, vec![vec![v("50"), None], vec![v("Alice"), None]]);

    // Version 2: a transaction that read alice's 50, with both receipts.
    let mut t = Batch::new();
    t.expect("checking", "alice", "50")
        .expect_absent("checking", "bob")
        .expect(ORDERED, "bob", "Bob")
        .insert("checking", "alice", "20")
        .insert("checking", "bob", "30")
        .delete(ORDERED, "bob");
    let v2 = client.transact(&t).await.unwrap();
    assert_eq!(v2.version, 2);
    // The same transaction again: alice no longer holds 50.
    let e = client.transact(&t).await.unwrap_err();
    assert!(e.is_expectation_failed(), "{e}");

    // Version 3: more names.
    let mut b = Batch::new();
    b.insert(ORDERED, "carol", "Carol")
        .insert(ORDERED, "dave", "Dave")
        .insert(ORDERED, "erin", "Erin");
    let v3 = client.put(&b).await.unwrap();
    assert_eq!(v3.version, 3);

    // Ranges, fresh and of the past.
    let now = client.range(ORDERED, "a", "d").await.unwrap();
    assert_eq!(now.version, 3);
    assert_eq!(
        now.entries,
        vec![kv("alice", "Alice"), kv("carol", "Carol")]
    );
    let then = client.range_at(1, ORDERED, "a", "d").await.unwrap();
    assert_eq!(then.version, 1);
    assert_eq!(then.entries, vec![kv("alice", "Alice"), kv("bob", "Bob")]);
    let none = client.range(ORDERED, "x", "z").await.unwrap();
    assert!(none.entries.is_empty());

    // Reads of the past.
    let old = client
        .get_at(1, &[("checking", &["alice", "bob"][..])])
        .await
        .unwrap();
    assert_eq!((old.version, &old.values), (1, &vec![vec![v("50"), None]]));
    assert_eq!(old.digest.size, 3);

    // Promises, proved later in one batch across two versions.
    let p3 = client
        .get_promise(&[
            ("checking", &["alice", "bob"][..]),
            (ORDERED, &["dave"][..]),
        ])
        .await
        .unwrap();
    assert_eq!(p3.version, 3);
    assert_eq!(p3.values, vec![vec![v("20"), v("30")], vec![v("Dave")]]);
    let mut b = Batch::new();
    b.insert("checking", "alice", "25");
    client.put(&b).await.unwrap();
    let p4 = client
        .get_promise(&[("checking", &["alice"][..])])
        .await
        .unwrap();
    assert_eq!((p4.version, &p4.values), (4, &vec![vec![v("25")]]));
    client.verify_promises(&[p3.clone(), p4]).await.unwrap();
    // A promise the version did not hold is refuted.
    let mut wrong = p3;
    wrong.values[0][0] = v("21");
    let e = client.verify_promises(&[wrong]).await.unwrap_err();
    assert!(
        matches!(e, Error::Lie(Lie::AlteredValue { ref key, .. }) if key == b"alice"),
        "{e}"
    );

    // The digest: the newest, which the client already trusts.
    let d = client.digest().await.unwrap();
    assert_eq!(d.size, 4);
    assert_eq!(client.trusted(), Some(d));

    // Input the client refuses before asking.
    assert!(matches!(
        client.put(&Batch::new()).await,
        Err(Error::Invalid(_))
    ));
    let mut with_expect = Batch::new();
    with_expect
        .insert("checking", "a", "1")
        .expect("checking", "a", "0");
    assert!(matches!(
        client.put(&with_expect).await,
        Err(Error::Invalid(_))
    ));
    assert!(matches!(
        client.get::<&str>(&[("checking", &[][..])]).await,
        Err(Error::Invalid(_))
    ));
}

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
