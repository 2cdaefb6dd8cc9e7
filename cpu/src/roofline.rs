//! The CPU's roofline for histograms: how fast all the device's threads read memory in
//! sequence, and how many random 4-byte reads and updates per second they make in a working set
//! of k bins. A histogram's primal reads its indices and values in sequence and updates its bins
//! at random: at small k its time is bounded by the first figure (bytes of indices, values and
//! output over the sequential rate), at large k, bins beyond the caches, by the second. Behind
//! `adgauge backends --roofline` and the roofline `adgauge run` records before a suite's
//! histograms (at their k); seeded, and well under a second on a 2-core VM.
//!
//! The measurement runs in [`ROUNDS`] rounds, each one pass of every figure in turn (the
//! sequential read, then at each k an untimed pass of updates that brings its tables back into
//! the caches, a timed one and a pass of reads), and each figure is the median of its rounds'
//! passes. On a shared machine a transient state then moves one pass of each figure
//! rather than every pass of one: this 2-core VM read 26 to 62 GB/s in back-to-back
//! measurements that took the best of three consecutive passes, and its update rate at k = 10^3
//! ranged 1.15 to 2.95 x 10^9/s. Every pass is checked: the sequential sum must equal the
//! buffer's known sum and the updates must add up to the number made, so a pass the compiler
//! dropped or a thread that did nothing is an error, not a figure.

use std::time::Instant;

use rayon::prelude::*;

use super::Cpu;
use crate::{OpError, Result};

/// Bytes of the sequentially read buffer: beyond the last-level cache of the machines this runs
/// on (this VM's EPYC read a 64 MiB buffer at 33 GB/s on one thread: from its L3) and beyond a
/// histogram primal's inputs at n = 10^7 (120 MB with i64 indices), so the figure is memory's.
pub const SEQ_BYTES: usize = 256 << 20;
/// Rounds of the measurement: every figure is the median of this many passes.
pub const ROUNDS: usize = 7;
/// Random indices read per pass of the random measurements: 2^21 in all, split over the threads.
pub const RANDOM_ACCESSES: usize = 1 << 21;
/// Elements per task of the sequential read.
const SEQ_TASK: usize = 1 << 16;

/// The random access rates at one working set of `bins` 4-byte bins.
#[derive(Clone, Debug, PartialEq)]
pub struct RandomRate {
    pub bins: usize,
    /// Random 4-byte reads per second (all threads, each reading its own table of `bins`).
    pub reads_per_s: f64,
    /// Random 4-byte read-modify-writes (`bin += 1`) per second, each thread on its own table
    /// of `bins` (privatised histograms, as the CPU's histogram kernels keep).
    pub updates_per_s: f64,
}

/// What [`Cpu::roofline`] measured.
#[derive(Clone, Debug, PartialEq)]
pub struct Roofline {
    /// Threads that ran the measurement (the device's).
    pub threads: usize,
    /// Bytes of the sequentially read buffer.
    pub seq_bytes: usize,
    /// Bytes read per second by the median sequential pass, all threads.
    pub seq_read_bytes_per_s: f64,
    /// Random access rates, one per bin count asked for, in the order asked.
    pub random: Vec<RandomRate>,
    /// Seconds the whole measurement took.
    pub elapsed_s: f64,
}

/// The bin counts `adgauge backends --roofline` measures: the histogram suites' k = 10, 10^3
/// and 10^6 and the sizes between (where the table leaves L1, L2 and the last-level cache).
pub const DEFAULT_BINS: [usize; 5] = [10, 1_000, 10_000, 100_000, 1_000_000];

/// splitmix64: the seeded index stream (one state per position, so any split of the stream over
/// threads reads the same indices).
#[inline]
fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The bin of random word `r` among `k`: multiply-shift, no division in the timed loops.
#[inline(always)]
fn bin_of(r: u32, k: usize) -> usize {
    ((u64::from(r) * k as u64) >> 32) as usize
}

/// The smallest sequential buffer [`Cpu::roofline_sized`] takes: one task's elements.
pub const MIN_SEQ_BYTES: usize = SEQ_TASK * 8;

impl Cpu {
    /// Measures the roofline on this device's threads for working sets of `bins` bins (each at
    /// least 1), from `seed`. Errors: a bin count of 0, or a pass whose check fails.
    pub fn roofline(&self, bins: &[usize], seed: u64) -> Result<Roofline> {
        self.roofline_sized(bins, seed, SEQ_BYTES, RANDOM_ACCESSES)
    }

