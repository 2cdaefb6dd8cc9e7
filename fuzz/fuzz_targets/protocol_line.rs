//! One line of GradBench's protocol as adgauge reads it (`harness/src/protocol.rs`, included
//! as it is rather than through `adgauge_harness`, so that this target builds without the
//! harness's dependencies, polars among them): a message to a tool and a tool's response.
#![no_main]

#[allow(dead_code)]
#[path = "../../harness/src/protocol.rs"]
mod protocol;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(line) = std::str::from_utf8(data) else { return };
    if let Ok(m) = serde_json::from_str::<protocol::Message>(line) {
        // What parses must write back and parse to the same message.
        let again = serde_json::to_string(&m).expect("a message serialises");
        assert_eq!(serde_json::from_str::<protocol::Message>(&again).ok(), Some(m));
    }
    let _ = serde_json::from_str::<serde_json::Value>(line);
});
