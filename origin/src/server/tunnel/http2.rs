//! The HTTP/2 side of a terminated tunnel (ALPN `h2`, with `tls.h2`),
//! served with the h2 crate directly: hyper 1.x's server cannot send a 1xx
//! response, and a page's `103 Early Hints` (`early_hints.rs`) is one.
//!
//! ```text
//!  TLS stream ─► h2::server::Connection ─accept─► one task per stream:
//!                 (polled here, drives          request body (≤ max_request_body,
//!                  every stream's I/O)           else 413), IncomingRequest,
//!                                                [page: Handler::pushes ─► 103]
//!                                                Handler::handle ─► HEADERS,
//!                                                DATA within the peer's window,
//!                                                RST_STREAM on a body error
//! ```
//!
//! The connection's settings are hyper's HTTP/2 server defaults, which the
//! hyper path used unchanged (see the constants). HTTP/1.1 stays with hyper
//! (`tunnel.rs`): Chromium ignores a 103 over HTTP/1.1.
//!
//! Invariants:
//! - The connection is polled (`accept`, then `poll_closed`) as long as a
//!   stream task may still send: h2 writes only while it is polled. The
//!   stream tasks live in a `JoinSet` dropped with the connection, so the
//!   tunnel's end (its task aborted) ends them all.
//! - A 103 goes before the final HEADERS or not at all: a page's hints are
//!   awaited at most [`HINTS_WAIT`] after its reply is ready.
//! - A body error resets that stream only (RST_STREAM INTERNAL_ERROR); the
//!   connection and its other streams go on.

use std::future::poll_fn;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::{Bytes, BytesMut};
use gateway_protocol::{Request, RequestClass, RequestId, Urgency};
use h2::server::SendResponse;
use h2::{Reason, RecvStream, SendStream};
use http::{HeaderName, HeaderValue, Method, StatusCode};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::task::JoinSet;

use super::early_hints;
use super::{HOP_BY_HOP, MAX_REPLY_FIELDS, render_request_head};
use crate::server::{BodySource, Handler, IncomingRequest, Reply};

// hyper 1.12's `proto::h2::server::Config::default()`, the settings the hyper
// path served HTTP/2 with (it set only a timer), each as the h2 builder's:
/// hyper `initial_stream_window_size` (1 MiB) → h2 `initial_window_size`.
const STREAM_WINDOW: u32 = 1 << 20;
/// hyper `initial_conn_window_size` (1 MiB) → h2
/// `initial_connection_window_size`.
const CONNECTION_WINDOW: u32 = 1 << 20;
/// hyper `max_frame_size` (16 KiB) → h2 `max_frame_size`.
const MAX_FRAME_SIZE: u32 = 16 << 10;
/// hyper `max_concurrent_streams` (200) → h2 `max_concurrent_streams`.
const MAX_CONCURRENT_STREAMS: u32 = 200;
/// hyper `max_send_buffer_size` (400 KiB) → h2 `max_send_buffer_size`:
/// bytes a stream may have queued in h2 beyond what the peer's window lets
/// out.
const MAX_SEND_BUFFER: usize = 400 << 10;
/// hyper `max_header_list_size` (16 KiB) → h2 `max_header_list_size`: the
/// largest request head accepted.
const MAX_HEADER_LIST: u32 = 16 << 10;
/// hyper `max_local_error_reset_streams` (1024) → h2's of the same name:
/// streams the peer makes us reset before the connection is closed
/// (RUSTSEC-2024-0003).
const MAX_LOCAL_ERROR_RESETS: usize = 1024;
// hyper `max_pending_accept_reset_streams` (unset: h2's default, 20): not
// set here either. hyper `keep_alive_interval` (unset: no PINGs) and its
// timer, which served only that: none here; the tunnel ends the connection.
// hyper `adaptive_window` (off), `enable_connect_protocol` (off): h2's
// defaults. hyper `date_header` (on): [`response_head`] adds Date.

/// Longest a page's reply waits for its hints once the reply is ready. A
/// kept closure answers in a few file-system calls; a new one (the page's
/// first request after a change) may take longer, and then the page goes
/// without hints rather than wait: its closure is still worked out and kept
/// for the next request.
pub(super) const HINTS_WAIT: Duration = Duration::from_millis(10);

