//! Origins for the origin_link tests: the real origin driver with the synthetic
//! handler, and a scripted origin whose every message the test decides.

use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use gateway::config::OriginEntry;
use gateway::origin_link::{LinkError, ResponseBody};
use gateway_protocol::{Capabilities, Message, Role, Session, SessionConfig};
use gateway_transport::{
    Association, AssociationConfig, BackendChoice, BackendKind, Listener, QuicConfig,
};
use http_body_util::BodyExt;
use origin::response_scheduler::{ResponsePolicyKind, ResponseSchedulerConfig};
use origin::server::{DriverConfig, drive};
use origin::synthetic::SyntheticHandler;
use tokio::task::JoinHandle;

/// Streams asked for on both sides, counting stream 0.
pub(crate) const STREAMS: u16 = 9;

pub(crate) fn transport() -> AssociationConfig {
    AssociationConfig {
        streams: STREAMS,
        max_inbound_streams: STREAMS,
        connect_timeout: Duration::from_secs(1),
        quic: QuicConfig {
            // QUIC: the certificate our own TestOrigin's listener will show.
            server_cert_sha256: gateway_transport::quic::listener_cert_sha256().ok(),
            ..QuicConfig::default()
        },
        ..AssociationConfig::default()
    }
}

/// A link configuration for `kind` toward `address`, with short backoff.
pub(crate) fn entry(kind: BackendKind, address: SocketAddr) -> OriginEntry {
    OriginEntry {
        name: "test".into(),
        address,
        destinations: Vec::new(),
        hosts: vec!["test.example".into()],
        backend: BackendChoice::Fixed(kind),
        fail_open: true,
        reconnect_min: Duration::from_millis(50),
        reconnect_max: Duration::from_millis(400),

        response_timeout: Duration::from_secs(10),
        feedback: Default::default(),
        transport: transport(),
    }
}

/// A loopback address nobody listens on (for `kind`'s socket type) right now.
pub(crate) fn free_address(kind: BackendKind) -> Result<SocketAddr> {
    let any = SocketAddr::from(([127, 0, 0, 1], 0));
    Ok(match kind {
        BackendKind::FramedTcp => TcpListener::bind(any)?.local_addr()?,
        _ => UdpSocket::bind(any)?.local_addr()?,
    })
}

/// The real origin driver on a loopback listener, serving `/bytes/N` and
/// `/endless`.
pub(crate) struct TestOrigin {
    pub(crate) addr: SocketAddr,
    pub(crate) handler: Arc<SyntheticHandler>,
    accept: JoinHandle<()>,
    assocs: Arc<Mutex<Vec<Association>>>,
}

impl TestOrigin {
    /// With the shortest-remaining-first scheduler and [`transport`].
    pub(crate) async fn start(kind: BackendKind, addr: SocketAddr) -> Result<Self> {
        Self::start_with(kind, addr, ResponsePolicyKind::Scf, &transport()).await
    }

    pub(crate) async fn start_with(
        kind: BackendKind,
        addr: SocketAddr,
        policy: ResponsePolicyKind,
        transport: &AssociationConfig,
    ) -> Result<Self> {
        let listener = Listener::bind(kind, addr, transport).await?;
        let addr = listener.local_addr()?;
        let handler = Arc::new(SyntheticHandler::default());
        let assocs = Arc::new(Mutex::new(Vec::new()));
        let accept = tokio::spawn({
            let handler = Arc::clone(&handler);
            let assocs = Arc::clone(&assocs);
            async move {
                let mut drivers = Vec::new();
                while let Ok(assoc) = listener.accept().await {
                    assocs.lock().expect("not poisoned").push(assoc.clone());
                    drivers.push(AbortOnDrop(tokio::spawn(drive(
                        assoc,
                        Arc::clone(&handler),
                        driver_config(policy),
                    ))));
                }
            }
        });
        Ok(Self {
            addr,
            handler,
            accept,
            assocs,
        })
    }

