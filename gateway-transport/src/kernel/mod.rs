//! The kernel backend: Linux SCTP through one-to-one (`SOCK_STREAM`,
//! `IPPROTO_SCTP`) sockets, driven by tokio's reactor.
//!
//! One socket is one association. Each [`Association::send`] is one `sendmsg` with
//! an `SCTP_SNDINFO` cmsg naming the stream, so a message is handed to the kernel
//! whole and concurrent senders never interleave bytes; the kernel's send buffer
//! is the backpressure (`EAGAIN` waits for writability). [`Association::recv`]
//! reads with `recvmsg`, learns the stream from the `SCTP_RCVINFO` cmsg and glues
//! partial reads together until `MSG_EOR`. Stream counts are asked for with
//! `SCTP_INITMSG` and read back with `SCTP_STATUS`. Optional RFC 6951 UDP
//! encapsulation and the kernel's stream schedulers are exposed as socket options.
//! `docs/kernel-sctp.md` explains the choices; `sys` holds every C definition.
//!
//! It never parses the messages it carries, never spawns tasks or threads, and
//! never blocks a runtime thread: all sockets are non-blocking.
//!
//! Start reading at [`connect`] and [`Listener::accept`] (both end in
//! `Association::establish`), then [`Association::recv`].

use std::io;
use std::net::{Shutdown, SocketAddr};
use std::os::fd::AsFd;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use tokio::io::unix::AsyncFd;
use tokio::sync::watch;

use crate::config::AssociationConfig;
use crate::error::TransportError;
use crate::message::{Message, StreamCounts};
use crate::sync::lock;

mod sys;

/// Bytes read per `recvmsg`; longer messages arrive in several pieces.
const RECV_CHUNK: usize = 64 * 1024;
/// Pending associations the kernel queues for `accept`.
const LISTEN_BACKLOG: i32 = 128;
/// How often `connect` and `close` re-read `SCTP_STATUS` while the handshake or
/// the shutdown is in flight (the socket gives no readiness edge for either).
const STATUS_POLL: Duration = Duration::from_millis(2);

/// True if this host can open a kernel SCTP socket (the `sctp` module is built in
/// or loadable). Opens and closes one socket.
pub fn available() -> bool {
    Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::SCTP)).is_ok()
}

/// A kernel stream scheduler: which stream's queued data the kernel sends next
/// (`enum sctp_sched_type` in linux/sctp.h).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StreamScheduler {
    /// `SCTP_SS_FCFS`: first come, first served, the default.
    Fcfs,
    /// `SCTP_SS_PRIO`: strict priority by the stream's value (lower goes first),
    /// round robin among equals.
    Priority,
    /// `SCTP_SS_RR`: round robin over the streams with data, one message each.
    RoundRobin,
    /// `SCTP_SS_FC`: fair capacity (Linux >= 6.2): the stream that sent the fewest
    /// bytes goes next.
    FairCapacity,
    /// `SCTP_SS_WFQ`: weighted fair queueing by the stream's value (Linux >= 6.2).
    WeightedFair,
}

impl StreamScheduler {
    /// Every scheduler, in the kernel's numbering.
    pub const ALL: [StreamScheduler; 5] = [
        StreamScheduler::Fcfs,
        StreamScheduler::Priority,
        StreamScheduler::RoundRobin,
        StreamScheduler::FairCapacity,
        StreamScheduler::WeightedFair,
    ];

    fn to_raw(self) -> u32 {
        match self {
            StreamScheduler::Fcfs => 0,
            StreamScheduler::Priority => 1,
            StreamScheduler::RoundRobin => 2,
            StreamScheduler::FairCapacity => 3,
            StreamScheduler::WeightedFair => 4,
        }
    }

    fn from_raw(raw: u32) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.to_raw() == raw)
    }
}

/// How an association ended, remembered so that every later call reports the
/// same thing (the kernel reports `ECONNRESET` once, then only `ENOTCONN`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    Closed,
    Aborted,
    Unreachable,
}

