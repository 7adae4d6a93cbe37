//! STUB until the real module lands from its branch: the agreed API only.
#![allow(dead_code, unused_variables, missing_docs, reason = "stub")]

use crate::config::GatewayConfig;

#[derive(Debug)]
pub struct Interception;

#[derive(Debug, thiserror::Error)]
pub enum InterceptError {
    #[error("stub")]
    Stub,
}

#[derive(Debug)]
pub struct CleanupReport;

impl std::fmt::Display for CleanupReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("nothing")
    }
}

impl Interception {
    pub fn install(config: &GatewayConfig) -> Result<Interception, InterceptError> {
        Err(InterceptError::Stub)
    }
    pub fn remove(self) -> Result<(), InterceptError> {
        Ok(())
    }
}

pub fn cleanup(config: &GatewayConfig) -> Result<CleanupReport, InterceptError> {
    Ok(CleanupReport)
}

pub fn ruleset_text(config: &GatewayConfig) -> String {
    String::new()
}