/// Longest a handler's `pushes` is let run for a page's hints; its task
/// (which outlives a page that did not wait for it) then ends.
const PUSHES_LIMIT: Duration = Duration::from_secs(10);

/// What every stream of one tunnel's connection shares.
#[derive(Clone, Copy)]
pub(super) struct StreamContext {
    /// The tunnel's id and data stream (the requests' `id` and `stream`).
    pub(super) tunnel: (RequestId, u16),
    pub(super) max_request_body: u64,
    pub(super) early_hints: bool,
}

/// Serves one HTTP/2 connection until the peer closes it or it fails.
pub(super) async fn serve<H, S>(io: S, handler: Arc<H>, context: StreamContext)
where
    H: Handler,
    S: AsyncRead + AsyncWrite + Unpin,
{
    let (id, stream) = context.tunnel;
    let handshake = h2::server::Builder::new()
        .initial_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .max_frame_size(MAX_FRAME_SIZE)
        .max_concurrent_streams(MAX_CONCURRENT_STREAMS)
        .max_send_buffer_size(MAX_SEND_BUFFER)
        .max_header_list_size(MAX_HEADER_LIST)
        .max_local_error_reset_streams(Some(MAX_LOCAL_ERROR_RESETS))
        .handshake::<_, Bytes>(io);
    let mut connection = match handshake.await {
        Ok(connection) => connection,
        Err(e) => {
            tracing::debug!(id, stream, "HTTP/2 handshake failed: {e}");
            return;
        }
    };
    let mut streams = JoinSet::new();
    loop {
        tokio::select! {
            accepted = connection.accept() => match accepted {
                Some(Ok((request, respond))) => {
                    let handler = Arc::clone(&handler);
                    streams.spawn(serve_stream(handler, request, respond, context));
                }
                Some(Err(e)) => {
                    tracing::debug!(id, stream, "tunnel HTTP/2 connection ended: {e}");
                    return;
                }
                None => break,
            },
            Some(_) = streams.join_next(), if !streams.is_empty() => {}
        }
    }
    // GOAWAY received or the peer closed: the streams under way finish
    // while the connection is polled.
    if let Err(e) = poll_fn(|cx| connection.poll_closed(cx)).await {
        tracing::debug!(id, stream, "tunnel HTTP/2 connection ended: {e}");
    }
}

/// One request stream: its body, the handler, the 103 for a page, the reply.
async fn serve_stream<H: Handler>(
    handler: Arc<H>,
    request: http::Request<RecvStream>,
    mut respond: SendResponse<Bytes>,
    context: StreamContext,
) {
    let (id, stream) = context.tunnel;
    let (parts, mut recv) = request.into_parts();
    let body = match read_body(&mut recv, context.max_request_body).await {
        Ok(body) => body,
        Err(BodyError::TooLarge) => {
            send_status(&mut respond, StatusCode::PAYLOAD_TOO_LARGE);
            return;
        }
        Err(BodyError::Stream(e)) => {
            tracing::debug!(id, stream, "tunnel HTTP/2 request body: {e}");
            return;
        }
    };
    drop(recv);
    tracing::debug!(id, stream, method = %parts.method, target = %parts.uri, "tunnel request");
    let incoming = IncomingRequest {
        id,
        stream,
        request: Request {
            id,
            urgency: Urgency::DEFAULT,
            class: RequestClass::Demand,
            end: body.is_empty(),
            head: render_request_head(&parts),
        },
        body,
        tunnelled: true,
    };
    let reply = if context.early_hints && early_hints::is_page(&parts.method, &parts.headers) {
        let target = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        answer_with_hints(&handler, incoming, target, &mut respond).await
    } else {
        handler.handle(incoming).await
    };
    send_reply(reply, &parts.method, respond, context.tunnel).await;
}

