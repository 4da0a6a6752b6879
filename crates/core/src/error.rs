//! Configuration errors. Every error renders as one clear line for the user.

use thiserror::Error;

/// Invalid configuration (a flag value, a list, a combination of options).
#[derive(Clone, Debug, Error, PartialEq)]
#[error("{0}")]
pub struct ConfigError(pub String);

impl ConfigError {
    /// A configuration error with this message.
    pub fn new(msg: impl Into<String>) -> Self {
        ConfigError(msg.into())
    }
}
