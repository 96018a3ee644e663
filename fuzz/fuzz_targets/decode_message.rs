//! Fuzz target: `ninep::wire::decode` never panics, and whatever it accepts
//! re-encodes to a frame that decodes to the same message.
#![no_main]

use libfuzzer_sys::fuzz_target;
use toolsrv::ninep::wire::{decode, decode_stats, encode};

fuzz_target!(|data: &[u8]| {
    if let Ok(msg) = decode(data) {
        let frame = encode(&msg).expect("a decoded message re-encodes");
        let again = decode(&frame).expect("a re-encoded message decodes");
        assert_eq!(msg, again);
    }
    // The same bytes as the data of a directory read.
    let _ = decode_stats(data);
});