/// The handler's reply to a page, with a 103 sent first when its hints come
/// in time. The hints are worked out beside the reply, in a task of their
/// own so that one cut short by [`HINTS_WAIT`] still finishes (and its
/// closure is kept for the next request), within [`PUSHES_LIMIT`].
async fn answer_with_hints<H: Handler>(
    handler: &Arc<H>,
    incoming: IncomingRequest,
    page_target: &str,
    respond: &mut SendResponse<Bytes>,
) -> Reply<H::Body> {
    let page = incoming.clone();
    let asked = Arc::clone(handler);
    let mut hints = tokio::spawn(async move {
        tokio::time::timeout(PUSHES_LIMIT, asked.pushes(&page))
            .await
            .unwrap_or_default()
    });
    let answer = handler.handle(incoming);
    tokio::pin!(answer);
    let (targets, reply) = tokio::select! {
        biased;
        targets = &mut hints => (targets.ok(), None),
        reply = &mut answer => {
            let targets = tokio::time::timeout(HINTS_WAIT, &mut hints).await;
            (targets.ok().and_then(Result::ok), Some(reply))
        }
    };
    let values = targets.map_or_else(Vec::new, |t| early_hints::link_values(&t, page_target));
    if !values.is_empty() {
        let mut hint = http::Response::new(());
        *hint.status_mut() = StatusCode::EARLY_HINTS;
        for value in values {
            hint.headers_mut().append(http::header::LINK, value);
        }
        if let Err(e) = respond.send_informational(hint) {
            tracing::debug!("tunnel HTTP/2 103: {e}");
        }
    }
    match reply {
        Some(reply) => reply,
        None => answer.await,
    }
}

/// Why a request body was not read.
enum BodyError {
    /// Longer than `max_request_body`: answered 413, as the hyper path's
    /// `Limited` body did.
    TooLarge,
    /// The peer reset the stream or the connection failed.
    Stream(h2::Error),
}

/// The whole request body, at most `limit` bytes; each DATA frame's window
/// is given back as it is read.
async fn read_body(recv: &mut RecvStream, limit: u64) -> Result<Bytes, BodyError> {
    let mut body = BytesMut::new();
    while let Some(data) = recv.data().await {
        let data = data.map_err(BodyError::Stream)?;
        let _ = recv.flow_control().release_capacity(data.len());
        if (body.len() + data.len()) as u64 > limit {
            return Err(BodyError::TooLarge);
        }
        body.extend_from_slice(&data);
    }
    Ok(body.freeze())
}

/// A response of `status` alone, END_STREAM on its HEADERS.
fn send_status(respond: &mut SendResponse<Bytes>, status: StatusCode) {
    let mut response = http::Response::new(());
    *response.status_mut() = status;
    add_date(response.headers_mut());
    let _ = respond.send_response(response, true);
}

/// The handler's reply on the stream: its head as HEADERS (END_STREAM when
/// no body may follow), then its body as DATA within the peer's windows. A
/// body error resets the stream (INTERNAL_ERROR); the peer's RST_STREAM
/// stops the body, which is dropped (the access log's `aborted`).
async fn send_reply<B: BodySource>(
    reply: Reply<B>,
    method: &Method,
    mut respond: SendResponse<Bytes>,
    (id, stream): (RequestId, u16),
) {
    let Some(response) = response_head(&reply.head) else {
        send_status(&mut respond, StatusCode::INTERNAL_SERVER_ERROR);
        return;
    };
    let status = response.status();
    let mut body = reply.body;
    let empty = method == Method::HEAD
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
        || reply.body_len == Some(0);
    let mut send = match respond.send_response(response, empty) {
        Ok(send) => send,
        Err(e) => {
            tracing::debug!(id, stream, "tunnel HTTP/2 response: {e}");
            return;
        }
    };
    if empty {
        // Read to its end (nothing, for these), so that the access log
        // writes `complete`.
        let _ = body.next_chunk(gateway_protocol::MAX_CHUNK).await;
        return;
    }
    loop {
        let next = tokio::select! {
            next = body.next_chunk(gateway_protocol::MAX_CHUNK) => next,
            reset = poll_fn(|cx| send.poll_reset(cx)) => {
                tracing::debug!(id, stream, "tunnel HTTP/2 stream reset by the browser: {reset:?}");
                return;
            }
        };
        let sent = match next {
            Ok(Some(chunk)) => send_data(&mut send, chunk).await,
            Ok(None) => {
                if let Err(e) = send.send_data(Bytes::new(), true) {
                    tracing::debug!(id, stream, "tunnel HTTP/2 body: {e}");
                }
                return;
            }
            Err(e) => {
                tracing::debug!(id, stream, "tunnel HTTP/2 body failed: {e}");
                send.send_reset(Reason::INTERNAL_ERROR);
                return;
            }
        };
        if let Err(e) = sent {
            tracing::debug!(id, stream, "tunnel HTTP/2 body: {e}");
            return;
        }
    }
}

