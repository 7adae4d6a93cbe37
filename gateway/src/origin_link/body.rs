//! The response body handed to the HTTP front-end.

use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http_body::{Body, Frame};

use super::conn::{Event, Outcome, Pending, RequestGuard};
use super::error::LinkError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Progress {
    Open,
    Complete,
    Failed,
}

/// The body of a response from an origin: an [`http_body::Body`] of RESPONSE_BODY
/// chunks.
///
/// It ends (`None`) only after RESPONSE_END whose `body_len` equals the bytes it
/// yielded. Association death, a RESET from the origin, a length mismatch or a
/// stalled reader yield one `Err` instead: a truncated body is never presented as
/// complete. Dropping it before the end abandons the request (CANCEL to the
/// origin), which stops the origin's sending.
pub struct ResponseBody {
    rx: tokio::sync::mpsc::Receiver<Event>,
    outcome: Outcome,
    /// Abandons the request on drop; harmless once the response has ended.
    /// Also counts the bytes taken toward the stream's backlog.
    guard: RequestGuard,
    delivered: u64,
    progress: Progress,
}

impl ResponseBody {
    pub(crate) fn new(pending: Pending) -> Self {
        Self {
            rx: pending.rx,
            outcome: pending.outcome,
            guard: pending.guard,
            delivered: 0,
            progress: Progress::Open,
        }
    }

    /// Body bytes yielded so far.
    pub fn delivered(&self) -> u64 {
        self.delivered
    }

    fn fail(&mut self, error: LinkError) -> Poll<Option<Result<Frame<Bytes>, LinkError>>> {
        self.progress = Progress::Failed;
        Poll::Ready(Some(Err(error)))
    }
}

impl fmt::Debug for ResponseBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseBody")
            .field("delivered", &self.delivered)
            .field("progress", &self.progress)
            .finish_non_exhaustive()
    }
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = LinkError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, LinkError>>> {
        let this = &mut *self;
        if this.progress != Progress::Open {
            return Poll::Ready(None);
        }
        match ready!(this.rx.poll_recv(cx)) {
            Some(Event::Data(data)) => {
                this.delivered += data.len() as u64;
                this.guard.delivered(data.len() as u64);
                Poll::Ready(Some(Ok(Frame::data(data))))
            }
            Some(Event::End(body_len)) if body_len == this.delivered => {
                this.progress = Progress::Complete;
                Poll::Ready(None)
            }
            Some(Event::End(body_len)) => {
                let delivered = this.delivered;
                this.fail(LinkError::Malformed(format!(
                    "RESPONSE_END counts {body_len} body bytes, {delivered} arrived"
                )))
            }
            Some(Event::Head(_)) => {
                this.fail(LinkError::Malformed("a second response head".into()))
            }
            // The session lets no tunnel message reach a request.
            Some(Event::Tunnel { .. } | Event::Credit(_)) => {
                this.fail(LinkError::Malformed("tunnel data on a request".into()))
            }
            None => {
                let error = Pending::take_error(&this.outcome, || {
                    LinkError::Broken("the association's receive task ended".into())
                });
                this.fail(error)
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.progress == Progress::Complete
    }
}
