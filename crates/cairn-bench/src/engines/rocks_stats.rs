//! RocksDB's compaction statistics per level, read from the text of its
//! `rocksdb.cfstats-no-file-histogram` property, for the RocksDB adapter's
//! [`Engine::level_work`](crate::engines::Engine::level_work).
//!
//! Owns: parsing that text ([`level_work`]). Must never touch: the `rocksdb` crate (the adapter
//! reads the property and hands the text here), so that this module builds, and its tests run,
//! without RocksDB's C++.
//!
//! The property's "Compaction Stats" table (RocksDB 11.8's `db/internal_stats.cc`,
//! `PrintLevelStatsHeader` and `PrintLevelStats`) has one row per level that has files or
//! compaction time (`L0`, `L1`, ...), then `Sum` and `Int`; its columns are the header's words,
//! but the `Size` column prints as two words ("1.23 MB"), so a row's cells are matched to the
//! header from the right, where every cell is one word. Of each level it reads `Comp(cnt)`, the
//! compactions whose output went to that level (for `L0`, its memtable flushes), and `KeyIn`,
//! the entries they read, which RocksDB prints rounded (`NumberToHumanString`: thousands from
//! 10,000 on as "12K", millions from 10M on, billions from 10G on). Its counters start when the
//! database is opened, as a run's do. RocksDB does not count compactions started, only done.

use crate::record::{LevelWork, LevelWorkRow};

/// The property whose text [`level_work`] reads.
pub const PROPERTY: &str = "rocksdb.cfstats-no-file-histogram";

/// What the steps of the rows count.
const STEPS_UNIT: &str = "input entries of the compactions into the level (KeyIn; on level 0, \
                          of its memtable flushes), rounded as RocksDB prints them";

/// The compactions and their input entries per output level in `text` (the value of
/// [`PROPERTY`]); `None` when the text has no per-level table with `Comp(cnt)` and `KeyIn`, or
/// a cell of one cannot be read.
pub fn level_work(text: &str) -> Option<LevelWork> {
    let mut lines = text.lines().map(str::split_whitespace);
    let header: Vec<&str> = lines
        .find(|words| words.clone().next() == Some("Level"))?
        .collect();
    // A column's place counted from the right end of the header.
    let from_right = |name: &str| {
        let at = header.iter().position(|word| *word == name)?;
        Some(header.len() - 1 - at)
    };
    let (count_at, keys_at) = (from_right("Comp(cnt)")?, from_right("KeyIn")?);
    let mut levels = Vec::new();
    // The rule under the header, then a row per level until `Sum`.
    for words in lines.skip(1) {
        let words: Vec<&str> = words.collect();
        let Some(level) = words
            .first()
            .and_then(|name| name.strip_prefix('L'))
            .and_then(|n| n.parse::<u32>().ok())
        else {
            break;
        };
        let cell = |from_right: usize| {
            let index = words.len().checked_sub(from_right + 1)?;
            words.get(index).copied()
        };
        levels.push(LevelWorkRow {
            level,
            started: None,
            finished: cell(count_at)?.parse().ok()?,
            steps: human_number(cell(keys_at)?)?,
        });
    }
    Some(LevelWork {
        steps_unit: STEPS_UNIT.to_string(),
        levels,
        unattributed_steps: None,
    })
}

