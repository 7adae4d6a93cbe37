//! PUSH (docs/protocol.md, "PUSH"): the three messages' layouts at their
//! largest, every row of the error table that concerns pushes, and each
//! transition of a push's life, driven through a gateway and an origin session.

use bytes::Bytes;

use super::request;
use crate::message::{FLAG_END, HELD_FRESH};
use crate::*;

const PAGE: RequestId = 1;
const PAGE_STREAM: u16 = 1;
const PUSH: RequestId = PUSH_ID_BIT | 1;
const HEAD: &[u8] = b"GET /app.css HTTP/1.1\r\nHost: site.test\r\nAccept: text/css\r\n\r\n";

fn protocol_goaway() -> Reaction {
    Reaction::GoAway {
        code: ErrorCode::ProtocolError,
    }
}

fn reset(id: RequestId, code: ErrorCode) -> Reaction {
    Reaction::Reset { id, code }
}

fn every_capability() -> Capabilities {
    SessionConfig::default().capabilities | Capabilities::PUSH
}

/// A gateway and an origin, with PUSH as given, over 4 streams.
fn pair(gateway_push: bool, origin_push: bool) -> (Session, Session) {
    let gateway_caps = if gateway_push {
        every_capability()
    } else {
        SessionConfig::default().capabilities
    };
    let origin_caps = if origin_push {
        every_capability()
    } else {
        SessionConfig::default().capabilities
    };
    let mut gateway = Session::new(
        Role::Gateway,
        SessionConfig {
            data_streams: 4,
            capabilities: gateway_caps,
            ..SessionConfig::default()
        },
    );
    let mut origin = Session::new(
        Role::Origin,
        SessionConfig {
            data_streams: 4,
            capabilities: origin_caps,
            ..SessionConfig::default()
        },
    );
    origin
        .handle_message(0, &gateway.hello().to_bytes())
        .expect("origin accepts HELLO");
    gateway
        .handle_message(0, &origin.hello().to_bytes())
        .expect("gateway accepts HELLO ack");
    (gateway, origin)
}

fn budget(page: RequestId, max_pushes: u16, max_bytes: u32) -> PushBudget {
    PushBudget {
        page,
        max_pushes,
        max_bytes,
        held: vec![],
    }
}

fn promise(id: RequestId, page: RequestId, head: &'static [u8]) -> Message {
    Message::PushPromise(PushPromise {
        id,
        page,
        head: Bytes::from_static(head),
    })
}

fn head_of(id: RequestId) -> Message {
    Message::ResponseHead {
        id,
        head: Bytes::from_static(b"HTTP/1.1 200 OK\r\n\r\n"),
    }
}

fn body_of(id: RequestId, len: usize) -> Message {
    Message::ResponseBody {
        id,
        data: Bytes::from(vec![b'x'; len]),
    }
}

fn deliver(to: &mut Session, stream: u16, message: &Message) -> Result<Message, Reaction> {
    to.handle_message(stream, &message.to_bytes())
}

/// Both sessions with PUSH, the page (request 1, Host site.test) sent on
/// stream 1 with a budget of `max_pushes` and `max_bytes`, and `grant` pushes
/// granted for the association: what the gateway sends before any push.
fn invited(max_pushes: u16, max_bytes: u32, grant: u32) -> (Session, Session) {
    let (mut gateway, mut origin) = pair(true, true);
    gateway
        .handle_request_sent(PAGE, PAGE_STREAM)
        .expect("page request");
    let page = request(PAGE, true);
    deliver(&mut origin, PAGE_STREAM, &page).expect("origin takes the page");
    let budget = budget(PAGE, max_pushes, max_bytes);
    gateway
        .handle_push_budget_sent(&budget, PAGE_STREAM, b"site.test")
        .expect("budget recorded");
    let budget = Message::PushBudget(budget);
    assert_eq!(deliver(&mut origin, PAGE_STREAM, &budget), Ok(budget));
    gateway.handle_max_pushes_sent(grant);
    let grant = Message::MaxPushes { max: grant };
    assert_eq!(deliver(&mut origin, 0, &grant), Ok(grant));
    (gateway, origin)
}

/// The origin records and the gateway receives push `id` on `stream`.
fn push(gateway: &mut Session, origin: &mut Session, id: RequestId, stream: u16) {
    origin
        .handle_push_sent(id, PAGE, stream)
        .expect("origin may push");
    let promise = promise(id, PAGE, HEAD);
    assert_eq!(deliver(gateway, stream, &promise), Ok(promise));
}

fn held(fresh: bool, target: Vec<u8>, etag: Vec<u8>, date: Vec<u8>) -> HeldEntry {
    HeldEntry {
        fresh,
        target: Bytes::from(target),
        etag: Bytes::from(etag),
        last_modified: Bytes::from(date),
    }
}

/// The largest PUSH_BUDGET: `MAX_HELD_ENTRIES` entries filling exactly
/// `MAX_HEAD` bytes of payload.
fn largest_budget() -> PushBudget {
    let per_entry = (MAX_HEAD - 8) / MAX_HELD_ENTRIES;
    let mut held: Vec<HeldEntry> = (0..MAX_HELD_ENTRIES)
        .map(|i| {
            let mut target = format!("/{i}/").into_bytes();
            target.resize(per_entry - 6 - 10, b'a');
            held(false, target, b"W/\"12345\"".to_vec(), b"x".to_vec())
        })
        .collect();
    let used = 8 + per_entry * MAX_HELD_ENTRIES;
    let last = held.last_mut().expect("entries");
    let mut target = last.target.to_vec();
    target.resize(target.len() + (MAX_HEAD - used), b'z');
    last.target = Bytes::from(target);
    PushBudget {
        page: PUSH_ID_BIT - 1,
        max_pushes: u16::MAX,
        max_bytes: u32::MAX,
        held,
    }
}

/// A push head of exactly `MAX_HEAD` bytes.
fn largest_push_head() -> Bytes {
    let start = b"GET /big HTTP/1.1\r\nHost: site.test\r\nX-Pad: ";
    let end = b"\r\n\r\n";
    let pad = MAX_HEAD - start.len() - end.len();
    Bytes::from([&start[..], &vec![b'p'; pad], &end[..]].concat())
}