/// Reassembly state of `recv`, kept across cancelled `recv` futures.
#[derive(Debug)]
struct RecvState {
    /// Messages whose end (`MSG_EOR`) has not arrived yet, at most one per
    /// stream. Without I-DATA the kernel hands out one message's pieces before
    /// any other's, so there is at most one; with it (`SCTP_FRAGMENT_INTERLEAVE`
    /// on), pieces of messages on different streams may alternate.
    partials: Vec<Partial>,
    /// A shutdown notification arrived: once the queue is empty, it is closed.
    shutting_down: bool,
    /// The `recvmsg` buffer.
    scratch: Vec<u8>,
}

/// One stream's message, read in part.
#[derive(Debug)]
struct Partial {
    stream: u16,
    /// The bytes so far; empty while discarding.
    data: BytesMut,
    /// Skipping the rest of a message already reported as too large.
    discarding: bool,
}

/// An established association over one one-to-one kernel SCTP socket.
#[derive(Debug)]
pub struct Association {
    /// The socket; emptied by [`abort`](Self::abort). Calls in flight hold their
    /// own `Arc`, so the socket closes when the last of them lets go.
    socket: Mutex<Option<Arc<AsyncFd<Socket>>>>,
    streams: StreamCounts,
    peer: SocketAddr,
    max_message: usize,
    /// Longest message the kernel accepts in one send: the send buffer's size
    /// (see `size_send_buffer`), at most `max_message`.
    send_limit: usize,
    idle_timeout: Duration,
    /// Boxed to keep this type small beside the other backends in `lib.rs`.
    recv_state: tokio::sync::Mutex<Box<RecvState>>,
    ended: Mutex<Option<Ended>>,
    /// Set once by [`abort`](Self::abort); every pending call selects on it, since
    /// an aborted socket gives no more readiness events.
    aborted: watch::Sender<bool>,
}

impl Association {
    /// Wraps a connected socket: per-association options, then `SCTP_STATUS` for
    /// the negotiated stream counts.
    ///
    /// `accepted_from` is the peer's address as `accept` returned it. A peer
    /// that sends a few messages and closes at once (sctp_darn does) may have
    /// ended the association before it is accepted: the socket then still
    /// holds every message, but the association's options answer EINVAL and
    /// no SHUTDOWN notification will come. Such an association is returned
    /// already shutting down: `recv` delivers what is queued, then `Closed`;
    /// it grants no outbound streams.
    fn establish(
        socket: Socket,
        config: &AssociationConfig,
        accepted_from: Option<SocketAddr>,
    ) -> Result<Self, TransportError> {
        subscribe_events(&socket)?;
        let gone = |e: &io::Error| {
            accepted_from.is_some()
                && matches!(e.raw_os_error(), Some(libc::EINVAL | libc::ENOTCONN))
        };
        let status = match set_peer_params(&socket, config).and_then(|()| status(&socket)) {
            Ok(status) => Some(status),
            Err(e) if gone(&e) => {
                tracing::debug!(peer = ?accepted_from, "the association ended before it was accepted; delivering what it left");
                None
            }
            Err(e) => return Err(e.into()),
        };
        let peer = match (socket.peer_addr().map(|a| a.as_socket()), accepted_from) {
            (Ok(Some(addr)), _) | (_, Some(addr)) => addr,
            (Ok(None), None) => {
                return Err(TransportError::Protocol("peer address is not IP".into()));
            }
            (Err(e), None) => return Err(e.into()),
        };
        let send_limit = socket.send_buffer_size()?.min(config.max_message);
        if send_limit < config.max_message {
            tracing::warn!(
                send_limit,
                max_message = config.max_message,
                "the kernel send buffer cannot hold max_message; longer messages will be \
                 refused (raise net.core.wmem_max or grant CAP_NET_ADMIN)"
            );
        }
        Ok(Self {
            socket: Mutex::new(Some(Arc::new(register(socket)?))),
            streams: match status {
                Some(status) => StreamCounts {
                    outbound: status.sstat_outstrms,
                    inbound: status.sstat_instrms,
                },
                None => StreamCounts {
                    outbound: 0,
                    inbound: config.max_inbound_streams,
                },
            },
            peer,
            max_message: config.max_message,
            send_limit,
            idle_timeout: config.idle_timeout,
            recv_state: tokio::sync::Mutex::new(Box::new(RecvState {
                partials: Vec::new(),
                shutting_down: status.is_none(),
                scratch: vec![0; RECV_CHUNK],
            })),
            ended: Mutex::new(None),
            aborted: watch::Sender::new(false),
        })
    }

