//! LSTM inputs in the ADBench text format, and a seeded generator.
//!
//! # Format (verified against ADBench's `data/lstm` files and `read_lstm_instance`)
//!
//! ```text
//! l c b                 layers, sequence length (characters), bits per character
//!                       (blank)
//! 2l lines of 4b        main parameters; per layer a weight row then a bias row, each the four
//!                       gates' b values in the order forget, input, output, change
//!                       (blank)
//! 3 lines of b          extra parameters: input weights, output weights, output bias
//!                       (blank)
//! 2l lines of b         state; per layer the hidden row then the cell row
//!                       (blank)
//! c lines of b          the sequence, one character's bits (0 or 1) per line
//! ```
//!
//! ADBench's files end with two blank lines; b = 14 in all of them. Blank lines are optional for
//! this reader (see the crate's text rules); the writer emits them as ADBench does (one per
//! section break, none at the end).

use std::io::Write;
use std::path::Path;

use crate::error::{DatasetError, Result};
use crate::text::{self, TextReader, product, write_row};

/// An LSTM problem: parameters, initial state and input sequence.
#[derive(Clone, Debug, PartialEq)]
pub struct LstmInput {
    /// Number of layers.
    pub l: usize,
    /// Sequence length (characters).
    pub c: usize,
    /// Bits per character (the width of every layer).
    pub b: usize,
    /// 2l rows of 4b: per layer weight row then bias row, gates forget/input/output/change.
    pub main_params: Vec<f64>,
    /// 3 rows of b: input weights, output weights, output bias.
    pub extra_params: Vec<f64>,
    /// 2l rows of b: per layer hidden then cell.
    pub state: Vec<f64>,
    /// c rows of b.
    pub sequence: Vec<f64>,
}

const SOURCE_IN_MEMORY: &str = "<LSTM input>";

impl LstmInput {
    /// Reads an ADBench LSTM file.
    pub fn read(path: &Path) -> Result<Self> {
        let text = text::read_file(path)?;
        Self::parse(&text, &path.display().to_string())
    }

    /// Parses ADBench LSTM text; `source` names it in errors.
    pub fn parse(text: &str, source: &str) -> Result<Self> {
        let mut r = TextReader::new(text, source);
        let (h, [l, c, b]) = r.header(["l", "c", "b"])?;
        // 2l*4b + 3b + 2l*b + c*b = b * (10l + 3 + c)
        let total = product(&[b]).saturating_mul(product(&[l, 10]).saturating_add(3).saturating_add(u128::from(c)));
        r.check_fits(h, "numbers announced (b*(10l + 3 + c))", total)?;
        let (l, c, b) = (l as usize, c as usize, b as usize);

        let mut main_params = Vec::with_capacity(8 * l * b);
        for i in 0..2 * l {
            let kind = if i % 2 == 0 { "weights" } else { "biases" };
            let what = || format!("main parameters: layer {} of {l}, {kind}", i / 2 + 1);
            r.numbers(4 * b, &what, &mut main_params)?;
        }
        let mut extra_params = Vec::with_capacity(3 * b);
        for name in ["input weights", "output weights", "output bias"] {
            r.numbers(b, &|| format!("extra parameters: {name}"), &mut extra_params)?;
        }
        let mut state = Vec::with_capacity(2 * l * b);
        for i in 0..2 * l {
            let kind = if i % 2 == 0 { "hidden" } else { "cell" };
            let what = || format!("state: layer {} of {l}, {kind}", i / 2 + 1);
            r.numbers(b, &what, &mut state)?;
        }
        let mut sequence = Vec::with_capacity(c * b);
        for i in 0..c {
            r.numbers(b, &|| format!("character {} of {c}", i + 1), &mut sequence)?;
        }
        r.finish()?;
        Ok(LstmInput { l, c, b, main_params, extra_params, state, sequence })
    }

    /// Checks that the sizes are positive, the vectors match them and every number is finite.
    pub fn validate(&self) -> Result<()> {
        let invalid = |what: String| DatasetError::Invalid { file: SOURCE_IN_MEMORY.into(), what };
        let (l, c, b) = (self.l, self.c, self.b);
        if l == 0 || c == 0 || b == 0 {
            return Err(invalid(format!("sizes must be positive (l = {l}, c = {c}, b = {b})")));
        }
        let sizes = [
            ("main_params", self.main_params.len(), l.checked_mul(8).and_then(|v| v.checked_mul(b))),
            ("extra_params", self.extra_params.len(), b.checked_mul(3)),
            ("state", self.state.len(), l.checked_mul(2).and_then(|v| v.checked_mul(b))),
            ("sequence", self.sequence.len(), c.checked_mul(b)),
        ];
        for (name, len, want) in sizes {
            if Some(len) != want {
                return Err(invalid(format!(
                    "{name} has {len} numbers, expected {want:?} for l = {l}, c = {c}, b = {b}"
                )));
            }
        }
        let all = [&self.main_params, &self.extra_params, &self.state, &self.sequence];
        if let Some(v) = all.iter().flat_map(|v| v.iter()).find(|v| !v.is_finite()) {
            return Err(invalid(format!("non-finite value {v}")));
        }
        Ok(())
    }