/// Sends `chunk` as DATA as the peer's windows open: capacity is reserved,
/// then each part h2 assigns goes out.
async fn send_data(send: &mut SendStream<Bytes>, mut chunk: Bytes) -> Result<(), h2::Error> {
    while !chunk.is_empty() {
        send.reserve_capacity(chunk.len());
        match poll_fn(|cx| send.poll_capacity(cx)).await {
            Some(Ok(0)) => {}
            Some(Ok(n)) => send.send_data(chunk.split_to(n.min(chunk.len())), false)?,
            Some(Err(e)) => return Err(e),
            None => return Err(Reason::STREAM_CLOSED.into()),
        }
    }
    Ok(())
}

/// The handler's rendered head as an HTTP/2 response head: hop-by-hop and
/// connection-specific fields dropped (RFC 9113 section 8.2.2), Date added
/// when missing (as hyper did). `None` when it does not parse.
fn response_head(head: &[u8]) -> Option<http::Response<()>> {
    let mut fields = [httparse::EMPTY_HEADER; MAX_REPLY_FIELDS];
    let mut parsed = httparse::Response::new(&mut fields);
    match parsed.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        _ => return None,
    }
    let status = StatusCode::from_u16(parsed.code?).ok()?;
    if status.is_informational() {
        return None;
    }
    let mut response = http::Response::new(());
    *response.status_mut() = status;
    let headers = response.headers_mut();
    for field in parsed.headers.iter() {
        let specific = HOP_BY_HOP
            .iter()
            .chain(&["proxy-connection", "te"])
            .any(|h| field.name.eq_ignore_ascii_case(h));
        if specific {
            continue;
        }
        let name = HeaderName::from_bytes(field.name.as_bytes()).ok()?;
        headers.append(name, HeaderValue::from_bytes(field.value).ok()?);
    }
    add_date(headers);
    Some(response)
}

fn add_date(headers: &mut http::HeaderMap) {
    if !headers.contains_key(http::header::DATE)
        && let Ok(date) = HeaderValue::from_str(&httpdate::fmt_http_date(SystemTime::now()))
    {
        headers.insert(http::header::DATE, date);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_head_becomes_an_http2_head() {
        let head = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nConnection: keep-alive\r\n\
            Keep-Alive: timeout=5\r\nTransfer-Encoding: chunked\r\nTE: trailers\r\n\
            Set-Cookie: a=1\r\nSet-Cookie: b=2\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT\r\n\r\n";
        let response = response_head(head).expect("parses");
        assert_eq!(response.status(), StatusCode::OK);
        let names: Vec<_> = response.headers().keys().map(|k| k.as_str()).collect();
        assert_eq!(names, ["content-type", "set-cookie", "date"]);
        assert_eq!(response.headers().get_all("set-cookie").iter().count(), 2);
        assert_eq!(response.headers()["date"], "Sun, 06 Nov 1994 08:49:37 GMT");
    }

    #[test]
    fn a_date_is_added_and_bad_heads_are_refused() {
        let response = response_head(b"HTTP/1.1 404 Not Found\r\n\r\n").expect("parses");
        assert_eq!(response.status(), StatusCode::NOT_FOUND);
        assert!(response.headers().contains_key("date"));
        assert!(
            response_head(b"HTTP/1.1 200 OK\r\n").is_none(),
            "incomplete"
        );
        assert!(response_head(b"HTTP/1.1 103 Early Hints\r\n\r\n").is_none());
        assert!(response_head(b"garbage\r\n\r\n").is_none());
    }
}
