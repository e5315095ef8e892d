//! The CLI's argument and JSON handling never panics.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| baton_cli::fuzz_args(data));
