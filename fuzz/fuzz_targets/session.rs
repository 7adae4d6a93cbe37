//! A hostile peer: any sequence of (stream, bytes) fed to a session of either role,
//! optionally after a valid handshake, interleaved with what the session's own
//! side does (requests, push budgets and grants, pushes, cancels, finished
//! requests). The session never panics, a GOAWAY reaction is final for the fuzz
//! case (the driver would close the association), and what the session reports
//! stays consistent: open pushes never outnumber open entries, and an origin's
//! `push_allowance` and `handle_push_sent` always agree.
#![no_main]

use bytes::Bytes;
use gateway_protocol::{
    Capabilities, Message, PUSH_ID_BIT, PushBudget, Reaction, RequestId, Role, Session,
    SessionConfig,
};
use libfuzzer_sys::fuzz_target;

/// A push request head the origin's side would send; the peer's bytes supply
/// every other kind.
const PUSH_HEAD: &[u8] = b"GET /a.css HTTP/1.1\r\nHost: site.test\r\n\r\n";

fuzz_target!(|data: &[u8]| {
    let Some((&control, mut rest)) = data.split_first() else {
        return;
    };
    let role = if control & 1 == 0 {
        Role::Gateway
    } else {
        Role::Origin
    };
    // Bit 2: this side announces PUSH; bit 3: the peer's HELLO does.
    let with_push = |on: bool| {
        let base = SessionConfig::default().capabilities;
        if on { base | Capabilities::PUSH } else { base }
    };
    let config = SessionConfig {
        data_streams: u16::from(control >> 4) + 1,
        capabilities: with_push(control & 4 != 0),
        ..SessionConfig::default()
    };
    let mut session = Session::new(role, config.clone());
    if control & 2 != 0 {
        let peer_role = if role == Role::Gateway {
            Role::Origin
        } else {
            Role::Gateway
        };
        let peer = SessionConfig {
            capabilities: with_push(control & 8 != 0),
            ..config
        };
        let hello = Session::new(peer_role, peer).hello().to_bytes();
        assert!(session.handle_message(0, &hello).is_ok());
    }
    let mut next_id: RequestId = 1;
    let mut next_push: RequestId = PUSH_ID_BIT | 1;
    // Records: stream (1 byte), length (1 byte), payload. Stream 0xff with
    // length 0 makes the gateway issue a request on stream 1; stream 0xfe
    // makes this side act, the length byte choosing what (below), with no
    // payload.
    while rest.len() >= 2 {
        let (stream, len) = (u16::from(rest[0]), usize::from(rest[1]));
        rest = &rest[2..];
        if stream == 0xff && len == 0 && role == Role::Gateway {
            let _ = session.handle_request_sent(next_id, 1);
            next_id += 1;
            continue;
        }
        if stream == 0xfe {
            act(&mut session, role, len as u8, &mut next_id, &mut next_push);
            check(&session);
            continue;
        }
        let len = len.min(rest.len());
        let message = Bytes::copy_from_slice(&rest[..len]);
        rest = &rest[len..];
        if let Err(Reaction::GoAway { .. }) = session.handle_message(stream, &message) {
            return;
        }
        check(&session);
    }
});

/// What this side does, chosen by `op`: the low 3 bits pick the action, the
/// high 5 bits a request, stream or amount. Every call is one the driver may
/// make; a refusal (`Err`) is a valid outcome.
fn act(
    session: &mut Session,
    role: Role,
    op: u8,
    next_id: &mut RequestId,
    next_push: &mut RequestId,
) {
    let arg = op >> 3;
    let streams = session.data_streams().max(1);
    let stream = u16::from(arg) % streams + 1;
    // A recent request of ours (gateway) or the peer's low ids (origin).
    let id = match role {
        Role::Gateway => next_id.saturating_sub(RequestId::from(arg % 4) + 1).max(1),
        Role::Origin => RequestId::from(arg % 8) + 1,
    };
    match (role, op & 7) {
        (Role::Gateway, 0) => {
            let _ = session.handle_request_sent(*next_id, stream);
            *next_id += 1;
        }
        (Role::Gateway, 1) => {
            let budget = PushBudget {
                page: id,
                max_pushes: u16::from(arg % 4),
                max_bytes: u32::from(arg) * 64,
                held: vec![],
            };
            let _ = session.handle_push_budget_sent(&budget, stream, b"site.test");
            let _ = Message::PushBudget(budget).to_bytes();
        }
        (Role::Gateway, 2) => session.handle_max_pushes_sent(u32::from(arg)),
        (Role::Gateway, 3) => session.handle_request_finished(id),
        (Role::Gateway, 4) => session.handle_request_finished(*next_push - 1),
        (Role::Gateway, _) => {
            let _ = session.may_send_priority(id);
            let _ = session.handle_tunnel_sent(*next_id, stream);
            *next_id += 1;
        }
        (Role::Origin, 0 | 1) => {
            let allowed = session.push_allowance(id).is_some();
            let sent = session.handle_push_sent(*next_push, id, stream);
            assert_eq!(
                sent.is_ok(),
                allowed,
                "push_allowance and handle_push_sent agree"
            );
            if sent.is_ok() {
                let promise = gateway_protocol::PushPromise {
                    id: *next_push,
                    page: id,
                    head: Bytes::from_static(PUSH_HEAD),
                };
                assert!(Message::PushPromise(promise).check_limits().is_ok());
                *next_push += 1;
            }
        }
        (Role::Origin, 2) => {
            let push = next_push.saturating_sub(RequestId::from(arg % 4) + 1);
            let _ = session.handle_push_body_sent(push, usize::from(arg) * 100);
        }
        (Role::Origin, 3) => {
            let push = next_push.saturating_sub(RequestId::from(arg % 4) + 1);
            session.handle_request_finished(push);
        }
        (Role::Origin, 4) => session.handle_request_finished(id),
        (Role::Origin, _) => {
            for push in session.pushes_of(id) {
                session.handle_request_finished(push);
            }
        }
    }
}

/// What holds after every step, whatever the peer sent.
fn check(session: &Session) {
    assert!(session.open_pushes() <= session.open_requests());
}
