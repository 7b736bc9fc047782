//! Duplicates and unions: a duplicate is an independent copy made without I/O (a fork to try a
//! block on); a union merges tables (shards, or the deltas of several nodes), incrementally.
//!
//! Run with `cargo run -p cairn --example duplicates_and_unions`.

use cairn::{Session, Table, TableConfig};

fn main() -> cairn::Result<()> {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let session = Session::open(dir.path())?;
    let state = session.new_table(TableConfig::default())?;
    for i in 0..500u32 {
        state.insert(format!("acct{i:03}"), b"1")?;
    }

    // Try a block on a fork; keep it or drop it.
    let fork = state.duplicate()?;
    fork.delete("acct000")?;
    fork.insert("acct999", b"new")?;
    assert!(
        state.lookup("acct000")?.value().is_some(),
        "the original is untouched"
    );
    drop(fork); // rejected: its files go when the last handle does

    // Two shards joined: the union is usable at once, and its merge work is paid as you go.
    let shard_a = session.new_table(TableConfig::default())?;
    let shard_b = session.new_table(TableConfig::default())?;
    for i in 0..300u32 {
        shard_a.insert(format!("a{i}"), b"x")?;
        shard_b.insert(format!("b{i}"), b"y")?;
    }
    let joined: Table = shard_a.incremental_union(&shard_b)?;
    println!("union debt: {}", joined.remaining_union_debt()?);
    assert_eq!(joined.lookup("b17")?.value(), Some(&b"y"[..]));
    while joined.remaining_union_debt()? > 0 {
        joined.supply_union_credits(100)?;
    }
    println!("union of {} keys, debt paid", joined.range(..)?.count());
    Ok(())
}
