//! QUIC (quinn): the association API on one QUIC connection, one QUIC stream per
//! stream number and direction. The best-engineered multistream transport a user
//! could pick instead of SCTP, kept as the anchor our SCTP is measured against
//! (a row of `cargo xtask bench transport`) and usable as a backend.
//!
//! ```text
//!  client                                              listener
//!  ──────                                              ────────
//!  bidirectional control stream (opened by the client, the only one):
//!    preamble  "GWQC" ver 0 streams:u16 max_inbound:u16 0:u16   (each way)
//!    later     FIN  n:u32  "I sent on n streams, all acknowledged"
//!              DONE 0:u32  "everything you sent is delivered to my recv"
//!  unidirectional streams, opened lazily by the sender, one per stream number:
//!    stream:u16, then frames  len:u32 payload   (len 0..=max_message)
//! ```
//!
//! Invariants and choices:
//!
//! - **Stream counts** travel in the control stream's preamble, exactly as framed
//!   TCP's: each side sends on at most `min(streams, peer's max_inbound_streams)`.
//!   QUIC's transport parameters cannot carry the peer's *wish* (only its limit),
//!   so the preamble is needed; `max_concurrent_uni_streams` is still set to
//!   `max_inbound_streams`, so the QUIC layer itself enforces the grant.
//! - **Order**: one QUIC stream per stream number keeps per-stream order and,
//!   unlike framed TCP, a loss on one stream never stalls another.
//! - **Backpressure**: `send` queues into a per-stream writer task (so `send` is
//!   cancel-safe and whole messages are never half-written); [`buffered`] counts
//!   bytes queued there and not yet accepted by quinn's send stream. quinn
//!   itself buffers what flow control and its send window allow beyond that.
//! - **Receive** is cancel-safe: per-stream reader tasks decode frames into one
//!   channel that `recv` drains, bounded in bytes by a semaphore
//!   ([`RECV_BUDGET`]), not in messages.
//! - **Close** is SCTP's SHUTDOWN in QUIC terms: finish every stream, wait for
//!   their acknowledgement, send FIN; when the peer's FIN is in too, `close`
//!   returns and both sides read `Closed` after the last message. The
//!   `CONNECTION_CLOSE` (code [`CODE_CLOSED`]) is sent only once both DONEs are
//!   exchanged, because it discards whatever a peer has not read yet.
//! - **Abort** is `CONNECTION_CLOSE` with [`CODE_ABORT`]. quinn's driver task
//!   sends it, so a process that exits in the same instant may not: the peer
//!   then sees `PeerUnreachable` after `idle_timeout`.
//! - **Liveness** is QUIC's own: a PING every `heartbeat_interval`, idle
//!   time-out `idle_timeout` (the smaller of both sides' wins).
//! - **TLS** (QUIC has no plaintext mode): the first listener of a process makes
//!   a self-signed certificate (all its listeners share it) and logs its SHA-256; the client accepts exactly the
//!   certificate whose SHA-256 is `quic_server_cert_sha256` and still checks the
//!   handshake signature against it (possession of the key). No CA, no names.
//!
//! Start at [`connect`] and [`Listener::accept`], which both end in
//! `Association::start`; the association's life is `drive`.
//!
//! [`buffered`]: Association::buffered

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use quinn::{ConnectionError, RecvStream, SendStream, VarInt};
use sha2::{Digest, Sha256};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, mpsc};
use tokio::task::{JoinHandle, JoinSet};

use crate::config::{AssociationConfig, Congestion};
use crate::error::TransportError;
use crate::message::{Message, StreamCounts};

/// ALPN of this framing: a peer that speaks anything else fails the handshake.
const ALPN: &[u8] = b"gw-transport-quic/1";
/// Name the listener's certificate is issued for. Nothing checks it: the client
/// pins the certificate itself.
const CERT_NAME: &str = "gateway-transport.invalid";
/// First bytes of the control stream's preamble.
const MAGIC: &[u8; 4] = b"GWQC";
/// Framing version in the preamble.
const FRAMING_VERSION: u8 = 1;
/// Preamble bytes: magic, version, reserved, streams, max inbound streams,
/// reserved.
const PREAMBLE_LEN: usize = 12;
/// Control record bytes: kind u8, value u32.
const RECORD_LEN: usize = 5;
const RECORD_FIN: u8 = 1;
const RECORD_DONE: u8 = 2;
/// Bytes of the stream number that opens every unidirectional stream.
const STREAM_HEADER_LEN: usize = 2;
/// Bytes of a frame's length prefix.
const FRAME_HEADER_LEN: usize = 4;

/// Application close code of a graceful close (both DONEs exchanged).
pub const CODE_CLOSED: u32 = 0;
/// Application close code of [`Association::abort`].
pub const CODE_ABORT: u32 = 1;
/// Application close code after the peer broke this framing.
pub const CODE_PROTOCOL: u32 = 2;

