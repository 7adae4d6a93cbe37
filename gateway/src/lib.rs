//! The gateway daemon's library half: the parts that tests and tools reach directly.
//!
//! Today that is [`ebpf`], the loader for the XDP programs built from
//! `gateway-ebpf`. The binary (`src/main.rs`) is still a skeleton; interception,
//! cache and prefetch arrive with their own issues.
//!
//! What it never does: start anything on its own. Every attachment and every
//! socket is made by an explicit call and undone by dropping what it returned.

pub mod ebpf;