#[test]
fn push_messages_round_trip_at_their_largest() {
    let messages = [
        Message::MaxPushes { max: 0 },
        Message::MaxPushes { max: u32::MAX },
        Message::PushBudget(budget(PAGE, 0, 0)),
        Message::PushBudget(largest_budget()),
        Message::PushBudget(PushBudget {
            page: 7,
            max_pushes: 3,
            max_bytes: 1 << 20,
            held: vec![
                held(true, b"/fresh.css".to_vec(), vec![], vec![]),
                held(
                    false,
                    [b"/".to_vec(), vec![b't'; MAX_HELD_TARGET - 1]].concat(),
                    [b"\"".to_vec(), vec![b'e'; 253], b"\"".to_vec()].concat(),
                    vec![b' '; 255],
                ),
            ],
        }),
        promise(PUSH, PAGE, HEAD),
        Message::PushPromise(PushPromise {
            id: u32::MAX,
            page: PUSH_ID_BIT - 1,
            head: largest_push_head(),
        }),
    ];
    for message in messages {
        let bytes = message.to_bytes();
        assert_eq!(message.check_limits(), Ok(()));
        assert_eq!(bytes.len(), message.encoded_len());
        assert!(bytes.len() <= MAX_MESSAGE, "{} bytes", bytes.len());
        assert_eq!(Message::decode(&bytes), Ok(message));
    }
    assert_eq!(
        Message::PushBudget(largest_budget()).encoded_len(),
        HEADER_LEN + MAX_HEAD
    );
}

