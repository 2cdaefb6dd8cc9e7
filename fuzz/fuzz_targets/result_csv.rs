//! The result files' reader (schemas 1 to 3): `adgauge report`, `gate`, `history` and `merge`
//! read every run through it. Errors must name the file and line; nothing may panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let _ = adgauge_reports::store::parse_csv(text, std::path::Path::new("fuzz.csv"));
});
