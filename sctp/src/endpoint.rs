//! The endpoint: one local port's demultiplexer and its stateless half of
//! the handshake (RFC 9260 5.1, 5.1.3, 5.1.5, 8.4, 8.5.1).
//!
//! A datagram is decoded (its CRC32c checked) and routed by the peer's UDP
//! address to the association that peer has. An INIT for no association is
//! answered with an INIT ACK whose state cookie carries everything the
//! association will need, signed with the endpoint's key: nothing is kept
//! until a COOKIE ECHO proves the peer can receive at its address, so an
//! INIT flood costs no memory. Everything else for no association is
//! out of the blue and answered as section 8.4 says.
//!
//! The endpoint never owns an association: `connect` and `handle` give them
//! to the caller (the driver), which hands packets back through
//! `Association::handle` and calls `forget` when one is over.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tracing::{debug, trace};

use crate::association::{Association, Incoming, Shared, Transmit, nonzero};
use crate::chunk::{Chunk, ErrorCause, Init, Packet, cause, kind};
use crate::config::{Config, ConfigError};
use crate::cookie::{CookieKey, CookieState};

/// Identifies an association among an endpoint's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AssocHandle(pub usize);

/// What a datagram meant.
#[derive(Debug)]
pub enum DatagramEvent {
    /// A packet for an existing association: pass it to `Association::handle`.
    Association(AssocHandle, Incoming),
    /// A valid COOKIE ECHO opened a new association (already established,
    /// with anything bundled behind the cookie processed). `replaces` is
    /// the association of a peer that restarted (RFC 9260 5.2.4 case A):
    /// tell it with `Association::peer_restarted` and drop it.
    NewAssociation {
        /// Its handle.
        handle: AssocHandle,
        /// The association.
        association: Box<Association>,
        /// The association it replaces, if the peer restarted.
        replaces: Option<AssocHandle>,
    },
    /// A stateless answer: INIT ACK, or the reply to an out-of-the-blue packet.
    Response(Transmit),
}

/// Counts of what the endpoint dropped, for operators.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EndpointStats {
    /// Datagrams that were not valid SCTP packets (checksum, lengths).
    pub malformed: u64,
    /// INIT ACKs sent without keeping state.
    pub init_acks: u64,
    /// COOKIE ECHOs whose cookie did not verify.
    pub forged_cookies: u64,
    /// COOKIE ECHOs whose cookie had expired.
    pub stale_cookies: u64,
    /// Out-of-the-blue packets.
    pub out_of_the_blue: u64,
}

/// One local SCTP port.
#[derive(Debug)]
pub struct Endpoint {
    shared: Arc<Shared>,
    rng: StdRng,
    /// The association each peer address has, and its tag.
    by_remote: HashMap<SocketAddr, (AssocHandle, u32)>,
    next_handle: usize,
    listening: bool,
    stats: EndpointStats,
}

impl Endpoint {
    /// An endpoint on SCTP port `local_port`; `listening`: INITs from new
    /// peers are answered. `seed` is the only randomness it ever uses (tags,
    /// initial TSNs, the cookie key): give it 32 bytes from the OS.
    pub fn new(
        config: Config,
        local_port: u16,
        listening: bool,
        seed: [u8; 32],
        now: Instant,
    ) -> Result<Self, ConfigError> {
        config.validate()?;
        let mut rng = StdRng::from_seed(seed);
        let key = CookieKey::new(rng.random());
        Ok(Endpoint {
            shared: Arc::new(Shared {
                config,
                key,
                epoch: now,
                local_port,
            }),
            rng,
            by_remote: HashMap::new(),
            next_handle: 0,
            listening,
            stats: EndpointStats::default(),
        })
    }

    /// The configuration every association gets.
    pub fn config(&self) -> &Config {
        &self.shared.config
    }

    /// What was dropped so far.
    pub fn stats(&self) -> EndpointStats {
        self.stats
    }

    /// Associations the endpoint routes to (what it keeps per peer).
    pub fn associations(&self) -> usize {
        self.by_remote.len()
    }

    /// Whether INITs from new peers are answered.
    pub fn set_listening(&mut self, listening: bool) {
        self.listening = listening;
    }

    /// Starts an association to `remote` (SCTP port `peer_port`): its INIT
    /// goes out on the first `poll_transmit`.
    pub fn connect(
        &mut self,
        now: Instant,
        remote: SocketAddr,
        peer_port: u16,
    ) -> (AssocHandle, Association) {
        let handle = self.new_handle();
        let assoc = Association::connect(
            self.shared.clone(),
            now,
            remote,
            peer_port,
            self.rng.random(),
        );
        self.by_remote.insert(remote, (handle, assoc.local_tag()));
        (handle, assoc)
    }