    pub(crate) fn streams(&self) -> StreamCounts {
        self.streams
    }

    pub(crate) fn peer_addr(&self) -> SocketAddr {
        self.peer
    }

    /// This end's primary address and SCTP port (`getsockname`). With the
    /// peer's port it names the association in the eBPF programs' maps.
    pub fn local_addr(&self) -> Result<SocketAddr, TransportError> {
        self.socket()?
            .get_ref()
            .local_addr()?
            .as_socket()
            .ok_or_else(|| TransportError::Protocol("local address is not IP".into()))
    }

    pub(crate) async fn send(&self, stream: u16, data: Bytes) -> Result<(), TransportError> {
        if data.len() > self.send_limit {
            return Err(TransportError::MessageTooLarge {
                len: data.len(),
                limit: self.send_limit,
            });
        }
        if stream >= self.streams.outbound {
            return Err(TransportError::InvalidStream {
                stream,
                outbound: self.streams.outbound,
            });
        }
        if data.is_empty() {
            // The kernel refuses zero-length DATA (RFC 9260 forbids empty chunks).
            return Err(TransportError::Io(io::Error::new(
                io::ErrorKind::InvalidInput,
                "SCTP cannot carry an empty message",
            )));
        }
        self.until_aborted(async {
            let fd = self.socket()?;
            loop {
                self.check_ended()?;
                let mut ready = fd.writable().await?;
                match ready.try_io(|fd| sys::send_message(fd.get_ref().as_fd(), stream, &data)) {
                    Err(_would_block) => continue,
                    Ok(Ok(sent)) if sent == data.len() => return Ok(()),
                    Ok(Ok(sent)) => {
                        return Err(TransportError::Protocol(format!(
                            "kernel took {sent} of {} bytes of one message",
                            data.len()
                        )));
                    }
                    Ok(Err(e)) => return Err(self.end_with(e)),
                }
            }
        })
        .await
    }

    pub(crate) async fn recv(&self) -> Result<Message, TransportError> {
        self.until_aborted(self.recv_message()).await
    }

    /// Reads pieces until one ends a message. All progress lives in `recv_state`,
    /// so dropping this future loses nothing.
    async fn recv_message(&self) -> Result<Message, TransportError> {
        let mut guard = self.recv_state.lock().await;
        let state = &mut *guard;
        let fd = self.socket()?;
        loop {
            self.check_ended()?;
            let mut ready = fd.readable().await?;
            let piece = match ready
                .try_io(|fd| sys::recv_piece(fd.get_ref().as_fd(), &mut state.scratch))
            {
                // After SHUTDOWN every message is already queued, so empty means
                // done (a socket whose association is gone may not say EOF).
                Err(_would_block) if state.shutting_down => return Err(self.end(Ended::Closed)),
                Err(_would_block) => continue,
                Ok(Ok(piece)) => piece,
                Ok(Err(e)) => return Err(self.end_with(e)),
            };
            if piece.notification {
                match sys::parse_notification(&state.scratch[..piece.len]) {
                    sys::Notification::PeerShutdown | sys::Notification::ShutdownComplete => {
                        state.shutting_down = true;
                    }
                    sys::Notification::CommunicationLost => {
                        // The socket error (ECONNRESET, ETIMEDOUT) says why.
                        return Err(match fd.get_ref().take_error()? {
                            Some(e) => self.end_with(e),
                            None => self.end(Ended::Aborted),
                        });
                    }
                    sys::Notification::Other => {}
                }
                continue;
            }
            if piece.len == 0 {
                return Err(self.end(Ended::Closed));
            }
            // Every piece carries its stream; a continuation without one can
            // only belong to the one message in progress.
            let stream = piece
                .stream
                .or(match state.partials.as_slice() {
                    [only] => Some(only.stream),
                    _ => None,
                })
                .ok_or_else(|| {
                    TransportError::Protocol("recvmsg returned no SCTP_RCVINFO".into())
                })?;
            let bytes = &state.scratch[..piece.len];
            let at = state.partials.iter().position(|p| p.stream == stream);
            if let Some(at) = at
                && state.partials[at].discarding
            {
                if piece.end_of_record {
                    state.partials.swap_remove(at);
                }
                continue;
            }
            let total = at.map_or(0, |at| state.partials[at].data.len()) + piece.len;
            if total > self.max_message {
                match at {
                    Some(at) if piece.end_of_record => drop(state.partials.swap_remove(at)),
                    Some(at) => {
                        state.partials[at].data = BytesMut::new();
                        state.partials[at].discarding = true;
                    }
                    None if piece.end_of_record => {}
                    None => state.partials.push(Partial {
                        stream,
                        data: BytesMut::new(),
                        discarding: true,
                    }),
                }
                return Err(TransportError::MessageTooLarge {
                    len: total,
                    limit: self.max_message,
                });
            }
            if !piece.end_of_record {
                match at {
                    Some(at) => state.partials[at].data.extend_from_slice(bytes),
                    None => state.partials.push(Partial {
                        stream,
                        data: BytesMut::from(bytes),
                        discarding: false,
                    }),
                }
                continue;
            }
            let data = match at {
                None => Bytes::copy_from_slice(bytes),
                Some(at) => {
                    let mut partial = state.partials.swap_remove(at);
                    partial.data.extend_from_slice(bytes);
                    partial.data.freeze()
                }
            };
            return Ok(Message { stream, data });
        }
    }

