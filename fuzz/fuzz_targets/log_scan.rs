#![no_main]
//! Fuzz target: `mnemo_engine::fuzzing::log_scan` on arbitrary bytes (also run by a proptest).

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = mnemo_engine::fuzzing::log_scan(data);
});