/// Decoded messages held for `recv` across all streams, bytes. A message larger
/// than this takes the whole budget. Beyond it the reader tasks stop reading and
/// QUIC's flow control holds the sender back.
pub const RECV_BUDGET: usize = 4 * 1024 * 1024;
/// The connection-wide QUIC receive window, bytes: bounds what quinn buffers for
/// unread streams (its default is unlimited; each stream's own window stays at
/// quinn's 1.25 MB).
pub const CONNECTION_RECEIVE_WINDOW: u32 = 16 * 1024 * 1024;
/// Payloads up to this many bytes are copied beside their length prefix, so that
/// small messages go to quinn as one chunk; larger ones are passed as they are.
const COPY_BELOW: usize = 4 * 1024;
/// Most bytes a writer hands to quinn in one call.
const WRITE_BATCH: usize = 256 * 1024;
/// How long a dropped association may take to close gracefully before it is
/// aborted.
const LINGER: Duration = Duration::from_secs(10);

/// How the association ended, as the API reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Ending {
    Closed,
    Aborted,
    Unreachable(Duration),
    Protocol(String),
}

impl Ending {
    fn to_error(&self) -> TransportError {
        match self {
            Ending::Closed => TransportError::Closed,
            Ending::Aborted => TransportError::Aborted,
            Ending::Unreachable(d) => TransportError::PeerUnreachable(*d),
            Ending::Protocol(what) => TransportError::Protocol(what.clone()),
        }
    }

    fn from_connection(error: &ConnectionError, idle_timeout: Duration) -> Self {
        match error {
            ConnectionError::ApplicationClosed(close) => {
                match u32::try_from(close.error_code.into_inner()) {
                    Ok(CODE_CLOSED) => Ending::Closed,
                    Ok(CODE_ABORT) => Ending::Aborted,
                    _ => Ending::Protocol(format!(
                        "peer closed with code {}: {}",
                        close.error_code,
                        String::from_utf8_lossy(&close.reason)
                    )),
                }
            }
            ConnectionError::TimedOut => Ending::Unreachable(idle_timeout),
            // A stateless reset: the peer lost the connection (restarted).
            ConnectionError::Reset | ConnectionError::LocallyClosed => Ending::Aborted,
            other => Ending::Protocol(format!("QUIC: {other}")),
        }
    }
}

/// What `send` and the writer tasks share, under one lock.
#[derive(Debug)]
struct SendState {
    /// Bytes per outbound stream accepted by `send`, not yet written into quinn.
    buffered: Vec<usize>,
    /// Queue of each outbound stream's writer task, spawned on first use.
    queues: Vec<Option<mpsc::UnboundedSender<Bytes>>>,
    /// The writer tasks; taken when closing starts.
    writers: JoinSet<()>,
    /// Set when a close starts (ours or the peer's FIN): `send` refuses.
    closing: bool,
    /// Set once; every later call reports it.
    ending: Option<Ending>,
}

/// State shared by the handle and the tasks.
#[derive(Debug)]
struct Shared {
    conn: quinn::Connection,
    /// Keeps a client's own endpoint (its socket and driver) alive.
    _endpoint: quinn::Endpoint,
    streams: StreamCounts,
    idle_timeout: Duration,
    state: Mutex<SendState>,
    /// Woken whenever `buffered` drops or `ending` is set.
    changed: Notify,
    /// `close()` asks the driver to start closing.
    close_requested: Notify,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, SendState> {
        crate::sync::lock(&self.state)
    }

    fn end(&self, ending: Ending) {
        self.lock().ending.get_or_insert(ending);
        self.changed.notify_waiters();
    }

    fn ending(&self) -> Option<Ending> {
        self.lock().ending.clone()
    }

    /// Ends the association because the peer broke the framing.
    fn violation(&self, what: &str) {
        tracing::debug!("quic: protocol violation: {what}");
        self.end(Ending::Protocol(what.to_owned()));
        self.conn
            .close(VarInt::from_u32(CODE_PROTOCOL), what.as_bytes());
    }
}

/// One message on its way to `recv`, with its share of [`RECV_BUDGET`].
type Delivery = (Message, OwnedSemaphorePermit);

/// An established QUIC association.
#[derive(Debug)]
pub struct Association {
    shared: Arc<Shared>,
    max_buffered: usize,
    max_message: usize,
    incoming: tokio::sync::Mutex<mpsc::UnboundedReceiver<Delivery>>,
    driver: JoinHandle<()>,
}

impl Drop for Association {
    /// Dropping the last handle closes gracefully, like the other backends: what
    /// was queued is still delivered; after [`LINGER`] the connection is aborted.
    fn drop(&mut self) {
        if self.shared.ending().is_some() || self.driver.is_finished() {
            return;
        }
        self.shared.close_requested.notify_one();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let shared = self.shared.clone();
            runtime.spawn(async move {
                tokio::time::sleep(LINGER).await;
                if shared.ending().is_none() {
                    tracing::debug!("quic: peer did not finish closing within {LINGER:?}");
                }
                shared.end(Ending::Aborted);
                shared.conn.close(VarInt::from_u32(CODE_ABORT), b"linger");
            });
        }
    }
}

impl Association {
    fn start(
        conn: quinn::Connection,
        endpoint: quinn::Endpoint,
        control: (SendStream, RecvStream),
        streams: StreamCounts,
        config: &AssociationConfig,
    ) -> Self {
        let shared = Arc::new(Shared {
            conn,
            _endpoint: endpoint,
            streams,
            idle_timeout: config.idle_timeout,
            state: Mutex::new(SendState {
                buffered: vec![0; usize::from(streams.outbound)],
                queues: vec![None; usize::from(streams.outbound)],
                writers: JoinSet::new(),
                closing: false,
                ending: None,
            }),
            changed: Notify::new(),
            close_requested: Notify::new(),
        });
        let (deliver, incoming) = mpsc::unbounded_channel();
        let driver = tokio::spawn(drive(shared.clone(), control, deliver, config.max_message));
        Self {
            shared,
            max_buffered: config.max_buffered_per_stream,
            max_message: config.max_message,
            incoming: tokio::sync::Mutex::new(incoming),
            driver,
        }
    }

