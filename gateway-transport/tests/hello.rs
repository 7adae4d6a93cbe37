//! The gateway's HELLO exchange (`gateway_transport::hello`) against an origin
//! the test scripts message by message, over framed TCP on loopback: an
//! accepted answer opens the session with the smaller stream count, a wrong
//! version or a message before HELLO is refused with the session's reaction,
//! and an origin that goes away is a transport error. Every test is bounded in
//! time.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use gateway_protocol::{
    Capabilities, ErrorCode, Hello, MAX_CHUNK, Message, Reaction, Role, Session, SessionConfig,
    VERSION,
};
use gateway_transport::hello::{HelloError, open_gateway_session};
use gateway_transport::{Association, AssociationConfig, BackendKind, Listener, connect};
use tokio::time::timeout;

/// Upper bound for any one test.
const TEST_LIMIT: Duration = Duration::from_secs(30);

/// A connected gateway side and the origin side it reached.
async fn pair() -> Result<(Association, Association)> {
    let config = AssociationConfig::default();
    let any = SocketAddr::from(([127, 0, 0, 1], 0));
    let listener = Listener::bind(BackendKind::FramedTcp, any, &config).await?;
    let target = listener.local_addr()?;
    let (gateway, origin) = tokio::join!(
        connect(BackendKind::FramedTcp, target, &config),
        listener.accept()
    );
    Ok((gateway.context("connect")?, origin.context("accept")?))
}

/// Receives the gateway's HELLO on the origin side, checked by an origin
/// session that will use `data_streams`.
async fn origin_session(origin: &Association, data_streams: u16) -> Result<Session> {
    let mut session = Session::new(
        Role::Origin,
        SessionConfig {
            data_streams,
            capabilities: Capabilities::PRIORITY,
            ..SessionConfig::default()
        },
    );
    let hello = origin.recv().await?;
    if let Err(reaction) = session.handle_message(hello.stream, &hello.data) {
        bail!("the gateway's HELLO was refused: {reaction:?}");
    }
    Ok(session)
}

/// The gateway's exchange against an origin that takes the gateway's HELLO
/// with a session of `data_streams`, then `answers` on its association.
async fn exchange(
    data_streams: u16,
    answers: impl AsyncFnOnce(&Association, Session) -> Result<()>,
) -> Result<Result<Session, HelloError>> {
    timeout(TEST_LIMIT, async {
        let (gateway, origin) = pair().await?;
        let answering = async {
            let session = origin_session(&origin, data_streams).await?;
            answers(&origin, session).await
        };
        let (opened, answered) = tokio::join!(
            open_gateway_session(&gateway, Capabilities::FEEDBACK),
            answering
        );
        answered?;
        Ok(opened)
    })
    .await?
}

#[tokio::test]
async fn an_accepted_answer_opens_the_session_with_the_smaller_stream_count() -> Result<()> {
    let opened = exchange(2, async |origin, session| {
        origin.send(0, session.hello().to_bytes()).await?;
        Ok(())
    })
    .await?;
    let session = opened?;
    ensure!(session.is_open());
    ensure!(session.data_streams() == 2, "{}", session.data_streams());
    ensure!(session.peer_capabilities() == Capabilities::PRIORITY);
    Ok(())
}

#[tokio::test]
async fn another_version_is_refused_with_version_mismatch() -> Result<()> {
    let opened = exchange(1, async |origin, _| {
        let hello = Message::Hello(Hello {
            ack: true,
            version: VERSION + 1,
            data_streams: 1,
            max_chunk: MAX_CHUNK as u32,
            capabilities: Capabilities::default(),
        });
        origin.send(0, hello.to_bytes()).await?;
        Ok(())
    })
    .await?;
    match opened {
        Err(HelloError::Refused(Reaction::GoAway {
            code: ErrorCode::VersionMismatch,
        })) => Ok(()),
        other => bail!("expected a refusal for the version, got {other:?}"),
    }
}

#[tokio::test]
async fn a_message_before_hello_is_refused_as_a_protocol_error() -> Result<()> {
    let opened = exchange(1, async |origin, _| {
        let ping = Message::Ping {
            ack: false,
            opaque: 7,
        };
        origin.send(0, ping.to_bytes()).await?;
        Ok(())
    })
    .await?;
    let err = match opened {
        Err(err @ HelloError::Refused(_)) => err,
        other => bail!("expected a refusal, got {other:?}"),
    };
    ensure!(
        matches!(
            err,
            HelloError::Refused(Reaction::GoAway {
                code: ErrorCode::ProtocolError
            })
        ),
        "{err:?}"
    );
    ensure!(
        err.to_string()
            .starts_with("the origin's HELLO was refused"),
        "{err}"
    );
    Ok(())
}

#[tokio::test]
async fn an_origin_that_goes_away_is_a_transport_error() -> Result<()> {
    let opened = exchange(1, async |origin, _| {
        origin.abort();
        Ok(())
    })
    .await?;
    match opened {
        Err(HelloError::Transport(_)) => Ok(()),
        other => bail!("expected a transport error, got {other:?}"),
    }
}
