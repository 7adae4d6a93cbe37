//! FFI: a browser connection's unsent and unacknowledged bytes, from
//! `ioctl(SIOCOUTQ)` (the same request as `TIOCOUTQ`) on its TCP socket. The
//! only `unsafe` of the origin link.

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

/// A browser connection's socket, for measuring its send queue. Holds its own
/// duplicate of the descriptor, so the number is never reused for another file
/// while this exists; dropped with the flow (it only delays the close of the
/// socket until both the connection and this are gone).
#[derive(Debug)]
pub struct BrowserSocket {
    fd: OwnedFd,
}

impl BrowserSocket {
    /// Duplicates `socket`'s descriptor (a connected TCP socket).
    pub fn of(socket: &impl AsFd) -> io::Result<Self> {
        Ok(Self {
            fd: socket.as_fd().try_clone_to_owned()?,
        })
    }

    /// Bytes written to the socket and not yet acknowledged by the peer: those
    /// still unsent plus those in flight.
    pub fn unacknowledged(&self) -> io::Result<u64> {
        let mut queued: libc::c_int = 0;
        // SAFETY: `self.fd` is an open descriptor we own; SIOCOUTQ (TIOCOUTQ) on
        // a TCP socket writes one `int` through the pointer, which points at a
        // live, aligned `c_int` for the duration of the call.
        let rc = unsafe {
            libc::ioctl(
                self.fd.as_raw_fd(),
                libc::TIOCOUTQ,
                &mut queued as *mut libc::c_int,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(u64::try_from(queued).unwrap_or(0))
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
}
