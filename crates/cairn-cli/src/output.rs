//! Formatting for people: hex, sizes, counts, and progress bars on stderr.
//!
//! Owns: how numbers and bytes look in text output, and the progress bar of long jobs. Must
//! never touch: stdout's JSON (built by `commands`), the database.

use cairn::inspect::{VerifyPhase, VerifyProgress};
use cairn::{HashKind, Root};
use indicatif::{ProgressBar, ProgressStyle};

/// Lower-case hex of `bytes` (the `hex` crate, as the benchmark tool uses it).
pub fn hex(bytes: &[u8]) -> String {
    hex::encode(bytes)
}

/// Bytes from hex, or `None` if `text` is not an even number of hex digits.
pub fn from_hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Printable ASCII but `\\` as itself; every other byte (space included) as `\xNN`.
pub fn escaped(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for &b in bytes {
        if b.is_ascii_graphic() && b != b'\\' {
            out.push(b as char);
        } else {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

/// `1 run`, `2 runs`, `1,000 entries`.
pub fn plural(n: u64, noun: &str) -> String {
    // `entry`, `entries`; but `key`, `keys` (a vowel before the y).
    let stem = noun
        .strip_suffix('y')
        .filter(|stem| !stem.ends_with(['a', 'e', 'i', 'o', 'u']));
    let noun = match (n, stem) {
        (1, _) => noun.to_string(),
        (_, Some(stem)) => format!("{stem}ies"),
        _ => format!("{noun}s"),
    };
    format!("{} {noun}", count(n))
}

/// `1,234,567`.
pub fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `1.5 MiB`.
pub fn size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// The hash function's name as the format documents it.
pub fn hash_name(kind: HashKind) -> &'static str {
    match kind {
        HashKind::Sha256 => "sha256",
        HashKind::Blake3 => "blake3",
    }
}

/// `sha256:<hex>`.
pub fn root(root: &Root) -> String {
    format!("{}:{}", hash_name(root.kind), hex(&root.hash))
}

/// A progress bar on stderr for a verification, hidden when stderr is not a terminal.
pub struct VerifyBar {
    bar: ProgressBar,
    phase: Option<VerifyPhase>,
}

impl VerifyBar {
    pub fn new(name: &str) -> VerifyBar {
        let bar = ProgressBar::new(0);
        bar.set_prefix(name.to_string());
        VerifyBar { bar, phase: None }
    }

    pub fn update(&mut self, p: VerifyProgress) {
        if self.phase != Some(p.phase) {
            self.phase = Some(p.phase);
            let template = match p.phase {
                VerifyPhase::Files => {
                    "{prefix}: files    [{bar:30}] {bytes}/{total_bytes} ({bytes_per_sec}, {eta})"
                }
                VerifyPhase::Contents => {
                    "{prefix}: contents [{bar:30}] {human_pos}/{human_len} entries ({per_sec})"
                }
                VerifyPhase::Root => "{prefix}: root     [{bar:30}] pass {pos}/{len}",
            };
            if let Ok(style) = ProgressStyle::with_template(template) {
                self.bar.set_style(style.progress_chars("=> "));
            }
            self.bar.reset();
        }
        self.bar.set_length(p.total.max(p.done));
        self.bar.set_position(p.done);
    }

    pub fn finish(self) {
        self.bar.finish_and_clear();
    }
}

/// A progress bar on stderr for an audit, hidden when stderr is not a terminal.
pub struct AuditBar {
    bar: ProgressBar,
    phase: String,
}

impl AuditBar {
    pub fn new() -> AuditBar {
        AuditBar {
            bar: ProgressBar::new(0),
            phase: String::new(),
        }
    }

    pub fn update(&mut self, p: &cairn_ledger::AuditProgress) {
        use cairn_ledger::AuditProgress as P;
        let (phase, template, done, total) = match p {
            P::Table { table, done, total } => (
                format!("table {table}"),
                "{prefix}: root [{bar:30}] pass {pos}/{len}",
                *done,
                *total,
            ),
            P::Keys { table, done } => (
                format!("keys {table}"),
                "{prefix}: {human_pos} keys checked ({per_sec})",
                *done,
                0,
            ),
            P::Undo { done, total } => (
                "kept versions".to_string(),
                "{prefix} [{bar:30}] {human_pos}/{human_len} rebuilt ({per_sec})",
                *done,
                *total,
            ),
            P::Versions { done, total } => (
                "versions".to_string(),
                "{prefix} [{bar:30}] {human_pos}/{human_len} ({per_sec}, {eta})",
                *done,
                *total,
            ),
            _ => return,
        };
        if self.phase != phase {
            if let Ok(style) = ProgressStyle::with_template(template) {
                self.bar.set_style(style.progress_chars("=> "));
            }
            self.bar.set_prefix(phase.clone());
            self.bar.reset();
            self.phase = phase;
        }
        self.bar.set_length(total.max(done));
        self.bar.set_position(done);
    }

    pub fn finish(self) {
        self.bar.finish_and_clear();
    }
}