    /// [`Cpu::roofline`] over a sequential buffer of `seq_bytes` (rounded down to whole 8-byte
    /// words; at least [`MIN_SEQ_BYTES`]) and `random_accesses` random indices per pass (at
    /// least 1): smaller sizes measure the caches rather than memory, for tests that only need
    /// a measurement to record.
    pub fn roofline_sized(
        &self,
        bins: &[usize],
        seed: u64,
        seq_bytes: usize,
        random_accesses: usize,
    ) -> Result<Roofline> {
        if let Some(&k) = bins.iter().find(|&&k| k == 0 || k > u32::MAX as usize) {
            return Err(OpError::Unsupported(format!("roofline: {k} bins (expected 1 to 2^32 - 1)")));
        }
        if seq_bytes < MIN_SEQ_BYTES || random_accesses == 0 {
            return Err(OpError::Unsupported(format!(
                "roofline: {seq_bytes} sequential bytes and {random_accesses} random accesses (expected at least {MIN_SEQ_BYTES} and 1)"
            )));
        }
        let seq_bytes = seq_bytes / 8 * 8;
        let started = Instant::now();
        self.install(|| {
            let threads = rayon::current_num_threads();
            let seq = SequentialBuffer::new(seq_bytes);
            let stream: Vec<u32> = (0..random_accesses as u64).map(|i| (splitmix(seed ^ i) >> 32) as u32).collect();
            let mut random: Vec<RandomTables> = bins.iter().map(|&k| RandomTables::new(k, threads, &stream)).collect();
            let mut seq_s = Vec::with_capacity(ROUNDS);
            for round in 1..=ROUNDS {
                seq_s.push(seq.pass()?);
                for r in &mut random {
                    r.round(&stream, round)?;
                }
            }
            Ok(Roofline {
                threads,
                seq_bytes,
                seq_read_bytes_per_s: seq_bytes as f64 / median(seq_s),
                random: random.into_iter().map(|r| r.rate(stream.len())).collect(),
                elapsed_s: started.elapsed().as_secs_f64(),
            })
        })
    }
}

/// The median of some pass times (the upper middle of an even count; never empty here).
fn median(mut seconds: Vec<f64>) -> f64 {
    seconds.sort_by(f64::total_cmp);
    seconds[seconds.len() / 2]
}

/// The sequentially read buffer: words 0, 1, 2, ..., whose sum every pass checks.
struct SequentialBuffer {
    words: Vec<u64>,
}

impl SequentialBuffer {
    fn new(bytes: usize) -> SequentialBuffer {
        let mut words = vec![0u64; bytes / 8];
        words.par_chunks_mut(SEQ_TASK).enumerate().for_each(|(c, block)| {
            for (j, w) in block.iter_mut().enumerate() {
                *w = (c * SEQ_TASK + j) as u64;
            }
        });
        SequentialBuffer { words }
    }

    /// Seconds of one read of the whole buffer on all threads.
    fn pass(&self) -> Result<f64> {
        let n = self.words.len() as u64;
        let want = n * (n - 1) / 2;
        let t = Instant::now();
        // Four independent sums per task: one add chain would bound the pass by its latency.
        let got: u64 = self
            .words
            .par_chunks(SEQ_TASK)
            .map(|block| {
                let mut s = [0u64; 4];
                let mut quads = block.chunks_exact(4);
                for q in &mut quads {
                    for (acc, &w) in s.iter_mut().zip(q) {
                        *acc = acc.wrapping_add(w);
                    }
                }
                let tail: u64 = quads.remainder().iter().fold(0, |a, &w| a.wrapping_add(w));
                s.iter().fold(tail, |a, &x| a.wrapping_add(x))
            })
            .reduce(|| 0, u64::wrapping_add);
        let seconds = t.elapsed().as_secs_f64();
        if std::hint::black_box(got) != want {
            return Err(OpError::Device(format!("roofline: the sequential pass summed {got}, expected {want}")));
        }
        Ok(seconds)
    }
}

/// The random measurements at one bin count: every thread reads its share of one seeded stream
/// of random words (the same at every k) and reads or updates its own table of k 4-byte bins.
struct RandomTables {
    k: usize,
    /// One contiguous share of the stream per table (the work is even: a thread per share).
    share: usize,
    tables: Vec<Vec<u32>>,
    update_s: Vec<f64>,
    read_s: Vec<f64>,
}

impl RandomTables {
    fn new(k: usize, threads: usize, stream: &[u32]) -> RandomTables {
        let share = stream.len().div_ceil(threads.max(1));
        let tables = (0..stream.len().div_ceil(share)).map(|_| vec![0u32; k]).collect();
        RandomTables { k, share, tables, update_s: Vec::new(), read_s: Vec::new() }
    }

