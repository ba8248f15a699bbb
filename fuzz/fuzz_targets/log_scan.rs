#![no_main]
//! Fuzz target: `amberdb::fuzzing::log_scan` on arbitrary bytes (also run by a proptest).

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = amberdb::fuzzing::log_scan(data);
});
