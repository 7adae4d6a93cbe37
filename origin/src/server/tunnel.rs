//! One TLS tunnel at the origin (docs/protocol.md, "Tunnels"): the task that
//! stands where a response's producer stands for a request.
//!
//! ```text
//!  driver ──Inbound (TUNNEL_DATA)──► pump ──► TLS end (rustls) ──► hyper HTTP/1.1,
//!     ▲                               │        or upstream TCP     or h2 (http2.rs)
//!     └──Produced::Tunnel*, Credit────┘                                   │
//!                                                          Handler (files, proxy)
//! ```
//!
//! HTTP/2 (ALPN `h2`, offered with `tls.h2`) is served with the h2 crate
//! (`tunnel/http2.rs`), not hyper, so that with `tls.early_hints` a page is
//! preceded by a `103 Early Hints` naming what it will need
//! (`tunnel/early_hints.rs`).
//!
//! The pump's output goes through the same permits and scheduler as response
//! chunks, so a tunnel is scheduled as demand beside the plain responses; its
//! input is bounded by the gateway's window (TUNNEL_CREDIT is granted only for
//! bytes written into the TLS end or the upstream).

use std::convert::Infallible;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

mod early_hints;
mod http2;

use bytes::Bytes;
use gateway_protocol::{Request, RequestClass, RequestId, Urgency};
use http_body::Frame;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream};
use tokio::sync::{Semaphore, mpsc};

use super::{BodySource, Event, Handler, IncomingRequest, Produced, Reply};
use crate::tls::{TunnelRoute, Tunnels};

/// Bytes buffered in the in-memory pipe between the pump and the TLS end.
const PIPE_BYTES: usize = 64 * 1024;
/// Longest wait for a passthrough upstream's TCP handshake.
const UPSTREAM_CONNECT_LIMIT: Duration = Duration::from_secs(5);
/// Response chunks the body puller may read ahead of hyper's writes.
const BODY_AHEAD: usize = 2;
/// Fields parsed from a handler's response head (as the gateway's limit).
const MAX_REPLY_FIELDS: usize = 128;
/// Fields of a handler's head that describe its HTTP/1.1 connection, not
/// the response: dropped, the server in front frames the response itself.
const HOP_BY_HOP: [&str; 4] = ["connection", "keep-alive", "transfer-encoding", "upgrade"];

/// What the driver forwards to a tunnel from the gateway.
#[derive(Debug)]
pub(super) enum Inbound {
    /// TUNNEL_DATA bytes.
    Data(Bytes),
    /// TUNNEL_DATA with END: the browser closed its half.
    End,
}

/// Where a tunnel task leaves its output: the driver's event queue, at most
/// `CHUNKS_AHEAD` chunks ahead of the sender (the permits).
pub(super) struct TunnelSink {
    pub(super) id: RequestId,
    pub(super) events: mpsc::Sender<Event>,
    pub(super) permits: Arc<Semaphore>,
}

impl TunnelSink {
    async fn produce(&self, item: Produced) -> bool {
        match self.permits.acquire().await {
            Ok(permit) => permit.forget(),
            Err(_) => return false,
        }
        self.events
            .send(Event::Produced(self.id, item))
            .await
            .is_ok()
    }

    async fn credit(&self, bytes: u32) -> bool {
        self.events
            .send(Event::Credit(self.id, bytes))
            .await
            .is_ok()
    }
}

/// What one tunnel task needs besides its sink and inbound queue.
pub(super) struct TunnelTask<H> {
    pub(super) route: TunnelRoute,
    pub(super) tunnels: Tunnels,
    pub(super) handler: Arc<H>,
    pub(super) stream: u16,
    pub(super) chunk_size: usize,
    pub(super) max_request_body: u64,
}

