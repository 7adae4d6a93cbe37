//! Framed TCP: the association API multiplexed over one TCP connection.
//!
//! It exists as the baseline for experiments: every stream shares one byte stream,
//! so one lost segment stalls all of them (TCP head-of-line blocking), which is
//! exactly what SCTP's streams avoid. Functionally it behaves like the SCTP
//! backends: a handshake negotiates stream counts, messages keep their boundaries
//! and their order within a stream, heartbeats detect a silent peer.
//!
//! Wire format (docs/protocol.md, "Framed TCP"): a 12-byte preamble each way, then
//! frames of an 8-byte header `kind u8, reserved u8, stream u16, length u32` and the
//! payload. Kinds: DATA, PING (keep-alive, not answered), SHUTDOWN (graceful close).
//!
//! Structure: one writer task owns the write half and drains a bounded queue; one
//! reader task owns the read half, decodes frames incrementally and feeds a bounded
//! channel that [`Association::recv`] drains. Start at [`connect`] and
//! [`Listener::accept`], which both end in `Association::start`.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::config::AssociationConfig;
use crate::error::TransportError;
use crate::message::{Message, StreamCounts};

/// First bytes of the preamble.
const MAGIC: &[u8; 4] = b"GWFT";
/// Framing version in the preamble.
const FRAMING_VERSION: u8 = 1;
/// Preamble bytes: magic, version, reserved, outbound streams, max inbound streams,
/// reserved.
const PREAMBLE_LEN: usize = 12;
/// Frame header bytes.
const FRAME_HEADER_LEN: usize = 8;
/// Messages queued toward the writer task before `send` waits, across all streams.
const WRITE_QUEUE: usize = 256;
/// Messages decoded by the reader task and not yet taken by `recv`.
const READ_QUEUE: usize = 256;
/// Bytes the writer gathers before a system call; larger payloads bypass it.
const WRITE_BUFFER: usize = 64 * 1024;
/// Connections the kernel queues before `accept` (tokio's `TcpListener::bind`
/// asks for the same).
const LISTEN_BACKLOG: i32 = 1024;

const KIND_DATA: u8 = 0;
const KIND_PING: u8 = 1;
const KIND_SHUTDOWN: u8 = 2;

/// How the association ended, as the API reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    Closed,
    Aborted,
    Unreachable(Duration),
    Protocol(&'static str),
}

impl Ending {
    fn to_error(self) -> TransportError {
        match self {
            Ending::Closed => TransportError::Closed,
            Ending::Aborted => TransportError::Aborted,
            Ending::Unreachable(d) => TransportError::PeerUnreachable(d),
            Ending::Protocol(what) => TransportError::Protocol(what.to_owned()),
        }
    }
}

enum Outgoing {
    Data(u16, Bytes),
    Ping,
    /// Write SHUTDOWN, flush, close the write half, then answer.
    Shutdown(oneshot::Sender<()>),
}

/// State shared by the handle and the two tasks.
#[derive(Debug)]
struct Shared {
    /// Bytes per outbound stream accepted by `send` and not yet written.
    buffered: Mutex<Vec<usize>>,
    /// Woken whenever `buffered` drops or the association ends.
    drained: Notify,
    /// Set once; every later call reports it.
    ending: Mutex<Option<Ending>>,
}

impl Shared {
    fn end(&self, ending: Ending) {
        let mut slot = crate::sync::lock(&self.ending);
        slot.get_or_insert(ending);
        drop(slot);
        self.drained.notify_waiters();
    }

    fn ending(&self) -> Option<Ending> {
        *crate::sync::lock(&self.ending)
    }
}

/// An established framed-TCP association.
#[derive(Debug)]
pub struct Association {
    streams: StreamCounts,
    peer: SocketAddr,
    max_buffered: usize,
    max_message: usize,
    shared: Arc<Shared>,
    outgoing: mpsc::Sender<Outgoing>,
    incoming: tokio::sync::Mutex<mpsc::Receiver<Message>>,
    socket: socket2::Socket,
    /// Writer, reader, keep-alive; taken by `Drop`.
    tasks: Option<[JoinHandle<()>; 3]>,
}

/// How long a dropped association may take to flush and close gracefully before
/// its tasks are stopped.
const LINGER: Duration = Duration::from_secs(10);

