#![no_main]
//! Fuzz target: `amberdb::fuzzing::checkpoint_decode` on arbitrary bytes (also run by a proptest).

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = amberdb::fuzzing::checkpoint_decode(data);
});