    /// The association is over: its address may start a new one.
    pub fn forget(&mut self, handle: AssocHandle) {
        self.by_remote.retain(|_, (h, _)| *h != handle);
    }

    fn new_handle(&mut self) -> AssocHandle {
        let handle = AssocHandle(self.next_handle);
        self.next_handle += 1;
        handle
    }

    /// One received datagram from `remote`.
    ///
    /// One UDP socket is one SCTP endpoint (RFC 6951), so the packet's
    /// destination port is not checked: a hop that translates UDP ports (a
    /// relay, a port forward) makes the peer address the port it knows us
    /// by, and the association answers from that port.
    pub fn handle(
        &mut self,
        now: Instant,
        remote: SocketAddr,
        datagram: Bytes,
    ) -> Option<DatagramEvent> {
        let packet = match Packet::decode(datagram) {
            Ok(packet) => packet,
            Err(e) => {
                trace!(%remote, error = %e, "datagram dropped");
                self.stats.malformed += 1;
                return None;
            }
        };
        let existing = self.by_remote.get(&remote).copied();
        if let Some(Chunk::CookieEcho(cookie)) = packet.chunks.first() {
            let cookie = cookie.clone();
            return self.on_cookie_echo(now, remote, packet, &cookie, existing);
        }
        if let Some((handle, _)) = existing {
            return Some(DatagramEvent::Association(
                handle,
                Incoming {
                    packet,
                    cookie: None,
                },
            ));
        }
        self.out_of_the_blue(now, remote, packet)
    }

    fn on_cookie_echo(
        &mut self,
        now: Instant,
        remote: SocketAddr,
        mut packet: Packet,
        cookie: &[u8],
        existing: Option<(AssocHandle, u32)>,
    ) -> Option<DatagramEvent> {
        // Opened at time zero so that a stale cookie still yields its state:
        // its tags address the Stale Cookie error (RFC 9260 5.1.5 item 3).
        let state = match CookieState::open(cookie, &self.shared.key, &remote, 0) {
            Ok(state) => state,
            Err(_) => {
                self.stats.forged_cookies += 1;
                return None;
            }
        };
        if packet.vtag != state.local_tag {
            self.stats.forged_cookies += 1;
            return None;
        }
        let now_ms = self.shared.now_ms(now);
        let expires = state.issued_ms.saturating_add(u64::from(state.lifetime_ms));
        if now_ms > expires {
            self.stats.stale_cookies += 1;
            let by_us = (now_ms - expires).saturating_mul(1000);
            let info =
                Bytes::copy_from_slice(&u32::try_from(by_us).unwrap_or(u32::MAX).to_be_bytes());
            let error = Chunk::Error(vec![ErrorCause::new(cause::STALE_COOKIE, info)]);
            return self.respond(
                remote,
                (state.local_port, state.peer_port),
                state.peer_tag,
                error,
            );
        }
        let replaces = match existing {
            Some((handle, tag)) if tag == state.local_tag => {
                // Cases B and D of RFC 9260 5.2.4: the association sorts them.
                return Some(DatagramEvent::Association(
                    handle,
                    Incoming {
                        packet,
                        cookie: Some(state),
                    },
                ));
            }
            // Case A: the peer restarted; the tie-tag proves the cookie was
            // issued by that association.
            Some((handle, tag)) if state.local_tie_tag == tag && tag != 0 => Some(handle),
            // Case C, or a cookie from before an association we have now.
            Some(_) => return None,
            None if !self.listening => return None,
            None => None,
        };
        let handle = self.new_handle();
        let mut association = Box::new(Association::accept(
            self.shared.clone(),
            now,
            remote,
            &state,
            self.rng.random(),
        ));
        self.by_remote
            .insert(remote, (handle, association.local_tag()));
        packet.chunks.remove(0);
        if !packet.chunks.is_empty() {
            association.handle(
                now,
                Incoming {
                    packet,
                    cookie: None,
                },
            );
        }
        Some(DatagramEvent::NewAssociation {
            handle,
            association,
            replaces,
        })
    }