    /// The origin dies: its associations are aborted, its listener is gone.
    pub(crate) fn kill(&self) {
        self.accept.abort();
        for assoc in self.assocs.lock().expect("not poisoned").drain(..) {
            assoc.abort();
        }
    }
}

impl Drop for TestOrigin {
    fn drop(&mut self) {
        self.kill();
    }
}

struct AbortOnDrop<T>(JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn driver_config(policy: ResponsePolicyKind) -> DriverConfig {
    DriverConfig {
        response_scheduler: ResponseSchedulerConfig {
            policy,
            transport_target: 32 * 1024,
            ..ResponseSchedulerConfig::default()
        },
        chunk_size: 16 * 1024,
        max_open_requests: 256,
        max_request_body: 1 << 20,
        stream_queue_limit: 64 * 1024,
        egress: None,
        tunnels: None,
    }
}

/// An origin whose messages the test writes one by one.
pub(crate) struct ScriptedOrigin {
    pub(crate) addr: SocketAddr,
    listener: Listener,
}

/// One association of a [`ScriptedOrigin`], after the HELLO exchange.
pub(crate) struct Scripted {
    pub(crate) assoc: Association,
    session: Session,
}

impl ScriptedOrigin {
    pub(crate) async fn bind(kind: BackendKind) -> Result<Self> {
        let any = SocketAddr::from(([127, 0, 0, 1], 0));
        let listener = Listener::bind(kind, any, &transport()).await?;
        Ok(Self {
            addr: listener.local_addr()?,
            listener,
        })
    }

    /// The next association, with HELLO answered, announcing every capability.
    pub(crate) async fn accept(&self) -> Result<Scripted> {
        self.accept_offering(SessionConfig::default().capabilities)
            .await
    }

    /// As [`accept`](Self::accept), announcing `capabilities` (an older origin
    /// announces fewer).
    pub(crate) async fn accept_offering(&self, capabilities: Capabilities) -> Result<Scripted> {
        let assoc = self.listener.accept().await?;
        let streams = assoc.streams();
        let mut session = Session::new(
            Role::Origin,
            SessionConfig {
                data_streams: streams.outbound.min(streams.inbound) - 1,
                capabilities,
                ..SessionConfig::default()
            },
        );
        let hello = assoc.recv().await?;
        if let Err(reaction) = session.handle_message(hello.stream, &hello.data) {
            bail!("gateway's HELLO refused: {reaction:?}");
        }
        assoc.send(0, session.hello().to_bytes()).await?;
        Ok(Scripted { assoc, session })
    }
}

impl Scripted {
    /// The next message from the gateway, checked by the origin's session.
    /// FEEDBACK (the gateway's backlog reports, which come whenever response
    /// bytes wait at the gateway) is checked and skipped.
    pub(crate) async fn recv(&mut self) -> Result<(u16, Message)> {
        loop {
            let m = self.assoc.recv().await?;
            match self.session.handle_message(m.stream, &m.data) {
                Ok(Message::Feedback(_)) => continue,
                Ok(message) => return Ok((m.stream, message)),
                Err(reaction) => bail!("origin session refused a message: {reaction:?}"),
            }
        }
    }

    pub(crate) async fn send(&self, stream: u16, message: Message) -> Result<()> {
        Ok(self.assoc.send(stream, message.to_bytes()).await?)
    }
}

/// All of a body, or its error.
pub(crate) async fn collect(mut body: ResponseBody) -> Result<Vec<u8>, LinkError> {
    let mut out = Vec::new();
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame?.into_data() {
            out.extend_from_slice(&data);
        }
    }
    Ok(out)
}

/// A GET head for `path`.
pub(crate) fn get(path: &str) -> Bytes {
    Bytes::from(format!("GET {path} HTTP/1.1\r\nhost: test.example\r\n\r\n"))
}

pub(crate) async fn bounded<T>(limit: Duration, f: impl Future<Output = Result<T>>) -> Result<T> {
    tokio::time::timeout(limit, f)
        .await
        .context("test step timed out")?
}