    pub(crate) fn buffered(&self, _stream: u16) -> Option<usize> {
        // The kernel queues per association; no socket option tells per stream.
        None
    }

    /// `shutdown(SHUT_WR)` starts the SCTP SHUTDOWN exchange, which the kernel
    /// completes after every queued message is acknowledged; this waits for that
    /// (the association disappears from `SCTP_STATUS`) for up to `idle_timeout`.
    /// Keep reading meanwhile if the peer may still be sending: its data must fit
    /// in this side's receive window for its half of the shutdown to finish.
    pub(crate) async fn close(&self) -> Result<(), TransportError> {
        self.until_aborted(async {
            let fd = self.socket()?;
            match fd.get_ref().shutdown(Shutdown::Write) {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => return Ok(()),
                Err(e) => return Err(self.end_with(e)),
            }
            let finished = async {
                loop {
                    match status(fd.get_ref()) {
                        Ok(s) if s.sstat_state != sys::SCTP_STATE_CLOSED => {
                            tokio::time::sleep(STATUS_POLL).await;
                        }
                        _ => return,
                    }
                }
            };
            tokio::time::timeout(self.idle_timeout, finished)
                .await
                .map_err(|_| TransportError::PeerUnreachable(self.idle_timeout))?;
            if let Some(e) = fd.get_ref().take_error()? {
                return Err(self.end_with(e));
            }
            Ok(())
        })
        .await
    }

    /// Sends ABORT at once. A one-to-one socket refuses the `SCTP_ABORT` send flag,
    /// so this sets `SO_LINGER` to zero and lets go of the socket: the kernel
    /// aborts when the descriptor closes, which is at once unless another task is
    /// inside a call, and then as soon as that call sees the abort and returns.
    pub(crate) fn abort(&self) {
        if self.aborted.send_replace(true) {
            return;
        }
        self.end(Ended::Aborted);
        let socket = lock(&self.socket).take();
        if let Some(socket) = socket
            && let Err(e) = socket.get_ref().set_linger(Some(Duration::ZERO))
        {
            tracing::warn!(error = %e, "SO_LINGER 0 failed: the association closes gracefully");
        }
    }