impl Drop for Association {
    /// Dropping the last handle closes gracefully, like `close(2)` on a kernel SCTP
    /// socket: what was queued is still delivered, then SHUTDOWN.
    fn drop(&mut self) {
        let Some([writer, reader, keepalive]) = self.tasks.take() else {
            return;
        };
        let runtime = tokio::runtime::Handle::try_current();
        let (Ok(runtime), None) = (runtime, self.shared.ending()) else {
            for task in [writer, reader, keepalive] {
                task.abort();
            }
            return;
        };
        let outgoing = self.outgoing.clone();
        runtime.spawn(async move {
            let (done, _) = oneshot::channel();
            let _ = outgoing.send(Outgoing::Shutdown(done)).await;
            drop(outgoing);
            let finished = tokio::time::timeout(LINGER, async {
                let _ = writer.await;
                let _ = reader.await;
            });
            if finished.await.is_err() {
                tracing::debug!("framed-tcp: peer did not finish closing within {LINGER:?}");
            }
            keepalive.abort();
        });
    }
}

impl Association {
    fn start(
        stream: TcpStream,
        streams: StreamCounts,
        config: &AssociationConfig,
    ) -> Result<Self, TransportError> {
        let peer = stream
            .peer_addr()
            .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
        // A second handle on the same socket, for abort (SO_LINGER 0) while the
        // tasks own the halves.
        let socket = socket2::SockRef::from(&stream).try_clone()?;
        let shared = Arc::new(Shared {
            buffered: Mutex::new(vec![0; usize::from(streams.outbound)]),
            drained: Notify::new(),
            ending: Mutex::new(None),
        });
        let (read_half, write_half) = stream.into_split();
        let (out_tx, out_rx) = mpsc::channel(WRITE_QUEUE);
        let (in_tx, in_rx) = mpsc::channel(READ_QUEUE);
        let last_heard = Arc::new(Mutex::new(Instant::now()));
        let writer = tokio::spawn(write_loop(
            BufWriter::with_capacity(WRITE_BUFFER, write_half),
            out_rx,
            shared.clone(),
        ));
        let reader = tokio::spawn(read_loop(
            read_half,
            in_tx,
            out_tx.clone(),
            shared.clone(),
            last_heard.clone(),
            streams.inbound,
            config.max_message,
        ));
        let keepalive = tokio::spawn(keepalive_loop(
            out_tx.clone(),
            shared.clone(),
            last_heard,
            config.heartbeat_interval,
            config.idle_timeout,
        ));
        Ok(Self {
            streams,
            peer,
            max_buffered: config.max_buffered_per_stream,
            max_message: config.max_message,
            shared,
            outgoing: out_tx,
            incoming: tokio::sync::Mutex::new(in_rx),
            socket,
            tasks: Some([writer, reader, keepalive]),
        })
    }

    pub(crate) fn streams(&self) -> StreamCounts {
        self.streams
    }

    pub(crate) fn peer_addr(&self) -> SocketAddr {
        self.peer
    }

    pub(crate) async fn send(&self, stream: u16, data: Bytes) -> Result<(), TransportError> {
        if stream >= self.streams.outbound {
            return Err(TransportError::InvalidStream {
                stream,
                outbound: self.streams.outbound,
            });
        }
        if data.len() > self.max_message {
            return Err(TransportError::MessageTooLarge {
                len: data.len(),
                limit: self.max_message,
            });
        }
        loop {
            // Register for the wake-up before checking, so a drain between the
            // check and the await is not missed.
            let drained = self.shared.drained.notified();
            if let Some(ending) = self.shared.ending() {
                return Err(ending.to_error());
            }
            {
                let mut buffered = self
                    .shared
                    .buffered
                    .lock()
                    .unwrap_or_else(|e| e.into_inner());
                let queued = &mut buffered[usize::from(stream)];
                if *queued <= self.max_buffered {
                    *queued += data.len();
                    break;
                }
            }
            drained.await;
        }
        let len = data.len();
        if self
            .outgoing
            .send(Outgoing::Data(stream, data))
            .await
            .is_err()
        {
            let mut buffered = self
                .shared
                .buffered
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            buffered[usize::from(stream)] -= len;
            return Err(self.shared.ending().unwrap_or(Ending::Aborted).to_error());
        }
        Ok(())
    }

