//! Line-oriented reading and writing of whitespace-separated numeric text (the ADBench formats).
//!
//! Reading rules shared by all formats: lines are split on ASCII whitespace (so trailing spaces
//! and `\r\n` line ends are accepted), blank lines are skipped wherever they appear, every
//! non-blank line must hold exactly the announced count of tokens, numbers must be finite, and
//! nothing but blank lines may follow the last expected line.

use std::io::Write;
use std::path::Path;

use crate::error::{DatasetError, Result};

/// The most numbers (f64 values plus indices) a replicated dataset may expand to. ADBench's own
/// readers index with C `int`, so nothing larger is a valid ADBench problem; at 8 bytes per
/// element this is 16 GiB.
pub const MAX_REPLICATED_ELEMENTS: u64 = 1 << 31;

/// Reads a file as UTF-8 text.
pub(crate) fn read_file(path: &Path) -> Result<String> {
    let file = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|source| DatasetError::Io { file: file.clone(), source })?;
    String::from_utf8(bytes).map_err(|e| {
        let valid = e.utf8_error().valid_up_to();
        let bytes = e.as_bytes();
        let line = 1 + bytes[..valid].iter().filter(|&&b| b == b'\n').count();
        DatasetError::Parse {
            file,
            line,
            expected: "UTF-8 text".into(),
            found: format!("the byte 0x{:02x}", bytes[valid]),
        }
    })
}

/// Quotes a token or line for an error message, cut to a readable length.
pub(crate) fn quote(s: &str) -> String {
    const MAX: usize = 40;
    let mut chars = s.chars();
    let head: String = chars.by_ref().take(MAX).collect();
    if chars.next().is_some() { format!("'{head}...'") } else { format!("'{head}'") }
}

fn plural(count: usize, what: &str) -> String {
    if count == 1 { format!("1 {what}") } else { format!("{count} {what}s") }
}

/// A cursor over the non-blank lines of a text, with the file name for error messages.
pub(crate) struct TextReader<'a> {
    file: &'a str,
    lines: std::iter::Enumerate<std::str::Lines<'a>>,
    /// Lines consumed so far (blank ones included).
    seen: usize,
    /// The most numbers the text can hold: each needs a character and a separator.
    capacity: u64,
}

impl<'a> TextReader<'a> {
    pub(crate) fn new(text: &'a str, file: &'a str) -> Self {
        TextReader { file, lines: text.lines().enumerate(), seen: 0, capacity: (text.len() as u64).div_ceil(2) }
    }

    pub(crate) fn error(&self, line: usize, expected: impl Into<String>, found: impl Into<String>) -> DatasetError {
        DatasetError::Parse { file: self.file.to_string(), line, expected: expected.into(), found: found.into() }
    }

    fn next_nonblank(&mut self) -> Option<(usize, &'a str)> {
        for (i, line) in self.lines.by_ref() {
            self.seen = i + 1;
            if !line.trim_ascii().is_empty() {
                return Some((i + 1, line));
            }
        }
        None
    }

    /// The number of non-blank lines not yet consumed (no allocation).
    pub(crate) fn remaining_lines(&self) -> usize {
        self.lines.clone().filter(|(_, l)| !l.trim_ascii().is_empty()).count()
    }

    /// The next non-blank line, or an error saying what was expected there.
    fn line(&mut self, expected: &dyn Fn() -> String) -> Result<(usize, &'a str)> {
        match self.next_nonblank() {
            Some(l) => Ok(l),
            None => Err(self.error(self.seen + 1, expected(), "end of file")),
        }
    }