    /// Chooses the kernel's stream scheduler for this association
    /// (`SCTP_STREAM_SCHEDULER`). `Unavailable` if this kernel lacks it.
    pub fn set_stream_scheduler(&self, scheduler: StreamScheduler) -> Result<(), TransportError> {
        let fd = self.socket()?;
        let value = sys::SctpAssocValue {
            assoc_id: 0,
            assoc_value: scheduler.to_raw(),
        };
        sys::set_opt(
            fd.get_ref().as_fd(),
            sys::SOL_SCTP,
            sys::SCTP_STREAM_SCHEDULER,
            &value,
        )
        .map_err(|e| match e.raw_os_error() {
            Some(libc::EINVAL) => TransportError::Unavailable(format!(
                "this kernel has no {scheduler:?} stream scheduler"
            )),
            _ => TransportError::Io(e),
        })
    }

    /// The kernel's stream scheduler for this association.
    pub fn stream_scheduler(&self) -> Result<StreamScheduler, TransportError> {
        let fd = self.socket()?;
        let mut value = sys::SctpAssocValue::default();
        sys::get_sctp_opt(fd.get_ref().as_fd(), sys::SCTP_STREAM_SCHEDULER, &mut value)?;
        StreamScheduler::from_raw(value.assoc_value).ok_or_else(|| {
            TransportError::Unavailable(format!(
                "unknown kernel stream scheduler {}",
                value.assoc_value
            ))
        })
    }

    /// Whether this association carries user data in I-DATA (RFC 8260): the
    /// kernel's `SCTP_INTERLEAVING_SUPPORTED`, which on an association reads
    /// whether both ends offered it (see [`crate::KernelConfig::idata`]).
    pub fn idata(&self) -> Result<bool, TransportError> {
        let fd = self.socket()?;
        let mut value = sys::SctpAssocValue::default();
        sys::get_sctp_opt(
            fd.get_ref().as_fd(),
            sys::SCTP_INTERLEAVING_SUPPORTED,
            &mut value,
        )?;
        Ok(value.assoc_value != 0)
    }

    /// Sets `stream`'s scheduler parameter (`SCTP_STREAM_SCHEDULER_VALUE`): the
    /// priority for [`StreamScheduler::Priority`] (0 first), the weight for
    /// [`StreamScheduler::WeightedFair`]. Set the scheduler first.
    pub fn set_stream_scheduler_value(
        &self,
        stream: u16,
        value: u16,
    ) -> Result<(), TransportError> {
        let fd = self.check_stream(stream)?;
        let value = sys::SctpStreamValue {
            assoc_id: 0,
            stream_id: stream,
            stream_value: value,
        };
        sys::set_opt(
            fd.get_ref().as_fd(),
            sys::SOL_SCTP,
            sys::SCTP_STREAM_SCHEDULER_VALUE,
            &value,
        )?;
        Ok(())
    }

    /// `stream`'s scheduler parameter.
    pub fn stream_scheduler_value(&self, stream: u16) -> Result<u16, TransportError> {
        let fd = self.check_stream(stream)?;
        let mut value = sys::SctpStreamValue {
            assoc_id: 0,
            stream_id: stream,
            stream_value: 0,
        };
        sys::get_sctp_opt(
            fd.get_ref().as_fd(),
            sys::SCTP_STREAM_SCHEDULER_VALUE,
            &mut value,
        )?;
        Ok(value.stream_value)
    }

    /// The socket, if `stream` is one this side may send on.
    fn check_stream(&self, stream: u16) -> Result<Arc<AsyncFd<Socket>>, TransportError> {
        if stream >= self.streams.outbound {
            return Err(TransportError::InvalidStream {
                stream,
                outbound: self.streams.outbound,
            });
        }
        self.socket()
    }

    /// The socket, unless the association was aborted here.
    fn socket(&self) -> Result<Arc<AsyncFd<Socket>>, TransportError> {
        lock(&self.socket).clone().ok_or(TransportError::Aborted)
    }

    /// Runs `op` unless and until [`abort`](Self::abort) is called.
    async fn until_aborted<T>(
        &self,
        op: impl Future<Output = Result<T, TransportError>>,
    ) -> Result<T, TransportError> {
        let mut aborted = self.aborted.subscribe();
        tokio::select! {
            biased;
            _ = aborted.wait_for(|aborted| *aborted) => Err(TransportError::Aborted),
            result = op => result,
        }
    }

