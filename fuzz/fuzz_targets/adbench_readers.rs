//! The ADBench readers (GMM, BA, LSTM text): the first byte picks the reader (and GMM's
//! replicate-point mode). Errors must name a line; nothing may panic or allocate beyond the
//! memory limit.
#![no_main]

use adgauge_datasets::ba::BaInput;
use adgauge_datasets::gmm::GmmInput;
use adgauge_datasets::lstm::LstmInput;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else { return };
    let Ok(text) = std::str::from_utf8(rest) else { return };
    adgauge_datasets::limits::set_max_bytes(256 << 20);
    match pick % 5 {
        0 => drop(GmmInput::parse(text, "fuzz", None)),
        1 => drop(GmmInput::parse(text, "fuzz", Some(true))),
        2 => drop(GmmInput::parse(text, "fuzz", Some(false))),
        3 => drop(BaInput::parse(text, "fuzz")),
        _ => drop(LstmInput::parse(text, "fuzz")),
    }
});
