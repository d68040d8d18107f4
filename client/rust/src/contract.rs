//! The resume contract's fields, in one place (docs/service.md, "Resume").

use crate::pb;

/// Whether the proto has the token-counted resume point (sessions are opened resumable).
pub(crate) const TOKEN_COUNTED_RESUME: bool = true;

/// The digest the server reports with a reply: the client only echoes it.
pub(crate) fn reply_digest(reply: &pb::ParseResponse) -> u32 {
    reply.output_digest
}

/// A resume point: the last reply's sequence and digest, and the answered history.
pub(crate) fn resume_point(sequence: u64, history: Vec<pb::Step>, output_digest: u32) -> Option<pb::ResumePoint> {
    Some(pb::ResumePoint { sequence, history, output_digest })
}

/// The packed outputs' digests (parallel to the keys), taken out of `packed`.
pub(crate) fn packed_digests(packed: &mut pb::PackedOutputs) -> Option<Vec<u32>> {
    Some(std::mem::take(&mut packed.output_digests)).filter(|d| !d.is_empty())
}

pub(crate) fn set_output_digest(out: &mut pb::SessionOutput, digest: u32) {
    out.output_digest = digest;
}
