//! A browser connection as the gateway measures it: the response bytes handed
//! on toward it, the bytes written to its socket, and (FFI) the socket's unsent
//! and unacknowledged bytes from `ioctl(SIOCOUTQ)` (the same request as
//! `TIOCOUTQ`). The only `unsafe` of the browser and origin paths.
//!
//! ```text
//!  ResponseBody ──handed──► hyper's write buffer, the cache's flight ──written──► socket ──SIOCOUTQ──► browser
//!                           └────── handed - written ──────┘                      └─ unacknowledged ─┘
//! ```
//!
//! `written` counts every byte written to the socket (heads, other responses
//! too), so `handed - written` (never below 0) can only underestimate what
//! waits in between.
//!
//! A leaf beside [`crate::client_bytes`]: the accepted connection is wrapped
//! where it is accepted ([`crate::listener::Intercepted::into_counted`]); the
//! origin link only reads the [`BrowserSocket`] a pinned stream watches, for
//! its backlog (FEEDBACK).

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A browser connection's socket, for measuring its send queue.
///
/// The front's connections lend it their descriptor
/// ([`CountedStream::measured`]): no second descriptor per connection (one
/// each made 10,000 connections need 20,000 descriptors,
/// bench/results/load.md). The stream that owns the descriptor withdraws it
/// before closing it, under the write lock, while every measurement holds the
/// read lock: a measurement never reaches a number the kernel has given to
/// another file. Elsewhere (tests) it holds a duplicate of its own
/// ([`BrowserSocket::of`]).
#[derive(Debug)]
pub struct BrowserSocket {
    fd: RwLock<Descriptor>,
    /// Origin response bytes handed on toward this connection.
    handed: AtomicU64,
    /// Bytes written to the socket (through [`CountedStream`]).
    written: AtomicU64,
}

/// Which descriptor a [`BrowserSocket`] measures.
#[derive(Debug)]
enum Descriptor {
    /// A duplicate of its own.
    Owned(OwnedFd),
    /// The stream's own, lent by [`CountedStream::measured`].
    Lent(RawFd),
    /// The stream has closed (or is about to close) what it lent.
    Withdrawn,
}

impl BrowserSocket {
    /// Duplicates `socket`'s descriptor (a connected TCP socket).
    pub fn of(socket: &impl AsFd) -> io::Result<Self> {
        Ok(Self::with(Descriptor::Owned(
            socket.as_fd().try_clone_to_owned()?,
        )))
    }

    fn with(fd: Descriptor) -> Self {
        Self {
            fd: RwLock::new(fd),
            handed: AtomicU64::new(0),
            written: AtomicU64::new(0),
        }
    }

