//! STUB until the real module lands from its branch: the agreed API only.
#![allow(dead_code, unused_variables, missing_docs, reason = "stub")]

use std::time::Duration;

use bytes::Bytes;

use crate::config::OriginEntry;

#[derive(Clone, Debug)]
pub struct OriginLink {
    name: String,
}

#[derive(Debug)]
pub struct StreamPin;

#[derive(Debug)]
pub struct OriginRequest {
    pub head: Bytes,
    pub body: Bytes,
    pub urgency: u8,
    pub class: gateway_protocol::RequestClass,
}

#[derive(Debug)]
pub struct ResponseBody;

impl http_body::Body for ResponseBody {
    type Data = Bytes;
    type Error = LinkError;
    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, LinkError>>> {
        std::task::Poll::Ready(None)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    #[error("unavailable")]
    Unavailable(String),
}

impl LinkError {
    pub fn nothing_sent(&self) -> bool {
        true
    }
}

impl OriginLink {
    pub fn spawn(entry: &OriginEntry) -> OriginLink {
        Self {
            name: entry.name.clone(),
        }
    }
    pub fn name(&self) -> &str {
        &self.name
    }
    pub fn is_up(&self) -> bool {
        false
    }
    pub async fn wait_up(&self, timeout: Duration) -> bool {
        false
    }
    pub fn pin(&self) -> StreamPin {
        StreamPin
    }
    pub async fn request(
        &self,
        pin: &StreamPin,
        req: OriginRequest,
    ) -> Result<http::Response<ResponseBody>, LinkError> {
        Err(LinkError::Unavailable("stub".into()))
    }
    pub async fn shutdown(&self) {}
}
