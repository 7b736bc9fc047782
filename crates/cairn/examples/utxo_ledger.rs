//! A UTxO-style ledger: each block spends some outputs and creates others. Batched lookups
//! check the spent outputs exist, one `updates` call applies the block, and a balance table
//! counts per address with upserts (no read before write).
//!
//! Run with `cargo run -p cairn --example utxo_ledger`. With a directory argument (an existing,
//! empty directory), the ledger is kept there, saved as snapshots `utxos` and `balances`, for
//! the `cairn` command to look at (README, "Looking inside").

use cairn::{Resolve, Session, TableConfig, Update};

fn main() -> cairn::Result<()> {
    let temporary = tempfile::tempdir().expect("a temporary directory");
    let kept = std::env::args_os().nth(1).map(std::path::PathBuf::from);
    let dir = kept.as_deref().unwrap_or(temporary.path());
    let session = Session::open(dir)?;
    let utxos = session.new_table(TableConfig::default())?;
    let balances = session.new_table(TableConfig {
        resolve: Resolve::AddU64Le, // an upsert adds to the balance
        ..TableConfig::default()
    })?;

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
        let mut block: Vec<(&str, Update<'_>)> = Vec::new();
        for out in &spent {
            block.push((out.as_str(), Update::Delete));
        }
        for (out, owner) in created.iter().zip(&owners) {
            block.push((out.as_str(), Update::Insert(owner)));
        }
        utxos.updates(&block)?;
    }

    let live = utxos.range(..)?.count();
    println!("live outputs after 10 blocks: {live}");
    assert_eq!(live, 100);
    let balance = balances.lookup("addr7")?;
    println!(
        "addr7 balance: {:?}",
        balance
            .value()
            .map(|v| u64::from_le_bytes(v.try_into().unwrap()))
    );
    if kept.is_some() {
        utxos.save_snapshot("utxos", "utxo-set")?;
        balances.save_snapshot("balances", "balances")?;
        println!("saved snapshots utxos and balances in {}", dir.display());
    }
    Ok(())
}
