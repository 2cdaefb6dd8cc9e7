//! adgauge's datasets: readers and writers of dataset formats and deterministic generators.
//!
//! Every random input comes from a generator seeded explicitly ([`rng`]), so a run can record its
//! seeds and be reproduced. This crate depends on no other adgauge crate.

pub mod hist;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// The random generator every dataset uses: ChaCha8, seeded from a u64.
pub fn rng(seed: u64) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(seed)
}
