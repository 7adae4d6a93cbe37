//! HTTP's rules as both daemons apply them: the request and response heads a
//! REQUEST and a RESPONSE_HEAD message carry, conditional requests, byte
//! ranges and validators (RFC 9110, RFC 9112).
//!
//! It never does I/O, never awaits, never reads the clock (a date is an
//! argument) and never decides what the gateway's cache stores (RFC 9111
//! stays in `gateway::cache::policy`, which calls in here for validators and
//! ranges). `httparse` does the byte-level parsing and the `http` crate's
//! types carry the result: a `HeaderValue` cannot hold CR, LF or NUL, so no
//! head written here carries an injected field.
//!
//! ```text
//!  gateway                                          origin
//!  request::write_request_head ──REQUEST──► request::RequestHead::parse
//!  response::parse_response_head ◄─RESPONSE_HEAD── response::ResponseHead::render
//!  cache answers:                                   files:
//!    conditional::not_modified                        conditional::evaluate_preconditions
//!    conditional::if_range_holds, range::parse_range  (the same two)
//! ```
//!
//! Where to start: [`request::RequestHead::parse`] and
//! [`response::parse_response_head`] for heads; [`conditional`]'s docs for how
//! a malformed entity-tag list is read (one decision for both daemons);
//! [`range::parse_range`] for Range.
//!
//! Inside the crate, `request` > `response` (a refused request is answered
//! with a [`ResponseHead`]); `conditional` and `range` import neither.
//!
//! Fuzzed as a whole by `fuzz/fuzz_targets/http_semantics.rs`.

pub mod conditional;
pub mod range;
pub mod request;
pub mod response;

pub use conditional::{EntityTag, EtagList, Precondition, Validators};
pub use range::{RangeRequest, RangeSpec, Unsatisfiable};
pub use request::{MAX_HEADERS, MAX_TARGET, RequestHead, RequestHeadError, write_request_head};
pub use response::{
    InvalidResponseField, MAX_RESPONSE_HEADERS, ParsedResponseHead, ResponseHead,
    ResponseHeadError, http_date, parse_response_head,
};
