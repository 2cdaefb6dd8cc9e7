//! The memory limit: the most bytes one size (a replicated dataset, a suite case, an `eval`
//! input) may need, checked before anything is allocated. The process sets it once from
//! `--max-memory` ([`set_max_bytes`]); the default is half the physical memory
//! ([`default_max_bytes`]). A refusal names the field and the bytes it would need.

use std::sync::atomic::{AtomicU64, Ordering};

/// 0 = not set: [`max_bytes`] gives the default.
static MAX_BYTES: AtomicU64 = AtomicU64::new(0);

/// Used where the physical memory cannot be read (no /proc/meminfo).
pub const FALLBACK_BYTES: u64 = 8 << 30;

/// Half the physical memory (MemTotal of /proc/meminfo), or [`FALLBACK_BYTES`].
pub fn default_max_bytes() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            let line = m.lines().find(|l| l.starts_with("MemTotal:"))?;
            let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
            Some(kb.saturating_mul(1024) / 2)
        })
        .filter(|&b| b > 0)
        .unwrap_or(FALLBACK_BYTES)
}

/// The limit in force.
pub fn max_bytes() -> u64 {
    match MAX_BYTES.load(Ordering::Relaxed) {
        0 => default_max_bytes(),
        b => b,
    }
}

/// Sets the limit for the process (`--max-memory`).
pub fn set_max_bytes(bytes: u64) {
    MAX_BYTES.store(bytes.max(1), Ordering::Relaxed);
}

/// `Err(message)` when `bytes` exceed the limit: "`what` needs N bytes, more than the memory
/// limit L (--max-memory)".
pub fn check(what: &str, bytes: u128) -> Result<(), String> {
    let limit = max_bytes();
    if bytes > u128::from(limit) {
        return Err(format!(
            "{what} needs {bytes} bytes, more than the memory limit {limit} (--max-memory; default half the physical memory)"
        ));
    }
    Ok(())
}

/// Parses a byte count: a whole number with an optional K, M, G or T suffix (powers of 1024).
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (digits, shift) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => match c.to_ascii_uppercase() {
            'K' => (&t[..i], 10),
            'M' => (&t[..i], 20),
            'G' => (&t[..i], 30),
            'T' => (&t[..i], 40),
            _ => return Err(format!("'{s}' is not a byte count (a number with K, M, G or T)")),
        },
        _ => (t, 0),
    };
    match digits.parse::<u64>() {
        Ok(n) if n > 0 && n.checked_shl(shift).is_some_and(|b| b >> shift == n) => Ok(n << shift),
        _ => Err(format!("'{s}' is not a byte count (a positive number with K, M, G or T)")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_counts_parse_with_suffixes_and_refuse_garbage() {
        assert_eq!(parse_bytes("4096"), Ok(4096));
        assert_eq!(parse_bytes("2G"), Ok(2 << 30));
        assert_eq!(parse_bytes("512m"), Ok(512 << 20));
        for bad in ["", "0", "-1", "1X", "G", "99999999999999T"] {
            assert!(parse_bytes(bad).is_err(), "{bad}");
        }
        assert!(default_max_bytes() > 0);
    }
}