    fn write_body<W: Write>(&self, out: &mut W) -> std::io::Result<()> {
        writeln!(out, "{} {} {}", self.l, self.c, self.b)?;
        let b = self.b;
        let sections: [(&[f64], usize); 4] =
            [(&self.main_params, 4 * b), (&self.extra_params, b), (&self.state, b), (&self.sequence, b)];
        for (values, width) in sections {
            writeln!(out)?;
            for row in values.chunks(width) {
                write_row(out, row)?;
            }
        }
        Ok(())
    }

    /// Writes the ADBench format (numbers in shortest round-trip form, so parsing the output
    /// gives back exactly `self`; 0/1 sequence bits are written as `0.0`/`1.0`).
    pub fn write<W: Write>(&self, out: W) -> Result<()> {
        self.validate()?;
        text::write_named("<output>", out, |w| self.write_body(w))
    }

    /// [`write`](Self::write) into a new file at `path`.
    pub fn write_file(&self, path: &Path) -> Result<()> {
        self.validate()?;
        text::write_path(path, |w| self.write_body(w))
    }

    /// [`write`](Self::write) into a String.
    pub fn to_text(&self) -> Result<String> {
        self.validate()?;
        Ok(text::write_string(|w| self.write_body(w)))
    }

    /// A seeded problem shaped like ADBench's files: main and extra parameters and the state
    /// uniform in [0, 1), sequence bits independently 0 or 1 with probability 1/2. Draw order:
    /// main parameters, extra parameters, state, sequence.
    ///
    /// # Panics
    /// When l, c or b is zero.
    pub fn generate(l: usize, c: usize, b: usize, seed: u64) -> Self {
        use rand::RngExt;
        assert!(l > 0 && c > 0 && b > 0, "LSTM sizes must be positive (l = {l}, c = {c}, b = {b})");
        let mut rng = crate::rng(seed);
        let mut unit = |len: usize| -> Vec<f64> { (0..len).map(|_| rng.random::<f64>()).collect() };
        let main_params = unit(8 * l * b);
        let extra_params = unit(3 * b);
        let state = unit(2 * l * b);
        let sequence = (0..c * b).map(|_| if rng.random::<bool>() { 1.0 } else { 0.0 }).collect();
        LstmInput { l, c, b, main_params, extra_params, state, sequence }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use adgauge_testkit::adbench_file;

    #[test]
    fn reads_adbench_l2_c1024() {
        let Some(path) = adbench_file("lstm/lstm_l2_c1024.txt") else {
            return;
        };
        let s = LstmInput::read(&path).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((s.l, s.c, s.b), (2, 1024, 14));
        assert_eq!(s.main_params.len(), 2 * 2 * 4 * 14);
        assert_eq!(&s.main_params[..2], [0.7477620204927391, 0.26762747231198525]);
        assert_eq!(s.main_params[4 * 56 - 1], 0.9544461199510779);
        assert_eq!(s.extra_params[0], 0.5848465223020524);
        assert_eq!(s.extra_params[2 * 14], 0.743816244074173);
        assert_eq!(s.extra_params[3 * 14 - 1], 0.11670601224776311);
        assert_eq!(s.state.len(), 4 * 14);
        assert_eq!(s.state[0], 0.9368207218464604);
        assert_eq!(s.state[3 * 14], 0.5607967723731909);
        let bits = |row: &[f64]| row.iter().map(|&v| v as u8).collect::<Vec<_>>();
        assert_eq!(bits(&s.sequence[..14]), [0, 0, 0, 0, 0, 0, 0, 1, 0, 1, 0, 1, 0, 0]);
        assert_eq!(bits(&s.sequence[1023 * 14..]), [0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 0, 0, 0, 0]);
        assert!(s.sequence.iter().all(|&v| v == 0.0 || v == 1.0));
        let text = s.to_text().unwrap();
        assert_eq!(LstmInput::parse(&text, "rt").unwrap(), s);
    }

    #[test]
    fn round_trips_generated_inputs_exactly() {
        for (seed, (l, c, b)) in [(1, 1, 1), (2, 10, 14), (4, 3, 5), (1, 7, 2)].into_iter().enumerate() {
            let s = LstmInput::generate(l, c, b, seed as u64);
            s.validate().unwrap();
            let text = s.to_text().unwrap();
            // header + 4 blanks + 2l + 3 + 2l + c rows
            assert_eq!(text.lines().count(), 1 + 4 + 4 * l + 3 + c);
            assert_eq!(LstmInput::parse(&text, "gen").unwrap(), s);
            // Blank lines are optional.
            let dense: String = text.lines().filter(|l| !l.is_empty()).map(|l| format!("{l}\n")).collect();
            assert_eq!(LstmInput::parse(&dense, "gen").unwrap(), s);
        }
        let s = LstmInput::generate(2, 4, 3, 8);
        let dir = std::env::temp_dir().join(format!("adgauge-lstm-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("s.txt");
        s.write_file(&path).unwrap();
        assert_eq!(LstmInput::read(&path).unwrap(), s);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn generator_is_deterministic_per_seed() {
        let s = LstmInput::generate(2, 20, 14, 3);
        assert_eq!(s, LstmInput::generate(2, 20, 14, 3));
        assert_ne!(s, LstmInput::generate(2, 20, 14, 4));
        assert!(s.main_params.iter().all(|v| (0.0..1.0).contains(v)));
        let ones = s.sequence.iter().filter(|&&v| v == 1.0).count();
        assert!(ones > 80 && ones < 200, "{ones}");
        assert!(s.sequence.iter().all(|&v| v == 0.0 || v == 1.0));
    }

    /// l = 1, c = 2, b = 2: header 1, blank 2, main 3-4, blank 5, extra 6-8, blank 9,
    /// state 10-11, blank 12, sequence 13-14.
    fn sample() -> Vec<String> {
        let text = LstmInput::generate(1, 2, 2, 0).to_text().unwrap();
        text.lines().map(str::to_string).collect()
    }

    fn parse_err(lines: &[String]) -> DatasetError {
        let e = LstmInput::parse(&(lines.join("\n") + "\n"), "bad.txt").unwrap_err();
        assert_eq!(e.file(), "bad.txt");
        e
    }

    #[test]
    fn malformed_inputs_name_the_line() {
        let lines = sample();
        assert_eq!(lines.len(), 14);
        // Truncated: the sequence misses its last row.
        let e = parse_err(&lines[..13]);
        assert_eq!(e.line(), Some(14), "{e}");
        assert!(e.to_string().contains("character 2 of 2"), "{e}");
        // Truncated inside the main parameters (the blank line 5 is skipped).
        let e = parse_err(&lines[..3]);
        assert_eq!(e.line(), Some(4), "{e}");
        // A letter where a number belongs.
        let mut bad = lines.clone();
        bad[6] = "0.5 o.5".into();
        let e = parse_err(&bad);
        assert_eq!(e.line(), Some(7), "{e}");
        assert!(e.to_string().contains("'o.5'"), "{e}");
        // Wrong count.
        let mut bad = lines.clone();
        bad[2].push_str(" 0.25");
        let e = parse_err(&bad);
        assert_eq!(e.line(), Some(3), "{e}");
        assert!(e.to_string().contains("expected 8 numbers"), "{e}");
        // Non-finite.
        let mut bad = lines.clone();
        bad[10] = "NaN 0.5".into();
        let e = parse_err(&bad);
        assert_eq!(e.line(), Some(11), "{e}");
        assert!(e.to_string().contains("finite"), "{e}");
        // Trailing garbage after blank lines.
        let mut bad = lines.clone();
        bad.extend(["".into(), "".into(), "1 0".into()]);
        assert_eq!(parse_err(&bad).line(), Some(17));
        // Bad header.
        for h in ["1 2", "1 2 0", "a 2 2", "1 2 2 2"] {
            let mut bad = lines.clone();
            bad[0] = h.into();
            assert_eq!(parse_err(&bad).line(), Some(1), "{h}");
        }
    }

    #[test]
    fn huge_headers_fail_before_allocating() {
        let lines = sample();
        for h in [
            "1 1000000000000 2",
            "1000000000000 2 2",
            "1 2 1000000000000",
            "18446744073709551615 18446744073709551615 18446744073709551615",
        ] {
            let mut bad = lines.clone();
            bad[0] = h.into();
            let e = parse_err(&bad);
            assert!(matches!(e, DatasetError::TooLarge { line: 1, .. }), "{h}: {e}");
        }
    }

    #[test]
    fn writer_rejects_inconsistent_inputs() {
        let mut s = LstmInput::generate(1, 2, 2, 0);
        s.state.pop();
        assert!(matches!(s.to_text(), Err(DatasetError::Invalid { .. })));
        let mut s = LstmInput::generate(1, 2, 2, 0);
        s.sequence[0] = f64::INFINITY;
        assert!(matches!(s.to_text(), Err(DatasetError::Invalid { .. })));
    }
}
