//! The state cookie (RFC 9260 sections 5.1.3 and 5.1.5): the association's
//! starting state, carried by the peer from our INIT ACK to its COOKIE ECHO,
//! so that the endpoint holds nothing for an INIT it has not yet seen
//! answered (an INIT flood allocates nothing).
//!
//! ```text
//! +---------+------------------------------------------+-------------------+
//! | version | CookieState, fixed layout, big-endian    | HMAC-SHA256 (32)  |
//! |   (1)   | (BODY_LEN bytes)                         |                   |
//! +---------+------------------------------------------+-------------------+
//!           the MAC covers version and body, then the peer's address
//! ```
//!
//! Invariants:
//! - a cookie is only accepted with the key that signed it and from the
//!   address it was issued to: the peer's address is signed but not carried
//!   (section 5.1.3 leaves the choice of what to sign to the implementation;
//!   binding to the address stops a cookie being replayed from elsewhere);
//! - the MAC is checked in constant time before any field is read, so a
//!   forged cookie learns nothing from how it fails;
//! - the lifetime is checked after the MAC (section 5.1.5 step 3), so the
//!   staleness reported in a Stale Cookie cause is that of a cookie we issued.

use std::fmt;
use std::net::{IpAddr, SocketAddr};

use bytes::{BufMut, Bytes, BytesMut};
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The HMAC the cookies are signed with.
type CookieMac = Hmac<Sha256>;

/// Layout version; a cookie of another version is malformed.
const VERSION: u8 = 1;
/// Bytes of the serialised [`CookieState`] after the version byte.
const BODY_LEN: usize = 8 + 4 + 5 * 4 + 2 * 2 + 1 + 2 * 2 + 2 * 4;
/// Bytes of the HMAC-SHA256 tag.
const MAC_LEN: usize = 32;
/// Bytes of a sealed cookie.
pub const COOKIE_LEN: usize = 1 + BODY_LEN + MAC_LEN;
/// Microseconds in a millisecond (the Stale Cookie cause counts microseconds).
const US_PER_MS: u64 = 1000;

/// The secret the endpoint signs cookies with.
#[derive(Clone)]
pub struct CookieKey {
    /// The HMAC keyed once; each use clones it.
    mac: CookieMac,
}

impl CookieKey {
    /// A key from 32 secret bytes (the caller draws them from its random source).
    pub fn new(secret: [u8; 32]) -> Self {
        CookieKey {
            mac: CookieMac::new_from_slice(&secret).expect("HMAC takes keys of any length"),
        }
    }

    /// The MAC state after the signed bytes: the cookie's version and body,
    /// then the peer's address.
    fn mac_over(&self, signed: &[u8], peer: &SocketAddr) -> CookieMac {
        let mut mac = self.mac.clone();
        mac.update(signed);
        // Canonical form, so that a peer seen as IPv4 and as IPv4-mapped IPv6
        // (on a dual-stack socket) is one peer.
        match peer.ip().to_canonical() {
            IpAddr::V4(ip) => {
                mac.update(&[4]);
                mac.update(&ip.octets());
            }
            IpAddr::V6(ip) => {
                mac.update(&[6]);
                mac.update(&ip.octets());
                if let SocketAddr::V6(v6) = peer {
                    mac.update(&v6.scope_id().to_be_bytes());
                }
            }
        }
        mac.update(&peer.port().to_be_bytes());
        mac
    }
}

impl fmt::Debug for CookieKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CookieKey").finish_non_exhaustive()
    }
}

/// Everything the association needs, carried by the peer so that the endpoint keeps no state before a valid COOKIE ECHO.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CookieState {
    /// When the INIT ACK was built, ms since the endpoint's epoch.
    pub issued_ms: u64,
    /// How long the cookie is good for, ms (Valid.Cookie.Life plus any
    /// Cookie Preservative granted).
    pub lifetime_ms: u32,
    /// Our verification tag (the Initiate Tag of our INIT ACK).
    pub local_tag: u32,
    /// Our first TSN.
    pub local_initial_tsn: u32,
    /// The peer's verification tag (the Initiate Tag of its INIT).
    pub peer_tag: u32,
    /// The peer's first TSN.
    pub peer_initial_tsn: u32,
    /// The peer's advertised receiver window, bytes.
    pub peer_a_rwnd: u32,
    /// Outbound streams, already negotiated.
    pub outbound_streams: u16,
    /// Inbound streams, already negotiated.
    pub inbound_streams: u16,
    /// Both sides support I-DATA (RFC 8260), so the association uses it.
    pub idata: bool,
    /// Our port.
    pub local_port: u16,
    /// The peer's port.
    pub peer_port: u16,
    /// Our tie-tag (RFC 9260 section 5.2.2); 0 when no association existed.
    pub local_tie_tag: u32,
    /// The peer's tie-tag (RFC 9260 section 5.2.2); 0 when no association existed.
    pub peer_tie_tag: u32,
}

