//! Manifest parsing never panics; what it accepts obeys the rules.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| baton_core::manifest::fuzz_manifest(data));
