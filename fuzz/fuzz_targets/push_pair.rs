//! Two honest sessions, a gateway and an origin that both push, whose messages
//! cross in flight: each stream delivers in order, but the input decides which
//! stream delivers next, so a promise can overtake the page's CANCEL, a grant,
//! or another push's end. Whatever the interleaving, a push that the origin's
//! session allowed is never a protocol error, a TOO_LARGE or a GOAWAY at the
//! gateway: the only refusal is REFUSED, for a page the gateway ended or
//! forgot. Each side answers the other as docs/protocol.md says.
#![no_main]

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

use bytes::Bytes;
use gateway_protocol::{
    Capabilities, ErrorCode, MAX_PUSH_PAGES, Message, PUSH_ID_BIT, PushBudget, PushPromise,
    Reaction, Request, RequestClass, RequestId, Role, Session, SessionConfig, Urgency,
};
use libfuzzer_sys::fuzz_target;

const STREAMS: u16 = 4;

struct Link {
    /// Per stream, messages on their way, oldest first.
    queues: Vec<VecDeque<Bytes>>,
}

impl Link {
    fn new() -> Self {
        Self {
            queues: vec![VecDeque::new(); usize::from(STREAMS) + 1],
        }
    }

    fn send(&mut self, stream: u16, message: &Message) {
        self.queues[usize::from(stream)].push_back(message.to_bytes());
    }

    fn next(&mut self, stream: u16) -> Option<Bytes> {
        self.queues[usize::from(stream)].pop_front()
    }
}

struct OriginPush {
    stream: u16,
    body: u64,
}

fn reset(id: RequestId, code: ErrorCode) -> Message {
    Message::Reset {
        id,
        code,
        reason: String::new(),
    }
}