    pub(crate) fn streams(&self) -> StreamCounts {
        self.shared.streams
    }

    pub(crate) fn peer_addr(&self) -> SocketAddr {
        self.shared.conn.remote_address()
    }

    pub(crate) async fn send(&self, stream: u16, data: Bytes) -> Result<(), TransportError> {
        let outbound = self.shared.streams.outbound;
        if stream >= outbound {
            return Err(TransportError::InvalidStream { stream, outbound });
        }
        if data.len() > self.max_message {
            return Err(TransportError::MessageTooLarge {
                len: data.len(),
                limit: self.max_message,
            });
        }
        let index = usize::from(stream);
        loop {
            // Register for the wake-up before checking, so a drain between the
            // check and the await is not missed.
            let changed = self.shared.changed.notified();
            {
                let mut st = self.shared.lock();
                if let Some(ending) = &st.ending {
                    return Err(ending.to_error());
                }
                if st.closing {
                    return Err(TransportError::Closed);
                }
                if st.buffered[index] <= self.max_buffered {
                    st.buffered[index] += data.len();
                    let queue = match &st.queues[index] {
                        Some(queue) => queue.clone(),
                        None => {
                            let (queue, rx) = mpsc::unbounded_channel();
                            st.writers
                                .spawn(write_stream(self.shared.clone(), stream, rx));
                            st.queues[index] = Some(queue.clone());
                            queue
                        }
                    };
                    // The writer only ends once its queue is dropped (closing)
                    // or the connection is lost, both checked above under the
                    // same lock; a failed push is the latter.
                    if queue.send(data).is_err() {
                        return Err(TransportError::Aborted);
                    }
                    return Ok(());
                }
            }
            changed.await;
        }
    }

    pub(crate) async fn recv(&self) -> Result<Message, TransportError> {
        let mut incoming = self.incoming.lock().await;
        match incoming.recv().await {
            // The permit returns its bytes to the budget here.
            Some((message, _permit)) => Ok(message),
            None => Err(self.shared.ending().unwrap_or(Ending::Aborted).to_error()),
        }
    }

    pub(crate) fn buffered(&self, stream: u16) -> Option<usize> {
        self.shared
            .lock()
            .buffered
            .get(usize::from(stream))
            .copied()
    }

    pub(crate) async fn close(&self) -> Result<(), TransportError> {
        self.shared.close_requested.notify_one();
        loop {
            let changed = self.shared.changed.notified();
            match self.shared.ending() {
                Some(Ending::Closed) => return Ok(()),
                Some(other) => return Err(other.to_error()),
                None => changed.await,
            }
        }
    }

    pub(crate) fn abort(&self) {
        self.shared.end(Ending::Aborted);
        self.shared
            .conn
            .close(VarInt::from_u32(CODE_ABORT), b"abort");
    }
}

/// One stream's writer: opens the QUIC stream, writes what `send` queues, and
/// when the queue is dropped (closing) finishes the stream and waits until the
/// peer has acknowledged all of it.
async fn write_stream(shared: Arc<Shared>, stream: u16, mut queue: mpsc::UnboundedReceiver<Bytes>) {
    let index = usize::from(stream);
    let result = async {
        let mut send = shared.conn.open_uni().await?;
        let mut header = BytesMut::with_capacity(COPY_BELOW + FRAME_HEADER_LEN);
        header.put_u16(stream);
        let mut chunks = Vec::new();
        while let Some(first) = queue.recv().await {
            let mut batch = 0usize;
            let mut next = Some(first);
            while let Some(data) = next.take() {
                batch += data.len();
                // `send` refuses messages above max_message, capped below 4 GiB.
                header.put_u32(data.len() as u32);
                if data.len() <= COPY_BELOW {
                    header.extend_from_slice(&data);
                } else {
                    chunks.push(header.split().freeze());
                    chunks.push(data);
                }
                if batch < WRITE_BATCH {
                    next = queue.try_recv().ok();
                }
            }
            if !header.is_empty() {
                chunks.push(header.split().freeze());
            }
            let written = send.write_all_chunks(&mut chunks[..]).await;
            chunks.clear();
            {
                let mut st = shared.lock();
                st.buffered[index] = st.buffered[index].saturating_sub(batch);
            }
            shared.changed.notify_waiters();
            written?;
        }
        if !header.is_empty() {
            // Opened but never written: still tell the peer the stream number.
            send.write_all(&header).await?;
        }
        send.finish()?;
        send.stopped().await?;
        Ok::<_, WriterError>(())
    }
    .await;
    if let Err(e) = result {
        // The connection's end is reported by the driver; nothing else fails.
        tracing::debug!("quic: writer of stream {stream} ended: {e}");
    }
}

