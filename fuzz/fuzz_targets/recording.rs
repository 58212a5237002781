//! A whole recording file: open, replay every intact chunk, decode, correlate, format.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    rdmatrace::fuzzing::recording(data);
});
