//! The resume contract's fields, in one place (docs/service.md, "Resume").

use crate::pb;

/// Whether the proto has the token-counted resume point (sessions are opened resumable).
pub(crate) const TOKEN_COUNTED_RESUME: bool = false;

/// The digest the server reports with a reply (0 from a server without the field).
pub(crate) fn reply_digest(_reply: &pb::ParseResponse) -> u32 {
    0
}

/// A resume point: the last reply's sequence and digest, and the answered history.
pub(crate) fn resume_point(_sequence: u64, _history: Vec<pb::Step>, _digest: u32) -> Option<pb::ResumePoint> {
    None
}

/// The packed outputs' digests, when the server sends them.
pub(crate) fn packed_digests(_packed: &mut pb::PackedOutputs) -> Option<Vec<u32>> {
    None
}

pub(crate) fn set_output_digest(_out: &mut pb::SessionOutput, _digest: u32) {}
