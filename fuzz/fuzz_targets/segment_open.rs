#![no_main]
//! Fuzz target: `mnemo_index::fuzz_segment_open` on arbitrary bytes (also run by a proptest).

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = mnemo_index::fuzz_segment_open(data);
});
