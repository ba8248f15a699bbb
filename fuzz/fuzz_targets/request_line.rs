#![no_main]
//! Fuzz target: `amberdb_server::fuzzing::request_line` (the request-line parser and argument
//! check, the code that faces the network) on arbitrary bytes; also run by a proptest.

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = amberdb_server::fuzzing::request_line(data);
});
