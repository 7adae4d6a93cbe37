//! A hostile peer: any sequence of (stream, bytes) fed to a session of either role,
//! optionally after a valid handshake. The session never panics, and a GOAWAY
//! reaction is final for the fuzz case (the driver would close the association).
#![no_main]

use bytes::Bytes;
use gateway_protocol::{Reaction, Role, Session, SessionConfig};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&control, mut rest)) = data.split_first() else {
        return;
    };
    let role = if control & 1 == 0 {
        Role::Gateway
    } else {
        Role::Origin
    };
    let config = SessionConfig {
        data_streams: u16::from(control >> 4) + 1,
        ..SessionConfig::default()
    };
    let mut session = Session::new(role, config.clone());
    if control & 2 != 0 {
        let peer_role = if role == Role::Gateway {
            Role::Origin
        } else {
            Role::Gateway
        };
        let hello = Session::new(peer_role, config).hello().to_bytes();
        assert!(session.handle_message(0, &hello).is_ok());
    }
    let mut next_id = 1;
    // Records: stream (1 byte), length (1 byte), payload; a zero-length record with
    // stream 0xff makes the gateway issue a request on stream 1.
    while rest.len() >= 2 {
        let (stream, len) = (u16::from(rest[0]), usize::from(rest[1]));
        rest = &rest[2..];
        if stream == 0xff && len == 0 && role == Role::Gateway {
            let _ = session.handle_request_sent(next_id, 1);
            next_id += 1;
            continue;
        }
        let len = len.min(rest.len());
        let message = Bytes::copy_from_slice(&rest[..len]);
        rest = &rest[len..];
        if let Err(Reaction::GoAway { .. }) = session.handle_message(stream, &message) {
            return;
        }
    }
});
