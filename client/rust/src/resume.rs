//! How sessions survive a broken stream: the retry policy and which statuses are a break
//! (docs/service.md, "Resume").

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tonic::Code;

/// How sessions resume after a broken stream. `attempts` is the retry budget: reconnects in a
/// row that may fail (refused, unreachable) before the last error ends the session; it is
/// renewed whenever a new stream is accepted. The backoff doubles from `initial_backoff` up to
/// `max_backoff`, with jitter, so a fleet's clients do not reconnect in lock step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResumePolicy {
    pub attempts: u32,
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
}

impl Default for ResumePolicy {
    /// 20 attempts, 50 ms doubling to 1 s: as the Go and C++ clients.
    fn default() -> Self {
        ResumePolicy { attempts: 20, initial_backoff: Duration::from_millis(50), max_backoff: Duration::from_secs(1) }
    }
}

impl ResumePolicy {
    /// The wait before retry `attempt` (0-based): half the doubled backoff plus a random half.
    pub(crate) fn backoff(&self, attempt: u32) -> Duration {
        let doubled = self.initial_backoff.saturating_mul(1u32.checked_shl(attempt.min(30)).unwrap_or(u32::MAX));
        let full = doubled.min(self.max_backoff);
        let half = full / 2;
        half + half.mul_f64(jitter())
    }
}

/// A number in [0, 1) that differs between calls and processes (no generator crate needed for
/// spreading reconnects).
fn jitter() -> f64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static STATE: AtomicU64 = AtomicU64::new(0);
    let seed = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0);
    let mut x = STATE.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed) ^ seed ^ u64::from(std::process::id());
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    (x >> 11) as f64 / (1u64 << 53) as f64
}

/// Trailing metadata of the server's own fault, never retried, and of a hand-off, always retried.
pub const FAULT_TRAILER: &str = "parsetier-fault";
pub const HANDOFF_TRAILER: &str = "parsetier-handoff";

/// The proto's retry rule (the comment on `ParserService`), from the code and trailers of
/// `status`. No message text is read.
pub fn retryable(status: &tonic::Status) -> bool {
    let trailers = status.metadata();
    !trailers.contains_key(FAULT_TRAILER)
        && (trailers.contains_key(HANDOFF_TRAILER)
            || matches!(status.code(), Code::Unavailable | Code::Cancelled | Code::Internal | Code::Unknown))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: Code, message: &str, trailer: Option<(&'static str, &'static str)>) -> tonic::Status {
        let mut metadata = tonic::metadata::MetadataMap::new();
        if let Some((key, value)) = trailer {
            metadata.insert(key, value.parse().unwrap());
        }
        tonic::Status::with_metadata(code, message, metadata)
    }

    /// The proto's retry rule: the trailers first, then the code, never the message.
    #[test]
    fn the_retry_rule_reads_code_and_trailers_only() {
        let fault = Some((FAULT_TRAILER, "server"));
        let internal_text = "internal server error; the server log has the details";
        assert!(!retryable(&status(Code::Internal, internal_text, fault)));
        assert!(!retryable(&status(Code::Unavailable, "x", fault)));
        assert!(retryable(&status(Code::Internal, internal_text, None)));
        assert!(retryable(&status(Code::Unknown, "a proxy's page", None)));
        assert!(retryable(&status(Code::Cancelled, "", None)));
        assert!(retryable(&status(Code::Unavailable, "draining", Some((HANDOFF_TRAILER, "resume")))));
        assert!(!retryable(&status(Code::InvalidArgument, "unexpected HTTP status code", None)));
        assert!(!retryable(&status(Code::FailedPrecondition, "Internal", None)));
    }
}
