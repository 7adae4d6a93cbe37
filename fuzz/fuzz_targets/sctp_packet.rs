//! Any bytes: SCTP packet decoding never panics, and whatever decodes
//! re-encodes to a packet that decodes to the same value.
//!
//! The input is decoded twice: as it is (which nearly always stops at the
//! checksum) and with its checksum sealed, so that the fuzzer explores the
//! chunk decoders instead of the CRC.
#![no_main]

use bytes::{Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use sctp::chunk::Packet;
use sctp::wire::{COMMON_HEADER_LEN, seal_checksum};

fuzz_target!(|data: &[u8]| {
    check(Bytes::copy_from_slice(data));
    if data.len() >= COMMON_HEADER_LEN {
        let mut sealed = data.to_vec();
        seal_checksum(&mut sealed);
        check(sealed.into());
    }
});

fn check(datagram: Bytes) {
    let Ok(packet) = Packet::decode(datagram) else {
        return;
    };
    let mut out = BytesMut::new();
    packet
        .encode(&mut out)
        .expect("a decoded packet fits its length fields again");
    assert_eq!(out.len(), packet.encoded_len());
    let again = Packet::decode(out.freeze()).expect("a re-encoded packet decodes");
    assert_eq!(again, packet);
}
