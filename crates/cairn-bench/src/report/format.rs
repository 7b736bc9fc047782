//! Number formats shared by the terminal tables, the Markdown report and the charts.
//!
//! Owns: how a count, a size or a missing value is written. Must never touch: files.

/// Bytes in a MiB.
pub const MIB: f64 = 1024.0 * 1024.0;

/// A peak RSS in MiB with one decimal, or "n/a".
pub fn rss_mib(bytes: Option<u64>) -> String {
    bytes.map_or("n/a".into(), |b| format!("{:.1}", b as f64 / MIB))
}

/// A value, or "-".
pub fn opt<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "-".to_string(), |v| v.to_string())
}

/// Bytes in a GiB.
pub const GIB: f64 = 1024.0 * MIB;

/// Rounded to an integer with thousands separators: 128929.1 → "128,929".
pub fn thousands(value: f64) -> String {
    let rounded = value.round();
    let digits = format!("{:.0}", rounded.abs());
    let mut out = String::new();
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    if rounded < 0.0 {
        out.insert(0, '-');
    }
    out
}

/// Bytes in MiB, one decimal.
pub fn mib_text(bytes: u64) -> String {
    rss_mib(Some(bytes))
}

/// Milliseconds with about three significant digits.
pub fn ms(value: f64) -> String {
    if value >= 100.0 {
        format!("{value:.0}")
    } else if value >= 10.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.2}")
    }
}

/// A count in short form: 10000000 → "10M", 250000 → "250k", 1500000 → "1.5M".
pub fn short_count(n: u64) -> String {
    if n >= 1_000_000 {
        format!("{}M", trimmed(n as f64 / 1e6, 2))
    } else if n >= 1_000 && n.is_multiple_of(1_000) {
        format!("{}k", n / 1_000)
    } else {
        thousands(n as f64)
    }
}

/// Compact axis numbers: 120000 → "120k", 0.5 → "0.5".
pub fn compact(value: f64) -> String {
    if value >= 1e6 {
        format!("{}M", trimmed(value / 1e6, 1))
    } else if value >= 1e3 {
        format!("{}k", trimmed(value / 1e3, 1))
    } else {
        trimmed(value, 2)
    }
}

/// `value` with at most `decimals` decimals, trailing zeros removed.
pub fn trimmed(value: f64, decimals: usize) -> String {
    let text = format!("{value:.decimals$}");
    if !text.contains('.') {
        return text;
    }
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// A memory limit in words.
pub fn limit_text(limit: Option<u64>) -> String {
    match limit {
        Some(bytes) => format!("{} MiB", thousands(bytes as f64 / MIB)),
        None => "no memory limit".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_numbers() {
        assert_eq!(thousands(128929.1), "128,929");
        assert_eq!(thousands(999.6), "1,000");
        assert_eq!(thousands(12.0), "12");
        assert_eq!(short_count(10_000_000), "10M");
        assert_eq!(short_count(1_500_000), "1.5M");
        assert_eq!(short_count(250_000), "250k");
        assert_eq!(short_count(1234), "1,234");
        assert_eq!(compact(120000.0), "120k");
        assert_eq!(compact(0.5), "0.5");
        assert_eq!(limit_text(None), "no memory limit");
        assert_eq!(limit_text(Some(1 << 30)), "1,024 MiB");
    }
}
