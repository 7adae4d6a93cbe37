//! A minimal gateway for tests: the real protocol session over a real
//! association, issuing requests and collecting responses.

#![allow(
    dead_code,
    reason = "a module of each test binary; each uses a different part"
)]

use std::collections::HashMap;

use anyhow::{Result, bail};
use bytes::Bytes;
use gateway_protocol::{
    Capabilities, ErrorCode, Message, PushBudget, PushPromise, Reaction, Request, RequestClass,
    RequestId, Session, SessionConfig, Urgency,
};
use gateway_transport::Association;
use gateway_transport::hello::open_gateway_session;

pub(crate) mod tunnel;

/// One response as the gateway saw it.
#[derive(Debug, Default)]
pub(crate) struct Seen {
    pub(crate) head: Option<Bytes>,
    pub(crate) body: Vec<u8>,
    pub(crate) end: Option<u64>,
    pub(crate) reset: Option<ErrorCode>,
}

/// A minimal gateway: the real protocol session over a real association.
pub(crate) struct TestGateway {
    pub(crate) assoc: Association,
    pub(crate) session: Session,
    next_id: RequestId,
    pub(crate) seen: HashMap<RequestId, Seen>,
    /// Ids in the order their RESPONSE_END (or RESET) arrived.
    pub(crate) finished: Vec<RequestId>,
    /// PUSH_PROMISEs in the order they arrived.
    pub(crate) promises: Vec<PushPromise>,
    /// The stream each push's promise came on.
    pub(crate) streams: HashMap<RequestId, u16>,
}

impl TestGateway {
    pub(crate) async fn open(assoc: Association) -> Result<Self> {
        Self::open_with(assoc, SessionConfig::default().capabilities).await
    }

    /// A gateway announcing `capabilities`.
    pub(crate) async fn open_with(assoc: Association, capabilities: Capabilities) -> Result<Self> {
        let session = open_gateway_session(&assoc, capabilities).await?;
        Ok(Self {
            assoc,
            session,
            next_id: 1,
            seen: HashMap::new(),
            finished: Vec::new(),
            promises: Vec::new(),
            streams: HashMap::new(),
        })
    }

    /// Grants `max` pushes in all (MAX_PUSHES).
    pub(crate) async fn max_pushes(&mut self, max: u32) -> Result<()> {
        self.session.handle_max_pushes_sent(max);
        self.assoc
            .send(0, Message::MaxPushes { max }.to_bytes())
            .await?;
        Ok(())
    }

    /// Sends `budget` on `stream` for its page, whose Host is `host`.
    pub(crate) async fn push_budget(
        &mut self,
        stream: u16,
        host: &str,
        budget: PushBudget,
    ) -> Result<()> {
        self.session
            .handle_push_budget_sent(&budget, stream, host.as_bytes())
            .map_err(|e| anyhow::anyhow!("budget refused: {e:?}"))?;
        self.assoc
            .send(stream, Message::PushBudget(budget).to_bytes())
            .await?;
        Ok(())
    }

    pub(crate) async fn request(
        &mut self,
        stream: u16,
        path: &str,
        class: RequestClass,
    ) -> Result<RequestId> {
        let head = format!("GET {path} HTTP/1.1\r\nhost: test\r\n\r\n");
        self.request_head(stream, head, class).await
    }

    /// Sends `head` (a whole HTTP/1.1 request head) as a REQUEST without body.
    pub(crate) async fn request_head(
        &mut self,
        stream: u16,
        head: String,
        class: RequestClass,
    ) -> Result<RequestId> {
        let id = self.next_id;
        self.next_id += 1;
        self.session
            .handle_request_sent(id, stream)
            .map_err(|e| anyhow::anyhow!("{e:?}"))?;
        let request = Message::Request(Request {
            id,
            urgency: Urgency::DEFAULT,
            class,
            end: true,
            head: Bytes::from(head),
        });
        self.assoc.send(stream, request.to_bytes()).await?;
        self.seen.insert(id, Seen::default());
        Ok(id)
    }

    /// Sends a REQUEST for `path` whose body is still to come (no END); the
    /// caller sends the REQUEST_BODY messages.
    pub(crate) async fn request_with_body_to_follow(
        &mut self,
        stream: u16,
        path: &str,
        class: RequestClass,
    ) -> Result<RequestId> {
        let id = self.next_id;
        self.next_id += 1;
        self.session
            .handle_request_sent(id, stream)
            .map_err(|e| anyhow::anyhow!("{e:?}"))?;
        let request = Message::Request(Request {
            id,
            urgency: Urgency::DEFAULT,
            class,
            end: false,
            head: Bytes::from(format!("POST {path} HTTP/1.1\r\nhost: test\r\n\r\n")),
        });
        self.assoc.send(stream, request.to_bytes()).await?;
        self.seen.insert(id, Seen::default());
        Ok(id)
    }

    /// Handles one message; returns the id it concerned.
    pub(crate) async fn receive_one(&mut self) -> Result<Option<RequestId>> {
        let m = self.assoc.recv().await?;
        let message = match self.session.handle_message(m.stream, &m.data) {
            Ok(message) => message,
            // Late messages for what this side ended.
            Err(Reaction::Ignore) => return Ok(None),
            Err(reaction) => bail!("gateway session refused a message: {reaction:?}"),
        };
        let id = message.request_id();
        let seen = self.seen.entry(id).or_default();
        match message {
            Message::PushPromise(promise) => {
                self.streams.insert(promise.id, m.stream);
                self.promises.push(promise);
            }
            Message::ResponseHead { head, .. } => seen.head = Some(head),
            Message::ResponseBody { data, .. } => seen.body.extend_from_slice(&data),
            Message::ResponseEnd { body_len, .. } => {
                seen.end = Some(body_len);
                self.finished.push(id);
            }
            Message::Reset { code, .. } => {
                seen.reset = Some(code);
                self.finished.push(id);
            }
            other => bail!("unexpected {other:?}"),
        }
        Ok(Some(id))
    }

    /// PING on stream 0 and wait for its answer (nothing else may come first):
    /// the origin has handled every control message sent before it.
    pub(crate) async fn ping(&mut self, opaque: u64) -> Result<()> {
        let ping = Message::Ping { ack: false, opaque };
        self.assoc.send(0, ping.to_bytes()).await?;
        let m = self.assoc.recv().await?;
        match self.session.handle_message(m.stream, &m.data) {
            Ok(Message::Ping {
                ack: true,
                opaque: echoed,
            }) if echoed == opaque => Ok(()),
            other => bail!("expected the PING answer, got {other:?}"),
        }
    }

    pub(crate) async fn until_finished(&mut self, count: usize) -> Result<()> {
        while self.finished.len() < count {
            self.receive_one().await?;
        }
        Ok(())
    }
}
