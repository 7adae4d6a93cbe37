//! The origin's request handler: parses the head and answers from the document
//! root. (Reverse-proxy mode joins here as a second source.)

use std::time::SystemTime;

use bytes::Bytes;

use crate::files::{FileBody, StaticFiles};
use crate::http::{RequestHead, ResponseHead};
use crate::server::{BodySource, Handler, IncomingRequest, Reply};

/// Answers requests from a document root.
#[derive(Debug)]
pub struct Service {
    files: StaticFiles,
}

impl Service {
    /// A service over an opened document root.
    pub fn new(files: StaticFiles) -> Self {
        Self { files }
    }
}

/// The body of any reply the service gives.
#[derive(Debug)]
pub enum ServiceBody {
    /// A file region or a generated body.
    File(FileBody),
}

impl BodySource for ServiceBody {
    async fn next_chunk(&mut self, max: usize) -> std::io::Result<Option<Bytes>> {
        match self {
            ServiceBody::File(body) => body.read_chunk(max).await,
        }
    }
}

fn reply(mut head: ResponseHead, body: FileBody) -> Reply<ServiceBody> {
    head.push_date(SystemTime::now());
    Reply {
        head: head.render(),
        body_len: Some(body.remaining()),
        body: ServiceBody::File(body),
    }
}

impl Handler for Service {
    type Body = ServiceBody;

    async fn handle(&self, request: IncomingRequest) -> Reply<ServiceBody> {
        let head = match RequestHead::parse(&request.request.head) {
            Ok(head) => head,
            Err(e) => {
                tracing::debug!(id = request.id, error = %e, "bad request head");
                let (head, body) = e.response();
                return reply(head, FileBody::Bytes(body));
            }
        };
        let response = self.files.respond(&head).await;
        tracing::debug!(
            id = request.id,
            stream = request.stream,
            method = %head.method,
            target = %head.target,
            status = response.head.status.as_u16(),
            "request"
        );
        reply(response.head, response.body)
    }
}
