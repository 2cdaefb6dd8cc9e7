//! adgauge's datasets: readers and writers of dataset formats and deterministic generators.
//!
//! Every random input comes from a generator seeded explicitly ([`rng`]), so a run can record its
//! seeds and be reproduced. This crate depends on no other adgauge crate.
//!
//! The ADBench formats ([`gmm`], [`ba`], [`lstm`]; [`ht`]'s model files are `:`-separated) are read line by line with these rules:
//! numbers are whitespace-separated (trailing spaces and `\r\n` are fine), blank lines are
//! skipped, every non-blank line must hold exactly its count of numbers, numbers must be finite,
//! and nothing may follow the last expected line. Errors ([`DatasetError`]) name the file, the
//! 1-based line and what was expected; readers never panic. Sizes announced by a header are
//! checked before anything is allocated: the numbers to read must fit in the text (each takes
//! at least two bytes), and a replicated problem may expand to at most
//! [`MAX_REPLICATED_ELEMENTS`] numbers and to no more bytes than the memory limit
//! ([`limits::max_bytes`], `--max-memory`). Writers emit numbers in shortest round-trip form, so
//! reading what was written gives back the same values bit for bit.
//!
//! The real ADBench files are not part of this repository; tests find them, or skip, with
//! `adgauge_testkit::adbench_file`.

pub mod ba;
mod error;
pub mod gmm;
pub mod hist;
pub mod ht;
pub mod kmeans;
pub mod limits;
pub mod lstm;
mod text;

pub use error::{DatasetError, Result};
pub use text::MAX_REPLICATED_ELEMENTS;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// The random generator every dataset uses: ChaCha8, seeded from a u64.
pub fn rng(seed: u64) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(seed)
}