    /// How the association ended, if it has.
    fn ended(&self) -> Option<Ended> {
        *lock(&self.ended)
    }

    /// `Err` if the association has ended.
    fn check_ended(&self) -> Result<(), TransportError> {
        match self.ended() {
            None => Ok(()),
            Some(ended) => Err(ended_error(ended, self.idle_timeout)),
        }
    }

    /// Records how the association ended (the first record wins) and returns it.
    fn end(&self, how: Ended) -> TransportError {
        let mut ended = lock(&self.ended);
        let how = *ended.get_or_insert(how);
        ended_error(how, self.idle_timeout)
    }

    /// Maps a socket error; the ones that mean the association is gone are
    /// remembered.
    fn end_with(&self, e: io::Error) -> TransportError {
        match e.raw_os_error() {
            Some(libc::ECONNRESET | libc::ECONNABORTED) => self.end(Ended::Aborted),
            Some(libc::ETIMEDOUT | libc::EHOSTUNREACH) => self.end(Ended::Unreachable),
            Some(libc::EPIPE | libc::ENOTCONN | libc::ESHUTDOWN) => self.end(Ended::Closed),
            _ => TransportError::Io(e),
        }
    }
}

fn ended_error(how: Ended, idle_timeout: Duration) -> TransportError {
    match how {
        Ended::Closed => TransportError::Closed,
        Ended::Aborted => TransportError::Aborted,
        Ended::Unreachable => TransportError::PeerUnreachable(idle_timeout),
    }
}

/// A listening one-to-one SCTP socket; accepted associations inherit its options.
#[derive(Debug)]
pub struct Listener {
    fd: AsyncFd<Socket>,
    config: AssociationConfig,
}

impl Listener {
    pub(crate) fn bind(
        addr: SocketAddr,
        config: &AssociationConfig,
    ) -> Result<Self, TransportError> {
        let socket = new_socket(addr, config)?;
        socket.set_reuse_address(true)?;
        socket.bind(&SockAddr::from(addr))?;
        socket.listen(LISTEN_BACKLOG)?;
        Ok(Self {
            fd: register(socket)?,
            config: config.clone(),
        })
    }

    pub(crate) fn local_addr(&self) -> Result<SocketAddr, TransportError> {
        self.fd
            .get_ref()
            .local_addr()?
            .as_socket()
            .ok_or_else(|| TransportError::Protocol("local address is not IP".into()))
    }

    pub(crate) async fn accept(&self) -> Result<Association, TransportError> {
        loop {
            let mut ready = self.fd.readable().await?;
            match ready.try_io(|fd| fd.get_ref().accept()) {
                Err(_would_block) => continue,
                Ok(Ok((socket, from))) => {
                    socket.set_nonblocking(true)?;
                    return Association::establish(socket, &self.config, from.as_socket());
                }
                Ok(Err(e)) => return Err(e.into()),
            }
        }
    }
}

pub(crate) async fn connect(
    addr: SocketAddr,
    config: &AssociationConfig,
) -> Result<Association, TransportError> {
    let socket = new_socket(addr, config)?;
    match socket.connect(&SockAddr::from(addr)) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
        Err(e) => return Err(e.into()),
    }
    let fd = register(socket)?;
    // Writable means the INIT went out, not that the association is up (the
    // socket is writable in COOKIE_WAIT already), so poll SCTP_STATUS after it;
    // the caller's connect time-out bounds the loop.
    drop(fd.writable().await?);
    loop {
        if let Some(e) = fd.get_ref().take_error()? {
            return Err(e.into());
        }
        match status(fd.get_ref()) {
            Ok(s) if s.sstat_state == sys::SCTP_STATE_ESTABLISHED => break,
            Ok(_) => tokio::time::sleep(STATUS_POLL).await,
            Err(e) => {
                // The association is gone; SO_ERROR says why, if it was set in
                // the meantime.
                return Err(fd.get_ref().take_error()?.unwrap_or(e).into());
            }
        }
    }
    Association::establish(fd.into_inner(), config, None)
}

