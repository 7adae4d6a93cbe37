//! Codec round trips, exact byte layouts, and the reaction table of docs/protocol.md.

use bytes::Bytes;

use crate::*;

mod push;

fn hello(ack: bool, streams: u16) -> Message {
    Message::Hello(Hello {
        ack,
        version: VERSION,
        data_streams: streams,
        max_chunk: MAX_CHUNK as u32,
        capabilities: Capabilities::FEEDBACK,
    })
}

fn request(id: RequestId, end: bool) -> Message {
    Message::Request(Request {
        id,
        urgency: Urgency::DEFAULT,
        class: RequestClass::Demand,
        end,
        head: Bytes::from_static(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"),
    })
}

fn priority(id: RequestId, urgency: u8, class: RequestClass) -> Message {
    Message::Priority {
        id,
        urgency: Urgency::new(urgency).expect("urgency 0..=7"),
        class,
    }
}

fn every_kind() -> Vec<Message> {
    vec![
        hello(false, 10),
        hello(true, 3),
        Message::Feedback(vec![]),
        Message::Feedback(vec![
            StreamBacklog {
                stream: 1,
                bytes: 0,
                arrived: None,
            },
            StreamBacklog {
                stream: 65535,
                bytes: u32::MAX,
                arrived: None,
            },
        ]),
        Message::Feedback(vec![
            StreamBacklog {
                stream: 2,
                bytes: 7,
                arrived: Some(0),
            },
            StreamBacklog {
                stream: 3,
                bytes: 0,
                arrived: Some(u32::MAX),
            },
        ]),
        Message::Cancel { id: 7 },
        Message::GoAway(GoAway {
            last_request: 99,
            code: ErrorCode::NoError,
            reason: "bye ✓".into(),
        }),
        Message::Ping {
            ack: true,
            opaque: u64::MAX - 1,
        },
        request(1, true),
        Message::Request(Request {
            id: u32::MAX,
            urgency: Urgency::LOWEST,
            class: RequestClass::Prefetch,
            end: false,
            head: Bytes::from_static(b"POST /x HTTP/1.1\r\n\r\n"),
        }),
        Message::RequestBody {
            id: 3,
            end: true,
            data: Bytes::new(),
        },
        Message::RequestBody {
            id: 3,
            end: false,
            data: Bytes::from(vec![0xab; MAX_CHUNK]),
        },
        Message::Priority {
            id: 3,
            urgency: Urgency::HIGHEST,
            class: RequestClass::Demand,
        },
        Message::Priority {
            id: u32::MAX,
            urgency: Urgency::LOWEST,
            class: RequestClass::Prefetch,
        },
        Message::ResponseHead {
            id: 4,
            head: Bytes::from_static(b"HTTP/1.1 200 OK\r\n\r\n"),
        },
        Message::ResponseBody {
            id: 4,
            data: Bytes::from_static(b"\0\x01\x02"),
        },
        Message::ResponseEnd {
            id: 4,
            body_len: 1 << 40,
        },
        Message::Reset {
            id: 5,
            code: ErrorCode::Unknown(0xbeef),
            reason: String::new(),
        },
        tunnel_open(6, "203.0.113.10:443", "www.example.test"),
        tunnel_open(7, "[2001:db8::1]:8443", "a"),
        Message::TunnelData {
            id: 6,
            end: false,
            data: Bytes::from(vec![0x16; MAX_CHUNK]),
        },
        Message::TunnelData {
            id: 6,
            end: true,
            data: Bytes::new(),
        },
        Message::TunnelCredit {
            id: 6,
            bytes: u32::MAX,
        },
    ]
}

fn tunnel_open(id: RequestId, destination: &str, name: &str) -> Message {
    Message::TunnelOpen(TunnelOpen {
        id,
        destination: destination.parse().expect("socket address literal"),
        server_name: name.into(),
    })
}

fn tunnel_data(id: RequestId, end: bool, data: &'static [u8]) -> Message {
    Message::TunnelData {
        id,
        end,
        data: Bytes::from_static(data),
    }
}

#[test]
fn tunnel_open_layout_is_exact() {
    let bytes = tunnel_open(9, "192.0.2.7:443", "ab.c").to_bytes();
    assert_eq!(
        &bytes[..],
        &[
            0x13, 0, 0, 0, 0, 0, 0, 9, 0x01, 0xbb, 4, 0, 192, 0, 2, 7, b'a', b'b', b'.', b'c'
        ]
    );
    let malformed = [
        (&[0x13, 0, 0, 0, 0, 0, 0, 9, 0x01, 0xbb][..], "short"),
        (
            &[
                0x13, 0, 0, 0, 0, 0, 0, 9, 0x01, 0xbb, 5, 0, 1, 2, 3, 4, b'a',
            ][..],
            "family 5",
        ),
        (
            &[
                0x13, 0, 0, 0, 0, 0, 0, 9, 0x01, 0xbb, 6, 0, 1, 2, 3, 4, b'a',
            ][..],
            "v6 cut",
        ),
        (
            &[0x13, 0, 0, 0, 0, 0, 0, 9, 0x01, 0xbb, 4, 0, 1, 2, 3, 4][..],
            "no name",
        ),
        (
            &[
                0x13, 0, 0, 0, 0, 0, 0, 9, 0x01, 0xbb, 4, 0, 1, 2, 3, 4, b'A',
            ][..],
            "upper case",
        ),
        (&[0x14, 0, 0, 0, 0, 0, 0, 9][..], "empty data without END"),
        (
            &[0x15, 0, 0, 0, 0, 0, 0, 9, 0, 0, 1][..],
            "credit of 3 bytes",
        ),
    ];
    for (bytes, name) in malformed {
        let error = Message::decode(&Bytes::copy_from_slice(bytes)).expect_err(name);
        assert_eq!(
            error.reaction(),
            Reaction::Reset {
                id: 9,
                code: ErrorCode::ProtocolError
            },
            "{name}"
        );
    }
}

#[test]
fn a_tunnel_passes_both_sessions_and_ends_after_both_halves() {
    let (mut gateway, mut origin) = open_pair(4, 4);
    assert!(gateway.may_open_tunnel());
    gateway.handle_tunnel_sent(1, 3).expect("valid tunnel");
    let open = tunnel_open(1, "192.0.2.1:443", "site.test");
    assert_eq!(origin.handle_message(3, &open.to_bytes()), Ok(open));
    let hello = tunnel_data(1, false, b"\x16\x03\x01");
    assert_eq!(origin.handle_message(3, &hello.to_bytes()), Ok(hello));
    let credit = Message::TunnelCredit { id: 1, bytes: 3 };
    origin.handle_credit_sent(1, 3);
    assert_eq!(gateway.handle_message(3, &credit.to_bytes()), Ok(credit));
    let answer = tunnel_data(1, true, b"\x16\x03\x03");
    assert!(
        !origin.handle_tunnel_end_sent(1),
        "the gateway's half is open"
    );
    assert_eq!(gateway.handle_message(3, &answer.to_bytes()), Ok(answer));
    // Data after the peer's END breaks the tunnel.
    let late = tunnel_data(1, false, b"x");
    assert_eq!(
        gateway.handle_message(3, &late.to_bytes()),
        Err(Reaction::Reset {
            id: 1,
            code: ErrorCode::ProtocolError
        })
    );
    let reset = Message::Reset {
        id: 1,
        code: ErrorCode::ProtocolError,
        reason: String::new(),
    };
    assert_eq!(origin.handle_message(3, &reset.to_bytes()), Ok(reset));
    gateway.handle_tunnel_sent(2, 3).expect("second tunnel");
    assert!(!gateway.handle_tunnel_end_sent(2));
    let open = tunnel_open(2, "192.0.2.1:443", "site.test");
    origin.handle_message(3, &open.to_bytes()).expect("opens");
    let end = tunnel_data(2, true, b"");
    assert_eq!(origin.handle_message(3, &end.to_bytes()), Ok(end.clone()));
    assert!(origin.handle_tunnel_end_sent(2), "both halves closed");
    assert_eq!(gateway.handle_message(3, &end.to_bytes()), Ok(end));
    assert_eq!(gateway.open_requests(), 0);
    assert_eq!(origin.open_requests(), 0);
}

#[test]
fn tunnel_data_beyond_the_window_or_misplaced_resets_the_tunnel() {
    let (_, mut origin) = open_pair(4, 4);
    let open = tunnel_open(1, "192.0.2.1:443", "site.test");
    origin.handle_message(1, &open.to_bytes()).expect("opens");
    let chunk = Message::TunnelData {
        id: 1,
        end: false,
        data: Bytes::from(vec![0; MAX_CHUNK]),
    };
    for _ in 0..(TUNNEL_WINDOW as usize / MAX_CHUNK) {
        origin
            .handle_message(1, &chunk.to_bytes())
            .expect("within the window");
    }
    let over = tunnel_data(1, false, b"x");
    assert_eq!(
        origin.handle_message(1, &over.to_bytes()),
        Err(Reaction::Reset {
            id: 1,
            code: ErrorCode::ProtocolError
        }),
        "one byte beyond the window"
    );
    let open = tunnel_open(2, "192.0.2.1:443", "site.test");
    origin.handle_message(1, &open.to_bytes()).expect("opens");
    assert_eq!(
        origin.handle_message(2, &tunnel_data(2, false, b"x").to_bytes()),
        Err(Reaction::Reset {
            id: 2,
            code: ErrorCode::ProtocolError
        }),
        "on another stream"
    );
    let body = Message::RequestBody {
        id: 3,
        end: true,
        data: Bytes::new(),
    };
    let open = tunnel_open(3, "192.0.2.1:443", "site.test");
    origin.handle_message(1, &open.to_bytes()).expect("opens");
    assert_eq!(
        origin.handle_message(1, &body.to_bytes()),
        Err(Reaction::Reset {
            id: 3,
            code: ErrorCode::ProtocolError
        }),
        "REQUEST_BODY on a tunnel"
    );
}

#[test]
fn an_origin_without_the_capability_refuses_tunnels_and_the_gateway_never_opens_one() {
    let (mut gateway, mut origin) = open_pair_offering(4, 4, Capabilities::FEEDBACK);
    assert!(!gateway.may_open_tunnel());
    assert_eq!(gateway.handle_tunnel_sent(1, 1), Err(ErrorCode::Refused));
    let open = tunnel_open(1, "192.0.2.1:443", "site.test");
    assert_eq!(
        origin.handle_message(1, &open.to_bytes()),
        Err(Reaction::Reset {
            id: 1,
            code: ErrorCode::Refused
        })
    );
}

#[test]
fn a_response_on_a_tunnel_or_a_credit_on_a_request_resets_it() {
    let (mut gateway, _) = open_pair(4, 4);
    gateway.handle_tunnel_sent(1, 1).expect("tunnel");
    let head = Message::ResponseHead {
        id: 1,
        head: Bytes::from_static(b"HTTP/1.1 200 OK\r\n\r\n"),
    };
    assert_eq!(
        gateway.handle_message(1, &head.to_bytes()),
        Err(Reaction::Reset {
            id: 1,
            code: ErrorCode::ProtocolError
        })
    );
    gateway.handle_request_sent(2, 1).expect("request");
    let credit = Message::TunnelCredit { id: 2, bytes: 1 };
    assert_eq!(
        gateway.handle_message(1, &credit.to_bytes()),
        Err(Reaction::Reset {
            id: 2,
            code: ErrorCode::ProtocolError
        })
    );
}

#[test]
fn every_message_round_trips_with_its_declared_length() {
    for message in every_kind() {
        let bytes = message.to_bytes();
        assert_eq!(bytes.len(), message.encoded_len(), "{message:?}");
        assert_eq!(Message::decode(&bytes), Ok(message.clone()));
    }
}

#[test]
fn header_and_payload_layout_is_exact() {
    let bytes = request(0x0102_0304, true).to_bytes();
    assert_eq!(&bytes[..12], &[0x10, 0x01, 0, 0, 1, 2, 3, 4, 3, 0, 0, 0]);
    assert_eq!(&bytes[12..], b"GET / HTTP/1.1\r\nHost: a\r\n\r\n");

    let bytes = hello(true, 0x0a0b).to_bytes();
    assert_eq!(
        &bytes[..],
        &[
            1, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0x0a, 0x0b, 0, 1, 0, 0, 0, 0, 0, 1
        ]
    );

    let bytes = priority(0x0102_0304, 1, RequestClass::Demand).to_bytes();
    assert_eq!(&bytes[..], &[0x12, 0, 0, 0, 1, 2, 3, 4, 1, 0, 0, 0]);
    let bytes = priority(9, 7, RequestClass::Prefetch).to_bytes();
    assert_eq!(&bytes[..], &[0x12, 0, 0, 0, 0, 0, 0, 9, 7, 1, 0, 0]);

    let bytes = Message::ResponseEnd {
        id: 9,
        body_len: 258,
    }
    .to_bytes();
    assert_eq!(
        &bytes[..],
        &[0x22, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 1, 2]
    );
}

#[test]
fn feedback_entries_with_the_arrived_bytes_are_ten_bytes_and_never_mixed() {
    let entry = |stream, bytes, arrived| StreamBacklog {
        stream,
        bytes,
        arrived,
    };
    let wide = Message::Feedback(vec![entry(0x0102, 0x0304_0506, Some(0x0708_090a))]);
    assert_eq!(
        &wide.to_bytes()[..],
        &[2, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
    );
    let narrow = Message::Feedback(vec![entry(0x0102, 0x0304_0506, None)]);
    assert_eq!(
        &narrow.to_bytes()[..],
        &[2, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 2, 3, 4, 5, 6]
    );
    let mixed = Message::Feedback(vec![entry(1, 0, Some(0)), entry(2, 0, None)]);
    assert!(mixed.check_limits().is_err());
    // Neither 6 nor 10 bytes per entry: refused like any layout mismatch.
    let odd = Bytes::from_static(&[2, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 2, 3, 4, 5, 6, 7, 8]);
    assert!(Message::decode(&odd).is_err());
}

#[test]
fn reserved_bits_and_unknown_flags_are_ignored() {
    let mut raw = Message::Cancel { id: 1 }.to_bytes().to_vec();
    raw[1] = 0xfe;
    raw[2] = 0xff;
    assert_eq!(
        Message::decode(&Bytes::from(raw)),
        Ok(Message::Cancel { id: 1 })
    );
}

/// Each malformed input with the error kind and reaction docs/protocol.md gives.
#[test]
fn malformed_messages_get_the_documented_reaction() {
    let protocol_goaway = Reaction::GoAway {
        code: ErrorCode::ProtocolError,
    };
    let cases: Vec<(&str, Vec<u8>, Reaction)> = vec![
        ("empty", vec![], protocol_goaway.clone()),
        ("short header", vec![0x10, 0, 0], protocol_goaway.clone()),
        (
            "unknown type",
            vec![0x7f, 0, 0, 0, 0, 0, 0, 1, 9],
            Reaction::Ignore,
        ),
        (
            "hello too short",
            vec![1, 0, 0, 0, 0, 0, 0, 0, 0, 1],
            protocol_goaway.clone(),
        ),
        (
            "feedback count larger than payload",
            vec![2, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 1, 0, 0, 0, 0],
            protocol_goaway.clone(),
        ),
        (
            "cancel with payload",
            vec![3, 0, 0, 0, 0, 0, 0, 1, 0],
            protocol_goaway.clone(),
        ),
        (
            "cancel of request 0",
            vec![3, 0, 0, 0, 0, 0, 0, 0],
            protocol_goaway.clone(),
        ),
        (
            "goaway reason not utf-8",
            vec![4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0xff],
            protocol_goaway.clone(),
        ),
        (
            "request urgency 8",
            [
                vec![0x10, 0, 0, 0, 0, 0, 0, 5, 8, 0, 0, 0],
                b"GET /".to_vec(),
            ]
            .concat(),
            Reaction::Reset {
                id: 5,
                code: ErrorCode::ProtocolError,
            },
        ),
        (
            "request class 2",
            [
                vec![0x10, 0, 0, 0, 0, 0, 0, 5, 3, 2, 0, 0],
                b"GET /".to_vec(),
            ]
            .concat(),
            Reaction::Reset {
                id: 5,
                code: ErrorCode::ProtocolError,
            },
        ),
        (
            "request with empty head",
            vec![0x10, 0, 0, 0, 0, 0, 0, 5, 3, 0, 0, 0],
            Reaction::Reset {
                id: 5,
                code: ErrorCode::ProtocolError,
            },
        ),
        (
            "priority urgency 8",
            vec![0x12, 0, 0, 0, 0, 0, 0, 5, 8, 0, 0, 0],
            Reaction::Reset {
                id: 5,
                code: ErrorCode::ProtocolError,
            },
        ),
        (
            "priority class 2",
            vec![0x12, 0, 0, 0, 0, 0, 0, 5, 0, 2, 0, 0],
            Reaction::Reset {
                id: 5,
                code: ErrorCode::ProtocolError,
            },
        ),
        (
            "priority too short",
            vec![0x12, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0],
            Reaction::Reset {
                id: 5,
                code: ErrorCode::ProtocolError,
            },
        ),
        (
            "priority too long",
            vec![0x12, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 0, 0],
            Reaction::Reset {
                id: 5,
                code: ErrorCode::ProtocolError,
            },
        ),
        (
            "priority of request 0",
            vec![0x12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            protocol_goaway.clone(),
        ),
        (
            "response body of request 0",
            vec![0x21, 0, 0, 0, 0, 0, 0, 0, 1],
            protocol_goaway.clone(),
        ),
        (
            "response body above MAX_CHUNK",
            [vec![0x21, 0, 0, 0, 0, 0, 0, 6], vec![0; MAX_CHUNK + 1]].concat(),
            Reaction::Reset {
                id: 6,
                code: ErrorCode::TooLarge,
            },
        ),
        (
            "response end too short",
            vec![0x22, 0, 0, 0, 0, 0, 0, 6, 0, 0, 0, 0],
            Reaction::Reset {
                id: 6,
                code: ErrorCode::ProtocolError,
            },
        ),
    ];
    for (name, raw, reaction) in cases {
        let error = Message::decode(&Bytes::from(raw)).expect_err(name);
        assert_eq!(error.reaction(), reaction, "{name}: {error}");
    }
}

/// A gateway and an origin session fed each other's messages, the way the
/// drivers will, through one request's whole life.
fn open_pair(gateway_streams: u16, origin_streams: u16) -> (Session, Session) {
    open_pair_offering(
        gateway_streams,
        origin_streams,
        SessionConfig::default().capabilities,
    )
}

/// As [`open_pair`], with the origin announcing `origin_capabilities`.
fn open_pair_offering(
    gateway_streams: u16,
    origin_streams: u16,
    origin_capabilities: Capabilities,
) -> (Session, Session) {
    let mut gateway = Session::new(
        Role::Gateway,
        SessionConfig {
            data_streams: gateway_streams,
            ..SessionConfig::default()
        },
    );
    let mut origin = Session::new(
        Role::Origin,
        SessionConfig {
            data_streams: origin_streams,
            capabilities: origin_capabilities,
            ..SessionConfig::default()
        },
    );
    let to_origin = gateway.hello().to_bytes();
    origin
        .handle_message(0, &to_origin)
        .expect("origin accepts HELLO");
    let to_gateway = origin.hello().to_bytes();
    gateway
        .handle_message(0, &to_gateway)
        .expect("gateway accepts HELLO ack");
    (gateway, origin)
}

#[test]
fn handshake_settles_on_the_smaller_stream_count() {
    let (gateway, origin) = open_pair(16, 4);
    assert_eq!(gateway.data_streams(), 4);
    assert_eq!(origin.data_streams(), 4);
    assert!(gateway.is_open() && origin.is_open());
}

#[test]
fn a_request_and_its_response_pass_both_sessions() {
    let (mut gateway, mut origin) = open_pair(4, 4);
    gateway.handle_request_sent(1, 2).expect("valid request");
    let got = origin.handle_message(2, &request(1, true).to_bytes());
    assert_eq!(got, Ok(request(1, true)));
    for m in [
        Message::ResponseHead {
            id: 1,
            head: Bytes::from_static(b"HTTP/1.1 200 OK\r\n\r\n"),
        },
        Message::ResponseBody {
            id: 1,
            data: Bytes::from_static(b"abc"),
        },
        Message::ResponseBody {
            id: 1,
            data: Bytes::from_static(b"de"),
        },
        Message::ResponseEnd { id: 1, body_len: 5 },
    ] {
        assert_eq!(gateway.handle_message(2, &m.to_bytes()), Ok(m));
    }
    origin.handle_request_finished(1);
    assert_eq!(gateway.open_requests(), 0);
    assert_eq!(origin.open_requests(), 0);
}

#[test]
fn misplaced_and_out_of_order_messages_get_the_documented_reaction() {
    let goaway = Err(Reaction::GoAway {
        code: ErrorCode::ProtocolError,
    });
    let reset = |id| {
        Err(Reaction::Reset {
            id,
            code: ErrorCode::ProtocolError,
        })
    };
    let head = |id| Message::ResponseHead {
        id,
        head: Bytes::from_static(b"HTTP/1.1 204 No Content\r\n\r\n"),
    };

    // Anything before HELLO.
    let mut origin = Session::new(Role::Origin, SessionConfig::default());
    assert_eq!(
        origin.handle_message(1, &request(1, true).to_bytes()),
        goaway
    );

    // A HELLO without ack reaching the gateway; a wrong version.
    let mut gateway = Session::new(Role::Gateway, SessionConfig::default());
    assert_eq!(
        gateway.handle_message(0, &hello(false, 1).to_bytes()),
        goaway
    );
    let mut old = hello(true, 1);
    if let Message::Hello(h) = &mut old {
        h.version = 0;
    }
    assert_eq!(
        gateway.handle_message(0, &old.to_bytes()),
        Err(Reaction::GoAway {
            code: ErrorCode::VersionMismatch
        })
    );

    let (mut gateway, mut origin) = open_pair(4, 4);
    // Control on a data stream, data on the control stream, a stream out of range.
    assert_eq!(
        origin.handle_message(1, &Message::Cancel { id: 1 }.to_bytes()),
        goaway
    );
    assert_eq!(
        origin.handle_message(0, &request(1, true).to_bytes()),
        goaway
    );
    assert_eq!(
        origin.handle_message(5, &request(1, true).to_bytes()),
        goaway
    );
    // A second HELLO.
    assert_eq!(
        origin.handle_message(0, &hello(false, 4).to_bytes()),
        goaway
    );
    // A request id reused on its stream.
    assert!(
        origin
            .handle_message(1, &request(3, true).to_bytes())
            .is_ok()
    );
    assert_eq!(
        origin.handle_message(1, &request(3, true).to_bytes()),
        reset(3)
    );
    assert_eq!(
        origin.handle_message(1, &request(2, true).to_bytes()),
        reset(2)
    );
    // Request body after the request ended, and for a request never seen.
    let body = |id| Message::RequestBody {
        id,
        end: true,
        data: Bytes::new(),
    };
    assert_eq!(origin.handle_message(1, &body(3).to_bytes()), reset(3));
    assert_eq!(origin.handle_message(1, &body(9).to_bytes()), reset(9));
    // Requests reaching the gateway.
    assert_eq!(
        gateway.handle_message(1, &request(1, true).to_bytes()),
        goaway
    );

    // Response messages out of order, on the wrong stream, for unknown requests.
    gateway.handle_request_sent(1, 1).expect("valid");
    let body = Message::ResponseBody {
        id: 1,
        data: Bytes::from_static(b"x"),
    };
    assert_eq!(gateway.handle_message(1, &body.to_bytes()), reset(1));
    // Request 1 is gone now: its late messages are ignored.
    assert_eq!(
        gateway.handle_message(1, &head(1).to_bytes()),
        Err(Reaction::Ignore)
    );
    gateway.handle_request_sent(2, 1).expect("valid");
    assert_eq!(gateway.handle_message(2, &head(2).to_bytes()), reset(2));
    // Never issued on this stream.
    assert_eq!(gateway.handle_message(3, &head(7).to_bytes()), goaway);
    // A body length that disagrees with the chunks: a truncated response.
    gateway.handle_request_sent(3, 1).expect("valid");
    assert!(gateway.handle_message(1, &head(3).to_bytes()).is_ok());
    assert_eq!(
        gateway.handle_message(1, &Message::ResponseEnd { id: 3, body_len: 1 }.to_bytes()),
        reset(3)
    );
    // The gateway refuses to issue ids that go backwards on a stream.
    assert!(gateway.handle_request_sent(3, 1).is_err());
    assert!(gateway.handle_request_sent(4, 0).is_err());
    assert!(gateway.handle_request_sent(4, 5).is_err());
}

#[test]
fn after_goaway_the_origin_refuses_new_requests() {
    let (_gateway, mut origin) = open_pair(2, 2);
    let goaway = Message::GoAway(GoAway {
        last_request: 0,
        code: ErrorCode::NoError,
        reason: String::new(),
    });
    assert!(origin.handle_message(0, &goaway.to_bytes()).is_ok());
    assert!(origin.peer_going_away());
    assert_eq!(
        origin.handle_message(1, &request(1, true).to_bytes()),
        Err(Reaction::Reset {
            id: 1,
            code: ErrorCode::Refused
        })
    );
}

/// PRIORITY is taken for a request that is open at the origin, on its own stream,
/// while its body arrives or its response runs; once the request has ended it is
/// ignored (it crossed the end in flight); anything else is an error.
#[test]
fn priority_is_accepted_only_for_an_open_request_on_its_stream() {
    let reset = |id| {
        Err(Reaction::Reset {
            id,
            code: ErrorCode::ProtocolError,
        })
    };
    let goaway = Err(Reaction::GoAway {
        code: ErrorCode::ProtocolError,
    });
    let promote = |id| priority(id, 1, RequestClass::Demand);
    let (mut gateway, mut origin) = open_pair(4, 4);

    // While the request body is still arriving, and after it.
    assert!(
        origin
            .handle_message(1, &request(1, false).to_bytes())
            .is_ok()
    );
    assert_eq!(
        origin.handle_message(1, &promote(1).to_bytes()),
        Ok(promote(1))
    );
    let last_body = Message::RequestBody {
        id: 1,
        end: true,
        data: Bytes::from_static(b"x"),
    };
    assert!(origin.handle_message(1, &last_body.to_bytes()).is_ok());
    let demote = priority(1, 6, RequestClass::Prefetch);
    assert_eq!(origin.handle_message(1, &demote.to_bytes()), Ok(demote));

    // The response ended (RESPONSE_END sent): a late PRIORITY is ignored, and so
    // is a malformed one, since there is nothing left to reset.
    origin.handle_request_finished(1);
    assert_eq!(
        origin.handle_message(1, &promote(1).to_bytes()),
        Err(Reaction::Ignore)
    );
    let urgency_8 = Bytes::from_static(&[0x12, 0, 0, 0, 0, 0, 0, 1, 8, 0, 0, 0]);
    assert_eq!(origin.handle_message(1, &urgency_8), Err(Reaction::Ignore));
    // A request the gateway reset is forgotten the same way.
    assert!(
        origin
            .handle_message(2, &request(2, true).to_bytes())
            .is_ok()
    );
    let reset_by_gateway = Message::Reset {
        id: 2,
        code: ErrorCode::Cancelled,
        reason: String::new(),
    };
    assert!(
        origin
            .handle_message(2, &reset_by_gateway.to_bytes())
            .is_ok()
    );
    assert_eq!(
        origin.handle_message(2, &promote(2).to_bytes()),
        Err(Reaction::Ignore)
    );

    // Never issued on that stream: an error for that id.
    assert_eq!(origin.handle_message(1, &promote(9).to_bytes()), reset(9));
    // On another stream than its REQUEST: the request is reset and forgotten.
    assert!(
        origin
            .handle_message(3, &request(3, true).to_bytes())
            .is_ok()
    );
    assert_eq!(origin.handle_message(4, &promote(3).to_bytes()), reset(3));
    assert_eq!(origin.open_requests(), 0);
    // Malformed, for an open request: RESET PROTOCOL_ERROR, like REQUEST.
    assert!(
        origin
            .handle_message(3, &request(4, true).to_bytes())
            .is_ok()
    );
    let class_2 = Bytes::from_static(&[0x12, 0, 0, 0, 0, 0, 0, 4, 0, 2, 0, 0]);
    assert_eq!(origin.handle_message(3, &class_2), reset(4));
    // On the control stream, or reaching the gateway: the association is over.
    assert!(
        origin
            .handle_message(3, &request(5, true).to_bytes())
            .is_ok()
    );
    assert_eq!(origin.handle_message(0, &promote(5).to_bytes()), goaway);
    gateway.handle_request_sent(1, 1).expect("valid request");
    assert_eq!(gateway.handle_message(1, &promote(1).to_bytes()), goaway);
}

/// The gateway may send PRIORITY only for an open request to an origin that
/// announced it; an origin that did not announce it ignores PRIORITY entirely,
/// as one that predates the message would.
#[test]
fn priority_needs_the_origin_capability() {
    let (mut gateway, mut origin) = open_pair(4, 4);
    assert!(!gateway.may_send_priority(1), "not sent yet");
    gateway.handle_request_sent(1, 1).expect("valid request");
    assert!(gateway.may_send_priority(1));
    assert!(
        origin
            .handle_message(1, &request(1, true).to_bytes())
            .is_ok()
    );
    assert!(!origin.may_send_priority(1), "origins never send it");
    let end = Message::ResponseEnd { id: 1, body_len: 0 };
    let head = Message::ResponseHead {
        id: 1,
        head: Bytes::from_static(b"HTTP/1.1 204 No Content\r\n\r\n"),
    };
    assert!(gateway.handle_message(1, &head.to_bytes()).is_ok());
    assert!(gateway.may_send_priority(1), "the response is running");
    assert!(gateway.handle_message(1, &end.to_bytes()).is_ok());
    assert!(!gateway.may_send_priority(1), "the response has ended");

    let older = Capabilities::FEEDBACK | Capabilities::PREFETCH_CLASS;
    let (mut gateway, mut origin) = open_pair_offering(4, 4, older);
    gateway.handle_request_sent(1, 1).expect("valid request");
    assert!(!gateway.may_send_priority(1));
    assert!(
        origin
            .handle_message(1, &request(1, true).to_bytes())
            .is_ok()
    );
    let urgency_8 = Bytes::from_static(&[0x12, 0, 0, 0, 0, 0, 0, 1, 8, 0, 0, 0]);
    for (stream, bytes) in [
        (1, priority(1, 0, RequestClass::Demand).to_bytes()),
        (2, priority(1, 0, RequestClass::Demand).to_bytes()),
        (1, priority(7, 0, RequestClass::Demand).to_bytes()),
        (0, priority(1, 0, RequestClass::Demand).to_bytes()),
        (1, urgency_8),
    ] {
        assert_eq!(
            origin.handle_message(stream, &bytes),
            Err(Reaction::Ignore),
            "{bytes:?} on {stream}"
        );
    }
    assert_eq!(origin.open_requests(), 1, "the request is untouched");
}