#[test]
fn push_layouts_are_exact() {
    let bytes = Message::MaxPushes { max: 0x0102_0304 }.to_bytes();
    assert_eq!(&bytes[..], &[0x06, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4]);

    let bytes = Message::PushBudget(PushBudget {
        page: 9,
        max_pushes: 0x0102,
        max_bytes: 0x0a0b_0c0d,
        held: vec![
            held(true, b"/a".to_vec(), vec![], vec![]),
            held(false, b"/b".to_vec(), b"\"e\"".to_vec(), b"D".to_vec()),
        ],
    })
    .to_bytes();
    assert_eq!(
        &bytes[..],
        &[
            0x16, 0, 0, 0, 0, 0, 0, 9, // header
            1, 2, 0, 2, 0x0a, 0x0b, 0x0c, 0x0d, // max_pushes, count, max_bytes
            HELD_FRESH, 0, 0, 0, 0, 2, b'/', b'a', // fresh entry
            0, 3, 1, 0, 0, 2, b'/', b'b', b'"', b'e', b'"', b'D', // stale entry
        ]
    );

    let bytes = promise(0x8000_0102, 0x0304, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").to_bytes();
    assert_eq!(&bytes[..12], &[0x24, 0, 0, 0, 0x80, 0, 1, 2, 0, 0, 3, 4]);
    assert_eq!(&bytes[12..], b"GET / HTTP/1.1\r\nHost: a\r\n\r\n");
}

/// Every malformed PUSH_BUDGET and PUSH_PROMISE layout, with the reaction the
/// codec alone assigns (the session refines it where the table says so).
#[test]
fn malformed_push_messages_get_the_documented_reaction() {
    let page = |payload: &[u8]| [&[0x16, 0, 0, 0, 0, 0, 0, 5][..], payload].concat();
    let entry = |flags: u8, target: &[u8], etag: &[u8], date: &[u8]| {
        let mut e = vec![flags, etag.len() as u8, date.len() as u8, 0];
        e.extend_from_slice(&(target.len() as u16).to_be_bytes());
        e.extend_from_slice(target);
        e.extend_from_slice(etag);
        e.extend_from_slice(date);
        e
    };
    let one = |e: Vec<u8>| page(&[&[0, 1, 0, 1, 0, 0, 0, 9][..], &e].concat());
    let bad_page = reset(5, ErrorCode::ProtocolError);
    let mut too_many = vec![0, 1, 0x02, 0x01, 0, 0, 0, 9];
    for _ in 0..=MAX_HELD_ENTRIES {
        too_many.extend(entry(HELD_FRESH, b"/", b"", b""));
    }
    let budget_cases: Vec<(&str, Vec<u8>, Reaction)> = vec![
        (
            "budget shorter than 8",
            page(&[0, 1, 0, 0, 0, 0, 0]),
            bad_page.clone(),
        ),
        (
            "more entries than MAX_HELD_ENTRIES",
            page(&too_many),
            bad_page.clone(),
        ),
        (
            "count above the entries",
            page(&[0, 1, 0, 1, 0, 0, 0, 9]),
            bad_page.clone(),
        ),
        (
            "entry cut short",
            one(entry(0, b"/a", b"\"e\"", b"")[..8].to_vec()),
            bad_page.clone(),
        ),
        (
            "bytes after the last entry",
            [one(entry(HELD_FRESH, b"/a", b"", b"")), vec![0]].concat(),
            bad_page.clone(),
        ),
        (
            "empty target",
            one(entry(HELD_FRESH, b"", b"", b"")),
            bad_page.clone(),
        ),
        (
            "target not origin-form",
            one(entry(HELD_FRESH, b"http://a/", b"", b"")),
            bad_page.clone(),
        ),
        (
            "target with a space",
            one(entry(HELD_FRESH, b"/a b", b"", b"")),
            bad_page.clone(),
        ),
        (
            "target above MAX_HELD_TARGET",
            one(entry(
                HELD_FRESH,
                &[b"/".to_vec(), vec![b'a'; MAX_HELD_TARGET]].concat(),
                b"",
                b"",
            )),
            bad_page.clone(),
        ),
        (
            "entity-tag with a space",
            one(entry(0, b"/a", b"\"a b\"", b"")),
            bad_page.clone(),
        ),
        (
            "date with a CR",
            one(entry(0, b"/a", b"", b"Sun\r")),
            bad_page.clone(),
        ),
        (
            "stale entry without a validator",
            one(entry(0, b"/a", b"", b"")),
            bad_page.clone(),
        ),
        (
            "budget above MAX_HEAD",
            page(&vec![0; MAX_HEAD + 1]),
            reset(5, ErrorCode::TooLarge),
        ),
        (
            "budget for page 0",
            vec![0x16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            protocol_goaway(),
        ),
        (
            "budget for a push id",
            vec![0x16, 0, 0, 0, 0x80, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 0],
            reset(PUSH_ID_BIT | 5, ErrorCode::ProtocolError),
        ),
        (
            "max_pushes not 4 bytes",
            vec![0x06, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
            protocol_goaway(),
        ),
    ];
    let pushed =
        |page: &[u8; 4], head: &[u8]| [&[0x24, 0, 0, 0, 0x80, 0, 0, 7][..], page, head].concat();
    let bad_push = reset(PUSH_ID_BIT | 7, ErrorCode::ProtocolError);
    let fields: String = (0..MAX_PUSH_FIELDS)
        .map(|i| format!("X-{i}: v\r\n"))
        .collect();
    let too_many_fields = format!("GET / HTTP/1.1\r\nHost: a\r\n{fields}\r\n");
    let promise_cases: Vec<(&str, Vec<u8>, Reaction)> = vec![
        (
            "promise shorter than 4",
            vec![0x24, 0, 0, 0, 0x80, 0, 0, 7, 0, 0, 1],
            bad_push.clone(),
        ),
        (
            "promise for page 0",
            pushed(&[0, 0, 0, 0], HEAD),
            bad_push.clone(),
        ),
        (
            "promise for a push",
            pushed(&[0x80, 0, 0, 1], HEAD),
            bad_push.clone(),
        ),
        ("empty head", pushed(&[0, 0, 0, 1], b""), bad_push.clone()),
        (
            "incomplete head",
            pushed(&[0, 0, 0, 1], b"GET / HTTP/1.1\r\nHost: a\r\n"),
            bad_push.clone(),
        ),
        (
            "bytes after the head",
            pushed(&[0, 0, 0, 1], b"GET / HTTP/1.1\r\nHost: a\r\n\r\nbody"),
            bad_push.clone(),
        ),
        (
            "not HTTP",
            pushed(&[0, 0, 0, 1], b"\x00\x01\r\n\r\n"),
            bad_push.clone(),
        ),
        (
            "POST",
            pushed(&[0, 0, 0, 1], b"POST / HTTP/1.1\r\nHost: a\r\n\r\n"),
            bad_push.clone(),
        ),
        (
            "HTTP/1.0",
            pushed(&[0, 0, 0, 1], b"GET / HTTP/1.0\r\nHost: a\r\n\r\n"),
            bad_push.clone(),
        ),
        (
            "absolute-form target",
            pushed(&[0, 0, 0, 1], b"GET http://a/ HTTP/1.1\r\nHost: a\r\n\r\n"),
            bad_push.clone(),
        ),
        (
            "no Host",
            pushed(&[0, 0, 0, 1], b"GET / HTTP/1.1\r\nAccept: */*\r\n\r\n"),
            bad_push.clone(),
        ),
        (
            "empty Host",
            pushed(&[0, 0, 0, 1], b"GET / HTTP/1.1\r\nHost: \r\n\r\n"),
            bad_push.clone(),
        ),
        (
            "two Hosts",
            pushed(
                &[0, 0, 0, 1],
                b"GET / HTTP/1.1\r\nHost: a\r\nhost: b\r\n\r\n",
            ),
            bad_push.clone(),
        ),
        (
            "Cookie",
            pushed(
                &[0, 0, 0, 1],
                b"GET / HTTP/1.1\r\nHost: a\r\nCookie: s=1\r\n\r\n",
            ),
            bad_push.clone(),
        ),
        (
            "Authorization",
            pushed(
                &[0, 0, 0, 1],
                b"GET / HTTP/1.1\r\nHost: a\r\nauthorization: x\r\n\r\n",
            ),
            bad_push.clone(),
        ),
        (
            "Proxy-Authorization",
            pushed(
                &[0, 0, 0, 1],
                b"GET / HTTP/1.1\r\nHost: a\r\nProxy-Authorization: x\r\n\r\n",
            ),
            bad_push.clone(),
        ),
        (
            "Content-Length",
            pushed(
                &[0, 0, 0, 1],
                b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n",
            ),
            bad_push.clone(),
        ),
        (
            "Transfer-Encoding",
            pushed(
                &[0, 0, 0, 1],
                b"GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n",
            ),
            bad_push.clone(),
        ),
        (
            "more than MAX_PUSH_FIELDS fields",
            pushed(&[0, 0, 0, 1], too_many_fields.as_bytes()),
            bad_push.clone(),
        ),
        (
            "head above MAX_HEAD",
            pushed(&[0, 0, 0, 1], &[&largest_push_head()[..], b"x"].concat()),
            reset(PUSH_ID_BIT | 7, ErrorCode::TooLarge),
        ),
        (
            "id without the push bit",
            [&[0x24, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 1][..], HEAD].concat(),
            reset(7, ErrorCode::ProtocolError),
        ),
    ];
    for (name, raw, reaction) in budget_cases.into_iter().chain(promise_cases) {
        let error = Message::decode(&Bytes::from(raw)).expect_err(name);
        assert_eq!(error.reaction(), reaction, "{name}: {error}");
    }
}

#[test]
fn a_push_passes_both_sessions_from_promise_to_end() {
    let (mut gateway, mut origin) = invited(2, 1000, 2);
    assert!(gateway.pushes_negotiated() && origin.pushes_negotiated());
    assert_eq!(
        origin.push_allowance(PAGE),
        Some(PushAllowance {
            pushes: 2,
            bytes: 1000
        })
    );
    // The page's own response ends first: its allowance stays.
    for message in [
        head_of(PAGE),
        body_of(PAGE, 5),
        Message::ResponseEnd {
            id: PAGE,
            body_len: 5,
        },
    ] {
        assert_eq!(deliver(&mut gateway, PAGE_STREAM, &message), Ok(message));
    }
    origin.handle_request_finished(PAGE);
    push(&mut gateway, &mut origin, PUSH, 3);
    assert_eq!(gateway.open_pushes(), 1);
    assert_eq!(origin.pushes_of(PAGE), vec![PUSH]);
    assert_eq!(origin.handle_push_body_sent(PUSH, 600), Ok(()));
    assert_eq!(
        origin.push_allowance(PAGE),
        Some(PushAllowance {
            pushes: 1,
            bytes: 400
        })
    );
    for message in [
        head_of(PUSH),
        body_of(PUSH, 600),
        Message::ResponseEnd {
            id: PUSH,
            body_len: 600,
        },
    ] {
        assert_eq!(deliver(&mut gateway, 3, &message), Ok(message));
    }
    origin.handle_request_finished(PUSH);
    assert_eq!((gateway.open_pushes(), origin.open_pushes()), (0, 0));
    // Late messages for the ended push are ignored.
    assert_eq!(
        deliver(&mut gateway, 3, &body_of(PUSH, 1)),
        Err(Reaction::Ignore)
    );
}

#[test]
fn pushes_need_both_capabilities() {
    // A gateway without PUSH never receives one.
    let (mut gateway, _) = pair(false, true);
    gateway.handle_request_sent(PAGE, 1).expect("request");
    assert_eq!(
        deliver(&mut gateway, 1, &promise(PUSH, PAGE, HEAD)),
        Err(protocol_goaway())
    );
    let (mut gateway, _) = pair(false, true);
    assert_eq!(
        gateway.handle_message(
            1,
            &Bytes::from_static(b"\x24\0\0\0\x80\0\0\x07\0\0\0\x01GET")
        ),
        Err(protocol_goaway()),
        "malformed too"
    );
    // Nor from an origin that did not announce it.
    let (mut gateway, _) = pair(true, false);
    gateway.handle_request_sent(PAGE, 1).expect("request");
    assert_eq!(
        gateway.handle_push_budget_sent(&budget(PAGE, 1, 1), 1, b"site.test"),
        Err(ErrorCode::Refused),
        "no budget for an origin that does not push"
    );
    assert_eq!(
        deliver(&mut gateway, 1, &promise(PUSH, PAGE, HEAD)),
        Err(protocol_goaway())
    );
    // An origin without PUSH, or whose gateway has none, ignores the offers
    // wherever and however they come, and may push nothing.
    for (gateway_push, origin_push) in [(true, false), (false, true)] {
        let (_, mut origin) = pair(gateway_push, origin_push);
        deliver(&mut origin, 1, &request(PAGE, true)).expect("request");
        for (stream, raw) in [
            (1, Message::PushBudget(budget(PAGE, 1, 1)).to_bytes()),
            (0, Message::MaxPushes { max: 9 }.to_bytes()),
            (0, Message::PushBudget(budget(PAGE, 1, 1)).to_bytes()),
            (1, Bytes::from_static(b"\x16\0\0\0\0\0\0\x01\0")),
            (1, Bytes::from_static(b"\x06\0\0\0\0\0\0\0\0")),
        ] {
            assert_eq!(origin.handle_message(stream, &raw), Err(Reaction::Ignore));
        }
        assert_eq!(origin.push_allowance(PAGE), None);
        assert_eq!(
            origin.handle_push_sent(PUSH, PAGE, 1),
            Err(ErrorCode::Refused)
        );
        assert_eq!(origin.open_requests(), 1, "the page is untouched");
    }
}

#[test]
fn push_messages_the_role_never_receives_cost_the_association() {
    let (mut gateway, mut origin) = invited(1, 1, 1);
    assert_eq!(
        deliver(&mut origin, 2, &promise(PUSH, PAGE, HEAD)),
        Err(protocol_goaway())
    );
    let (mut gateway2, mut origin2) = invited(1, 1, 1);
    assert_eq!(
        origin2.handle_message(2, &Bytes::from_static(b"\x24\0\0\0\x80\0\0\x07\0")),
        Err(protocol_goaway()),
        "malformed PUSH_PROMISE at the origin"
    );
    assert_eq!(
        deliver(
            &mut gateway,
            PAGE_STREAM,
            &Message::PushBudget(budget(PAGE, 1, 1))
        ),
        Err(protocol_goaway())
    );
    assert_eq!(
        gateway2.handle_message(PAGE_STREAM, &Bytes::from_static(b"\x16\0\0\0\0\0\0\x01\0")),
        Err(protocol_goaway()),
        "malformed PUSH_BUDGET at the gateway"
    );
    let (mut gateway, _) = invited(1, 1, 1);
    assert_eq!(
        deliver(&mut gateway, 0, &Message::MaxPushes { max: 1 }),
        Err(protocol_goaway())
    );
    // And a push message on the wrong kind of stream.
    let (mut gateway, mut origin) = invited(1, 1, 1);
    assert_eq!(
        deliver(&mut gateway, 0, &promise(PUSH, PAGE, HEAD)),
        Err(protocol_goaway())
    );
    assert_eq!(
        deliver(&mut origin, 1, &Message::MaxPushes { max: 5 }),
        Err(protocol_goaway())
    );
}

#[test]
fn the_grant_is_cumulative_and_a_promise_beyond_it_costs_the_association() {
    let (mut gateway, mut origin) = invited(10, 1000, 1);
    push(&mut gateway, &mut origin, PUSH, 2);
    assert_eq!(origin.push_allowance(PAGE), None, "grant spent");
    assert_eq!(
        origin.handle_push_sent(PUSH + 1, PAGE, 2),
        Err(ErrorCode::Refused)
    );
    // A smaller MAX_PUSHES changes nothing; a larger one grants more.
    assert!(deliver(&mut origin, 0, &Message::MaxPushes { max: 0 }).is_ok());
    assert_eq!(origin.push_allowance(PAGE), None);
    gateway.handle_max_pushes_sent(0);
    gateway.handle_max_pushes_sent(2);
    assert!(deliver(&mut origin, 0, &Message::MaxPushes { max: 2 }).is_ok());
    assert_eq!(
        origin.push_allowance(PAGE).map(|a| a.pushes),
        Some(1),
        "the page's count is capped by the grant"
    );
    // A malformed promise counts against the grant too...
    let malformed = b"\x24\0\0\0\x80\0\0\x02\0\0\0\x01POST / HTTP/1.1\r\nHost: site.test\r\n\r\n";
    assert_eq!((gateway.pushes_promised(), gateway.open_pushes()), (1, 1));
    assert_eq!(
        gateway.handle_message(2, &Bytes::from_static(malformed)),
        Err(reset(PUSH_ID_BIT | 2, ErrorCode::ProtocolError))
    );
    assert_eq!(
        (gateway.pushes_promised(), gateway.open_pushes()),
        (2, 1),
        "counted, never open"
    );
    // ... so the next one is beyond the grant.
    assert_eq!(
        deliver(&mut gateway, 2, &promise(PUSH_ID_BIT | 3, PAGE, HEAD)),
        Err(protocol_goaway())
    );
    let (mut gateway, _) = invited(10, 1000, 0);
    assert_eq!(
        deliver(&mut gateway, 2, &promise(PUSH, PAGE, HEAD)),
        Err(protocol_goaway()),
        "nothing granted"
    );
    let (mut gateway, _) = invited(10, 1000, 0);
    assert_eq!(
        gateway.handle_message(2, &Bytes::from_static(malformed)),
        Err(protocol_goaway()),
        "malformed and beyond the grant"
    );
}

#[test]
fn push_ids_keep_their_space_and_rise_on_their_stream() {
    let (mut gateway, mut origin) = invited(10, 1000, 10);
    // A promise whose id lacks the push bit costs the association.
    let raw = [&[0x24, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 1][..], HEAD].concat();
    assert_eq!(
        gateway.handle_message(2, &Bytes::from(raw)),
        Err(protocol_goaway())
    );
    let (mut gateway, mut origin2) = invited(10, 1000, 10);
    push(&mut gateway, &mut origin2, PUSH_ID_BIT | 5, 2);
    // Not above the last on its stream, or still open: RESET for the push.
    assert_eq!(
        deliver(&mut gateway, 2, &promise(PUSH_ID_BIT | 4, PAGE, HEAD)),
        Err(reset(PUSH_ID_BIT | 4, ErrorCode::ProtocolError))
    );
    assert_eq!(
        deliver(&mut gateway, 3, &promise(PUSH_ID_BIT | 5, PAGE, HEAD)),
        Err(reset(PUSH_ID_BIT | 5, ErrorCode::ProtocolError)),
        "open on another stream"
    );
    assert_eq!(
        deliver(&mut gateway, 2, &head_of(PUSH_ID_BIT | 5)),
        Err(Reaction::Ignore),
        "the reset push is gone"
    );
    // Another stream has its own order.
    assert!(deliver(&mut gateway, 4, &promise(PUSH_ID_BIT | 1, PAGE, HEAD)).is_ok());
    // A response for a push id never promised on that stream.
    assert_eq!(
        deliver(&mut gateway, 1, &head_of(PUSH_ID_BIT | 9)),
        Err(protocol_goaway())
    );
    // The origin's own checks, which record nothing when they fail.
    assert_eq!(
        origin.handle_push_sent(7, PAGE, 2),
        Err(ErrorCode::InternalError)
    );
    assert_eq!(
        origin.handle_push_sent(PUSH, PAGE, 0),
        Err(ErrorCode::InternalError)
    );
    assert_eq!(
        origin.handle_push_sent(PUSH, PAGE, 5),
        Err(ErrorCode::InternalError)
    );
    origin
        .handle_push_sent(PUSH_ID_BIT | 3, PAGE, 2)
        .expect("push");
    assert_eq!(
        origin.handle_push_sent(PUSH_ID_BIT | 3, PAGE, 2),
        Err(ErrorCode::InternalError)
    );
    assert_eq!(
        origin.handle_push_sent(PUSH_ID_BIT | 2, PAGE, 2),
        Err(ErrorCode::InternalError)
    );
    assert_eq!(
        origin.handle_push_sent(PUSH_ID_BIT | 4, PAGE + 1, 2),
        Err(ErrorCode::Refused),
        "no budget for that page"
    );
    assert_eq!(origin.pushes_of(PAGE), vec![PUSH_ID_BIT | 3]);
    // And the gateway never issues a request id in the push space: the
    // origin resets a REQUEST or TUNNEL_OPEN there.
    assert_eq!(
        gateway.handle_request_sent(PUSH_ID_BIT | 1, 1),
        Err(ErrorCode::InternalError)
    );
    assert_eq!(
        deliver(&mut origin, 3, &request(PUSH_ID_BIT | 8, true)),
        Err(reset(PUSH_ID_BIT | 8, ErrorCode::ProtocolError))
    );
    let tunnel = Message::TunnelOpen(TunnelOpen {
        id: PUSH_ID_BIT | 9,
        destination: "192.0.2.1:443".parse().expect("address"),
        server_name: "site.test".into(),
    });
    assert_eq!(
        deliver(&mut origin, 3, &tunnel),
        Err(reset(PUSH_ID_BIT | 9, ErrorCode::ProtocolError))
    );
    assert_eq!(origin.open_requests(), 2, "the page and push 3 only");
}

#[test]
fn a_promise_needs_the_pages_allowance() {
    // An open page that got no budget never invited pushes.
    let (mut gateway, mut origin) = invited(1, 1000, 10);
    gateway.handle_request_sent(3, 2).expect("second page");
    assert_eq!(
        deliver(&mut gateway, 2, &promise(PUSH, 3, HEAD)),
        Err(reset(PUSH, ErrorCode::ProtocolError))
    );
    // A page that was never issued, or has ended without a budget: refused.
    assert_eq!(
        deliver(&mut gateway, 2, &promise(PUSH + 1, 77, HEAD)),
        Err(reset(PUSH + 1, ErrorCode::Refused))
    );
    // Beyond the page's count, and for another host.
    push(&mut gateway, &mut origin, PUSH + 2, 2);
    assert_eq!(
        deliver(&mut gateway, 2, &promise(PUSH + 3, PAGE, HEAD)),
        Err(reset(PUSH + 3, ErrorCode::ProtocolError))
    );
    let (mut gateway, _) = invited(5, 1000, 10);
    assert_eq!(
        deliver(
            &mut gateway,
            2,
            &promise(PUSH, PAGE, b"GET /x HTTP/1.1\r\nHost: other.test\r\n\r\n")
        ),
        Err(reset(PUSH, ErrorCode::ProtocolError))
    );
    assert!(
        deliver(
            &mut gateway,
            2,
            &promise(
                PUSH + 1,
                PAGE,
                b"GET /x HTTP/1.1\r\nHOST: SITE.test\r\n\r\n"
            )
        )
        .is_ok(),
        "hosts compare case-insensitively"
    );
}

#[test]
fn the_pages_byte_budget_bounds_its_pushes() {
    let (mut gateway, mut origin) = invited(2, 100, 10);
    push(&mut gateway, &mut origin, PUSH, 2);
    push(&mut gateway, &mut origin, PUSH + 1, 3);
    assert_eq!(origin.handle_push_body_sent(PUSH, 60), Ok(()));
    assert_eq!(
        origin.handle_push_body_sent(PUSH + 1, 41),
        Err(ErrorCode::TooLarge)
    );
    assert_eq!(origin.handle_push_body_sent(PUSH + 1, 40), Ok(()));
    assert!(deliver(&mut gateway, 2, &head_of(PUSH)).is_ok());
    assert!(deliver(&mut gateway, 2, &body_of(PUSH, 60)).is_ok());
    assert!(deliver(&mut gateway, 3, &head_of(PUSH + 1)).is_ok());
    assert!(deliver(&mut gateway, 3, &body_of(PUSH + 1, 40)).is_ok());
    assert_eq!(
        deliver(&mut gateway, 3, &body_of(PUSH + 1, 1)),
        Err(reset(PUSH + 1, ErrorCode::TooLarge))
    );
    assert_eq!(gateway.open_pushes(), 1);
    assert_eq!(
        deliver(&mut gateway, 3, &body_of(PUSH + 1, 1)),
        Err(Reaction::Ignore),
        "after the reset"
    );
}

#[test]
fn a_push_on_the_wrong_stream_or_out_of_order_is_reset() {
    let (mut gateway, mut origin) = invited(5, 1000, 10);
    push(&mut gateway, &mut origin, PUSH, 2);
    assert_eq!(
        deliver(&mut gateway, 3, &head_of(PUSH)),
        Err(reset(PUSH, ErrorCode::ProtocolError))
    );
    push(&mut gateway, &mut origin, PUSH + 1, 2);
    assert_eq!(
        deliver(&mut gateway, 2, &body_of(PUSH + 1, 1)),
        Err(reset(PUSH + 1, ErrorCode::ProtocolError)),
        "body before head"
    );
    push(&mut gateway, &mut origin, PUSH + 2, 2);
    assert!(deliver(&mut gateway, 2, &head_of(PUSH + 2)).is_ok());
    assert_eq!(
        deliver(
            &mut gateway,
            2,
            &Message::ResponseEnd {
                id: PUSH + 2,
                body_len: 9
            }
        ),
        Err(reset(PUSH + 2, ErrorCode::ProtocolError)),
        "short body"
    );
    push(&mut gateway, &mut origin, PUSH + 3, 2);
    assert_eq!(
        deliver(
            &mut gateway,
            2,
            &Message::TunnelCredit {
                id: PUSH + 3,
                bytes: 1
            }
        ),
        Err(reset(PUSH + 3, ErrorCode::ProtocolError))
    );
    push(&mut gateway, &mut origin, PUSH + 4, 2);
    assert_eq!(
        deliver(
            &mut gateway,
            2,
            &Message::TunnelData {
                id: PUSH + 4,
                end: false,
                data: Bytes::from_static(b"x")
            }
        ),
        Err(reset(PUSH + 4, ErrorCode::ProtocolError))
    );
    // The origin's RESET of a push ends it at the gateway.
    let (mut gateway, mut origin) = invited(5, 1000, 10);
    push(&mut gateway, &mut origin, PUSH, 2);
    let refused = Message::Reset {
        id: PUSH,
        code: ErrorCode::InternalError,
        reason: String::new(),
    };
    assert_eq!(deliver(&mut gateway, 2, &refused), Ok(refused));
    assert_eq!(gateway.open_pushes(), 0);
}

#[test]
fn the_gateway_cancels_or_refuses_a_push_by_its_id() {
    let (mut gateway, mut origin) = invited(5, 1000, 10);
    push(&mut gateway, &mut origin, PUSH, 2);
    push(&mut gateway, &mut origin, PUSH + 1, 3);
    // CANCEL on stream 0: the gateway forgets it at once...
    gateway.handle_request_finished(PUSH);
    let cancel = Message::Cancel { id: PUSH };
    assert_eq!(deliver(&mut origin, 0, &cancel), Ok(cancel));
    assert_eq!(
        deliver(&mut gateway, 2, &head_of(PUSH)),
        Err(Reaction::Ignore)
    );
    // ... and the origin ends it when it stops it.
    assert_eq!(origin.pushes_of(PAGE), vec![PUSH, PUSH + 1]);
    origin.handle_request_finished(PUSH);
    // RESET on the push's stream: the origin forgets it on receipt.
    gateway.handle_request_finished(PUSH + 1);
    let refused = Message::Reset {
        id: PUSH + 1,
        code: ErrorCode::Refused,
        reason: String::new(),
    };
    assert_eq!(deliver(&mut origin, 3, &refused), Ok(refused.clone()));
    assert_eq!(origin.open_pushes(), 0);
    assert_eq!(deliver(&mut origin, 3, &refused), Err(Reaction::Ignore));
    // The page's allowance is untouched by its pushes' ends.
    assert_eq!(origin.push_allowance(PAGE).map(|a| a.pushes), Some(3));
    // PRIORITY promotes a push on its stream, at an origin that takes it.
    push(&mut gateway, &mut origin, PUSH + 2, 4);
    assert!(gateway.may_send_priority(PUSH + 2));
    let promote = Message::Priority {
        id: PUSH + 2,
        urgency: Urgency::HIGHEST,
        class: RequestClass::Demand,
    };
    assert_eq!(deliver(&mut origin, 4, &promote), Ok(promote.clone()));
    assert_eq!(
        deliver(&mut origin, 2, &promote),
        Err(reset(PUSH + 2, ErrorCode::ProtocolError)),
        "on another stream"
    );
    assert_eq!(
        deliver(&mut origin, 4, &promote),
        Err(Reaction::Ignore),
        "after it ended"
    );
}

#[test]
fn ending_the_page_ends_its_allowance_and_pushes() {
    // The gateway's CANCEL of the page.
    let (mut gateway, mut origin) = invited(5, 1000, 10);
    push(&mut gateway, &mut origin, PUSH, 2);
    gateway.handle_request_finished(PAGE);
    assert_eq!(gateway.open_pushes(), 0, "forgotten with the page");
    assert_eq!(
        deliver(&mut gateway, 2, &head_of(PUSH)),
        Err(Reaction::Ignore)
    );
    assert_eq!(
        deliver(&mut gateway, 3, &promise(PUSH + 1, PAGE, HEAD)),
        Err(reset(PUSH + 1, ErrorCode::Refused)),
        "a promise that crossed the CANCEL"
    );
    let cancel = Message::Cancel { id: PAGE };
    assert_eq!(deliver(&mut origin, 0, &cancel), Ok(cancel));
    assert_eq!(origin.push_allowance(PAGE), None);
    assert_eq!(origin.pushes_of(PAGE), vec![PUSH], "for the origin to stop");
    origin.handle_request_finished(PUSH);
    // The gateway's RESET of the page, before its response began.
    let (mut gateway, mut origin) = invited(5, 1000, 10);
    gateway.handle_request_finished(PAGE);
    let reset_page = Message::Reset {
        id: PAGE,
        code: ErrorCode::Cancelled,
        reason: String::new(),
    };
    assert_eq!(
        deliver(&mut origin, PAGE_STREAM, &reset_page),
        Ok(reset_page)
    );
    assert_eq!(origin.push_allowance(PAGE), None);
    // The origin's RESET of the page leaves the allowance.
    let (mut gateway, mut origin) = invited(5, 1000, 10);
    origin.handle_request_finished(PAGE);
    let failed = Message::Reset {
        id: PAGE,
        code: ErrorCode::UpstreamFailed,
        reason: String::new(),
    };
    assert_eq!(deliver(&mut gateway, PAGE_STREAM, &failed), Ok(failed));
    assert!(origin.push_allowance(PAGE).is_some());
    push(&mut gateway, &mut origin, PUSH, 2);
}

#[test]
fn after_goaway_no_new_push() {
    let (mut gateway, mut origin) = invited(5, 1000, 10);
    push(&mut gateway, &mut origin, PUSH, 2);
    let goaway = Message::GoAway(GoAway {
        last_request: PAGE,
        code: ErrorCode::NoError,
        reason: String::new(),
    });
    assert!(deliver(&mut gateway, 0, &goaway).is_ok());
    assert_eq!(
        deliver(&mut gateway, 3, &promise(PUSH + 1, PAGE, HEAD)),
        Err(reset(PUSH + 1, ErrorCode::Refused))
    );
    assert!(
        deliver(&mut gateway, 2, &head_of(PUSH)).is_ok(),
        "promised pushes finish"
    );
    assert!(deliver(&mut origin, 0, &goaway).is_ok());
    assert_eq!(origin.push_allowance(PAGE), None);
    assert_eq!(
        origin.handle_push_sent(PUSH + 2, PAGE, 2),
        Err(ErrorCode::Refused)
    );
}

#[test]
fn the_origin_checks_where_a_budget_comes() {
    let (mut gateway, mut origin) = invited(5, 1000, 10);
    let again = Message::PushBudget(budget(PAGE, 9, 9));
    // A second budget for an open page.
    assert_eq!(
        deliver(&mut origin, PAGE_STREAM, &again),
        Err(reset(PAGE, ErrorCode::ProtocolError))
    );
    assert_eq!(origin.push_allowance(PAGE), None, "the page is gone");
    // On another stream than its page.
    deliver(&mut origin, 2, &request(3, true)).expect("request 3");
    assert_eq!(
        deliver(&mut origin, 1, &Message::PushBudget(budget(3, 1, 1))),
        Err(reset(3, ErrorCode::ProtocolError))
    );
    // For a tunnel.
    let open = Message::TunnelOpen(TunnelOpen {
        id: 4,
        destination: "192.0.2.1:443".parse().expect("address"),
        server_name: "site.test".into(),
    });
    deliver(&mut origin, 2, &open).expect("tunnel");
    assert_eq!(
        deliver(&mut origin, 2, &Message::PushBudget(budget(4, 1, 1))),
        Err(reset(4, ErrorCode::ProtocolError))
    );
    // For an id never seen on that stream.
    assert_eq!(
        deliver(&mut origin, 3, &Message::PushBudget(budget(6, 1, 1))),
        Err(reset(6, ErrorCode::ProtocolError))
    );
    // For a page already answered: taken, once.
    deliver(&mut origin, 2, &request(5, true)).expect("request 5");
    origin.handle_request_finished(5);
    let late = Message::PushBudget(budget(5, 1, 1));
    assert_eq!(deliver(&mut origin, 2, &late), Ok(late.clone()));
    assert!(origin.push_allowance(5).is_some());
    assert_eq!(deliver(&mut origin, 2, &late), Err(Reaction::Ignore));
    // Malformed or too large: the page is reset.
    deliver(&mut origin, 2, &request(7, true)).expect("request 7");
    assert_eq!(
        origin.handle_message(2, &Bytes::from_static(b"\x16\0\0\0\0\0\0\x07\0\0\0")),
        Err(reset(7, ErrorCode::ProtocolError))
    );
    deliver(&mut origin, 2, &request(8, true)).expect("request 8");
    let big = [&b"\x16\0\0\0\0\0\0\x08"[..], &vec![0; MAX_HEAD + 1]].concat();
    assert_eq!(
        origin.handle_message(2, &Bytes::from(big)),
        Err(reset(8, ErrorCode::TooLarge))
    );
    // For a push, open or ended: the push is reset, or nothing is done.
    origin
        .handle_push_sent(PUSH, 5, 3)
        .expect("push for page 5");
    let for_push = b"\x16\0\0\0\x80\0\0\x01\0\0\0\0\0\0\0\0";
    assert_eq!(
        origin.handle_message(3, &Bytes::from_static(for_push)),
        Err(reset(PUSH, ErrorCode::ProtocolError))
    );
    assert_eq!(
        origin.handle_message(3, &Bytes::from_static(for_push)),
        Err(Reaction::Ignore)
    );
    assert_eq!(origin.push_allowance(PUSH), None);
    assert_eq!(
        origin.handle_message(2, &Bytes::from_static(b"\x16\0\0\0\0\0\0\x63\0")),
        Err(Reaction::Ignore),
        "malformed for a request not open"
    );
    // The held entries reach the origin as sent.
    let mut with_held = budget(9, 1, 1);
    with_held.held = vec![
        held(true, b"/a.css".to_vec(), b"\"1\"".to_vec(), vec![]),
        held(
            false,
            b"/b.js".to_vec(),
            vec![],
            b"Sun, 06 Nov 1994 08:49:37 GMT".to_vec(),
        ),
    ];
    deliver(&mut origin, 2, &request(9, true)).expect("request 9");
    gateway.handle_request_sent(9, 2).expect("request 9");
    gateway
        .handle_push_budget_sent(&with_held, 2, b"site.test")
        .expect("budget");
    let message = Message::PushBudget(with_held);
    assert_eq!(deliver(&mut origin, 2, &message), Ok(message));
}

#[test]
fn the_gateway_records_budgets_only_where_they_belong() {
    let (mut gateway, _) = invited(5, 1000, 10);
    let b = |page| budget(page, 1, 1);
    assert_eq!(
        gateway.handle_push_budget_sent(&b(PAGE), PAGE_STREAM, b"site.test"),
        Err(ErrorCode::InternalError),
        "a second budget"
    );
    assert_eq!(
        gateway.handle_push_budget_sent(&b(9), 1, b"site.test"),
        Err(ErrorCode::InternalError),
        "a request never sent"
    );
    gateway.handle_request_sent(3, 2).expect("request");
    assert_eq!(
        gateway.handle_push_budget_sent(&b(3), 1, b"site.test"),
        Err(ErrorCode::InternalError),
        "another stream"
    );
    assert_eq!(
        gateway.handle_push_budget_sent(&b(3), 2, b""),
        Err(ErrorCode::InternalError),
        "no host"
    );
    gateway.handle_tunnel_sent(4, 2).expect("tunnel");
    assert_eq!(
        gateway.handle_push_budget_sent(&b(4), 2, b"site.test"),
        Err(ErrorCode::InternalError),
        "a tunnel"
    );
}

#[test]
fn each_side_keeps_at_most_max_push_pages_allowances() {
    let (mut gateway, mut origin) = pair(true, true);
    gateway.handle_max_pushes_sent(u32::MAX);
    deliver(&mut origin, 0, &Message::MaxPushes { max: u32::MAX }).expect("grant");
    let pages = MAX_PUSH_PAGES as RequestId;
    let mut next_push = PUSH_ID_BIT;
    for page in 1..=pages {
        gateway.handle_request_sent(page, 1).expect("request");
        deliver(&mut origin, 1, &request(page, true)).expect("request");
        let b = budget(page, 1, 10);
        gateway
            .handle_push_budget_sent(&b, 1, b"site.test")
            .expect("budget");
        deliver(&mut origin, 1, &Message::PushBudget(b)).expect("budget");
        // Every page holds an open push.
        next_push += 1;
        origin.handle_push_sent(next_push, page, 2).expect("push");
        deliver(&mut gateway, 2, &promise(next_push, page, HEAD)).expect("promise");
    }
    // The gateway has no place: every page has a push open.
    let extra = pages + 1;
    gateway.handle_request_sent(extra, 1).expect("request");
    assert_eq!(
        gateway.handle_push_budget_sent(&budget(extra, 1, 10), 1, b"site.test"),
        Err(ErrorCode::Refused)
    );
    // Once page 2's push ends, page 2 (the oldest without one) makes room.
    let second = PUSH_ID_BIT + 2;
    for message in [
        head_of(second),
        Message::ResponseEnd {
            id: second,
            body_len: 0,
        },
    ] {
        deliver(&mut gateway, 2, &message).expect("push 2 ends");
    }
    gateway
        .handle_push_budget_sent(&budget(extra, 1, 10), 1, b"site.test")
        .expect("room made");
    assert_eq!(
        deliver(&mut gateway, 3, &promise(PUSH_ID_BIT | 0x1000, 2, HEAD)),
        Err(reset(PUSH_ID_BIT | 0x1000, ErrorCode::Refused)),
        "page 2 was forgotten"
    );
    // The origin takes no budget while every allowance has a push open...
    deliver(&mut origin, 1, &request(extra, true)).expect("request");
    let extra_budget = Message::PushBudget(budget(extra, 1, 10));
    assert_eq!(
        deliver(&mut origin, 1, &extra_budget),
        Err(Reaction::Ignore)
    );
    assert_eq!(origin.push_allowance(extra), None);
    assert_eq!(
        origin.handle_push_body_sent(PUSH_ID_BIT + 1, 11),
        Err(ErrorCode::TooLarge),
        "page 1's bytes are still counted"
    );
    // ... and forgets the oldest one without, once there is one.
    origin.handle_request_finished(PUSH_ID_BIT + 2);
    let late = Message::PushBudget(budget(extra + 1, 1, 10));
    deliver(&mut origin, 1, &request(extra + 1, true)).expect("request");
    assert_eq!(deliver(&mut origin, 1, &late), Ok(late));
    assert_eq!(origin.push_allowance(2), None);
    assert!(origin.push_allowance(extra + 1).is_some());
}

#[test]
fn request_flags_stay_for_push_messages() {
    // Unknown flags on the push messages are ignored, as everywhere.
    let mut raw = promise(PUSH, PAGE, HEAD).to_bytes().to_vec();
    raw[1] = FLAG_END | 0x80;
    raw[2] = 0xff;
    assert_eq!(
        Message::decode(&Bytes::from(raw)),
        Ok(promise(PUSH, PAGE, HEAD))
    );
}

#[test]
fn push_is_not_a_default_capability() {
    assert!(
        !SessionConfig::default()
            .capabilities
            .contains(Capabilities::PUSH),
        "a daemon announces PUSH only once it pushes or takes pushes"
    );
}
