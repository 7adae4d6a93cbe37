//! The framed-TCP backend's frame decoder
//! (`gateway_transport::framed_tcp::FrameDecoder`): any bytes, split into any
//! pieces as a socket would deliver them, never panic it, and:
//!
//! - every frame it returns is the bytes it was given: a DATA frame's stream
//!   and payload are the header's stream and the bytes after the header, a
//!   PING or SHUTDOWN consumed exactly one empty header;
//! - a DATA frame is on a granted stream and at most `max_message` bytes;
//! - between frames it holds back less than one header and one largest
//!   message, however the declared lengths lie;
//! - once it reports an error, the connection is over (the test stops).
//!
//! Input: byte 0 seeds the piece sizes, byte 1 the granted stream count, byte 2
//! the largest message (small, so that the fuzzer reaches both sides); the
//! rest is the byte stream.
#![no_main]

use bytes::BytesMut;
use gateway_transport::framed_tcp::{Frame, FrameDecoder};
use libfuzzer_sys::fuzz_target;

const FRAME_HEADER_LEN: usize = 8;

fuzz_target!(|data: &[u8]| {
    let [seed, streams, max, stream @ ..] = data else {
        return;
    };
    let inbound_streams = u16::from(*streams % 8) + 1;
    let max_message = usize::from(*max) * 16;
    let decoder = FrameDecoder::new(inbound_streams, max_message);
    let mut buf = BytesMut::new();
    let mut consumed = 0;
    let mut fed = 0;
    let mut size = usize::from(*seed % 64) + 1;
    while fed < stream.len() {
        let end = (fed + size).min(stream.len());
        buf.extend_from_slice(&stream[fed..end]);
        fed = end;
        size = size * 7 % 4099 + 1;
        loop {
            let before = buf.len();
            let frame = match decoder.decode(&mut buf) {
                Ok(Some(frame)) => frame,
                Ok(None) => break,
                Err(_) => return,
            };
            let header = &stream[consumed..consumed + FRAME_HEADER_LEN];
            let taken = before - buf.len();
            match frame {
                Frame::Data(message) => {
                    assert_eq!(header[0], 0, "DATA from kind {}", header[0]);
                    assert_eq!(message.stream, u16::from_be_bytes([header[2], header[3]]));
                    assert!(message.stream < inbound_streams);
                    assert!(message.data.len() <= max_message);
                    assert_eq!(taken, FRAME_HEADER_LEN + message.data.len());
                    assert_eq!(
                        &message.data[..],
                        &stream[consumed + FRAME_HEADER_LEN..consumed + taken]
                    );
                }
                Frame::Ping | Frame::Shutdown => {
                    assert_eq!(taken, FRAME_HEADER_LEN);
                    assert_eq!(&header[4..], &[0; 4], "control frame with a length");
                }
            }
            consumed += taken;
        }
        assert_eq!(consumed + buf.len(), fed);
        assert!(
            buf.len() < FRAME_HEADER_LEN + max_message.max(1),
            "{} bytes held back, max_message {max_message}",
            buf.len()
        );
    }
});