/// A non-blocking one-to-one SCTP socket for `addr`'s family with the options
/// that must precede `connect`/`listen`: stream counts, no-delay, `SCTP_RCVINFO`,
/// buffer sizes, heartbeat and UDP encapsulation.
fn new_socket(addr: SocketAddr, config: &AssociationConfig) -> Result<Socket, TransportError> {
    let socket = Socket::new(
        Domain::for_address(addr),
        Type::STREAM,
        Some(Protocol::SCTP),
    )
    .map_err(|e| match e.raw_os_error() {
        Some(libc::EPROTONOSUPPORT | libc::ESOCKTNOSUPPORT | libc::EAFNOSUPPORT) => {
            TransportError::Unavailable(format!("no kernel SCTP on this host: {e}"))
        }
        _ => TransportError::Io(e),
    })?;
    socket.set_nonblocking(true)?;
    crate::host::ipv6_only(&socket, addr)?;
    let fd = socket.as_fd();
    let initmsg = sys::SctpInitmsg {
        sinit_num_ostreams: config.streams,
        sinit_max_instreams: config.max_inbound_streams,
        ..sys::SctpInitmsg::default()
    };
    sys::set_opt(fd, sys::SOL_SCTP, sys::SCTP_INITMSG, &initmsg)?;
    sys::set_opt(fd, sys::SOL_SCTP, sys::SCTP_NODELAY, &1)?;
    sys::set_opt(fd, sys::SOL_SCTP, sys::SCTP_RECVRCVINFO, &1)?;
    subscribe_events(&socket)?;
    size_send_buffer(&socket, config)?;
    if let Some(bytes) = config.recv_buffer {
        socket.set_recv_buffer_size(bytes)?;
    }
    if let Some(port) = config.kernel.udp_encapsulation_port {
        // SAFETY: all-zero is a valid sockaddr_storage (AF_UNSPEC: "every address").
        let any: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let encaps = sys::SctpUdpencaps {
            sue_assoc_id: 0,
            sue_address: any,
            sue_port: port.to_be(),
        };
        sys::set_opt(fd, sys::SOL_SCTP, sys::SCTP_REMOTE_UDP_ENCAPS_PORT, &encaps).map_err(
            |e| match e.raw_os_error() {
                Some(libc::ENOPROTOOPT | libc::EINVAL) => TransportError::Unavailable(format!(
                    "this kernel has no SCTP over UDP (Linux >= 5.11): {e}"
                )),
                _ => TransportError::Io(e),
            },
        )?;
    }
    if config.kernel.idata {
        offer_idata(&socket);
    }
    set_peer_params(&socket, config)?;
    Ok(socket)
}

/// Offers I-DATA (RFC 8260) in this socket's INIT or INIT ACK, best effort.
/// Linux wants `SCTP_FRAGMENT_INTERLEAVE` on first (pieces of messages on
/// different streams may then alternate in `recvmsg`, which `recv_message`
/// reassembles per stream), and refuses `SCTP_INTERLEAVING_SUPPORTED` with
/// `EPERM` unless the namespace's `net.sctp.intl_enable` is 1 (0 by default).
/// A refusal is logged at debug level and the association uses DATA, as
/// against a peer that does not offer I-DATA.
fn offer_idata(socket: &Socket) {
    let fd = socket.as_fd();
    let offered =
        sys::set_opt(fd, sys::SOL_SCTP, sys::SCTP_FRAGMENT_INTERLEAVE, &2).and_then(|()| {
            let on = sys::SctpAssocValue {
                assoc_id: 0,
                assoc_value: 1,
            };
            sys::set_opt(fd, sys::SOL_SCTP, sys::SCTP_INTERLEAVING_SUPPORTED, &on)
        });
    if let Err(e) = offered {
        tracing::debug!(
            error = %e,
            "the kernel refused I-DATA (is net.sctp.intl_enable 0?); using DATA"
        );
        // Whole messages again, as without the knob.
        let _ = sys::set_opt(fd, sys::SOL_SCTP, sys::SCTP_FRAGMENT_INTERLEAVE, &0);
    }
}