    pub(crate) async fn recv(&self) -> Result<Message, TransportError> {
        let mut incoming = self.incoming.lock().await;
        match incoming.recv().await {
            Some(message) => Ok(message),
            None => Err(self.shared.ending().unwrap_or(Ending::Aborted).to_error()),
        }
    }

    pub(crate) fn buffered(&self, stream: u16) -> Option<usize> {
        let buffered = self
            .shared
            .buffered
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        buffered.get(usize::from(stream)).copied()
    }

    /// [`buffered`](Self::buffered) of each stream, under one lock.
    pub(crate) fn buffered_each(
        &self,
        streams: impl IntoIterator<Item = u16>,
        out: &mut Vec<(u16, u64)>,
    ) {
        let buffered = self
            .shared
            .buffered
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        out.extend(streams.into_iter().filter_map(|stream| {
            let depth = buffered.get(usize::from(stream))?;
            Some((stream, *depth as u64))
        }));
    }

    pub(crate) async fn close(&self) -> Result<(), TransportError> {
        let (done_tx, done_rx) = oneshot::channel();
        if self
            .outgoing
            .send(Outgoing::Shutdown(done_tx))
            .await
            .is_err()
        {
            return match self.shared.ending() {
                Some(Ending::Closed) | None => Ok(()),
                Some(other) => Err(other.to_error()),
            };
        }
        done_rx
            .await
            .map_err(|_| self.shared.ending().unwrap_or(Ending::Aborted).to_error())
    }

    pub(crate) fn abort(&self) {
        // Linger 0 turns the close into a reset, which the peer reads as abort.
        if let Err(e) = self.socket.set_linger(Some(Duration::ZERO)) {
            tracing::debug!("framed-tcp: SO_LINGER before abort failed: {e}");
        }
        if let Err(e) = self.socket.shutdown(std::net::Shutdown::Both) {
            tracing::debug!("framed-tcp: shutdown on abort failed: {e}");
        }
        self.shared.end(Ending::Aborted);
        for task in self.tasks.iter().flatten() {
            task.abort();
        }
    }
}

async fn write_loop<W: AsyncWrite + Unpin>(
    mut writer: BufWriter<W>,
    mut queue: mpsc::Receiver<Outgoing>,
    shared: Arc<Shared>,
) {
    let mut header = [0u8; FRAME_HEADER_LEN];
    while let Some(item) = queue.recv().await {
        let result = match item {
            Outgoing::Data(stream, data) => {
                encode_header(&mut header, KIND_DATA, stream, data.len());
                let written = write_frame(&mut writer, &header, &data).await;
                let mut buffered = shared.buffered.lock().unwrap_or_else(|e| e.into_inner());
                buffered[usize::from(stream)] -= data.len();
                drop(buffered);
                shared.drained.notify_waiters();
                written
            }
            Outgoing::Ping => {
                encode_header(&mut header, KIND_PING, 0, 0);
                writer.write_all(&header).await
            }
            Outgoing::Shutdown(done) => {
                encode_header(&mut header, KIND_SHUTDOWN, 0, 0);
                let result = async {
                    writer.write_all(&header).await?;
                    writer.flush().await?;
                    writer.get_mut().shutdown().await
                }
                .await;
                if result.is_ok() {
                    shared.end(Ending::Closed);
                    let _ = done.send(());
                    return;
                }
                result
            }
        };
        if let Err(e) = result {
            tracing::debug!("framed-tcp: write failed: {e}");
            shared.end(Ending::Aborted);
            return;
        }
        // Flush only when nothing else is waiting: frames queued back to back go
        // out in one system call.
        if queue.is_empty()
            && let Err(e) = writer.flush().await
        {
            tracing::debug!("framed-tcp: flush failed: {e}");
            shared.end(Ending::Aborted);
            return;
        }
    }
}

async fn write_frame<W: AsyncWrite + Unpin>(
    writer: &mut BufWriter<W>,
    header: &[u8],
    data: &[u8],
) -> std::io::Result<()> {
    writer.write_all(header).await?;
    writer.write_all(data).await
}

