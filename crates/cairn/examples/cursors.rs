//! Cursors and ranges: a cursor is a stable view of the table (later updates do not show), read
//! as an iterator of `Result<CursorEntry>`.
//!
//! Run with `cargo run -p cairn --example cursors`.

use cairn::{Session, TableConfig};

fn main() -> cairn::Result<()> {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let session = Session::open(dir.path())?;
    // A small write buffer, so that the range spans runs as well as the buffer.
    let table = session.new_table(TableConfig::default().write_buffer_entries(64))?;
    for day in 1..=30u32 {
        for tx in 0..10u32 {
            table.insert(
                format!("2026-11-{day:02}/tx{tx}"),
                format!("{}", day * 100 + tx),
            )?;
        }
    }
    // Every transaction of one week, in key order.
    let week: Vec<String> = table
        .range("2026-11-08".."2026-11-15")?
        .map(|e| e.map(|e| String::from_utf8_lossy(&e.key).into_owned()))
        .collect::<cairn::Result<_>>()?;
    println!("{} transactions from the 8th to the 14th", week.len());
    assert_eq!(week.len(), 70);

    // A cursor opened now does not see a delete made after it.
    let mut cursor = table.cursor_at("2026-11-30")?;
    table.delete("2026-11-30/tx0")?;
    let first = cursor.next().expect("an entry")?;
    assert_eq!(first.key, b"2026-11-30/tx0");
    println!(
        "the cursor still sees {}",
        String::from_utf8_lossy(&first.key)
    );
    Ok(())
}
