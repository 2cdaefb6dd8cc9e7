//! The counting allocator's figures, each measured in a process of its own
//! ([`common::alone`]): the counts are process-wide, and with other tests beside them, buffers
//! freed mid-measurement (a 570 KB free lowered a 64 MiB peak below its slack on CI) spoil them.
//! There the only other code running is the test runner itself.

use adgauge_harness::memory::allocations_during;

use crate::common;

/// What the test runner may allocate or free beside a measurement (its output lines).
const SLACK: usize = 64 << 10;

#[test]
fn many_small_allocations_add_up_in_the_peak() {
    common::alone("allocations::many_small_allocations_add_up_in_the_peak", || {
        // 4000 live allocations of 1 KiB each, all in the peak.
        let (n, seen) = allocations_during(|| {
            let held: Vec<Vec<u8>> = (0..4000).map(|i| vec![i as u8; 1024]).collect();
            held.iter().map(|v| v.len()).sum::<usize>()
        });
        assert_eq!(n, 4000 * 1024);
        assert!(seen.peak >= 4000 * 1024 - SLACK, "{seen:?}");
        // The 4000 buffers and the vector that held them were freed inside the measurement.
        assert!(seen.net.unsigned_abs() < SLACK, "{seen:?}");
    });
}

#[test]
fn a_large_temporary_allocation_shows_in_the_peak_but_not_in_the_net() {
    common::alone("allocations::a_large_temporary_allocation_shows_in_the_peak_but_not_in_the_net", || {
        let (sum, seen) = allocations_during(|| {
            let v = vec![1u8; 64 << 20];
            v.iter().map(|&x| x as u64).sum::<u64>()
        });
        assert_eq!(sum, 64 << 20);
        assert!(seen.peak >= (64 << 20) - SLACK, "{seen:?}");
        assert!(seen.peak < (64 << 20) + SLACK, "{seen:?}");
        assert!(seen.net.unsigned_abs() < SLACK, "{seen:?}");
    });
}

#[test]
fn nothing_is_counted_outside_a_measurement() {
    common::alone("allocations::nothing_is_counted_outside_a_measurement", || {
        // A measurement starts from zero, whatever the one before it saw.
        let (_, before) = allocations_during(|| vec![1u8; 8 << 20].len());
        assert!(before.peak >= (8 << 20) - SLACK, "{before:?}");
        // A buffer allocated before and freed after the measurement is not in it.
        let outside = std::hint::black_box(vec![7u8; 8 << 20]);
        let ((), seen) = allocations_during(|| {});
        drop(outside);
        assert!(seen.peak < SLACK, "{seen:?}");
        assert!(seen.net.unsigned_abs() < SLACK, "{seen:?}");
    });
}
