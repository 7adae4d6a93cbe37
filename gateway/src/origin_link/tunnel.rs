//! The gateway's end of one TLS tunnel (docs/protocol.md, "Tunnels"): open it,
//! send the browser's bytes within the origin's window, take the origin's.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use gateway_protocol::TUNNEL_WINDOW;

use super::conn::{Conn, Event, Pending};
use super::error::LinkError;
use super::{OriginLink, StreamPin};

/// What the origin sent on a tunnel.
#[derive(Debug, PartialEq, Eq)]
pub enum TunnelEvent {
    /// Bytes for the browser.
    Data(Bytes),
    /// The origin closed its half (after any bytes in the same message).
    End,
}

/// One open tunnel. Dropping it before both halves closed abandons it
/// (RESET CANCELLED or CANCEL to the origin).
#[derive(Debug)]
pub struct OriginTunnel {
    conn: Arc<Conn>,
    pending: Pending,
    stream: u16,
    /// Bytes the origin still accepts (TUNNEL_WINDOW plus credits, minus sent).
    window: u64,
    /// An END that came with bytes, handed out after them.
    end_pending: bool,
    /// Bytes received from the origin; zero means nothing reached the browser.
    received: u64,
}

impl OriginLink {
    /// Opens a tunnel on the pin's stream toward the origin, for a browser
    /// that dialled `destination` with SNI `server_name`. Fails at once while
    /// the link is down or when the origin does not serve tunnels.
    pub async fn open_tunnel(
        &self,
        pin: &StreamPin,
        destination: SocketAddr,
        server_name: &str,
    ) -> Result<OriginTunnel, LinkError> {
        let conn = self.accepting_conn()?;
        let socket = pin.socket.get().cloned();
        let (pending, stream) = conn
            .send_tunnel_open(pin.stream, destination, server_name.to_owned(), socket)
            .await?;
        Ok(OriginTunnel {
            conn,
            pending,
            stream,
            window: u64::from(TUNNEL_WINDOW),
            end_pending: false,
            received: 0,
        })
    }
}

impl OriginTunnel {
    /// Bytes that may be sent now without waiting for credit.
    pub fn window(&self) -> usize {
        usize::try_from(self.window).unwrap_or(usize::MAX)
    }

    /// Bytes received from the origin so far.
    pub fn received(&self) -> u64 {
        self.received
    }

    /// Sends browser bytes, at most [`OriginTunnel::window`] of them (the
    /// caller reads no more than that) and at most the origin's chunk limit.
    pub async fn send(&mut self, data: Bytes, end: bool) -> Result<(), LinkError> {
        let len = data.len() as u64;
        if len > self.window {
            return Err(LinkError::Unsendable("tunnel bytes beyond the window"));
        }
        self.window -= len;
        let id = self.pending.guard.id();
        self.conn.send_tunnel_data(self.stream, id, data, end).await
    }

    /// The origin's next bytes or its END; credits are taken in passing.
    /// `Err` when the origin reset the tunnel or the association failed.
    pub async fn recv(&mut self) -> Result<TunnelEvent, LinkError> {
        if self.end_pending {
            self.end_pending = false;
            return Ok(TunnelEvent::End);
        }
        loop {
            match self.pending.rx.recv().await {
                Some(Event::Tunnel { data, end }) => {
                    self.received += data.len() as u64;
                    self.pending.guard.delivered(data.len() as u64);
                    if data.is_empty() {
                        if end {
                            return Ok(TunnelEvent::End);
                        }
                        continue;
                    }
                    self.end_pending = end;
                    return Ok(TunnelEvent::Data(data));
                }
                Some(Event::Credit(bytes)) => self.window += u64::from(bytes),
                Some(_) => return Err(LinkError::Malformed("a response on a tunnel".into())),
                None => {
                    return Err(Pending::take_error(&self.pending.outcome, || {
                        LinkError::Broken("the association's receive task ended".into())
                    }));
                }
            }
        }
    }
}