/// Why a writer task stopped early; only logged, since the connection's own end
/// is what the API reports.
#[derive(Debug, thiserror::Error)]
enum WriterError {
    /// Opening the stream failed: the connection is gone.
    #[error(transparent)]
    Open(#[from] ConnectionError),
    /// Writing failed: the connection is gone or the peer stopped the stream.
    #[error(transparent)]
    Write(#[from] quinn::WriteError),
    /// The stream was already finished (cannot happen: finished once).
    #[error(transparent)]
    Finish(#[from] quinn::ClosedStream),
    /// The connection went away before the peer acknowledged everything.
    #[error(transparent)]
    Stopped(#[from] quinn::StoppedError),
}

/// Why a reader task stopped early.
#[derive(Debug)]
enum ReadEnd {
    /// The connection went away; the driver reports how.
    Lost,
    /// The peer broke the framing.
    Violation(&'static str),
}

impl From<quinn::ReadError> for ReadEnd {
    fn from(e: quinn::ReadError) -> Self {
        match e {
            quinn::ReadError::ConnectionLost(_) => ReadEnd::Lost,
            quinn::ReadError::Reset(_) => ReadEnd::Violation("peer reset a data stream"),
            _ => ReadEnd::Violation("unexpected read error on a data stream"),
        }
    }
}

impl From<quinn::ReadExactError> for ReadEnd {
    fn from(e: quinn::ReadExactError) -> Self {
        match e {
            quinn::ReadExactError::FinishedEarly(_) => {
                ReadEnd::Violation("data stream ended inside a frame")
            }
            quinn::ReadExactError::ReadError(e) => e.into(),
        }
    }
}

/// One inbound stream: its number, then frames until the peer finishes it.
async fn read_stream(
    mut recv: RecvStream,
    deliver: mpsc::UnboundedSender<Delivery>,
    budget: Arc<Semaphore>,
    inbound: u16,
    max_message: usize,
) -> Result<(), ReadEnd> {
    let mut header = [0u8; STREAM_HEADER_LEN];
    recv.read_exact(&mut header).await?;
    let stream = u16::from_be_bytes(header);
    if stream >= inbound {
        return Err(ReadEnd::Violation(
            "data stream number the handshake did not grant",
        ));
    }
    loop {
        let mut prefix = [0u8; FRAME_HEADER_LEN];
        match recv.read_exact(&mut prefix).await {
            Ok(()) => {}
            // Finished at a frame boundary: the stream's clean end.
            Err(quinn::ReadExactError::FinishedEarly(0)) => return Ok(()),
            Err(e) => return Err(e.into()),
        }
        let len = u32::from_be_bytes(prefix) as usize;
        if len > max_message {
            return Err(ReadEnd::Violation("message larger than max_message"));
        }
        // RECV_BUDGET is far below u32::MAX.
        let share = len.clamp(1, RECV_BUDGET) as u32;
        let Ok(permit) = budget.clone().acquire_many_owned(share).await else {
            return Err(ReadEnd::Lost);
        };
        let data = read_payload(&mut recv, len).await?;
        if deliver.send((Message { stream, data }, permit)).is_err() {
            // The handle is gone; keep reading so the stream completes.
            continue;
        }
    }
}

/// Exactly `len` bytes; one chunk that holds them all is passed on uncopied.
async fn read_payload(recv: &mut RecvStream, len: usize) -> Result<Bytes, ReadEnd> {
    let mut data = BytesMut::new();
    while data.len() < len {
        let Some(chunk) = recv.read_chunk(len - data.len(), true).await? else {
            return Err(ReadEnd::Violation("data stream ended inside a message"));
        };
        if data.is_empty() && chunk.bytes.len() == len {
            return Ok(chunk.bytes);
        }
        if data.is_empty() {
            data.reserve(len);
        }
        data.extend_from_slice(&chunk.bytes);
    }
    Ok(data.freeze())
}

/// A record on the control stream after the preamble.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Record {
    /// The peer sent on this many streams, all finished and acknowledged.
    Fin(u32),
    /// The peer has delivered everything we sent to its `recv`.
    Done,
}

fn encode_record(record: Record) -> [u8; RECORD_LEN] {
    let (kind, value) = match record {
        Record::Fin(n) => (RECORD_FIN, n),
        Record::Done => (RECORD_DONE, 0),
    };
    let mut out = [0u8; RECORD_LEN];
    out[0] = kind;
    out[1..].copy_from_slice(&value.to_be_bytes());
    out
}

fn decode_record(raw: [u8; RECORD_LEN]) -> Result<Record, &'static str> {
    let value = u32::from_be_bytes([raw[1], raw[2], raw[3], raw[4]]);
    match raw[0] {
        RECORD_FIN => Ok(Record::Fin(value)),
        RECORD_DONE if value == 0 => Ok(Record::Done),
        _ => Err("unknown control record"),
    }
}

/// Reads control records into `records` until the stream or connection ends.
async fn read_records(
    mut control: RecvStream,
    records: mpsc::Sender<Result<Record, &'static str>>,
) {
    loop {
        let mut raw = [0u8; RECORD_LEN];
        let record = match control.read_exact(&mut raw).await {
            Ok(()) => decode_record(raw),
            // Finished after DONE, or lost with the connection: the driver
            // learns the latter from the connection itself.
            Err(quinn::ReadExactError::FinishedEarly(0)) => return,
            Err(quinn::ReadExactError::ReadError(quinn::ReadError::ConnectionLost(_))) => return,
            Err(_) => Err("control stream broken"),
        };
        let stop = record.is_err();
        if records.send(record).await.is_err() || stop {
            return;
        }
    }
}

/// The association's life: accepts the peer's streams, runs the close exchange
/// (FIN, DONE) and reports how the connection ended.
async fn drive(
    shared: Arc<Shared>,
    (mut control, control_recv): (SendStream, RecvStream),
    deliver: mpsc::UnboundedSender<Delivery>,
    max_message: usize,
) {
    let conn = shared.conn.clone();
    let budget = Arc::new(Semaphore::new(RECV_BUDGET));
    let (records_tx, mut records) = mpsc::channel(4);
    let control_reader = tokio::spawn(read_records(control_recv, records_tx));
    let mut deliver = Some(deliver);
    let mut readers = JoinSet::new();
    let mut records_open = true;
    let mut close = CloseExchange::default();
    let ending = loop {
        if close
            .advance(&shared, &mut control, readers.is_empty(), &mut deliver)
            .await
        {
            break Ending::Closed;
        }
        tokio::select! {
            record = records.recv(), if records_open => match record {
                Some(record) => close.handle_record(&shared, record),
                None => records_open = false,
            },
            () = shared.close_requested.notified(), if close.flushed.is_none() => {
                close.flushed = Some(start_closing(&shared));
            }
            incoming = conn.accept_uni(), if close.peer_fin.is_none_or(|n| close.accepted < n) => {
                let Ok(recv) = incoming else {
                    // The connection's error comes from `closed()` below.
                    continue;
                };
                close.accepted += 1;
                if let Some(deliver) = &deliver {
                    readers.spawn(read_stream(
                        recv,
                        deliver.clone(),
                        budget.clone(),
                        shared.streams.inbound,
                        max_message,
                    ));
                }
            }
            Some(read) = readers.join_next(), if !readers.is_empty() => {
                match read {
                    Ok(Ok(()) | Err(ReadEnd::Lost)) => {}
                    Ok(Err(ReadEnd::Violation(what))) => shared.violation(what),
                    Err(e) => tracing::debug!("quic: reader task failed: {e}"),
                }
            }
            opened = async {
                match close.flushed.as_mut() {
                    Some(handle) => handle.await,
                    None => std::future::pending().await,
                }
            }, if close.flushed.is_some() && !close.fin_sent => {
                close.send_fin(&mut control, opened.unwrap_or(0)).await;
            }
            error = conn.closed() => break Ending::from_connection(&error, shared.idle_timeout),
        }
    };
    shared.end(ending);
    drop(deliver);
    control_reader.abort();
    readers.abort_all();
}

/// Where the close exchange stands (the module doc's **Close**): each side
/// sends FIN once its writers have finished and DONE once it has delivered
/// everything the peer sent; `CONNECTION_CLOSE` waits for both DONEs.
#[derive(Default)]
struct CloseExchange {
    /// The peer's streams accepted so far.
    accepted: u32,
    /// The peer's FIN: how many streams it sent on.
    peer_fin: Option<u32>,
    /// The peer's DONE, the answer to our FIN, has arrived.
    peer_done: bool,
    /// Set when closing starts: every writer finished and acknowledged.
    flushed: Option<JoinHandle<u32>>,
    fin_sent: bool,
    done_sent: bool,
}

impl CloseExchange {
    /// Takes the steps that are due before the driver waits again: reports
    /// the close once both FINs are out, sends DONE once every stream the
    /// peer announced has been read (`readers_idle`: no reader is left), stops
    /// delivering once the association has ended, and closes the connection
    /// once both DONEs are exchanged. Returns whether it closed.
    async fn advance(
        &mut self,
        shared: &Shared,
        control: &mut SendStream,
        readers_idle: bool,
        deliver: &mut Option<mpsc::UnboundedSender<Delivery>>,
    ) -> bool {
        if self.fin_sent && self.peer_fin.is_some() {
            shared.end(Ending::Closed);
        }
        let all_delivered = self.peer_fin == Some(self.accepted) && readers_idle;
        if all_delivered && !self.done_sent {
            if let Err(e) = control.write_all(&encode_record(Record::Done)).await {
                tracing::debug!("quic: writing DONE failed: {e}");
            }
            // The control stream is never finished: FIN may still follow DONE,
            // and CONNECTION_CLOSE ends it anyway.
            self.done_sent = true;
        }
        if self.done_sent && shared.ending().is_some() {
            // recv drains what is queued, then reports the ending.
            *deliver = None;
        }
        if self.done_sent && self.peer_done {
            shared.conn.close(VarInt::from_u32(CODE_CLOSED), b"closed");
            return true;
        }
        false
    }

    /// Takes in one record of the peer's control stream; a record out of
    /// order or broken ends the association.
    fn handle_record(&mut self, shared: &Arc<Shared>, record: Result<Record, &'static str>) {
        match record {
            Ok(Record::Fin(n)) if self.peer_fin.is_none() && n >= self.accepted => {
                self.peer_fin = Some(n);
                if self.flushed.is_none() {
                    self.flushed = Some(start_closing(shared));
                }
            }
            // The peer's DONE answers our FIN; its own FIN may come later.
            Ok(Record::Done) if self.fin_sent && !self.peer_done => self.peer_done = true,
            Ok(_) => shared.violation("control record out of order"),
            Err(what) => shared.violation(what),
        }
    }

    /// Sends our FIN once every writer has finished: `opened` streams.
    async fn send_fin(&mut self, control: &mut SendStream, opened: u32) {
        if let Err(e) = control.write_all(&encode_record(Record::Fin(opened))).await {
            tracing::debug!("quic: writing FIN failed: {e}");
        }
        self.fin_sent = true;
    }
}

/// Refuses new sends, lets every writer drain its queue, finish its stream and
/// wait for the acknowledgement; the task returns how many streams were opened.
fn start_closing(shared: &Arc<Shared>) -> JoinHandle<u32> {
    let mut writers = {
        let mut st = shared.lock();
        st.closing = true;
        st.queues.iter_mut().for_each(|q| *q = None);
        std::mem::take(&mut st.writers)
    };
    shared.changed.notify_waiters();
    tokio::spawn(async move {
        let mut opened = 0;
        while writers.join_next().await.is_some() {
            opened += 1;
        }
        opened
    })
}

/// The SHA-256 of a certificate, as lowercase hex: what the listener logs and
/// the client's `quic_server_cert_sha256` holds.
pub fn cert_sha256_hex(der: &[u8]) -> String {
    Sha256::digest(der)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Parses `quic_server_cert_sha256`: 64 hex digits, either case, colons
/// between bytes allowed (as `openssl x509 -fingerprint` prints them).
pub(crate) fn parse_sha256(text: &str) -> Result<[u8; 32], TransportError> {
    let bad = |reason: &str| TransportError::Config {
        key: "quic.server_cert_sha256",
        reason: reason.to_owned(),
    };
    let digits: Vec<u8> = text.bytes().filter(|&b| b != b':').collect();
    if digits.len() != 64 {
        return Err(bad("must be a SHA-256: 64 hex digits (colons allowed)"));
    }
    let mut out = [0u8; 32];
    for (byte, pair) in out.iter_mut().zip(digits.chunks_exact(2)) {
        let hex = std::str::from_utf8(pair).map_err(|_| bad("not hex"))?;
        *byte = u8::from_str_radix(hex, 16).map_err(|_| bad("not hex"))?;
    }
    Ok(out)
}

fn crypto_provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Accepts exactly one certificate, named by its SHA-256, and checks that the
/// server holds its key (the handshake signature). No CA, names or dates: the
/// pair is configured together, like an SSH host key.
#[derive(Debug)]
struct PinnedCert {
    sha256: [u8; 32],
    provider: Arc<rustls::crypto::CryptoProvider>,
}

impl rustls::client::danger::ServerCertVerifier for PinnedCert {
    fn verify_server_cert(
        &self,
        end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        if Sha256::digest(end_entity.as_ref()).as_slice() == self.sha256 {
            Ok(rustls::client::danger::ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::ApplicationVerificationFailure,
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

fn tls_error(e: impl std::fmt::Display) -> TransportError {
    TransportError::Unavailable(format!("QUIC TLS setup: {e}"))
}

/// QUIC settings common to both ends, from the association's.
fn transport_config(
    config: &AssociationConfig,
    bidi: u32,
) -> Result<Arc<quinn::TransportConfig>, TransportError> {
    let mut transport = quinn::TransportConfig::default();
    let idle = quinn::IdleTimeout::try_from(config.idle_timeout)
        .unwrap_or_else(|_| quinn::IdleTimeout::from(VarInt::MAX));
    transport
        .max_idle_timeout(Some(idle))
        .keep_alive_interval(Some(config.heartbeat_interval))
        .max_concurrent_uni_streams(VarInt::from(config.max_inbound_streams))
        .max_concurrent_bidi_streams(VarInt::from_u32(bidi))
        .receive_window(VarInt::from_u32(CONNECTION_RECEIVE_WINDOW))
        .congestion_controller_factory(congestion(config)?);
    Ok(Arc::new(transport))
}

/// quinn's controller for `[transport.quic] congestion`: the same names
/// as our SCTP stack's, mapped to quinn's NewReno, CUBIC (quinn's default) and
/// its experimental BBR, so that a comparison of the two backends can run the
/// same kind of controller on both.
fn congestion(
    config: &AssociationConfig,
) -> Result<Arc<dyn quinn::congestion::ControllerFactory + Send + Sync>, TransportError> {
    Ok(match config.quic.congestion {
        Congestion::Reno => Arc::new(quinn::congestion::NewRenoConfig::default()),
        Congestion::Cubic => Arc::new(quinn::congestion::CubicConfig::default()),
        Congestion::Bbr => Arc::new(quinn::congestion::BbrConfig::default()),
    })
}

/// A UDP socket with the configured buffers, ready for quinn.
fn udp_socket(
    addr: SocketAddr,
    config: &AssociationConfig,
) -> Result<std::net::UdpSocket, TransportError> {
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::DGRAM,
        Some(socket2::Protocol::UDP),
    )?;
    if let Some(size) = config.send_buffer {
        socket.set_send_buffer_size(size)?;
    }
    if let Some(size) = config.recv_buffer {
        socket.set_recv_buffer_size(size)?;
    }
    socket.set_nonblocking(true)?;
    crate::host::ipv6_only(&socket, addr)?;
    socket.bind(&addr.into())?;
    Ok(socket.into())
}

fn endpoint(
    addr: SocketAddr,
    config: &AssociationConfig,
    server: Option<quinn::ServerConfig>,
) -> Result<quinn::Endpoint, TransportError> {
    Ok(quinn::Endpoint::new(
        quinn::EndpointConfig::default(),
        server,
        udp_socket(addr, config)?,
        Arc::new(quinn::TokioRuntime),
    )?)
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

/// Exchanges preambles on the control stream (the client writes first) and
/// returns the negotiated counts: each side sends on at most as many streams as
/// the other accepts.
async fn handshake(
    control: &mut (SendStream, RecvStream),
    config: &AssociationConfig,
    send_first: bool,
) -> Result<StreamCounts, TransportError> {
    let ours = encode_preamble(config);
    let write_error = |e: quinn::WriteError| {
        TransportError::Protocol(format!("QUIC handshake: writing the preamble: {e}"))
    };
    if send_first {
        control.0.write_all(&ours).await.map_err(write_error)?;
    }
    let mut theirs = [0u8; PREAMBLE_LEN];
    control.1.read_exact(&mut theirs).await.map_err(|e| {
        TransportError::Protocol(format!("QUIC handshake: reading the preamble: {e}"))
    })?;
    if &theirs[..4] != MAGIC {
        return Err(TransportError::Protocol(
            "peer is not speaking this QUIC framing (bad magic)".into(),
        ));
    }
    if theirs[4] != FRAMING_VERSION {
        return Err(TransportError::Protocol(format!(
            "QUIC framing version {} not supported (want {FRAMING_VERSION})",
            theirs[4]
        )));
    }
    let peer_outbound = u16::from_be_bytes([theirs[6], theirs[7]]);
    let peer_max_inbound = u16::from_be_bytes([theirs[8], theirs[9]]);
    if peer_outbound == 0 || peer_max_inbound == 0 {
        return Err(TransportError::Protocol("peer offered zero streams".into()));
    }
    if !send_first {
        control.0.write_all(&ours).await.map_err(write_error)?;
    }
    Ok(StreamCounts {
        outbound: config.streams.min(peer_max_inbound),
        inbound: peer_outbound.min(config.max_inbound_streams),
    })
}

/// The listeners' certificate and key, made once per process: an origin that
/// listens on several addresses shows one certificate, so a gateway pins one
/// SHA-256 whichever address it reaches.
#[derive(Debug)]
struct Identity {
    cert: rustls::pki_types::CertificateDer<'static>,
    /// PKCS#8 DER.
    key: Vec<u8>,
    sha256: String,
}

fn process_identity() -> Result<&'static Identity, TransportError> {
    static IDENTITY: std::sync::OnceLock<Identity> = std::sync::OnceLock::new();
    if let Some(identity) = IDENTITY.get() {
        return Ok(identity);
    }
    let certified =
        rcgen::generate_simple_self_signed(vec![CERT_NAME.to_owned()]).map_err(tls_error)?;
    let cert = certified.cert.der().clone();
    let made = Identity {
        sha256: cert_sha256_hex(&cert),
        cert,
        key: certified.key_pair.serialize_der(),
    };
    // Two racing first binds: one certificate wins and both use it.
    Ok(IDENTITY.get_or_init(|| made))
}

/// The SHA-256 (lowercase hex) of the certificate this process's QUIC
/// listeners show, making it if no listener has yet. Lets a process that runs
/// both ends (tests, benchmarks) configure its client before it binds.
pub fn listener_cert_sha256() -> Result<String, TransportError> {
    Ok(process_identity()?.sha256.clone())
}

/// A QUIC endpoint that hands out associations, with the process's self-signed
/// certificate (made at the first bind).
#[derive(Debug)]
pub struct Listener {
    endpoint: quinn::Endpoint,
    config: AssociationConfig,
    cert_sha256: String,
}

impl Listener {
    pub(crate) async fn bind(
        addr: SocketAddr,
        config: &AssociationConfig,
    ) -> Result<Self, TransportError> {
        let identity = process_identity()?;
        let cert = identity.cert.clone();
        let cert_sha256 = identity.sha256.clone();
        let key = rustls::pki_types::PrivatePkcs8KeyDer::from(identity.key.clone());
        let mut tls = rustls::ServerConfig::builder_with_provider(crypto_provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(tls_error)?
            .with_no_client_auth()
            .with_single_cert(vec![cert], key.into())
            .map_err(tls_error)?;
        tls.alpn_protocols = vec![ALPN.to_vec()];
        let crypto = quinn::crypto::rustls::QuicServerConfig::try_from(tls).map_err(tls_error)?;
        let mut server = quinn::ServerConfig::with_crypto(Arc::new(crypto));
        server.transport_config(transport_config(config, 1)?);
        let endpoint = endpoint(addr, config, Some(server))?;
        tracing::info!(
            addr = %endpoint.local_addr()?,
            "QUIC listener certificate: set quic_server_cert_sha256 = \"{cert_sha256}\" on the connecting side"
        );
        Ok(Self {
            endpoint,
            config: config.clone(),
            cert_sha256,
        })
    }

    pub(crate) fn local_addr(&self) -> Result<SocketAddr, TransportError> {
        Ok(self.endpoint.local_addr()?)
    }

    /// The SHA-256 of this listener's certificate, lowercase hex: the value of
    /// the client's `quic_server_cert_sha256`.
    pub fn cert_sha256(&self) -> &str {
        &self.cert_sha256
    }

    /// Waits for a peer that completes the QUIC and the stream handshake; peers
    /// that fail either are logged and dropped, so one bad client cannot stop
    /// the listener.
    pub(crate) async fn accept(&self) -> Result<Association, TransportError> {
        loop {
            let incoming = self.endpoint.accept().await.ok_or_else(|| {
                TransportError::Unavailable("the QUIC endpoint was closed".into())
            })?;
            let peer = incoming.remote_address();
            let setup = async {
                let conn = incoming
                    .await
                    .map_err(|e| TransportError::Protocol(format!("QUIC handshake: {e}")))?;
                let mut control = conn.accept_bi().await.map_err(|e| {
                    TransportError::Protocol(format!("QUIC handshake: control stream: {e}"))
                })?;
                let streams = handshake(&mut control, &self.config, false).await?;
                Ok::<_, TransportError>((conn, control, streams))
            };
            match tokio::time::timeout(self.config.connect_timeout, setup).await {
                Ok(Ok((conn, control, streams))) => {
                    return Ok(Association::start(
                        conn,
                        self.endpoint.clone(),
                        control,
                        streams,
                        &self.config,
                    ));
                }
                Ok(Err(e)) => tracing::debug!("quic: handshake with {peer} failed: {e}"),
                Err(_) => tracing::debug!("quic: handshake with {peer} timed out"),
            }
        }
    }
}

pub(crate) async fn connect(
    addr: SocketAddr,
    config: &AssociationConfig,
) -> Result<Association, TransportError> {
    let Some(pinned) = &config.quic.server_cert_sha256 else {
        return Err(TransportError::Config {
            key: "quic.server_cert_sha256",
            reason: "the QUIC backend accepts only the listener's own certificate: set this \
                     to the SHA-256 the listener logs at start"
                .into(),
        });
    };
    let provider = crypto_provider();
    let verifier = PinnedCert {
        sha256: parse_sha256(pinned)?,
        provider: provider.clone(),
    };
    let mut tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(tls_error)?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();
    tls.alpn_protocols = vec![ALPN.to_vec()];
    let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(tls).map_err(tls_error)?;
    let mut client = quinn::ClientConfig::new(Arc::new(crypto));
    client.transport_config(transport_config(config, 0)?);
    let local: SocketAddr = if addr.is_ipv4() {
        (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let endpoint = endpoint(local, config, None)?;
    let conn = endpoint
        .connect_with(client, addr, CERT_NAME)
        .map_err(|e| TransportError::Protocol(format!("QUIC connect: {e}")))?
        .await
        .map_err(|e| match e {
            ConnectionError::TimedOut => TransportError::ConnectTimeout(config.connect_timeout),
            other => TransportError::Protocol(format!("QUIC handshake: {other}")),
        })?;
    let mut control = conn
        .open_bi()
        .await
        .map_err(|e| TransportError::Protocol(format!("QUIC handshake: control stream: {e}")))?;
    let streams = handshake(&mut control, config, true).await?;
    Ok(Association::start(conn, endpoint, control, streams, config))
}

/// QUIC (quinn), registered in `crate::backend`.
#[derive(Debug)]
pub(crate) struct QuicBackend;

impl crate::contract::Backend for QuicBackend {
    type Association = Association;
    type Listener = Listener;

    fn validate(config: &AssociationConfig) -> Result<(), TransportError> {
        if let Some(sha256) = &config.quic.server_cert_sha256 {
            parse_sha256(sha256)?;
        }
        Ok(())
    }

    fn validate_connecting(config: &AssociationConfig) -> Result<(), TransportError> {
        match config.quic.server_cert_sha256 {
            Some(_) => Ok(()),
            None => Err(TransportError::Config {
                key: "quic.server_cert_sha256",
                reason: "required with backend = \"quic\": the SHA-256 the origin logs at start"
                    .to_owned(),
            }),
        }
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

crate::contract::by_inherent_methods!(Association, Listener; cert_sha256);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints_parse_in_the_usual_spellings() {
        let hex = cert_sha256_hex(b"certificate");
        assert_eq!(hex.len(), 64);
        let raw = parse_sha256(&hex).expect("own output");
        assert_eq!(raw.as_slice(), Sha256::digest(b"certificate").as_slice());
        let colons = raw
            .iter()
            .map(|b| format!("{b:02X}"))
            .collect::<Vec<_>>()
            .join(":");
        assert_eq!(parse_sha256(&colons).expect("openssl style"), raw);
        for bad in ["", "abc", &hex[..62], &format!("{}zz", &hex[..62])] {
            assert!(parse_sha256(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn control_records_round_trip_and_unknown_ones_are_refused() {
        for record in [Record::Fin(0), Record::Fin(65_535), Record::Done] {
            assert_eq!(decode_record(encode_record(record)), Ok(record));
        }
        assert!(decode_record([9, 0, 0, 0, 0]).is_err());
        assert!(decode_record([RECORD_DONE, 0, 0, 0, 1]).is_err());
    }
}
