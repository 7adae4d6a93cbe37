//! The one place that knows every backend: the list that registers each
//! implementation of the contract in `contract` ([`Backend`],
//! [`BackendAssociation`], [`BackendListener`]) once (`backends!` at the end
//! of this file).
//!
//! The list generates [`BackendKind`], its names for the configuration files,
//! and the enums behind [`crate::Association`] and [`crate::Listener`] with one
//! statically dispatched `match` per call, so a call costs what it cost before
//! the trait (no boxing, no virtual call on `send` and `recv`).
//!
//! Adding a backend: a module that implements the three traits on its own
//! types (its settings in its own `AssociationConfig` section, checked by its
//! [`Backend::validate`]), then one line in `backends!`. Nothing else in the
//! crate names a backend, apart from the typed accessors
//! [`crate::Association::kernel`] and [`crate::Association::userspace`].
//!
//! Order inside the crate: `lib` > `backend` > one module per backend >
//! `contract` > `config` > {`error`, `host`}; a backend never imports
//! another.

use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::config::AssociationConfig;
use crate::contract::{Backend, BackendAssociation, BackendListener};
use crate::error::TransportError;
use crate::message::{Message, StreamCounts};

/// Registers the backends: for each, its [`BackendKind`] variant, its name in
/// the configuration, the words the logs use for it, and its [`Backend`]
/// implementation. A `#[cfg(...)]` before a line leaves the backend out of
/// builds without that configuration.
macro_rules! backends {
    ($(
        $(#[doc = $doc:literal])*
        $(#[cfg($cfg:meta)])?
        $variant:ident = $name:literal, $label:literal, $wire:ident => $backend:path;
    )*) => {
        /// A concrete backend.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum BackendKind {
            $(
                $(#[doc = $doc])*
                $(#[cfg($cfg)])?
                $variant,
            )*
        }

        impl BackendKind {
            /// Every backend this build carries, in registration order.
            pub const ALL: &[BackendKind] = &[$( $(#[cfg($cfg)])? BackendKind::$variant, )*];

            /// Its name in the configuration (`backend = "..."`).
            pub fn name(self) -> &'static str {
                match self {
                    $( $(#[cfg($cfg)])? BackendKind::$variant => $name, )*
                }
            }

            /// What the logs call it ("userspace SCTP").
            pub fn label(self) -> &'static str {
                match self {
                    $( $(#[cfg($cfg)])? BackendKind::$variant => $label, )*
                }
            }

            /// What its packets are on the wire, for a firewall or a
            /// doctor's advice.
            pub fn wire(self) -> Wire {
                match self {
                    $( $(#[cfg($cfg)])? BackendKind::$variant => Wire::$wire, )*
                }
            }
        }

        /// The chosen backend's check of a connecting side's settings.
        pub(crate) fn validate_connecting(
            kind: BackendKind,
            config: &AssociationConfig,
        ) -> Result<(), TransportError> {
            match kind {
                $(
                    $(#[cfg($cfg)])?
                    BackendKind::$variant => <$backend as Backend>::validate_connecting(config),
                )*
            }
        }

        /// Every backend's own check of its settings.
        pub(crate) fn validate_each(config: &AssociationConfig) -> Result<(), TransportError> {
            $(
                $(#[cfg($cfg)])?
                <$backend as Backend>::validate(config)?;
            )*
            Ok(())
        }

        /// An association of whichever backend.
        #[derive(Debug)]
        pub(crate) enum AnyAssociation {
            $(
                $(#[cfg($cfg)])?
                $variant(<$backend as Backend>::Association),
            )*
        }

        /// A listener of whichever backend.
        #[derive(Debug)]
        #[cfg_attr(
            not(feature = "baselines"),
            expect(
                clippy::large_enum_variant,
                reason = "one per bound address, made once; the kernel's holds its config"
            )
        )]
        pub(crate) enum AnyListener {
            $(
                $(#[cfg($cfg)])?
                $variant(<$backend as Backend>::Listener),
            )*
        }

        impl AnyListener {
            pub(crate) async fn bind(
                kind: BackendKind,
                addr: SocketAddr,
                config: &AssociationConfig,
            ) -> Result<Self, TransportError> {
                Ok(match kind {
                    $(
                        $(#[cfg($cfg)])?
                        BackendKind::$variant => {
                            AnyListener::$variant(<$backend as Backend>::bind(addr, config).await?)
                        }
                    )*
                })
            }

            pub(crate) fn local_addr(&self) -> Result<SocketAddr, TransportError> {
                match self {
                    $( $(#[cfg($cfg)])? AnyListener::$variant(l) => BackendListener::local_addr(l), )*
                }
            }

            pub(crate) fn cert_sha256(&self) -> Option<&str> {
                match self {
                    $( $(#[cfg($cfg)])? AnyListener::$variant(l) => BackendListener::cert_sha256(l), )*
                }
            }

            pub(crate) async fn accept(&self) -> Result<AnyAssociation, TransportError> {
                Ok(match self {
                    $(
                        $(#[cfg($cfg)])?
                        AnyListener::$variant(l) => AnyAssociation::$variant(BackendListener::accept(l).await?),
                    )*
                })
            }
        }

        impl AnyAssociation {
            pub(crate) async fn connect(
                kind: BackendKind,
                addr: SocketAddr,
                config: &AssociationConfig,
            ) -> Result<Self, TransportError> {
                Ok(match kind {
                    $(
                        $(#[cfg($cfg)])?
                        BackendKind::$variant => AnyAssociation::$variant(
                            <$backend as Backend>::connect(addr, config).await?,
                        ),
                    )*
                })
            }

            pub(crate) fn kind(&self) -> BackendKind {
                match self {
                    $( $(#[cfg($cfg)])? AnyAssociation::$variant(_) => BackendKind::$variant, )*
                }
            }
        }

        // One statically dispatched call per method of `BackendAssociation`.
        impl AnyAssociation {
            pub(crate) fn streams(&self) -> StreamCounts {
                match self {
                    $( $(#[cfg($cfg)])? AnyAssociation::$variant(a) => BackendAssociation::streams(a), )*
                }
            }

            pub(crate) fn peer_addr(&self) -> SocketAddr {
                match self {
                    $( $(#[cfg($cfg)])? AnyAssociation::$variant(a) => BackendAssociation::peer_addr(a), )*
                }
            }

            pub(crate) fn idata(&self) -> bool {
                match self {
                    $( $(#[cfg($cfg)])? AnyAssociation::$variant(a) => BackendAssociation::idata(a), )*
                }
            }

            pub(crate) fn sctp_stats(&self) -> Option<sctp::Stats> {
                match self {
                    $( $(#[cfg($cfg)])? AnyAssociation::$variant(a) => BackendAssociation::sctp_stats(a), )*
                }
            }

            pub(crate) async fn send(&self, stream: u16, data: Bytes) -> Result<(), TransportError> {
                match self {
                    $( $(#[cfg($cfg)])? AnyAssociation::$variant(a) => BackendAssociation::send(a, stream, data).await, )*
                }
            }

            pub(crate) async fn recv(&self) -> Result<Message, TransportError> {
                match self {
                    $( $(#[cfg($cfg)])? AnyAssociation::$variant(a) => BackendAssociation::recv(a).await, )*
                }
            }

            pub(crate) fn buffered(&self, stream: u16) -> Option<usize> {
                match self {
                    $( $(#[cfg($cfg)])? AnyAssociation::$variant(a) => BackendAssociation::buffered(a, stream), )*
                }
            }

            pub(crate) fn buffered_each(
                &self,
                streams: impl IntoIterator<Item = u16>,
                out: &mut Vec<(u16, u64)>,
            ) {
                match self {
                    $( $(#[cfg($cfg)])? AnyAssociation::$variant(a) => BackendAssociation::buffered_each(a, streams, out), )*
                }
            }

            pub(crate) async fn close(&self) -> Result<(), TransportError> {
                match self {
                    $( $(#[cfg($cfg)])? AnyAssociation::$variant(a) => BackendAssociation::close(a).await, )*
                }
            }

            pub(crate) fn abort(&self) {
                match self {
                    $( $(#[cfg($cfg)])? AnyAssociation::$variant(a) => BackendAssociation::abort(a), )*
                }
            }
        }
    };
}

backends! {
    /// Linux kernel SCTP, one-to-one sockets.
    Kernel = "kernel", "kernel SCTP", Sctp => crate::kernel::KernelBackend;
    /// Our own SCTP core over UDP (RFC 6951 framing).
    Userspace = "userspace", "userspace SCTP", Udp => crate::userspace::UserspaceBackend;
    /// The protocol multiplexed over one TCP connection (a baseline).
    #[cfg(feature = "baselines")]
    FramedTcp = "framed-tcp", "framed TCP", Tcp => crate::framed_tcp::FramedTcpBackend;
    /// QUIC (quinn), one QUIC stream per stream number (a baseline).
    #[cfg(feature = "baselines")]
    Quic = "quic", "QUIC", Udp => crate::quic::QuicBackend;
}

/// The backends a build without the `baselines` feature leaves out, by name,
/// so that a configuration naming one is told why it is refused.
const BASELINE_NAMES: [&str; 2] = ["framed-tcp", "quic"];

/// What a backend's packets are on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    /// Native SCTP, IP protocol 132 (the kernel backend; in UDP where
    /// `[transport.kernel] udp_encapsulation_port` is set).
    Sctp,
    /// UDP datagrams.
    Udp,
    /// One TCP connection.
    Tcp,
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for BackendKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        BackendKind::ALL
            .iter()
            .copied()
            .find(|kind| kind.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = BackendKind::ALL.iter().map(|k| k.name()).collect();
                if BASELINE_NAMES.contains(&s) {
                    format!(
                        "transport `{s}` is a benchmark baseline this build leaves out \
                         (build with the `baselines` feature; this one has {})",
                        names.join(", ")
                    )
                } else {
                    format!(
                        "unknown transport `{s}` (expected auto or one of {})",
                        names.join(", ")
                    )
                }
            })
    }
}

impl Serialize for BackendKind {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for BackendKind {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

/// What the configuration asks for: a backend, or `auto`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BackendChoice {
    /// Userspace SCTP over UDP, whether or not the host has kernel SCTP
    /// (see [`BackendChoice::decide`] for why).
    #[default]
    Auto,
    /// Always this backend.
    Fixed(BackendKind),
}

impl From<BackendKind> for BackendChoice {
    fn from(kind: BackendKind) -> Self {
        BackendChoice::Fixed(kind)
    }
}

impl BackendChoice {
    /// The backend to use on this host.
    pub fn resolve(self) -> BackendKind {
        self.decide().0
    }

    /// The backend to use on this host and why, for the daemons' start-up log.
    ///
    /// `Auto` is our userspace SCTP over UDP even where the kernel has SCTP.
    /// Ours is built for this job (a BBR-family controller that does not read
    /// random loss as congestion, RACK-TLP, a delayed SACK of milliseconds,
    /// pacing); Linux SCTP is Reno-like with a 1 s minimum RTO and a 200 ms
    /// delayed SACK (docs/transport.md has the figures). And both ends of an
    /// association must pick the same wire: a gateway on a router with the
    /// `sctp` module and an origin in a container without it would otherwise
    /// speak native SCTP and SCTP over UDP past each other. A kernel peer
    /// still talks to ours through its UDP encapsulation (RFC 6951, Linux
    /// 5.11+); `kernel` selects the kernel backend explicitly.
    pub fn decide(self) -> (BackendKind, &'static str) {
        match self {
            BackendChoice::Auto if crate::kernel::available() => (
                BackendKind::Userspace,
                "auto: our SCTP over UDP (BBR, RACK-TLP, short delayed SACK); this host \
                 also has kernel SCTP, which backend = \"kernel\" selects",
            ),
            BackendChoice::Auto => (
                BackendKind::Userspace,
                "auto: our SCTP over UDP; this host has no kernel SCTP",
            ),
            BackendChoice::Fixed(kind) => (kind, "configured"),
        }
    }
}

impl fmt::Display for BackendChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BackendChoice::Auto => f.write_str("auto"),
            BackendChoice::Fixed(kind) => kind.fmt(f),
        }
    }
}

impl FromStr for BackendChoice {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(BackendChoice::Auto),
            other => other.parse().map(BackendChoice::Fixed),
        }
    }
}

impl Serialize for BackendChoice {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for BackendChoice {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_ones_are_named() {
        for &kind in BackendKind::ALL {
            assert_eq!(kind.name().parse::<BackendKind>(), Ok(kind));
            assert_eq!(
                kind.name().parse::<BackendChoice>(),
                Ok(BackendChoice::Fixed(kind))
            );
        }
        assert_eq!("auto".parse::<BackendChoice>(), Ok(BackendChoice::Auto));
        let err = "sctp-proto".parse::<BackendChoice>().expect_err("gone");
        assert!(err.contains("unknown transport `sctp-proto`"), "{err}");
    }

    #[test]
    fn the_baselines_are_built_exactly_with_their_feature() {
        for name in BASELINE_NAMES {
            let parsed = name.parse::<BackendKind>();
            if cfg!(feature = "baselines") {
                assert_eq!(parsed.map(BackendKind::name), Ok(name));
            } else {
                let err = parsed.expect_err("left out");
                assert!(err.contains("`baselines` feature"), "{err}");
            }
        }
    }
}
