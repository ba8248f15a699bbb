#![no_main]
//! Fuzz target: `amberdb::fuzzing::identity_decode` on arbitrary bytes (also run by a proptest).

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = amberdb::fuzzing::identity_decode(data);
});
