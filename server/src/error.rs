//! The error type of the server crate.

/// Everything that can go wrong while starting or restarting an [`EmbeddedServer`](crate::EmbeddedServer).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The builder was given contradictory or unusable settings.
    #[error("invalid embedded server configuration: {0}")]
    InvalidConfig(String),

    /// An I/O operation failed; `context` names the operation.
    #[error("{context}: {source}")]
    Io {
        /// What was being done when the error happened.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },

    /// A TLS certificate, private key or client CA could not be used (feature `tls`); the
    /// message names the file or the part of the configuration at fault.
    #[error("TLS configuration: {0}")]
    Tls(String),
}

impl Error {
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }
}