/// Why a COOKIE ECHO's cookie is refused.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum CookieError {
    /// Wrong length or version.
    #[error("malformed state cookie")]
    Malformed,
    /// The MAC does not verify: another key, another peer address, or altered bytes.
    #[error("state cookie does not verify")]
    Forged,
    /// Expired: by how long, microseconds (for the Stale Cookie cause).
    #[error("state cookie expired {by_us} us ago")]
    Stale {
        /// Microseconds past the cookie's lifetime.
        by_us: u64,
    },
}

impl CookieState {
    /// Serialises and signs: fixed layout, a version byte, then HMAC-SHA256 over the layout and `peer` (the peer's address bytes, so a cookie is only good from the address it was issued to; the address itself is not in the cookie).
    pub fn seal(&self, key: &CookieKey, peer: &SocketAddr) -> Bytes {
        let mut out = BytesMut::with_capacity(COOKIE_LEN);
        out.put_u8(VERSION);
        out.put_u64(self.issued_ms);
        out.put_u32(self.lifetime_ms);
        out.put_u32(self.local_tag);
        out.put_u32(self.local_initial_tsn);
        out.put_u32(self.peer_tag);
        out.put_u32(self.peer_initial_tsn);
        out.put_u32(self.peer_a_rwnd);
        out.put_u16(self.outbound_streams);
        out.put_u16(self.inbound_streams);
        out.put_u8(u8::from(self.idata));
        out.put_u16(self.local_port);
        out.put_u16(self.peer_port);
        out.put_u32(self.local_tie_tag);
        out.put_u32(self.peer_tie_tag);
        debug_assert_eq!(out.len(), 1 + BODY_LEN, "BODY_LEN matches the layout");
        let tag = key.mac_over(&out, peer).finalize().into_bytes();
        out.put_slice(&tag);
        out.freeze()
    }

    /// Verifies (constant time, via the hmac crate's verify) and decodes; `now_ms` since the same epoch; stale when now_ms > issued_ms + lifetime_ms.
    pub fn open(
        cookie: &[u8],
        key: &CookieKey,
        peer: &SocketAddr,
        now_ms: u64,
    ) -> Result<CookieState, CookieError> {
        if cookie.len() != COOKIE_LEN {
            return Err(CookieError::Malformed);
        }
        let (signed, tag) = cookie.split_at(1 + BODY_LEN);
        key.mac_over(signed, peer)
            .verify_slice(tag)
            .map_err(|_| CookieError::Forged)?;
        // Only a cookie we signed gets here, so a bad version or flag byte
        // means a cookie from another build of ours, not an attack.
        if signed[0] != VERSION {
            return Err(CookieError::Malformed);
        }
        let mut r = Reader(&signed[1..]);
        let state = CookieState {
            issued_ms: u64::from_be_bytes(r.take()),
            lifetime_ms: u32::from_be_bytes(r.take()),
            local_tag: u32::from_be_bytes(r.take()),
            local_initial_tsn: u32::from_be_bytes(r.take()),
            peer_tag: u32::from_be_bytes(r.take()),
            peer_initial_tsn: u32::from_be_bytes(r.take()),
            peer_a_rwnd: u32::from_be_bytes(r.take()),
            outbound_streams: u16::from_be_bytes(r.take()),
            inbound_streams: u16::from_be_bytes(r.take()),
            idata: match r.take::<1>() {
                [0] => false,
                [1] => true,
                _ => return Err(CookieError::Malformed),
            },
            local_port: u16::from_be_bytes(r.take()),
            peer_port: u16::from_be_bytes(r.take()),
            local_tie_tag: u32::from_be_bytes(r.take()),
            peer_tie_tag: u32::from_be_bytes(r.take()),
        };
        let expires_ms = state.issued_ms.saturating_add(u64::from(state.lifetime_ms));
        if now_ms > expires_ms {
            return Err(CookieError::Stale {
                by_us: (now_ms - expires_ms).saturating_mul(US_PER_MS),
            });
        }
        Ok(state)
    }
}