fn encode_header(header: &mut [u8; FRAME_HEADER_LEN], kind: u8, stream: u16, len: usize) {
    header[0] = kind;
    header[1] = 0;
    header[2..4].copy_from_slice(&stream.to_be_bytes());
    // `send` refuses messages above max_message, itself capped far below 4 GiB.
    header[4..8].copy_from_slice(&(len as u32).to_be_bytes());
}

/// One decoded frame.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame {
    /// A message on one of the streams the handshake granted.
    Data(Message),
    /// A keepalive; it carries nothing.
    Ping,
    /// The peer has sent its last frame.
    Shutdown,
}

/// Incremental frame decoder: `Ok(None)` means "need more bytes", never "bad".
/// Public so that the fuzz crate can drive it; the association is its only user.
#[derive(Debug)]
pub struct FrameDecoder {
    inbound_streams: u16,
    max_message: usize,
}

impl FrameDecoder {
    /// A decoder for a connection whose handshake granted `inbound_streams`
    /// streams and messages of at most `max_message` bytes.
    pub fn new(inbound_streams: u16, max_message: usize) -> FrameDecoder {
        FrameDecoder {
            inbound_streams,
            max_message,
        }
    }

    /// Takes one whole frame off the front of `buf`. A DATA frame's length is
    /// checked against `max_message` from its header alone, so a peer cannot
    /// make `buf` grow past one frame header and one largest message.
    pub fn decode(&self, buf: &mut BytesMut) -> Result<Option<Frame>, &'static str> {
        if buf.len() < FRAME_HEADER_LEN {
            return Ok(None);
        }
        let kind = buf[0];
        let stream = u16::from_be_bytes([buf[2], buf[3]]);
        let len = u32::from_be_bytes([buf[4], buf[5], buf[6], buf[7]]) as usize;
        match kind {
            KIND_DATA => {
                if stream >= self.inbound_streams {
                    return Err("DATA frame on a stream the handshake did not grant");
                }
                if len > self.max_message {
                    return Err("DATA frame larger than max_message");
                }
                if buf.len() < FRAME_HEADER_LEN + len {
                    buf.reserve(FRAME_HEADER_LEN + len - buf.len());
                    return Ok(None);
                }
                buf.advance(FRAME_HEADER_LEN);
                let data = buf.split_to(len).freeze();
                Ok(Some(Frame::Data(Message { stream, data })))
            }
            KIND_PING | KIND_SHUTDOWN => {
                if len != 0 {
                    return Err("control frame with a payload");
                }
                buf.advance(FRAME_HEADER_LEN);
                Ok(Some(if kind == KIND_PING {
                    Frame::Ping
                } else {
                    Frame::Shutdown
                }))
            }
            _ => Err("unknown frame kind"),
        }
    }
}

async fn read_loop<R: AsyncRead + Unpin>(
    mut reader: R,
    deliver: mpsc::Sender<Message>,
    outgoing: mpsc::Sender<Outgoing>,
    shared: Arc<Shared>,
    last_heard: Arc<Mutex<Instant>>,
    inbound_streams: u16,
    max_message: usize,
) {
    let decoder = FrameDecoder::new(inbound_streams, max_message);
    let mut buf = BytesMut::with_capacity(64 * 1024);
    let mut shutdown_seen = false;
    let ending = 'read: loop {
        loop {
            match decoder.decode(&mut buf) {
                Ok(None) => break,
                Ok(Some(Frame::Data(message))) => {
                    // With the handle gone nobody listens, but the socket is still
                    // read to its end: closing it with unread bytes would reset it.
                    let _ = deliver.send(message).await;
                }
                Ok(Some(Frame::Ping)) => {}
                Ok(Some(Frame::Shutdown)) => {
                    // Answer with our own SHUTDOWN once our queue is written, as
                    // SCTP's SHUTDOWN-ACK does; then both sides see a clean end.
                    shutdown_seen = true;
                    let (done, _) = oneshot::channel();
                    let _ = outgoing.send(Outgoing::Shutdown(done)).await;
                }
                Err(what) => break 'read Ending::Protocol(what),
            }
        }
        if buf.capacity() - buf.len() < 4096 {
            buf.reserve(64 * 1024);
        }
        match reader.read_buf(&mut buf).await {
            Ok(0) if shutdown_seen && buf.is_empty() => break Ending::Closed,
            Ok(0) => break Ending::Aborted,
            Ok(_) => *last_heard.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now(),
            Err(e) => {
                tracing::debug!("framed-tcp: read failed: {e}");
                break Ending::Aborted;
            }
        }
    };
    shared.end(ending);
}

