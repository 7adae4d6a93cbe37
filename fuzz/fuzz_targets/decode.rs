//! Any bytes: decoding never panics, and whatever decodes re-encodes to a message
//! that decodes to the same value (the codec is its own inverse on valid input).
#![no_main]

use bytes::Bytes;
use gateway_protocol::Message;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let input = Bytes::copy_from_slice(data);
    if let Ok(message) = Message::decode(&input) {
        let again = Message::decode(&message.to_bytes()).expect("re-encoded message decodes");
        assert_eq!(again, message);
        // Reserved bits and unknown flags are the only bytes allowed to differ.
        assert_eq!(message.encoded_len(), data.len());
    }
});