fuzz_target!(|data: &[u8]| {
    let config = SessionConfig {
        data_streams: STREAMS,
        capabilities: SessionConfig::default().capabilities | Capabilities::PUSH,
        ..SessionConfig::default()
    };
    let mut gateway = Session::new(Role::Gateway, config.clone());
    let mut origin = Session::new(Role::Origin, config);
    assert!(
        origin
            .handle_message(0, &gateway.hello().to_bytes())
            .is_ok()
    );
    assert!(
        gateway
            .handle_message(0, &origin.hello().to_bytes())
            .is_ok()
    );
    let (mut to_origin, mut to_gateway) = (Link::new(), Link::new());
    let mut next_page: RequestId = 1;
    let mut next_push: RequestId = PUSH_ID_BIT | 1;
    let mut granted: u32 = 0;
    // Pages the gateway has open and pages the origin has read and not
    // answered (id to stream), and the origin's open pushes.
    let mut pages: HashMap<RequestId, u16> = HashMap::new();
    let mut origin_pages: BTreeMap<RequestId, u16> = BTreeMap::new();
    let mut pushes: HashMap<RequestId, OriginPush> = HashMap::new();
    // Pages the gateway cancelled, and how many budgets it sent.
    let mut cancelled: HashSet<RequestId> = HashSet::new();
    let mut budgets = 0;

    for pair in data.chunks(2) {
        let (op, arg) = (pair[0], pair.get(1).copied().unwrap_or(0));
        let stream = u16::from(arg) % STREAMS + 1;
        let pick = |ids: Vec<RequestId>| -> Option<RequestId> {
            (!ids.is_empty()).then(|| ids[usize::from(arg) % ids.len()])
        };
        match op % 12 {
            // The gateway sends a page, and invites pushes for most.
            0 => {
                let id = next_page;
                next_page += 1;
                if gateway.handle_request_sent(id, stream).is_err() {
                    continue;
                }
                pages.insert(id, stream);
                to_origin.send(
                    stream,
                    &Message::Request(Request {
                        id,
                        urgency: Urgency::DEFAULT,
                        class: RequestClass::Demand,
                        end: true,
                        head: Bytes::from_static(b"GET / HTTP/1.1\r\nHost: site.test\r\n\r\n"),
                    }),
                );
                if arg & 0x80 == 0 {
                    let budget = PushBudget {
                        page: id,
                        max_pushes: u16::from(arg % 5),
                        max_bytes: u32::from(arg) * 16,
                        held: vec![],
                    };
                    if gateway
                        .handle_push_budget_sent(&budget, stream, b"site.test")
                        .is_ok()
                    {
                        budgets += 1;
                        to_origin.send(stream, &Message::PushBudget(budget));
                    }
                }
            }
            // The gateway grants pushes.
            1 => {
                granted = granted.saturating_add(u32::from(arg % 4));
                gateway.handle_max_pushes_sent(granted);
                to_origin.send(0, &Message::MaxPushes { max: granted });
            }
            // The origin pushes for a page it has read, if its session allows.
            2 => {
                let Some(page) = pick(origin_pages.keys().copied().collect()) else {
                    continue;
                };
                if origin.push_allowance(page).is_none() {
                    assert!(origin.handle_push_sent(next_push, page, stream).is_err());
                    continue;
                }
                origin
                    .handle_push_sent(next_push, page, stream)
                    .expect("the allowance said yes");
                to_gateway.send(
                    stream,
                    &Message::PushPromise(PushPromise {
                        id: next_push,
                        page,
                        head: Bytes::from_static(
                            b"GET /a.css HTTP/1.1\r\nHost: site.test\r\nAccept: text/css\r\n\r\n",
                        ),
                    }),
                );
                to_gateway.send(
                    stream,
                    &Message::ResponseHead {
                        id: next_push,
                        head: Bytes::from_static(b"HTTP/1.1 200 OK\r\n\r\n"),
                    },
                );
                pushes.insert(next_push, OriginPush { stream, body: 0 });
                next_push += 1;
            }
            // The origin sends a chunk of a push, within the page's budget.
            3 => {
                let Some(id) = pick(pushes.keys().copied().collect()) else {
                    continue;
                };
                let len = usize::from(arg) * 4;
                if origin.handle_push_body_sent(id, len).is_ok() {
                    if let Some(p) = pushes.get_mut(&id) {
                        p.body += len as u64;
                        to_gateway.send(
                            p.stream,
                            &Message::ResponseBody {
                                id,
                                data: Bytes::from(vec![0; len]),
                            },
                        );
                    }
                }
            }
            // The origin ends a push.
            4 => {
                let Some(id) = pick(pushes.keys().copied().collect()) else {
                    continue;
                };
                if let Some(p) = pushes.remove(&id) {
                    to_gateway.send(
                        p.stream,
                        &Message::ResponseEnd {
                            id,
                            body_len: p.body,
                        },
                    );
                    origin.handle_request_finished(id);
                }
            }
            // The origin answers a page (its pushes may still come).
            5 => {
                let Some(page) = pick(origin_pages.keys().copied().collect()) else {
                    continue;
                };
                if let Some(stream) = origin_pages.remove(&page) {
                    to_gateway.send(
                        stream,
                        &Message::ResponseHead {
                            id: page,
                            head: Bytes::from_static(b"HTTP/1.1 200 OK\r\n\r\n"),
                        },
                    );
                    to_gateway.send(
                        stream,
                        &Message::ResponseEnd {
                            id: page,
                            body_len: 0,
                        },
                    );
                }
                origin.handle_request_finished(page);
            }
            // The gateway cancels a page, or a push, by CANCEL on stream 0.
            6 | 7 => {
                let id = if op % 12 == 6 {
                    pick(pages.keys().copied().collect())
                } else {
                    Some(next_push.saturating_sub(u32::from(arg % 4) + 1))
                        .filter(|id| *id > PUSH_ID_BIT)
                };
                let Some(id) = id else { continue };
                cancelled.insert(id);
                pages.remove(&id);
                gateway.handle_request_finished(id);
                to_origin.send(0, &Message::Cancel { id });
            }
            // Deliver the next message of one stream to the origin.
            8 | 9 => {
                let Some(bytes) = to_origin.next(u16::from(arg) % (STREAMS + 1)) else {
                    continue;
                };
                let on = u16::from(arg) % (STREAMS + 1);
                match origin.handle_message(on, &bytes) {
                    Ok(Message::Request(request)) => {
                        origin_pages.insert(request.id, on);
                    }
                    Ok(message @ (Message::Cancel { .. } | Message::Reset { .. })) => {
                        // The request or push stops; a CANCEL of one still
                        // running is answered with RESET CANCELLED. A page's
                        // pushes stop with it, silently.
                        let (id, cancel) = (
                            message.request_id(),
                            matches!(message, Message::Cancel { .. }),
                        );
                        let running = pushes
                            .remove(&id)
                            .map(|p| p.stream)
                            .or_else(|| origin_pages.remove(&id));
                        if let (Some(stream), true) = (running, cancel) {
                            to_gateway.send(stream, &reset(id, ErrorCode::Cancelled));
                        }
                        for push in origin.pushes_of(id) {
                            pushes.remove(&push);
                            origin.handle_request_finished(push);
                        }
                        origin.handle_request_finished(id);
                    }
                    Ok(_) | Err(Reaction::Ignore) => {}
                    Err(reaction) => panic!("the origin refused an honest gateway: {reaction:?}"),
                }
            }
            // Deliver the next message of one stream to the gateway.
            _ => {
                let on = u16::from(arg) % (STREAMS + 1);
                let Some(bytes) = to_gateway.next(on) else {
                    continue;
                };
                match gateway.handle_message(on, &bytes) {
                    Ok(Message::ResponseEnd { id, .. }) | Ok(Message::Reset { id, .. }) => {
                        pages.remove(&id);
                    }
                    Ok(_) | Err(Reaction::Ignore) => {}
                    Err(Reaction::Reset {
                        id,
                        code: ErrorCode::Refused,
                    }) => {
                        // Only a promise for a page the gateway ended (or,
                        // beyond MAX_PUSH_PAGES budgets, forgot).
                        let Ok(Message::PushPromise(promise)) = Message::decode(&bytes) else {
                            panic!("REFUSED for something other than a promise");
                        };
                        assert!(
                            cancelled.contains(&promise.page) || budgets > MAX_PUSH_PAGES,
                            "a push for live page {} refused",
                            promise.page
                        );
                        to_origin.send(on, &reset(id, ErrorCode::Refused));
                    }
                    Err(reaction) => panic!("the gateway refused an honest origin: {reaction:?}"),
                }
            }
        }
        assert!(gateway.open_pushes() <= gateway.open_requests());
        assert!(origin.open_pushes() <= origin.open_requests());
    }
});
