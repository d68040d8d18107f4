//! The one error type of the crate: every failure says which gRPC status it is.

use std::fmt;

pub use tonic::Code;

/// The trailing metadata key of a failed call's error in its wire dialect (docs/service.md,
/// "Errors in the dialect").
const WIRE_TRAILER: &str = "parsetier-wire-bin";

/// What went wrong. Every variant has a gRPC [`Code`] ([`Error::code`]): a server's own status is
/// kept whole ([`Error::Status`]); the client's own failures use the code a server would have
/// used for the same fault.
#[derive(Debug)]
pub enum Error {
    /// The status the server (or the transport on the way) ended the call with, e.g.
    /// `InvalidArgument` naming an out-of-vocabulary id, `NotFound` for an unknown model.
    Status(tonic::Status),
    /// The client was configured wrongly (no transport security chosen, a bad target, an
    /// unreadable certificate): nothing reached a server.
    Config(String),
    /// The server's replies broke the contract (a gap in `sequence`, parts that do not parse,
    /// packed arrays of different lengths): the code is `Internal`.
    Protocol(String),
    /// The session has ended (its final reply, or the status in its replies, says how): nothing
    /// more can be sent on it. The code is `FailedPrecondition`, as the server's for a message
    /// after the end.
    Ended,
}

impl Error {
    /// The gRPC code: the server's for [`Error::Status`], `InvalidArgument` for a configuration
    /// error, `Internal` for a reply that breaks the contract.
    pub fn code(&self) -> Code {
        match self {
            Error::Status(status) => status.code(),
            Error::Config(_) => Code::InvalidArgument,
            Error::Protocol(_) => Code::Internal,
            Error::Ended => Code::FailedPrecondition,
        }
    }

    /// The status message (the server's, or this client's description).
    pub fn message(&self) -> &str {
        match self {
            Error::Status(status) => status.message(),
            Error::Config(message) | Error::Protocol(message) => message,
            Error::Ended => "parsetier: the session has ended",
        }
    }

    /// The server's status with its metadata (trailers), when the server sent one.
    pub fn status(&self) -> Option<&tonic::Status> {
        match self {
            Error::Status(status) => Some(status),
            _ => None,
        }
    }

    /// The error in the wire dialect of the call that failed, when the server sent it (a
    /// `Render`, or a session opened with `wire`, that ended with a status): the bytes to forward
    /// to the caller, an error body (with [`Error::http_status`]) or a stream's error event.
    pub fn wire(&self) -> Option<Vec<u8>> {
        let value = self.status()?.metadata().get_bin(WIRE_TRAILER)?;
        value.to_bytes().ok().map(|bytes| bytes.to_vec()).filter(|bytes| !bytes.is_empty())
    }

    /// The HTTP status to send an error body with: the one the SDKs map to their error classes
    /// for this code (docs/service.md, "Errors in the dialect"); 500 for any other.
    pub fn http_status(&self) -> u16 {
        match self.code() {
            Code::InvalidArgument | Code::FailedPrecondition | Code::OutOfRange => 400,
            Code::Unauthenticated => 401,
            Code::PermissionDenied => 403,
            Code::NotFound => 404,
            Code::ResourceExhausted => 429,
            Code::DeadlineExceeded => 504,
            Code::Unavailable => 503,
            _ => 500,
        }
    }

    pub(crate) fn protocol(message: impl Into<String>) -> Self {
        Error::Protocol(format!("parsetier: {}", message.into()))
    }

    pub(crate) fn config(message: impl Into<String>) -> Self {
        Error::Config(format!("parsetier: {}", message.into()))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {}", self.code(), self.message())
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Status(status) => Some(status),
            _ => None,
        }
    }
}

impl From<tonic::Status> for Error {
    /// Keeps the server's status; a transport failure that tonic reports as `Unknown` or
    /// `Cancelled` (a TLS handshake the server refused, a connection reset mid-call: a status
    /// with a local cause, which a server's never has) becomes `Unavailable`, as the other gRPC
    /// stacks report it.
    fn from(status: tonic::Status) -> Self {
        if local_transport_failure(&status) {
            let cause = std::error::Error::source(&status).map(|e| format!(": {e}")).unwrap_or_default();
            return Error::Status(tonic::Status::unavailable(format!("{}{cause}", status.message())));
        }
        Error::Status(status)
    }
}

/// Whether `status` is tonic's own report of a transport failure rather than a server's status.
pub(crate) fn local_transport_failure(status: &tonic::Status) -> bool {
    matches!(status.code(), Code::Unknown | Code::Cancelled) && std::error::Error::source(status).is_some()
}

/// The crate's `Result`.
pub type Result<T, E = Error> = std::result::Result<T, E>;
