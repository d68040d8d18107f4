//! The bytes to forward (`Open.wire`): each reply's `wire` holds the OpenAI or Anthropic bytes
//! of what it carries, and the final result's `wire` the closing ones (the last SSE events, or
//! the whole body of a non-streaming response). A gateway writes them as they come.

use crate::pb;

/// A reply that carries bytes to forward: a `Parse` stream's [`pb::ParseResponse`] or a batch
/// session's [`pb::SessionOutput`].
pub trait WireReply {
    /// The final result, on the session's last reply.
    fn final_result(&self) -> Option<&pb::Final>;

    /// This reply's own bytes (without its final result's).
    fn own_wire(&self) -> &[u8];

    /// The error in the session's dialect, on a batch output that ended its session with a
    /// status (`SessionStatus.wire`); a `Parse` stream's error is in its status
    /// ([`crate::Error::wire`]).
    fn status_wire(&self) -> &[u8] {
        &[]
    }

    /// This reply's bytes, then its final result's: the pieces to forward, in order.
    fn wire_pieces(&self) -> [&[u8]; 2] {
        [self.own_wire(), self.final_result().map_or(&[][..], |f| &f.wire)]
    }
}

impl WireReply for pb::ParseResponse {
    fn final_result(&self) -> Option<&pb::Final> {
        self.r#final.as_ref()
    }

    fn own_wire(&self) -> &[u8] {
        &self.wire
    }
}

impl WireReply for pb::SessionOutput {
    fn final_result(&self) -> Option<&pb::Final> {
        self.r#final.as_ref()
    }

    fn own_wire(&self) -> &[u8] {
        &self.wire
    }

    fn status_wire(&self) -> &[u8] {
        self.status.as_ref().map_or(&[][..], |s| &s.wire)
    }
}

/// A session's replies' bytes to forward, joined in order: the whole SSE stream, or the
/// complete body.
///
/// ```
/// use parsetier_client::{pb, wire_of};
/// let replies = [
///     pb::ParseResponse { wire: b"data: 1\n\n".to_vec(), ..Default::default() },
///     pb::ParseResponse {
///         r#final: Some(pb::Final { wire: b"data: [DONE]\n\n".to_vec(), ..Default::default() }),
///         ..Default::default()
///     },
/// ];
/// assert_eq!(wire_of(&replies), b"data: 1\n\ndata: [DONE]\n\n");
/// ```
pub fn wire_of<'a, R: WireReply + 'a>(replies: impl IntoIterator<Item = &'a R>) -> Vec<u8> {
    let mut joined = Vec::new();
    for reply in replies {
        for piece in reply.wire_pieces() {
            joined.extend_from_slice(piece);
        }
    }
    joined
}
