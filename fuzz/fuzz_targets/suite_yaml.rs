//! Suite YAML as `adgauge run --suite` reads it (`adgauge_harness::suite::parse_suite`): any text
//! gives a suite or an error that names the file, never a panic, and what parses stays within
//! the case limit and names only tools and workloads that exist.
#![no_main]

use adgauge_harness::suite::parse_suite;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    adgauge_datasets::limits::set_max_bytes(256 << 20);
    match parse_suite(text, "fuzz.yaml") {
        Ok(suite) => {
            assert!(!suite.cases.is_empty() && suite.cases.len() <= 100_000, "{} cases", suite.cases.len());
            assert!(suite.budget.samples >= 1);
        }
        Err(e) => assert!(e.starts_with("fuzz.yaml"), "an error that does not name the file: {e}"),
    }
});
