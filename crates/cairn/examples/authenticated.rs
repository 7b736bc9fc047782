//! An authenticated table: its state root after each block, a proof for a light client, and a
//! snapshot that keeps its root.
//!
//! Run with `cargo run -p cairn --example authenticated`.

use cairn::cairn_proof::{verify, Claim};
use cairn::{AuthConfig, Session, SnapshotOverrides, TableConfig};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let session = Session::open(dir.path())?;
    let accounts = session.new_table(TableConfig::default().auth(Some(AuthConfig::default())))?;
    for block in 0..5u32 {
        let keys: Vec<String> = (0..100)
            .map(|i| format!("acct{}", block * 100 + i))
            .collect();
        accounts.prefetch(&keys)?; // while the block executes, say
        for k in &keys {
            accounts.insert(k, block.to_le_bytes())?;
        }
        let commit = accounts.commit()?;
        println!(
            "block {block}: version {} root {}",
            commit.version,
            hex(&commit.root.hash)
        );
    }
    let root = accounts.root()?.root;
    let proof = accounts.prove(&["acct42", "nobody"])?.proof;
    println!("proof of 2 keys: {} bytes", proof.encoded_len());
    let value = 0u32.to_le_bytes(); // acct42 was written in block 0
    let claims = [Claim::present(b"acct42", &value), Claim::absent(b"nobody")];
    verify(&root, &proof.encode(), &claims)?;

    accounts.save_snapshot("block-4", "accounts")?;
    let reopened = session.open_snapshot("block-4", "accounts", SnapshotOverrides::default())?;
    assert_eq!(reopened.root()?.root, root);
    println!("the snapshot opens with the same root");
    Ok(())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
