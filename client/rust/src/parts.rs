//! Replies too large for one message arrive in parts (`ReplyPart`): the next bytes of the
//! reply's serialized form, `more` on all but the last. They are joined here, so callers only
//! ever see whole replies (docs/service.md, "Reply size").

use prost::Message;
use tonic::Streaming;

use crate::error::{Error, Result};
use crate::pb;

/// A streamed reply type that may arrive in parts.
pub(crate) trait Parted: Message + Default + Sized {
    fn take_part(&mut self) -> Option<pb::ReplyPart>;
}

impl Parted for pb::ParseResponse {
    fn take_part(&mut self) -> Option<pb::ReplyPart> {
        self.part.take()
    }
}

impl Parted for pb::ParseBatchResponse {
    fn take_part(&mut self) -> Option<pb::ReplyPart> {
        self.part.take()
    }
}

/// The bytes of a reply whose parts are still arriving. Kept outside the receiving future, so a
/// receive that is cancelled (a `select!` branch that lost) loses no part.
#[derive(Default)]
pub(crate) struct Joiner {
    data: Vec<u8>,
    in_parts: bool,
}

/// What receiving a whole reply gave: a reply, the stream's clean end, or the status it broke
/// with (kept apart from the client's own errors so resume can judge it).
pub(crate) enum Received<T> {
    Reply(T),
    End,
    Broken(tonic::Status),
}

impl Joiner {
    /// Receives the next whole reply of `stream`; a contract violation in the parts is an error.
    pub(crate) async fn next<T: Parted>(&mut self, stream: &mut Streaming<T>) -> Result<Received<T>> {
        loop {
            let mut msg = match stream.message().await {
                Ok(Some(msg)) => msg,
                Ok(None) => {
                    self.reset();
                    return Ok(Received::End);
                }
                Err(status) => {
                    self.reset(); // parts of a reply whose stream broke go with it
                    return Ok(Received::Broken(status));
                }
            };
            let Some(part) = msg.take_part() else {
                if self.in_parts {
                    return Err(Error::protocol("a reply arrived inside the parts of another"));
                }
                return Ok(Received::Reply(msg));
            };
            self.in_parts = true;
            self.data.extend_from_slice(&part.data);
            if part.more {
                continue;
            }
            let data = std::mem::take(&mut self.data);
            self.in_parts = false;
            return T::decode(data.as_slice())
                .map(Received::Reply)
                .map_err(|e| Error::protocol(format!("the parts of a reply do not parse: {e}")));
        }
    }

    fn reset(&mut self) {
        self.data.clear();
        self.in_parts = false;
    }
}
