//! One chunk's stored bytes behind a valid header and CRC: decompressor and entry parser.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    rdmatrace::fuzzing::chunk(data);
});
