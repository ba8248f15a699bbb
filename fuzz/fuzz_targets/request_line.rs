#![no_main]
//! Fuzz target: `mnemo_server::fuzzing::request_line` (the request-line parser and argument
//! check, the code that faces the network) on arbitrary bytes; also run by a proptest.

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = mnemo_server::fuzzing::request_line(data);
});