    /// Round `round` (from 1) over `stream`: an untimed pass of updates that brings the tables
    /// back into the caches (the round's other passes evicted them, while a histogram updates its
    /// bins many times over), one timed pass of updates, then one of reads, all checked.
    fn round(&mut self, stream: &[u32], round: usize) -> Result<()> {
        let (k, accesses) = (self.k, stream.len() as u64);
        let mut made = self.update(stream);
        let t = Instant::now();
        made += self.update(stream);
        self.update_s.push(t.elapsed().as_secs_f64());
        let counted: u64 = self.tables.iter().flatten().map(|&c| u64::from(c)).sum();
        if made != 2 * accesses || counted != round as u64 * made {
            return Err(OpError::Device(format!(
                "roofline: {made} updates made and {counted} counted after {} passes at k = {k}",
                2 * round
            )));
        }
        let t = Instant::now();
        let read: u64 = stream
            .par_chunks(self.share)
            .zip(self.tables.par_iter())
            .map(|(words, table)| {
                // Four independent sums: the loads, not an add chain, bound the loop.
                let mut s = [0u64; 4];
                let mut quads = words.chunks_exact(4);
                for q in &mut quads {
                    for (acc, &r) in s.iter_mut().zip(q) {
                        *acc += u64::from(table[bin_of(r, k)]);
                    }
                }
                let tail: u64 = quads.remainder().iter().map(|&r| u64::from(table[bin_of(r, k)])).sum();
                s.iter().sum::<u64>() + tail
            })
            .sum();
        self.read_s.push(t.elapsed().as_secs_f64());
        // Every bin read holds the passes' updates to it so far: at least one per read.
        if std::hint::black_box(read) < accesses {
            return Err(OpError::Device(format!("roofline: random reads at k = {k} summed {read}")));
        }
        Ok(())
    }

    /// One pass of updates, every thread its share into its table; the updates made.
    fn update(&mut self, stream: &[u32]) -> u64 {
        let k = self.k;
        stream
            .par_chunks(self.share)
            .zip(self.tables.par_iter_mut())
            .map(|(words, table)| {
                for &r in words {
                    table[bin_of(r, k)] += 1;
                }
                words.len() as u64
            })
            .sum()
    }

    /// The median rates of the rounds taken, `accesses` per pass.
    fn rate(self, accesses: usize) -> RandomRate {
        let made = accesses as f64;
        RandomRate {
            bins: self.k,
            reads_per_s: made / median(self.read_s),
            updates_per_s: made / median(self.update_s),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_multiply_shift_bin_covers_every_bin_and_stays_in_range() {
        for k in [1usize, 7, 1000] {
            let mut seen = vec![false; k];
            for r in (0..=u32::MAX).step_by(65_537).chain([u32::MAX]) {
                let b = bin_of(r, k);
                assert!(b < k, "k = {k}: word {r} gave bin {b}");
                seen[b] = true;
            }
            assert!(seen.iter().all(|&s| s), "k = {k}: some bin never hit");
        }
    }

    #[test]
    fn a_measurement_reports_every_bin_count_in_order_with_positive_rates() {
        let cpu = Cpu::new(Some(2)).unwrap();
        let r = cpu.roofline(&[3, 5000], 7).unwrap();
        assert_eq!(r.threads, 2);
        assert_eq!(r.seq_bytes, SEQ_BYTES);
        assert_eq!(r.random.iter().map(|x| x.bins).collect::<Vec<_>>(), vec![3, 5000]);
        assert!(r.seq_read_bytes_per_s.is_finite() && r.seq_read_bytes_per_s > 0.0, "{r:?}");
        for x in &r.random {
            assert!(x.reads_per_s.is_finite() && x.reads_per_s > 0.0, "{x:?}");
            assert!(x.updates_per_s.is_finite() && x.updates_per_s > 0.0, "{x:?}");
        }
    }

    #[test]
    fn a_small_measurement_reads_the_bytes_asked_for_and_refuses_too_few() {
        let cpu = Cpu::new(Some(2)).unwrap();
        // 1 MiB + 3 bytes: whole words only.
        let r = cpu.roofline_sized(&[10], 3, (1 << 20) + 3, 1000).unwrap();
        assert_eq!((r.seq_bytes, r.threads), (1 << 20, 2));
        assert_eq!(r.random.len(), 1);
        assert!(r.seq_read_bytes_per_s > 0.0 && r.random[0].updates_per_s > 0.0, "{r:?}");
        let e = cpu.roofline_sized(&[10], 3, MIN_SEQ_BYTES - 8, 1000).unwrap_err().to_string();
        assert!(e.contains("at least 524288"), "{e}");
        assert!(cpu.roofline_sized(&[10], 3, MIN_SEQ_BYTES, 0).is_err());
    }

    #[test]
    fn a_figure_is_the_median_of_its_passes() {
        // One odd pass, fast or slow, moves nothing; an even count takes the upper middle.
        assert_eq!(median(vec![3.0, 0.1, 2.0]), 2.0);
        assert_eq!(median(vec![2.0, 9.0, 2.5, 2.2, 0.5]), 2.2);
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 3.0);
    }

    #[test]
    fn zero_bins_are_refused() {
        let cpu = Cpu::new(Some(1)).unwrap();
        let e = cpu.roofline(&[10, 0], 1).unwrap_err().to_string();
        assert!(e.contains("0 bins"), "{e}");
    }
}