async fn keepalive_loop(
    outgoing: mpsc::Sender<Outgoing>,
    shared: Arc<Shared>,
    last_heard: Arc<Mutex<Instant>>,
    interval: Duration,
    idle_timeout: Duration,
) {
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        if shared.ending().is_some() {
            return;
        }
        let silent = last_heard
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .elapsed();
        if silent > idle_timeout {
            shared.end(Ending::Unreachable(silent));
            return;
        }
        // A full queue means data is flowing anyway; the ping can wait.
        let _ = outgoing.try_send(Outgoing::Ping);
    }
}

fn encode_preamble(config: &AssociationConfig) -> [u8; PREAMBLE_LEN] {
    let mut out = [0u8; PREAMBLE_LEN];
    let mut buf = &mut out[..];
    buf.put_slice(MAGIC);
    buf.put_u8(FRAMING_VERSION);
    buf.put_u8(0);
    buf.put_u16(config.streams);
    buf.put_u16(config.max_inbound_streams);
    buf.put_u16(0);
    out
}

/// Exchanges preambles and returns the negotiated counts, the way SCTP's INIT
/// does: each side sends on at most as many streams as the other accepts.
async fn handshake(
    stream: &mut TcpStream,
    config: &AssociationConfig,
    send_first: bool,
) -> Result<StreamCounts, TransportError> {
    let ours = encode_preamble(config);
    if send_first {
        stream.write_all(&ours).await?;
    }
    let mut theirs = [0u8; PREAMBLE_LEN];
    stream.read_exact(&mut theirs).await.map_err(|e| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            TransportError::Protocol("peer closed during the framed-TCP handshake".into())
        } else {
            TransportError::Io(e)
        }
    })?;
    if &theirs[..4] != MAGIC {
        return Err(TransportError::Protocol(
            "peer is not speaking framed TCP (bad magic)".into(),
        ));
    }
    if theirs[4] != FRAMING_VERSION {
        return Err(TransportError::Protocol(format!(
            "framed-TCP version {} not supported (want {FRAMING_VERSION})",
            theirs[4]
        )));
    }
    let peer_outbound = u16::from_be_bytes([theirs[6], theirs[7]]);
    let peer_max_inbound = u16::from_be_bytes([theirs[8], theirs[9]]);
    if peer_outbound == 0 || peer_max_inbound == 0 {
        return Err(TransportError::Protocol("peer offered zero streams".into()));
    }
    if !send_first {
        stream.write_all(&ours).await?;
    }
    Ok(StreamCounts {
        outbound: config.streams.min(peer_max_inbound),
        inbound: peer_outbound.min(config.max_inbound_streams),
    })
}

fn tune(stream: &TcpStream, config: &AssociationConfig) -> Result<(), TransportError> {
    stream.set_nodelay(true)?;
    let sock = socket2::SockRef::from(stream);
    if let Some(size) = config.send_buffer {
        sock.set_send_buffer_size(size)?;
    }
    if let Some(size) = config.recv_buffer {
        sock.set_recv_buffer_size(size)?;
    }
    Ok(())
}

/// A TCP listening socket that hands out framed-TCP associations.
#[derive(Debug)]
pub struct Listener {
    listener: TcpListener,
    config: AssociationConfig,
}

impl Listener {
    pub(crate) async fn bind(
        addr: SocketAddr,
        config: &AssociationConfig,
    ) -> Result<Self, TransportError> {
        use socket2::{Domain, Protocol, Socket, Type};
        let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
        socket.set_nonblocking(true)?;
        // As `TcpListener::bind` does: a restarted origin rebinds at once.
        socket.set_reuse_address(true)?;
        crate::host::ipv6_only(&socket, addr)?;
        socket.bind(&addr.into())?;
        socket.listen(LISTEN_BACKLOG)?;
        Ok(Self {
            listener: TcpListener::from_std(socket.into())?,
            config: config.clone(),
        })
    }

    pub(crate) fn local_addr(&self) -> Result<SocketAddr, TransportError> {
        Ok(self.listener.local_addr()?)
    }

