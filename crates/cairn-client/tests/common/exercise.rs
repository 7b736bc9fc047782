//! Every call of the client, run on a fresh ledger: shared by the tests against one server and
//! against a cluster's leader.

use cairn_client::{Batch, Client, Error, Lie};

use super::{kv, v, ORDERED};

/// Every call of the client on a fresh ledger, checking the answers (the client verified each).
pub async fn exercise(client: &Client) {
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
