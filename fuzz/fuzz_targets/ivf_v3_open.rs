#![no_main]
//! Fuzz target: `amberdb_index::fuzz_ivf_v3_open` on arbitrary bytes, seeded from a valid
//! version-3 IVF segment (1-bit codes): the decoder, then a search through the bit codes of
//! whatever it accepts.

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = amberdb_index::fuzz_ivf_v3_open(data);
});