/// A count as RocksDB's `NumberToHumanString` prints it: digits, then K, M or G for
/// thousands, millions or billions. Negative counts and other text are `None`.
fn human_number(text: &str) -> Option<u64> {
    let (digits, scale) = match text.as_bytes().last()? {
        b'K' => (&text[..text.len() - 1], 1_000),
        b'M' => (&text[..text.len() - 1], 1_000_000),
        b'G' => (&text[..text.len() - 1], 1_000_000_000),
        _ => (text, 1),
    };
    digits.parse::<u64>().ok()?.checked_mul(scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The property's text as RocksDB 11.8 prints it (the widths of `PrintLevelStats`), for a
    /// database with levels 0, 1 and 3, and the by-priority table after it.
    const CFSTATS: &str = "
** Compaction Stats [default] **
Level    Files   Size     Score Read(GB)  Rn(GB) Rnp1(GB) Write(GB) WPreComp(GB) Wnew(GB) Moved(GB) W-Amp Rd(MB/s) Wr(MB/s) Comp(sec) CompMergeCPU(sec) Comp(cnt) Avg(sec) KeyIn KeyDrop Rblob(GB) Wblob(GB)
-------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------
  L0      2/0   12.31 MB   0.5      0.0     0.0      0.0       1.2       1.2      1.2       0.0   1.0      0.0     55.2     22.10             20.01        41    0.539   9876    0       0.0       0.0
  L1      4/1   245.67 MB   0.9      2.5     1.2      1.3       2.4       2.4      1.1       0.0   2.0     80.1     78.3     31.90             29.50         7    4.557    25M   123K       0.0       0.0
  L3    130/0    6.54 GB   0.0     10.1     2.4      7.7       9.8       9.8      2.1       0.5   4.1     60.0     58.0    172.00            160.00        12   14.333   3456K      0       0.0       0.0
 Sum    136/1    6.80 GB   0.0     12.6     3.6      9.0      13.4      13.4      4.4       0.5  11.2     62.0     65.9    226.00            209.51        60    3.767    28M   123K       0.0       0.0
 Int      0/0    0.00 KB   0.0      0.0     0.0      0.0       0.0       0.0      0.0       0.0   0.0      0.0      0.0      0.00              0.00         0    0.000       0      0       0.0       0.0

** Compaction Stats [default] **
Priority    Files   Size     Score Read(GB)  Rn(GB) Rnp1(GB) Write(GB) WPreComp(GB) Wnew(GB) Moved(GB) W-Amp Rd(MB/s) Wr(MB/s) Comp(sec) CompMergeCPU(sec) Comp(cnt) Avg(sec) KeyIn KeyDrop Rblob(GB) Wblob(GB)
---------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------
 Low      0/0    0.00 KB   0.0     12.6     3.6      9.0      12.2      12.2      3.2       0.5   0.0     62.0     60.0    203.90            189.50        19   10.732    28M   123K       0.0       0.0
High      0/0    0.00 KB   0.0      0.0     0.0      0.0       1.2       1.2      1.2       0.0   0.0      0.0     55.2     22.10             20.01        41    0.539   9876    0       0.0       0.0

Blob file count: 0, total size: 0.0 GB, garbage size: 0.0 GB, space amp: 0.0
";

    fn row(level: u32, finished: u64, steps: u64) -> LevelWorkRow {
        LevelWorkRow {
            level,
            started: None,
            finished,
            steps,
        }
    }

    #[test]
    fn reads_the_compactions_and_input_entries_of_each_level() {
        let work = level_work(CFSTATS).expect("a table");
        assert_eq!(
            work.levels,
            [
                row(0, 41, 9_876),
                row(1, 7, 25_000_000),
                row(3, 12, 3_456_000)
            ]
        );
        assert!(work.steps_unit.contains("KeyIn"), "{}", work.steps_unit);
        assert_eq!(work.unattributed_steps, None);
    }

    #[test]
    fn text_without_the_table_or_with_bad_cells_is_none() {
        assert_eq!(level_work(""), None);
        assert_eq!(level_work("** DB Stats **\nUptime(secs): 1.0 total"), None);
        let without_keys = CFSTATS.replace(" KeyIn ", " Keys ");
        assert_eq!(level_work(&without_keys), None);
        let bad_count = CFSTATS.replace("   41    0.539", "   4x    0.539");
        assert_eq!(level_work(&bad_count), None);
        // A table without levels (nothing flushed yet) has no rows.
        let header = CFSTATS.lines().take(4).collect::<Vec<_>>().join("\n");
        assert_eq!(level_work(&header).map(|w| w.levels.len()), Some(0));
        assert_eq!(human_number("12K"), Some(12_000));
        assert_eq!(human_number("3G"), Some(3_000_000_000));
        assert_eq!(human_number("-5"), None);
        assert_eq!(human_number("M"), None);
    }
}