    /// A packet for no association (RFC 9260 8.4), or an INIT that may
    /// start one.
    fn out_of_the_blue(
        &mut self,
        now: Instant,
        remote: SocketAddr,
        packet: Packet,
    ) -> Option<DatagramEvent> {
        self.stats.out_of_the_blue += 1;
        let first = packet.chunks.first()?;
        match first {
            Chunk::Init(init) => {
                if !self.listening || packet.vtag != 0 || packet.chunks.len() != 1 {
                    return None;
                }
                if init.initiate_tag == 0 || init.outbound_streams == 0 || init.inbound_streams == 0
                {
                    // RFC 9260 5.1: an INIT with a zero tag or zero streams is aborted.
                    let abort = Chunk::Abort {
                        reflected: false,
                        causes: vec![ErrorCause::new(cause::INVALID_PARAMETER, Bytes::new())],
                    };
                    return self.respond(
                        remote,
                        (packet.dst_port, packet.src_port),
                        init.initiate_tag,
                        abort,
                    );
                }
                let init = init.clone();
                self.stats.out_of_the_blue -= 1;
                self.stats.init_acks += 1;
                self.init_ack(now, remote, packet.src_port, packet.dst_port, init)
            }
            // Rules 2, 6 and 7: never answered.
            Chunk::Abort { .. }
            | Chunk::ShutdownComplete { .. }
            | Chunk::CookieAck
            | Chunk::Error(_) => None,
            // Rule 5: SHUTDOWN ACK is answered with SHUTDOWN COMPLETE, T set.
            Chunk::ShutdownAck => {
                let complete = Chunk::ShutdownComplete { reflected: true };
                self.respond(
                    remote,
                    (packet.dst_port, packet.src_port),
                    packet.vtag,
                    complete,
                )
            }
            // Rule 8: anything else gets an ABORT with the T bit.
            _ => {
                if packet.vtag == 0 {
                    return None;
                }
                let abort = Chunk::Abort {
                    reflected: true,
                    causes: Vec::new(),
                };
                self.respond(
                    remote,
                    (packet.dst_port, packet.src_port),
                    packet.vtag,
                    abort,
                )
            }
        }
    }

    fn init_ack(
        &mut self,
        now: Instant,
        remote: SocketAddr,
        peer_port: u16,
        local_port: u16,
        init: Init,
    ) -> Option<DatagramEvent> {
        let config = &self.shared.config;
        let idata = config.idata && init.supports_idata();
        let local_tag = nonzero(&mut self.rng);
        // Drawn even when a test fixes it, so the tags stay what the seed gives.
        let local_initial_tsn = config.initial_tsn.unwrap_or(self.rng.random());
        let lifetime =
            config.cookie_lifetime.as_millis() + u128::from(init.cookie_preservative.unwrap_or(0));
        let state = CookieState {
            issued_ms: self.shared.now_ms(now),
            lifetime_ms: u32::try_from(lifetime).unwrap_or(u32::MAX),
            local_tag,
            local_initial_tsn,
            peer_tag: init.initiate_tag,
            peer_initial_tsn: init.initial_tsn,
            peer_a_rwnd: init.a_rwnd,
            outbound_streams: config.outbound_streams.min(init.inbound_streams),
            inbound_streams: config.max_inbound_streams.min(init.outbound_streams),
            idata,
            local_port,
            peer_port,
            local_tie_tag: 0,
            peer_tie_tag: 0,
        };
        let cookie = state.seal(&self.shared.key, &remote);
        let ack = Init {
            initiate_tag: local_tag,
            a_rwnd: config.recv_window,
            outbound_streams: config.outbound_streams,
            inbound_streams: config.max_inbound_streams,
            initial_tsn: local_initial_tsn,
            cookie: Some(cookie),
            extensions: if idata {
                vec![kind::I_DATA]
            } else {
                Vec::new()
            },
            cookie_preservative: None,
            unrecognized: init.unrecognized,
        };
        self.respond(
            remote,
            (local_port, peer_port),
            init.initiate_tag,
            Chunk::InitAck(ack),
        )
    }

    /// A one-chunk packet to `remote`; `ports` are (ours as the peer
    /// addressed it, the peer's). None if the chunk cannot be encoded, which
    /// nothing an endpoint answers with can be: what it echoes of a peer is
    /// capped by `wire::MAX_REPORT_LEN`.
    fn respond(
        &self,
        remote: SocketAddr,
        ports: (u16, u16),
        vtag: u32,
        chunk: Chunk,
    ) -> Option<DatagramEvent> {
        let packet = Packet {
            src_port: ports.0,
            dst_port: ports.1,
            vtag,
            chunks: vec![chunk],
        };
        let mut buf = BytesMut::with_capacity(packet.encoded_len());
        if let Err(e) = packet.encode(&mut buf) {
            debug!(%remote, error = %e, "answer not sent");
            return None;
        }
        Some(DatagramEvent::Response(Transmit {
            destination: remote,
            contents: buf.freeze(),
        }))
    }
}