/// Reads the fixed-size fields of a body whose length was checked against
/// `BODY_LEN`.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> [u8; N] {
        let (field, rest) = self
            .0
            .split_first_chunk::<N>()
            .expect("the body length was checked against the layout");
        self.0 = rest;
        *field
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> CookieState {
        CookieState {
            issued_ms: 1_000_000,
            lifetime_ms: 60_000,
            local_tag: 0x1111_1111,
            local_initial_tsn: 0x2222_2222,
            peer_tag: 0x3333_3333,
            peer_initial_tsn: 0x4444_4444,
            peer_a_rwnd: 131_072,
            outbound_streams: 10,
            inbound_streams: 20,
            idata: true,
            local_port: 5000,
            peer_port: 9899,
            local_tie_tag: 7,
            peer_tie_tag: 8,
        }
    }

    fn key() -> CookieKey {
        CookieKey::new([0x5a; 32])
    }

    fn peer() -> SocketAddr {
        "192.0.2.1:9899".parse().expect("address")
    }

    #[test]
    fn round_trip() {
        let cookie = state().seal(&key(), &peer());
        assert_eq!(cookie.len(), COOKIE_LEN);
        assert_eq!(cookie[0], VERSION);
        // The layout is big-endian, fields in declaration order.
        assert_eq!(&cookie[1..9], &1_000_000u64.to_be_bytes());
        assert_eq!(&cookie[9..13], &60_000u32.to_be_bytes());
        assert_eq!(
            CookieState::open(&cookie, &key(), &peer(), 1_000_000),
            Ok(state())
        );
        let edge = 1_000_000 + 60_000;
        assert_eq!(
            CookieState::open(&cookie, &key(), &peer(), edge),
            Ok(state())
        );
    }

    #[test]
    fn any_flipped_bit_is_forged() {
        let cookie = state().seal(&key(), &peer());
        for byte in 0..cookie.len() {
            for bit in 0..8 {
                let mut bad = cookie.to_vec();
                bad[byte] ^= 1 << bit;
                assert_eq!(
                    CookieState::open(&bad, &key(), &peer(), 1_000_000),
                    Err(CookieError::Forged),
                    "byte {byte} bit {bit}"
                );
            }
        }
    }

    #[test]
    fn another_peer_or_key_is_forged() {
        let cookie = state().seal(&key(), &peer());
        for other in ["192.0.2.2:9899", "192.0.2.1:9898", "[2001:db8::1]:9899"] {
            let other: SocketAddr = other.parse().expect("address");
            assert_eq!(
                CookieState::open(&cookie, &key(), &other, 1_000_000),
                Err(CookieError::Forged),
                "{other}"
            );
        }
        assert_eq!(
            CookieState::open(&cookie, &CookieKey::new([0x5b; 32]), &peer(), 1_000_000),
            Err(CookieError::Forged)
        );
    }

    #[test]
    fn ipv4_mapped_peer_is_the_same_peer() {
        let cookie = state().seal(&key(), &peer());
        let mapped: SocketAddr = "[::ffff:192.0.2.1]:9899".parse().expect("address");
        assert_eq!(
            CookieState::open(&cookie, &key(), &mapped, 1_000_000),
            Ok(state())
        );
    }

    #[test]
    fn expired_is_stale_by_the_exact_time() {
        let cookie = state().seal(&key(), &peer());
        assert_eq!(
            CookieState::open(&cookie, &key(), &peer(), 1_000_000 + 60_000 + 1),
            Err(CookieError::Stale { by_us: 1000 })
        );
        assert_eq!(
            CookieState::open(&cookie, &key(), &peer(), 1_000_000 + 60_000 + 2_500),
            Err(CookieError::Stale { by_us: 2_500_000 })
        );
    }

    #[test]
    fn wrong_length_is_malformed() {
        let cookie = state().seal(&key(), &peer());
        for len in [0, 1, COOKIE_LEN - 1] {
            assert_eq!(
                CookieState::open(&cookie[..len], &key(), &peer(), 0),
                Err(CookieError::Malformed),
                "{len} bytes"
            );
        }
        let mut long = cookie.to_vec();
        long.push(0);
        assert_eq!(
            CookieState::open(&long, &key(), &peer(), 0),
            Err(CookieError::Malformed)
        );
    }

    #[test]
    fn another_version_is_malformed() {
        let mut cookie = state().seal(&key(), &peer()).to_vec();
        cookie[0] = VERSION + 1;
        let tag = key()
            .mac_over(&cookie[..1 + BODY_LEN], &peer())
            .finalize()
            .into_bytes();
        cookie[1 + BODY_LEN..].copy_from_slice(&tag);
        assert_eq!(
            CookieState::open(&cookie, &key(), &peer(), 0),
            Err(CookieError::Malformed)
        );
    }

    #[test]
    fn debug_hides_the_secret() {
        let shown = format!("{:?}", CookieKey::new([0xab; 32]));
        assert_eq!(shown, "CookieKey { .. }");
    }
}
