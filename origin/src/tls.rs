//! `[tls]`: what the origin does with a TLS tunnel, by the server name the
//! browser asked for (docs/origin.md, "TLS").
//!
//! A name with a certificate is terminated here (rustls, ALPN `http/1.1`, and
//! `h2` first when `tls.h2` is set) and
//! its requests are served by the same handler as plain ones; a name listed
//! under `passthrough` is relayed as bytes to an upstream that holds its keys;
//! any other name is refused (RESET REFUSED: the gateway then passes the
//! browser to the original destination).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::crypto::ring;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::ResolvesServerCertUsingSni;
use rustls::sign::CertifiedKey;
use serde::Deserialize;
use tokio_rustls::TlsAcceptor;

/// `[tls]` in origin.toml.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TlsConfig {
    /// Names terminated here, each with its certificate chain and key.
    pub certificates: Vec<CertificateEntry>,
    /// Names relayed as TCP to an upstream (TLS passthrough).
    pub passthrough: Vec<PassthroughEntry>,
    /// Offer `h2` before `http/1.1` by ALPN on terminated tunnels (default
    /// off). A browser then opens one connection, so one tunnel and one TLS
    /// handshake per site, but the scheduler sees the whole page as one job
    /// and a lost packet stalls every request in it (docs/origin.md, "TLS").
    pub h2: bool,
    /// With `h2`: answer a page (a GET for a document) over HTTP/2 with a
    /// `103 Early Hints` response naming what [`crate::server::Handler::pushes`]
    /// names for it as `Link: rel=preload`, before the final response
    /// (RFC 8297; docs/origin.md, "Early Hints"). Default off until measured.
    pub early_hints: bool,
}

/// `[[tls.certificates]]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CertificateEntry {
    /// Server names (SNI) this certificate answers, lower-case.
    pub names: Vec<String>,
    /// The certificate chain, PEM, leaf first; relative to the config file.
    pub cert: PathBuf,
    /// The private key, PEM (PKCS#8, PKCS#1 or SEC1); relative to the config file.
    pub key: PathBuf,
}

/// `[[tls.passthrough]]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PassthroughEntry {
    /// Server names (SNI) relayed, lower-case.
    pub names: Vec<String>,
    /// Where their TLS bytes go.
    pub upstream: SocketAddr,
}

impl TlsConfig {
    /// Makes relative paths relative to `dir` (the config file's directory).
    pub fn resolve_paths(&mut self, dir: &Path) {
        for entry in &mut self.certificates {
            for path in [&mut entry.cert, &mut entry.key] {
                if path.is_relative() {
                    *path = dir.join(&*path);
                }
            }
        }
    }

    /// Rejects what cannot work, naming the key and the reason.
    pub fn validate(&self) -> Result<(), (String, String)> {
        if self.early_hints && !self.h2 {
            // Chromium acts on 103 over HTTP/2 only, and hyper's HTTP/1.1
            // server cannot send one: without h2 the key would do nothing.
            return Err((
                "tls.early_hints".into(),
                "needs tls.h2 = true (Early Hints are sent over HTTP/2 only)".into(),
            ));
        }
        let mut seen = std::collections::HashSet::new();
        let lists = self
            .certificates
            .iter()
            .map(|c| ("tls.certificates.names", &c.names))
            .chain(
                self.passthrough
                    .iter()
                    .map(|p| ("tls.passthrough.names", &p.names)),
            );
        for (key, names) in lists {
            if names.is_empty() {
                return Err((key.into(), "at least one name is needed".into()));
            }
            for name in names {
                if !gateway_protocol::message::valid_server_name(name) {
                    return Err((key.into(), format!("{name:?} is not a lower-case DNS name")));
                }
                if !seen.insert(name.as_str()) {
                    return Err((key.into(), format!("{name:?} is listed twice")));
                }
            }
        }
        Ok(())
    }
}

/// Why `[tls]` could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A certificate or key file is missing or not PEM.
    #[error("tls: reading {path}: {reason}")]
    Read {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// rustls refused the key or the certificate for a name.
    #[error("tls: {name}: {reason}")]
    Refused {
        /// The server name.
        name: String,
        /// rustls's reason.
        reason: String,
    },
}

