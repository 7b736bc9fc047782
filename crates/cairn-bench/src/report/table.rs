//! Tables as text: the "metric / value" table each command prints to the terminal, and the
//! Markdown tables of the reports and printouts.
//!
//! Owns: [`metric_value`], [`Markdown`] and [`Align`]. Must never touch: files, or the numbers'
//! formats (the caller's, through [`super::format`]).
//!
//! Both are laid out by the `tabled` crate (column widths by display width, alignment, line
//! wrapping, the Markdown alignment row) rather than by padding of our own: one well-kept layout
//! for every table, whose Markdown columns line up in the file as well as on the page.

use tabled::builder::Builder;
use tabled::grid::config::Offset;
use tabled::settings::object::{Cell, Columns};
use tabled::settings::span::ColumnSpan;
use tabled::settings::style::{HorizontalLine, LineChar, Style};
use tabled::settings::width::Wrap;
use tabled::settings::Width;
use tabled::settings::{Alignment, Modify, Padding};

/// A column's alignment: text left, numbers right.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Align {
    /// Left-aligned: `---` in the Markdown alignment row.
    Left,
    /// Right-aligned: `--:` in the Markdown alignment row.
    Right,
}

/// Values longer than this (a settings line) do not widen the value column: they start in it,
/// run on to the right and wrap at word boundaries.
const LONG_VALUE: usize = 24;

/// Width at which a long value is wrapped.
const WRAP_WIDTH: usize = 72;

/// `rows` as a two-column terminal table under a "metric / value" header: names left-aligned,
/// values right-aligned; a value longer than 24 characters (a settings line) is left-aligned,
/// runs on past the value column and wraps at 72 characters.
pub fn metric_value(rows: &[(&str, String)]) -> String {
    let long = |value: &str| value.chars().count() > LONG_VALUE;
    let any_long = rows.iter().any(|(_, value)| long(value));
    let mut builder = Builder::default();
    // A long value spans the value column and a third one, empty elsewhere, that holds its run-on.
    let run_on = || any_long.then(String::new);
    builder.push_record(
        ["metric".to_string(), "value".to_string()]
            .into_iter()
            .chain(run_on()),
    );
    for (name, value) in rows {
        builder.push_record(
            [name.to_string(), value.clone()]
                .into_iter()
                .chain(run_on()),
        );
    }
    let mut table = builder.build();
    let rule = HorizontalLine::new('-').intersection(' ');
    table
        .with(Style::empty().vertical(' ').horizontals([(1, rule)]))
        .with(Padding::zero())
        .with(Modify::new(Columns::one(0)).with(Padding::new(0, 1, 0, 0)))
        .with(Modify::new(Columns::one(1)).with(Alignment::right()));
    for (i, (_, value)) in rows.iter().enumerate() {
        if long(value) {
            let cell = Cell::new(i + 1, 1);
            table.with(
                Modify::new(cell)
                    .with(Wrap::new(WRAP_WIDTH).keep_words(true))
                    .with(Alignment::left())
                    .with(ColumnSpan::new(2)),
            );
        }
    }
    let mut rule_width = None;
    if any_long {
        // The name and value columns as wide as their widest entries (long values aside), the
        // run-on column the rest of the wrapped width.
        let width = |text: &str| text.chars().count();
        let names = rows
            .iter()
            .map(|(name, _)| width(name))
            .chain([width("metric")]);
        let values = rows
            .iter()
            .map(|(_, value)| width(value))
            .filter(|&w| w <= LONG_VALUE);
        let value_width = values.chain([width("value")]).max().unwrap_or(0);
        let run_on = WRAP_WIDTH.saturating_sub(value_width + 1).max(1);
        let name_width = names.max().unwrap_or(0) + 1;
        table.with(Width::list([name_width, value_width, run_on]));
        rule_width = Some(name_width + 1 + value_width);
    }
    let text = table.to_string();
    let Some(width) = rule_width else {
        return text + "\n";
    };
    // No padding of the run-on column after a line's last word, and the rule under the header
    // stops at the value column, as the header does.
    let mut lines: Vec<&str> = text.lines().map(str::trim_end).collect();
    if let Some(rule) = lines.get_mut(1) {
        *rule = &rule[..width.min(rule.len())];
    }
    lines.join("\n") + "\n"
}

