#![no_main]
//! Fuzz target: `amberdb_index::fuzz_ivf_open` on arbitrary bytes (also run by a proptest).

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = amberdb_index::fuzz_ivf_open(data);
});