/// Sets `SO_SNDBUF` from the config, raised so that one whole `max_message` fits:
/// Linux refuses a message longer than the send buffer with `EMSGSIZE` (the
/// buffer bounds a single send, RFC 6458 8.1.26). The kernel doubles the value
/// asked for and caps it at `net.core.wmem_max`; a process with `CAP_NET_ADMIN`
/// may exceed the cap with `SO_SNDBUFFORCE`, which is tried next. If the buffer
/// still ends up smaller, `send` refuses longer messages as too large.
fn size_send_buffer(socket: &Socket, config: &AssociationConfig) -> Result<(), TransportError> {
    let needed = config.max_message;
    if config.send_buffer.is_none() && socket.send_buffer_size()? >= needed {
        return Ok(());
    }
    let asked = config.send_buffer.unwrap_or(0).max(needed.div_ceil(2));
    socket.set_send_buffer_size(asked)?;
    if socket.send_buffer_size()? < needed {
        let forced = libc::c_int::try_from(asked).unwrap_or(libc::c_int::MAX);
        if let Err(e) = sys::set_opt(
            socket.as_fd(),
            libc::SOL_SOCKET,
            libc::SO_SNDBUFFORCE,
            &forced,
        ) {
            tracing::debug!(error = %e, "SO_SNDBUFFORCE refused; keeping the capped send buffer");
        }
    }
    Ok(())
}

/// Asks for the notifications that end an association (`SCTP_EVENT`): the
/// peer's SHUTDOWN and association changes. Besides naming the cause, they wake
/// a waiting reader; Linux 6.1 does not make a one-to-one socket readable when the
/// peer's SHUTDOWN arrives while a reader waits, so without them `recv` would
/// wait forever.
fn subscribe_events(socket: &Socket) -> Result<(), TransportError> {
    for se_type in [sys::SCTP_SHUTDOWN_EVENT, sys::SCTP_ASSOC_CHANGE] {
        let event = sys::SctpEvent {
            se_assoc_id: 0,
            se_type,
            se_on: 1,
        };
        sys::set_opt(socket.as_fd(), sys::SOL_SCTP, sys::SCTP_EVENT, &event)?;
    }
    Ok(())
}

/// Heartbeat interval (`SCTP_PEER_ADDR_PARAMS`, every path): on a listening or
/// unconnected socket it is the default for future associations.
fn set_peer_params(socket: &Socket, config: &AssociationConfig) -> io::Result<()> {
    let params = sys::SctpPaddrparams {
        spp_hbinterval: u32::try_from(config.heartbeat_interval.as_millis()).unwrap_or(u32::MAX),
        spp_flags: sys::SPP_HB_ENABLE,
        ..<sys::SctpPaddrparams as sys::Pod>::zeroed()
    };
    sys::set_opt(
        socket.as_fd(),
        sys::SOL_SCTP,
        sys::SCTP_PEER_ADDR_PARAMS,
        &params,
    )?;
    Ok(())
}

/// Registers `socket` with tokio's reactor.
fn register(socket: Socket) -> Result<AsyncFd<Socket>, TransportError> {
    // SAFETY: `Socket` owns its descriptor, and nothing here closes or replaces it
    // while the `AsyncFd` lives (abort only drops the `AsyncFd`, closing it last).
    unsafe { AsyncFd::register(socket) }.map_err(|e| TransportError::Io(e.into()))
}

/// `SCTP_STATUS` of the socket's association.
fn status(socket: &Socket) -> io::Result<sys::SctpStatus> {
    let mut status = <sys::SctpStatus as sys::Pod>::zeroed();
    sys::get_sctp_opt(socket.as_fd(), sys::SCTP_STATUS, &mut status)?;
    Ok(status)
}

/// Linux kernel SCTP, registered in `crate::backend`.
#[derive(Debug)]
pub(crate) struct KernelBackend;

impl crate::contract::Backend for KernelBackend {
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
        Listener::bind(addr, config)
    }

    async fn connect(
        addr: SocketAddr,
        config: &AssociationConfig,
    ) -> Result<Association, TransportError> {
        connect(addr, config).await
    }
}

crate::contract::by_inherent_methods!(Association, Listener; idata_or_false);
