//! The response body type every layer of the gateway hands on: the front answers
//! with it, the cache stores and replays it, the origin link and the direct path
//! produce it. It is a leaf so that each of them can name it without importing
//! another (the cache must not import the front that calls it).

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;

/// Response bodies of every kind, boxed: origin streams, direct streams, cached
/// entries, and the gateway's own short messages.
pub type Body = UnsyncBoxBody<Bytes, BoxError>;
/// The error type of [`Body`].
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