/// Runs one tunnel until both directions are done or it fails.
pub(super) async fn run<H: Handler>(
    task: TunnelTask<H>,
    inbound: mpsc::UnboundedReceiver<Inbound>,
    sink: TunnelSink,
) {
    let id = sink.id;
    match task.route {
        TunnelRoute::Terminate => {
            let (near, far) = tokio::io::duplex(PIPE_BYTES);
            let acceptor = task.tunnels.acceptor().clone();
            let context = http2::StreamContext {
                tunnel: (id, task.stream),
                max_request_body: task.max_request_body,
                early_hints: task.tunnels.early_hints(),
            };
            let server = tokio::spawn(serve_tls(acceptor, far, task.handler, context));
            pump(near, inbound, &sink, task.chunk_size).await;
            server.abort();
        }
        TunnelRoute::Passthrough(upstream) => {
            let connect = tokio::net::TcpStream::connect(upstream);
            match tokio::time::timeout(UPSTREAM_CONNECT_LIMIT, connect).await {
                Ok(Ok(tcp)) => {
                    let _ = tcp.set_nodelay(true);
                    pump(tcp, inbound, &sink, task.chunk_size).await;
                }
                Ok(Err(e)) => {
                    let why = format!("passthrough upstream {upstream}: {e}");
                    sink.produce(Produced::Failed(why)).await;
                }
                Err(_) => {
                    let why = format!("passthrough upstream {upstream}: no answer");
                    sink.produce(Produced::Failed(why)).await;
                }
            }
        }
    }
}

/// Moves bytes between the tunnel and `io` both ways. The read side ends the
/// tunnel's output (END on EOF, RESET on an error); a write error only stops
/// the writes (the read side then sees the end).
async fn pump<S: AsyncRead + AsyncWrite>(
    io: S,
    mut inbound: mpsc::UnboundedReceiver<Inbound>,
    sink: &TunnelSink,
    chunk_size: usize,
) {
    let (mut reader, mut writer) = tokio::io::split(io);
    let writes = async {
        let mut broken = false;
        while let Some(item) = inbound.recv().await {
            match item {
                Inbound::Data(data) => {
                    if !broken && let Err(e) = writer.write_all(&data).await {
                        tracing::debug!(id = sink.id, "tunnel write failed: {e}");
                        broken = true;
                    }
                    // Granted even for bytes dropped after a failure: the window
                    // bounds memory, and these are gone.
                    if !sink.credit(data.len() as u32).await {
                        return;
                    }
                }
                Inbound::End => {
                    let _ = writer.shutdown().await;
                }
            }
        }
    };
    let reads = async {
        let mut buf = vec![0; chunk_size.max(1)];
        loop {
            let item = match reader.read(&mut buf).await {
                Ok(0) => Produced::TunnelEnd,
                Ok(n) => Produced::TunnelData(Bytes::copy_from_slice(&buf[..n])),
                Err(e) => Produced::Failed(format!("tunnel read failed: {e}")),
            };
            let last = !matches!(item, Produced::TunnelData(_));
            if !sink.produce(item).await || last {
                return;
            }
        }
    };
    tokio::join!(writes, reads);
}

/// The TLS end: rustls's handshake, then hyper's HTTP/1.1 server, or the
/// h2 server of `http2.rs` when the browser chose `h2` by ALPN (which
/// `tls.h2` offers), whose every request goes to `handler` as if it had come
/// as a REQUEST on the tunnel's stream.
async fn serve_tls<H: Handler>(
    acceptor: tokio_rustls::TlsAcceptor,
    io: DuplexStream,
    handler: Arc<H>,
    context: http2::StreamContext,
) {
    let (id, stream) = context.tunnel;
    let max_request_body = context.max_request_body;
    let tls = match acceptor.accept(io).await {
        Ok(tls) => tls,
        Err(e) => {
            tracing::debug!(id, stream, "TLS handshake failed: {e}");
            return;
        }
    };
    if tls.get_ref().1.alpn_protocol() == Some(b"h2") {
        http2::serve(tls, handler, context).await;
        return;
    }
    let service = hyper::service::service_fn(move |request| {
        let handler = Arc::clone(&handler);
        async move {
            let response = answer(&*handler, (id, stream), request, max_request_body).await;
            Ok::<_, Infallible>(response)
        }
    });
    let served = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .serve_connection(TokioIo::new(tls), service)
        .await;
    if let Err(e) = served {
        tracing::debug!(id, stream, "tunnel HTTP connection ended: {e}");
    }
}