    /// Runs `f` on the descriptor while it cannot be closed; an error once
    /// the connection's stream has closed it.
    fn with_fd<T>(&self, f: impl FnOnce(BorrowedFd<'_>) -> io::Result<T>) -> io::Result<T> {
        let fd = self.fd.read().unwrap_or_else(PoisonError::into_inner);
        match &*fd {
            Descriptor::Owned(owned) => f(owned.as_fd()),
            // SAFETY: a lent descriptor stays open until its stream withdraws
            // it (`withdraw`, under the write lock this read lock excludes).
            Descriptor::Lent(raw) => f(unsafe { BorrowedFd::borrow_raw(*raw) }),
            Descriptor::Withdrawn => Err(io::Error::new(
                io::ErrorKind::NotConnected,
                "the browser connection has closed",
            )),
        }
    }

    /// The lending stream is about to close its descriptor: no measurement
    /// may use it from now on.
    fn withdraw(&self) {
        let mut fd = self.fd.write().unwrap_or_else(PoisonError::into_inner);
        if matches!(*fd, Descriptor::Lent(_)) {
            *fd = Descriptor::Withdrawn;
        }
    }

    /// `bytes` of an origin response were handed on toward this connection.
    pub(crate) fn handed(&self, bytes: u64) {
        self.handed.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Bytes of this connection's backlog below the origin link: handed on and
    /// not yet written to the socket, plus [`unacknowledged`](Self::unacknowledged).
    pub fn backlog(&self) -> io::Result<u64> {
        let written = self.written.load(Ordering::Relaxed);
        let pending = self.handed.load(Ordering::Relaxed).saturating_sub(written);
        Ok(pending + self.unacknowledged()?)
    }

    /// The connection's (local, peer) addresses: for an intercepted flow, the
    /// original destination and the browser.
    pub fn addresses(&self) -> io::Result<(std::net::SocketAddr, std::net::SocketAddr)> {
        self.with_fd(|fd| {
            let socket = socket2::SockRef::from(&fd);
            let as_inet = |addr: socket2::SockAddr| {
                addr.as_socket()
                    .ok_or_else(|| io::Error::other("not an IP socket"))
            };
            Ok((
                as_inet(socket.local_addr()?)?,
                as_inet(socket.peer_addr()?)?,
            ))
        })
    }

    /// Bytes written to the socket and not yet acknowledged by the peer: those
    /// still unsent plus those in flight.
    pub fn unacknowledged(&self) -> io::Result<u64> {
        self.with_fd(|fd| {
            let mut queued: libc::c_int = 0;
            // SAFETY: `fd` is open for the duration of the call (see
            // `with_fd`); SIOCOUTQ (TIOCOUTQ) on a TCP socket writes one `int`
            // through the pointer, which points at a live, aligned `c_int`.
            let rc = unsafe {
                libc::ioctl(
                    fd.as_raw_fd(),
                    libc::TIOCOUTQ,
                    &mut queued as *mut libc::c_int,
                )
            };
            if rc < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(u64::try_from(queued).unwrap_or(0))
        })
    }
}

/// A browser connection's stream whose writes count toward its
/// [`BrowserSocket`]. Reads and everything else pass through.
#[derive(Debug)]
pub struct CountedStream<S> {
    inner: S,
    socket: Option<Arc<BrowserSocket>>,
    /// The per-client figure of `/metrics`, when counted.
    client: Option<crate::client_bytes::ClientTally>,
}

impl<S: AsRawFd> CountedStream<S> {
    /// Wraps a browser connection's stream and lends its descriptor to a
    /// [`BrowserSocket`] that measures it, withdrawn when this is dropped,
    /// before the stream closes it.
    pub fn measured(stream: S) -> (Self, Arc<BrowserSocket>) {
        let socket = Arc::new(BrowserSocket::with(Descriptor::Lent(stream.as_raw_fd())));
        let counted = Self {
            inner: stream,
            socket: Some(Arc::clone(&socket)),
            client: None,
        };
        (counted, socket)
    }
}

impl<S> Drop for CountedStream<S> {
    fn drop(&mut self) {
        // Before `inner` (dropped after this returns) closes the descriptor.
        if let Some(socket) = &self.socket {
            socket.withdraw();
        }
    }
}

impl<S> CountedStream<S> {
    /// Wraps a browser connection's stream; its writes count toward `socket`
    /// (nothing is counted without one).
    pub fn new(stream: S, socket: Option<Arc<BrowserSocket>>) -> Self {
        Self {
            inner: stream,
            socket,
            client: None,
        }
    }

    /// Also counts the writes into `client`'s bytes on `/metrics`.
    pub fn with_client(mut self, client: crate::client_bytes::ClientTally) -> Self {
        self.client = Some(client);
        self
    }

    fn count(&self, written: &Poll<io::Result<usize>>) {
        let Poll::Ready(Ok(n)) = written else {
            return;
        };
        if let Some(socket) = &self.socket {
            socket.written.fetch_add(*n as u64, Ordering::Relaxed);
        }
        if let Some(client) = &self.client
            && *n > 0
        {
            client.add(*n as u64);
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for CountedStream<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for CountedStream<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let written = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.count(&written);
        written
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let written = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.count(&written);
        written
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};

    use super::*;

    #[test]
    fn counts_bytes_the_peer_has_not_read_and_acknowledged() -> io::Result<()> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let client = TcpStream::connect(listener.local_addr()?)?;
        let (mut server, _) = listener.accept()?;
        let socket = BrowserSocket::of(&server)?;
        assert_eq!(socket.unacknowledged()?, 0);
        // The client never reads: once its receive buffer is full, written
        // bytes stay in the server's send queue.
        server.set_nonblocking(true)?;
        let chunk = vec![7u8; 64 * 1024];
        let mut written = 0u64;
        for _ in 0..1024 {
            match server.write(&chunk) {
                Ok(n) => written += n as u64,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e),
            }
        }
        let queued = socket.unacknowledged()?;
        assert!(queued > 0 && queued <= written, "{queued} of {written}");
        // Read everything: the queue drains to zero (poll with a deadline).
        let mut client = client;
        client.set_read_timeout(Some(std::time::Duration::from_millis(100)))?;
        let mut sink = vec![0u8; 256 * 1024];
        let mut read = 0u64;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while read < written {
            assert!(
                std::time::Instant::now() < deadline,
                "read {read} of {written}"
            );
            match client.read(&mut sink) {
                Ok(n) => read += n as u64,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
        while socket.unacknowledged()? > 0 {
            assert!(std::time::Instant::now() < deadline, "queue never drained");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        Ok(())
    }

    #[tokio::test]
    async fn a_measured_stream_lends_its_descriptor_and_withdraws_it_on_close() -> io::Result<()> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let client = tokio::net::TcpStream::connect(listener.local_addr()?).await?;
        let (server, _) = listener.accept().await?;
        let (counted, socket) = CountedStream::measured(server);
        assert_eq!(socket.unacknowledged()?, 0);
        let (local, peer) = socket.addresses()?;
        assert_eq!(
            (local, peer),
            (listener.local_addr()?, client.local_addr()?)
        );
        drop(counted);
        // The kernel may give the number to the next file (the lowest free
        // one; other tests share this process): the socket never uses it.
        let _next = std::fs::File::open("/dev/null")?;
        let closed = socket.unacknowledged().expect_err("withdrawn");
        assert_eq!(closed.kind(), io::ErrorKind::NotConnected);
        assert!(socket.addresses().is_err());
        Ok(())
    }

    #[tokio::test]
    async fn bytes_handed_and_not_yet_written_count_until_written() -> io::Result<()> {
        use tokio::io::AsyncWriteExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let _client = tokio::net::TcpStream::connect(listener.local_addr()?).await?;
        let (server, _) = listener.accept().await?;
        let socket = Arc::new(BrowserSocket::of(&server)?);
        let mut counted = CountedStream::new(server, Some(Arc::clone(&socket)));
        socket.handed(1000);
        assert_eq!(socket.backlog()?, 1000, "all of it in the gateway");
        counted.write_all(&[1u8; 600]).await?;
        // 600 written: what the client has not acknowledged yet counts too.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while socket.unacknowledged()? > 0 {
            assert!(std::time::Instant::now() < deadline, "never acknowledged");
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        assert_eq!(socket.backlog()?, 400);
        // Heads and other responses are written too: never below zero.
        counted.write_all(&[2u8; 900]).await?;
        while socket.unacknowledged()? > 0 {
            assert!(std::time::Instant::now() < deadline, "never acknowledged");
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        assert_eq!(socket.backlog()?, 0);
        Ok(())
    }
}
