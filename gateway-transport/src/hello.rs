//! The gateway's side of opening a session on an association: send our HELLO
//! on the control stream, wait for the origin's, and let the protocol's
//! [`Session`] check it (version, ACK, streams, capabilities).
//!
//! This is the one module of the crate that knows `gateway-protocol`: the
//! checks themselves stay in the I/O-free session; what lives here is the
//! exchange over an [`Association`], written once for the gateway's origin
//! link, the scheduler benchmark's client and the origin's test gateway.
//! The origin's side is its server loop (`origin::server`), which answers a
//! HELLO like any other control message.
//!
//! What the caller still decides: how long to wait (wrap the call in a
//! time-out) and how to leave an association whose HELLO failed (the gateway
//! sends GOAWAY with the [`Reaction`]'s code, tests just drop it).

use gateway_protocol::{CONTROL_STREAM, Capabilities, Reaction, Role, Session, SessionConfig};

use crate::association::Association;
use crate::error::TransportError;

/// Why the HELLO exchange did not open a session.
#[derive(Debug, thiserror::Error)]
pub enum HelloError {
    /// Beyond the control stream, no stream was granted both ways; responses
    /// come back on their request's stream, so there is nothing to carry them.
    #[error("the association has no data stream")]
    NoDataStream,
    /// Sending our HELLO or receiving the answer failed.
    #[error("HELLO exchange: {0}")]
    Transport(#[from] TransportError),
    /// The origin's first message was no acceptable HELLO; the session's
    /// reaction says how to refuse it.
    #[error("the origin's HELLO was refused ({0:?})")]
    Refused(Reaction),
}

/// Opens the gateway's session on `assoc`, announcing `capabilities`: one
/// data stream per stream granted both ways beyond the control stream, the
/// protocol's largest chunk. Returns the session once the origin's HELLO has
/// been accepted; the association is left as it is on error.
pub async fn open_gateway_session(
    assoc: &Association,
    capabilities: Capabilities,
) -> Result<Session, HelloError> {
    let counts = assoc.streams();
    let data_streams = counts.outbound.min(counts.inbound).saturating_sub(1);
    if data_streams == 0 {
        return Err(HelloError::NoDataStream);
    }
    let mut session = Session::new(
        Role::Gateway,
        SessionConfig {
            data_streams,
            capabilities,
            ..SessionConfig::default()
        },
    );
    assoc
        .send(CONTROL_STREAM, session.hello().to_bytes())
        .await?;
    let answer = assoc.recv().await?;
    session
        .handle_message(answer.stream, &answer.data)
        .map_err(HelloError::Refused)?;
    Ok(session)
}