/// One decrypted request through the handler.
async fn answer<H: Handler>(
    handler: &H,
    (id, stream): (RequestId, u16),
    request: hyper::Request<Incoming>,
    max_request_body: u64,
) -> hyper::Response<ReplyBody> {
    let (parts, body) = request.into_parts();
    let limit = usize::try_from(max_request_body).unwrap_or(usize::MAX);
    let body = match Limited::new(body, limit).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => return status_only(hyper::StatusCode::PAYLOAD_TOO_LARGE),
    };
    let head = render_request_head(&parts);
    tracing::debug!(id, stream, method = %parts.method, target = %parts.uri, "tunnel request");
    let request = Request {
        id,
        urgency: Urgency::DEFAULT,
        class: RequestClass::Demand,
        end: body.is_empty(),
        head,
    };
    let reply = handler
        .handle(IncomingRequest {
            id,
            stream,
            request,
            body,
            tunnelled: true,
        })
        .await;
    response_from(reply)
}

/// The request as the protocol's REQUEST head would carry it. An HTTP/2
/// request's target is its `:path`, and its `:authority` becomes the Host
/// field (RFC 9113 section 8.3.1), so the handler sees what HTTP/1.1 would
/// have sent.
fn render_request_head(parts: &http::request::Parts) -> Bytes {
    let h2 = parts.version == http::Version::HTTP_2;
    let mut head = if h2 {
        let target = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        let mut head = format!("{} {target} HTTP/1.1\r\n", parts.method).into_bytes();
        if let Some(authority) = parts.uri.authority()
            && !parts.headers.contains_key(http::header::HOST)
        {
            head.extend_from_slice(format!("host: {authority}\r\n").as_bytes());
        }
        head
    } else {
        format!("{} {} HTTP/1.1\r\n", parts.method, parts.uri).into_bytes()
    };
    for (name, value) in &parts.headers {
        head.extend_from_slice(name.as_str().as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(value.as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    head.extend_from_slice(b"\r\n");
    Bytes::from(head)
}

/// The handler's rendered head and body as a hyper response; hyper frames it
/// (Content-Length as given, else chunked). Hop-by-hop fields are dropped.
fn response_from<B: BodySource>(reply: Reply<B>) -> hyper::Response<ReplyBody> {
    let mut fields = [httparse::EMPTY_HEADER; MAX_REPLY_FIELDS];
    let mut parsed = httparse::Response::new(&mut fields);
    let status = match parsed.parse(&reply.head) {
        Ok(httparse::Status::Complete(_)) => parsed.code.unwrap_or(500),
        _ => return status_only(hyper::StatusCode::INTERNAL_SERVER_ERROR),
    };
    let mut builder = hyper::Response::builder().status(status);
    for field in parsed.headers.iter() {
        let hop_by_hop = HOP_BY_HOP
            .iter()
            .any(|h| field.name.eq_ignore_ascii_case(h));
        if !hop_by_hop {
            builder = builder.header(field.name, field.value);
        }
    }
    let (tx, rx) = mpsc::channel(BODY_AHEAD);
    let mut body = reply.body;
    tokio::spawn(async move {
        loop {
            let next = body.next_chunk(gateway_protocol::MAX_CHUNK).await;
            let last = !matches!(next, Ok(Some(_)));
            let item = match next {
                Ok(Some(chunk)) => Ok(chunk),
                Ok(None) => return,
                Err(e) => Err(e),
            };
            if tx.send(item).await.is_err() || last {
                return;
            }
        }
    });
    builder
        .body(ReplyBody { rx })
        .unwrap_or_else(|_| status_only(hyper::StatusCode::INTERNAL_SERVER_ERROR))
}

fn status_only(status: hyper::StatusCode) -> hyper::Response<ReplyBody> {
    let (_, rx) = mpsc::channel(1);
    let mut response = hyper::Response::new(ReplyBody { rx });
    *response.status_mut() = status;
    response
}

/// A handler's body as hyper pulls it.
pub(super) struct ReplyBody {
    rx: mpsc::Receiver<io::Result<Bytes>>,
}

impl http_body::Body for ReplyBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        self.rx
            .poll_recv(cx)
            .map(|item| item.map(|chunk| chunk.map(Frame::data)))
    }
}