    /// The next non-blank line split into exactly `N` tokens.
    pub(crate) fn fields<const N: usize>(&mut self, what: &str) -> Result<(usize, [&'a str; N])> {
        let expected = || format!("{} ({what})", plural(N, "value"));
        let (line, text) = self.line(&expected)?;
        let mut out = [""; N];
        let mut count = 0;
        for tok in text.split_ascii_whitespace() {
            if count < N {
                out[count] = tok;
            }
            count += 1;
        }
        if count != N {
            return Err(self.error(line, expected(), plural(count, "value")));
        }
        Ok((line, out))
    }

    /// Reads the next non-blank line, which must hold exactly `count` finite numbers, appending
    /// them to `out`. Returns the line number.
    pub(crate) fn numbers(&mut self, count: usize, what: &dyn Fn() -> String, out: &mut Vec<f64>) -> Result<usize> {
        let expected = || format!("{} ({})", plural(count, "number"), what());
        let (line, text) = self.line(&expected)?;
        let found = text.split_ascii_whitespace().count();
        if found != count {
            return Err(self.error(line, expected(), plural(found, "number")));
        }
        for (j, tok) in text.split_ascii_whitespace().enumerate() {
            let v = self.float(line, tok, &|| format!("number {} of {count} ({})", j + 1, what()))?;
            out.push(v);
        }
        Ok(line)
    }

    /// Parses a finite f64 token.
    pub(crate) fn float(&self, line: usize, tok: &str, what: &dyn Fn() -> String) -> Result<f64> {
        match tok.parse::<f64>() {
            Ok(v) if v.is_finite() => Ok(v),
            Ok(_) => Err(self.error(line, format!("a finite {}", what()), quote(tok))),
            Err(_) => Err(self.error(line, format!("a decimal {}", what()), quote(tok))),
        }
    }

    /// Parses a positive integer token (a size in a header).
    pub(crate) fn positive(&self, line: usize, tok: &str, what: &str) -> Result<u64> {
        match tok.parse::<u64>() {
            Ok(v) if v > 0 => Ok(v),
            _ => Err(self.error(line, format!("a positive integer ({what})"), quote(tok))),
        }
    }

    /// Reads a header line of `N` positive integers named `names`.
    pub(crate) fn header<const N: usize>(&mut self, names: [&str; N]) -> Result<(usize, [u64; N])> {
        let (line, toks) = self.fields::<N>(&format!("header '{}'", names.join(" ")))?;
        let mut out = [0u64; N];
        for i in 0..N {
            out[i] = self.positive(line, toks[i], names[i])?;
        }
        Ok((line, out))
    }

    /// Fails unless only blank lines remain.
    pub(crate) fn finish(&mut self) -> Result<()> {
        match self.next_nonblank() {
            None => Ok(()),
            Some((line, text)) => Err(self.error(line, "end of file", quote(text.trim_ascii()))),
        }
    }

    /// Fails with `TooLarge` unless the text can hold `count` numbers.
    pub(crate) fn check_fits(&self, line: usize, what: &str, count: u128) -> Result<()> {
        self.check_limit(line, what, count, self.capacity)
    }

    /// Fails with `TooMuchMemory` unless `numbers` f64 values fit in the memory limit.
    pub(crate) fn check_memory(&self, line: usize, what: &str, numbers: u128) -> Result<()> {
        let bytes = numbers.saturating_mul(8);
        crate::limits::check(what, bytes).map_err(|message| DatasetError::TooMuchMemory {
            file: self.file.to_string(),
            line,
            message,
        })
    }

    /// Fails with `TooLarge` unless `value <= limit`.
    pub(crate) fn check_limit(&self, line: usize, what: &str, value: u128, limit: u64) -> Result<()> {
        if value > u128::from(limit) {
            return Err(DatasetError::TooLarge {
                file: self.file.to_string(),
                line,
                what: what.to_string(),
                value: u64::try_from(value).unwrap_or(u64::MAX),
                limit,
            });
        }
        Ok(())
    }
}

/// Product of sizes without overflow (saturating at u128::MAX).
pub(crate) fn product(factors: &[u64]) -> u128 {
    factors.iter().fold(1u128, |acc, &f| acc.saturating_mul(u128::from(f)))
}

/// Writes one line of numbers in shortest round-trip form (`{:?}`), separated by single spaces.
pub(crate) fn write_row<W: Write>(out: &mut W, values: &[f64]) -> std::io::Result<()> {
    for (i, v) in values.iter().enumerate() {
        if i > 0 {
            out.write_all(b" ")?;
        }
        write!(out, "{v:?}")?;
    }
    out.write_all(b"\n")
}

/// Runs a writer body, naming `file` in any I/O error.
pub(crate) fn write_named<W: Write>(
    file: &str,
    out: W,
    body: impl FnOnce(&mut std::io::BufWriter<W>) -> std::io::Result<()>,
) -> Result<()> {
    let mut out = std::io::BufWriter::new(out);
    body(&mut out).and_then(|()| out.flush()).map_err(|source| DatasetError::Io { file: file.to_string(), source })
}

/// Creates `path` and writes into it.
pub(crate) fn write_path(
    path: &Path,
    body: impl FnOnce(&mut std::io::BufWriter<std::fs::File>) -> std::io::Result<()>,
) -> Result<()> {
    let file = path.display().to_string();
    let f = std::fs::File::create(path).map_err(|source| DatasetError::Io { file: file.clone(), source })?;
    write_named(&file, f, body)
}

/// Runs a writer body into a String.
pub(crate) fn write_string(body: impl FnOnce(&mut Vec<u8>) -> std::io::Result<()>) -> String {
    let mut buf = Vec::new();
    // Writing into a Vec cannot fail, and the writers only emit ASCII.
    let _ = body(&mut buf);
    String::from_utf8(buf).unwrap_or_default()
}

/// A standard normal sample (Box-Muller; one uniform pair per sample, for simplicity).
pub(crate) fn normal(rng: &mut impl rand::RngExt) -> f64 {
    let u1 = 1.0 - rng.random::<f64>(); // (0, 1]
    let u2 = rng.random::<f64>();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// Uniform sample in [lo, hi).
pub(crate) fn uniform(rng: &mut impl rand::RngExt, lo: f64, hi: f64) -> f64 {
    lo + (hi - lo) * rng.random::<f64>()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_errors_name_the_file_and_line() {
        let dir = std::env::temp_dir().join(format!("adgauge-text-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let missing = dir.join("missing.txt");
        let e = read_file(&missing).unwrap_err();
        assert!(matches!(e, DatasetError::Io { .. }), "{e}");
        assert!(e.to_string().contains("missing.txt"), "{e}");

        let bad = dir.join("bad.txt");
        std::fs::write(&bad, b"1 2 3\n4 5\n6 \xff 7\n").unwrap();
        let e = read_file(&bad).unwrap_err();
        assert_eq!(e.line(), Some(3), "{e}");
        assert!(e.to_string().contains("0xff"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn quoting_cuts_long_text_on_char_boundaries() {
        assert_eq!(quote("abc"), "'abc'");
        let long = "é".repeat(100);
        let q = quote(&long);
        assert!(q.ends_with("...'") && q.chars().count() == 40 + 5, "{q}");
    }

    #[test]
    fn rows_use_shortest_round_trip_form() {
        let mut out = Vec::new();
        write_row(&mut out, &[1.0, -0.0, 0.1, 1e-7, 5e-324, f64::MAX]).unwrap();
        let s = String::from_utf8(out).unwrap();
        assert_eq!(s, "1.0 -0.0 0.1 1e-7 5e-324 1.7976931348623157e308\n");
    }
}
