//! The persistent HTTP cache (RFC 9111) shared by SCTP-mapped and direct traffic.
pub mod coalesce;
pub mod config;
pub mod policy;
pub mod store;