/// What to do with one tunnel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TunnelRoute {
    /// Terminate TLS here and serve the requests.
    Terminate,
    /// Relay the bytes to this upstream.
    Passthrough(SocketAddr),
}

/// `[tls]` loaded: the acceptor for terminated names and the passthrough map.
#[derive(Clone)]
pub struct Tunnels {
    acceptor: TlsAcceptor,
    terminated: Arc<[String]>,
    passthrough: Arc<HashMap<String, SocketAddr>>,
    early_hints: bool,
}

impl std::fmt::Debug for Tunnels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tunnels")
            .field("terminated", &self.terminated)
            .field("passthrough", &self.passthrough)
            .field("early_hints", &self.early_hints)
            .finish_non_exhaustive()
    }
}

impl Tunnels {
    /// Reads every certificate and key and builds the rustls server config:
    /// TLS 1.2 and 1.3, no client certificates, ALPN `http/1.1` only unless
    /// `tls.h2` (HTTP/2 multiplexes a page's requests inside one tunnel, out
    /// of the scheduler's sight; docs/origin.md, "TLS").
    pub fn load(config: &TlsConfig) -> Result<Self, TlsError> {
        let provider = Arc::new(ring::default_provider());
        let mut resolver = ResolvesServerCertUsingSni::new();
        let mut terminated = Vec::new();
        for entry in &config.certificates {
            let key = certified_key(entry, &provider)?;
            for name in &entry.names {
                resolver
                    .add(name, key.clone())
                    .map_err(|e| TlsError::Refused {
                        name: name.clone(),
                        reason: e.to_string(),
                    })?;
                terminated.push(name.clone());
            }
        }
        let mut server = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Refused {
                name: "*".into(),
                reason: e.to_string(),
            })?
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(resolver));
        server.alpn_protocols = if config.h2 {
            vec![b"h2".to_vec(), b"http/1.1".to_vec()]
        } else {
            vec![b"http/1.1".to_vec()]
        };
        let passthrough = config
            .passthrough
            .iter()
            .flat_map(|p| p.names.iter().map(|n| (n.clone(), p.upstream)))
            .collect();
        Ok(Self {
            acceptor: TlsAcceptor::from(Arc::new(server)),
            terminated: terminated.into(),
            passthrough: Arc::new(passthrough),
            early_hints: config.h2 && config.early_hints,
        })
    }

    /// What to do with a tunnel for `server_name`; `None`: refuse it.
    pub fn route(&self, server_name: &str) -> Option<TunnelRoute> {
        if self.terminated.iter().any(|n| n == server_name) {
            return Some(TunnelRoute::Terminate);
        }
        self.passthrough
            .get(server_name)
            .map(|upstream| TunnelRoute::Passthrough(*upstream))
    }

    /// The acceptor for terminated names.
    pub fn acceptor(&self) -> &TlsAcceptor {
        &self.acceptor
    }

    /// `tls.early_hints` (with `tls.h2`): pages served over HTTP/2 get a
    /// `103 Early Hints` first.
    pub fn early_hints(&self) -> bool {
        self.early_hints
    }
}

fn certified_key(
    entry: &CertificateEntry,
    provider: &rustls::crypto::CryptoProvider,
) -> Result<CertifiedKey, TlsError> {
    let read_error = |path: &Path, reason: String| TlsError::Read {
        path: path.to_owned(),
        reason,
    };
    let chain = CertificateDer::pem_file_iter(&entry.cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| read_error(&entry.cert, e.to_string()))?;
    if chain.is_empty() {
        return Err(read_error(&entry.cert, "no certificate in it".into()));
    }
    let key = PrivateKeyDer::from_pem_file(&entry.key)
        .map_err(|e| read_error(&entry.key, e.to_string()))?;
    let signing = provider
        .key_provider
        .load_private_key(key)
        .map_err(|e| read_error(&entry.key, e.to_string()))?;
    Ok(CertifiedKey::new(chain, signing))
}
