//! A UTxO-style ledger in two named, durable tables: each block spends some outputs and
//! creates others. Batched lookups check the spent outputs exist, and one `WriteBatch` applies
//! the block to both tables atomically: the outputs, and a balance table that counts per address
//! with upserts (no read before write).
//!
//! Run with `cargo run -p cairn --example utxo_ledger`. With a directory argument (created if
//! missing), the ledger is kept there, and also saved as snapshots `utxos` and `balances` for the
//! `cairn` command to look at (README, "Looking inside").

use cairn::{Resolve, Session, TableConfig, Update, WriteBatch};

fn main() -> cairn::Result<()> {
    let temporary = tempfile::tempdir().expect("a temporary directory");
    let kept = std::env::args_os().nth(1).map(std::path::PathBuf::from);
    let dir = kept.as_deref().unwrap_or(temporary.path());
    let session = Session::open(dir)?;
    let utxos = session.table("utxos", TableConfig::default())?;
    let balances = session.table(
        "balances",
        TableConfig::default().resolve(Resolve::AddU64Le), // an upsert adds to the balance
    )?;

    // Block 0: a genesis output per address.
    let genesis: Vec<(String, String)> = (0..100)
        .map(|a| (format!("genesis#{a}"), format!("addr{a}")))
        .collect();
    let block: Vec<(&str, Update<'_>)> = genesis
        .iter()
        .map(|(out, addr)| (out.as_str(), Update::Insert(addr.as_bytes())))
        .collect();
    utxos.updates(&block)?;
    for (_, addr) in &genesis {
        balances.upsert(addr, 1000u64.to_le_bytes())?;
    }

    // Blocks 1..=10: each spends ten outputs and creates one new output per spent one.
    for height in 1..=10u32 {
        let spent: Vec<String> = (0..10)
            .map(|i| match height {
                1 => format!("genesis#{}", i * 10),
                _ => format!("tx{}#{}", height - 1, i),
            })
            .collect();
        // One batch: every page read submitted at once.
        let found = utxos.lookups(&spent)?;
        let owners: Vec<Vec<u8>> = found
            .iter()
            .map(|r| r.value().expect("a spent output exists").to_vec())
            .collect();
        let created: Vec<String> = (0..10).map(|i| format!("tx{height}#{i}")).collect();
        // The block, atomically across both tables: spent outputs deleted, new ones created,
        // one unit moved from each spender to the output's owner (a no-op here: same owner).
        let mut block = WriteBatch::new();
        for (out, owner) in spent.iter().zip(&owners) {
            block.delete(&utxos, out);
            block.upsert(&balances, owner, (1u64.wrapping_neg()).to_le_bytes());
        }
        for (out, owner) in created.iter().zip(&owners) {
            block.insert(&utxos, out, owner);
            block.upsert(&balances, owner, 1u64.to_le_bytes());
        }
        session.write_batch(&block)?.wait()?;
    }

    let live = utxos.range(..)?.count();
    println!("live outputs after 10 blocks: {live}");
    assert_eq!(live, 100);
    let balance = balances.get("addr7")?;
    let balance = balance.map(|v| u64::from_le_bytes(v.try_into().expect("8 bytes")));
    println!("addr7 balance: {balance:?}");
    assert_eq!(balance, Some(1000));
    if kept.is_some() {
        utxos.save_snapshot("utxos", "utxo-set")?;
        balances.save_snapshot("balances", "balances")?;
        println!("saved snapshots utxos and balances in {}", dir.display());
    }
    Ok(())
}