    /// Waits for a peer that completes the handshake; peers that fail it are
    /// logged and dropped, so one bad client cannot stop the listener.
    pub(crate) async fn accept(&self) -> Result<Association, TransportError> {
        loop {
            let (mut stream, peer) = self.listener.accept().await?;
            let setup = async {
                tune(&stream, &self.config)?;
                handshake(&mut stream, &self.config, false).await
            };
            match tokio::time::timeout(self.config.connect_timeout, setup).await {
                Ok(Ok(streams)) => return Association::start(stream, streams, &self.config),
                Ok(Err(e)) => tracing::debug!("framed-tcp: handshake with {peer} failed: {e}"),
                Err(_) => tracing::debug!("framed-tcp: handshake with {peer} timed out"),
            }
        }
    }
}

pub(crate) async fn connect(
    addr: SocketAddr,
    config: &AssociationConfig,
) -> Result<Association, TransportError> {
    let mut stream = TcpStream::connect(addr).await?;
    tune(&stream, config)?;
    let streams = handshake(&mut stream, config, true).await?;
    Association::start(stream, streams, config)
}

/// The protocol framed on one TCP connection, registered in `crate::backend`.
#[derive(Debug)]
pub(crate) struct FramedTcpBackend;

impl crate::contract::Backend for FramedTcpBackend {
    type Association = Association;
    type Listener = Listener;

    fn validate(_config: &AssociationConfig) -> Result<(), TransportError> {
        // The common settings are all it reads.
        Ok(())
    }

    async fn bind(
        addr: SocketAddr,
        config: &AssociationConfig,
    ) -> Result<Listener, TransportError> {
        Listener::bind(addr, config).await
    }

    async fn connect(
        addr: SocketAddr,
        config: &AssociationConfig,
    ) -> Result<Association, TransportError> {
        connect(addr, config).await
    }
}

crate::contract::by_inherent_methods!(Association, Listener; buffered_each);

#[cfg(test)]
mod tests {
    use super::*;

    fn decoder() -> FrameDecoder {
        FrameDecoder::new(4, 16)
    }

    fn frame(kind: u8, stream: u16, payload: &[u8]) -> Vec<u8> {
        let mut header = [0u8; FRAME_HEADER_LEN];
        encode_header(&mut header, kind, stream, payload.len());
        [&header[..], payload].concat()
    }

    #[test]
    fn decoder_waits_for_whole_frames_fed_byte_by_byte() {
        let wire = [
            frame(KIND_DATA, 3, b"hello"),
            frame(KIND_PING, 0, b""),
            frame(KIND_DATA, 0, b""),
            frame(KIND_SHUTDOWN, 0, b""),
        ]
        .concat();
        let mut buf = BytesMut::new();
        let mut frames = Vec::new();
        for byte in wire {
            buf.put_u8(byte);
            while let Some(f) = decoder().decode(&mut buf).expect("valid input") {
                frames.push(f);
            }
        }
        assert_eq!(
            frames,
            vec![
                Frame::Data(Message {
                    stream: 3,
                    data: Bytes::from_static(b"hello")
                }),
                Frame::Ping,
                Frame::Data(Message {
                    stream: 0,
                    data: Bytes::new()
                }),
                Frame::Shutdown,
            ]
        );
        assert!(buf.is_empty());
    }

    #[test]
    fn decoder_rejects_what_the_handshake_did_not_allow() {
        let cases: [(&[u8], &str); 4] = [
            (&frame(KIND_DATA, 4, b"x"), "stream"),
            (&frame(KIND_DATA, 0, &[0; 17]), "max_message"),
            (&frame(KIND_PING, 0, b"x"), "payload"),
            (&frame(9, 0, b""), "unknown"),
        ];
        for (wire, what) in cases {
            let err = decoder().decode(&mut BytesMut::from(wire)).expect_err(what);
            assert!(err.contains(what), "{err} should mention {what}");
        }
    }

    #[test]
    fn oversized_length_is_rejected_before_its_bytes_arrive() {
        let mut header = BytesMut::from(&frame(KIND_DATA, 0, &[0; 17])[..FRAME_HEADER_LEN]);
        assert!(decoder().decode(&mut header).is_err());
    }
}