/// A Markdown table: its header with each column's alignment, then rows of cells (a row with
/// fewer cells than the header gets empty ones).
pub struct Markdown {
    builder: Builder,
    align: Vec<Align>,
}

impl Markdown {
    /// A table with these columns.
    pub fn new(columns: &[(&str, Align)]) -> Markdown {
        let mut builder = Builder::default();
        builder.push_record(columns.iter().map(|(name, _)| name.to_string()));
        Markdown {
            builder,
            align: columns.iter().map(|(_, align)| *align).collect(),
        }
    }

    /// A table whose columns are all left-aligned (`---`).
    pub fn left(columns: &[&str]) -> Markdown {
        let columns: Vec<_> = columns.iter().map(|name| (*name, Align::Left)).collect();
        Markdown::new(&columns)
    }

    /// Adds a row; a line break in a cell becomes a space, so the row stays one line.
    pub fn row<I, S>(&mut self, cells: I)
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let cells: Vec<String> = cells
            .into_iter()
            .map(|cell| cell.as_ref().replace(['\n', '\r'], " "))
            .collect();
        self.builder.push_record(cells);
    }

    /// The table's text, one line per row, ending in a line break.
    pub fn render(self) -> String {
        let mut table = self.builder.build();
        table.with(Style::markdown());
        for (column, align) in self.align.iter().enumerate() {
            if *align == Align::Right {
                table
                    .with(Modify::new(Columns::one(column)).with(Alignment::right()))
                    .with(
                        Modify::new(Cell::new(1, column))
                            .with(LineChar::horizontal(':', Offset::End(0))),
                    );
            }
        }
        table.to_string() + "\n"
    }
}

/// For tests: `text` with every run of spaces in a table row (a line starting with `|`) cut to
/// one, so a test can match a row cell by cell whatever the columns' padding.
#[cfg(test)]
pub(crate) fn squeezed(text: &str) -> String {
    let lines = text.lines().map(|line| {
        if !line.starts_with('|') {
            return line.to_string();
        }
        let mut out = String::new();
        for c in line.chars() {
            if !(c == ' ' && out.ends_with(' ')) {
                out.push(c);
            }
        }
        out
    });
    lines.collect::<Vec<_>>().join("\n") + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_value_tables_align_and_wrap() {
        let table = metric_value(&[
            ("engine", "cairn".to_string()),
            ("ops/s", "352002".to_string()),
            ("settings", "word ".repeat(20).trim().to_string()),
        ]);
        println!("{table}");
        let lines: Vec<&str> = table.lines().collect();
        assert!(lines[0].starts_with("metric "), "{table}");
        assert!(lines[1].starts_with("------"), "{table}");
        assert!(
            lines[2].starts_with("engine ") && lines[2].ends_with(" cairn"),
            "{table}"
        );
        assert!(lines[3].ends_with(" 352002"), "{table}");
        assert!(lines.len() > 5, "the settings wrap: {table}");
    }

    #[test]
    fn markdown_tables_have_the_alignment_row() {
        let mut table = Markdown::new(&[("engine", Align::Left), ("ops/s", Align::Right)]);
        table.row(["cairn", "120,000"]);
        table.row(["lmdb"]);
        let text = table.render();
        println!("{text}");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{text}");
        assert!(
            lines[1].starts_with("|---") && lines[1].ends_with("-:|"),
            "{text}"
        );
        assert!(
            lines[2].starts_with("| cairn ") && lines[2].ends_with(" 120,000 |"),
            "{text}"
        );
        let empty = Markdown::new(&[("a", Align::Left), ("b", Align::Right)]).render();
        assert_eq!(empty, "| a | b |\n|---|--:|\n", "a header alone");
    }
}
