//! What a `Parse` session keeps to resume on another stream (docs/service.md, "Resume", the
//! ledger's pseudo-code): its `Open`, the answered steps, the pending messages with their index on
//! the current stream, and the `sequence` and `output_digest` of the last reply.

use std::collections::VecDeque;

use crate::error::{Error, Result};
use crate::pb;

#[derive(Default)]
pub(crate) struct Ledger {
    open: pb::Open, // resumable: keep history and pending messages
    answered: Vec<pb::Step>,
    pending: VecDeque<(u64, pb::ParseRequest)>,
    next_index: u64,
    sequence: u64,
    output_digest: u32,
    finish_sent: bool,
    moved: bool, // a stream broke: the next Open carries the resume point
}

impl Ledger {
    pub(crate) fn new(open: pb::Open) -> Self {
        Ledger { open, next_index: 2, ..Default::default() }
    }

    /// Whether the session can move to another stream.
    pub(crate) fn resumable(&self) -> bool {
        self.open.resumable
    }

    pub(crate) fn finish_sent(&self) -> bool {
        self.finish_sent
    }

    /// The messages that start a stream: the `Open` (with the resume point once the session has
    /// moved), then every pending message as it was framed, numbered on the new stream from 2.
    pub(crate) fn restart(&mut self) -> Vec<pb::ParseRequest> {
        let mut open = self.open.clone();
        if self.moved {
            let (sequence, history, output_digest) = (self.sequence, self.answered.clone(), self.output_digest);
            open.resume = Some(pb::ResumePoint { sequence, history, output_digest });
        }
        let mut msgs = vec![pb::ParseRequest { open: Some(open), ..Default::default() }];
        for (index, msg) in self.pending.iter_mut() {
            *index = msgs.len() as u64 + 1;
            msgs.push(msg.clone());
        }
        self.next_index = msgs.len() as u64 + 1;
        msgs
    }

    /// The current stream broke: the next [`Ledger::restart`] resumes.
    pub(crate) fn broke(&mut self) {
        self.moved = true;
    }

    /// Records a message written to the current stream.
    pub(crate) fn sent(&mut self, msg: &pb::ParseRequest) {
        self.finish_sent |= msg.finish.is_some();
        if self.open.resumable {
            self.pending.push_back((self.next_index, msg.clone()));
        }
        self.next_index += 1;
    }

    /// Records a reply: checks its sequence, and moves the messages it covers to `answered`.
    pub(crate) fn received(&mut self, reply: &pb::ParseResponse) -> Result<()> {
        if reply.sequence != self.sequence + 1 {
            let order = format!("reply {} after {}: a gap or a repeat", reply.sequence, self.sequence);
            return Err(Error::protocol(order));
        }
        self.sequence = reply.sequence;
        self.output_digest = reply.output_digest;
        let covered = self.pending.iter().take_while(|(index, _)| *index <= reply.client_messages).count();
        for (_, msg) in self.pending.drain(..covered) {
            append_answered(&mut self.answered, msg.steps);
        }
        Ok(())
    }
}

/// Appends answered steps to a history: runs of plain id steps merged into one step, text and
/// logprob steps kept whole in their place, empty steps (keep-alives) left out.
pub(crate) fn append_answered(history: &mut Vec<pb::Step>, steps: Vec<pb::Step>) {
    for step in steps {
        if step.logprobs.is_some() || step.token_ids.is_empty() {
            if !step.token_ids.is_empty() || !step.text.is_empty() || step.text_tokens != 0 {
                history.push(step);
            }
            continue;
        }
        match history.last_mut() {
            Some(last) if last.logprobs.is_none() && !last.token_ids.is_empty() => {
                last.token_ids.extend_from_slice(&step.token_ids)
            }
            _ => history.push(pb::Step { token_ids: step.token_ids, ..Default::default() }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(ids: &[u32]) -> pb::ParseRequest {
        pb::ParseRequest {
            steps: vec![pb::Step { token_ids: ids.to_vec(), ..Default::default() }],
            ..Default::default()
        }
    }

    fn reply(sequence: u64, client_messages: u64, digest: u32) -> pb::ParseResponse {
        pb::ParseResponse { sequence, client_messages, output_digest: digest, ..Default::default() }
    }

    fn ledger() -> Ledger {
        Ledger::new(pb::Open { model: "qwen3".into(), resumable: true, ..Default::default() })
    }

    /// Answered id runs merge into one step; a text step keeps its place; unanswered messages
    /// are re-sent after the resumed Open, numbered from 2.
    #[test]
    fn history_merges_id_runs_and_pending_messages_are_resent() {
        let mut l = ledger();
        assert_eq!(l.restart().len(), 1, "a new session: the Open alone");
        l.sent(&ids(&[1, 2]));
        l.sent(&ids(&[3]));
        let text = pb::ParseRequest {
            steps: vec![pb::Step { text: "hi".into(), text_tokens: 1, ..Default::default() }],
            ..Default::default()
        };
        l.sent(&text);
        l.sent(&ids(&[4]));
        l.sent(&ids(&[5]));
        l.received(&reply(1, 3, 11)).expect("reply 1"); // covers messages 2 and 3
        l.received(&reply(2, 5, 22)).expect("reply 2"); // covers the text step and [4]
        l.broke();
        let msgs = l.restart();
        let point = msgs[0].open.as_ref().and_then(|o| o.resume.as_ref()).expect("a resume point");
        assert_eq!((point.sequence, point.output_digest), (2, 22));
        let history: Vec<_> = point.history.iter().map(|s| (s.token_ids.clone(), s.text.clone())).collect();
        assert_eq!(history, vec![(vec![1, 2, 3], String::new()), (vec![], "hi".into()), (vec![4], String::new())]);
        assert_eq!(msgs[1..], [ids(&[5])], "the unanswered message, as it was framed");
        l.received(&reply(3, 2, 33)).expect("the resumed stream counts from 2");
        l.broke();
        assert_eq!(l.restart().len(), 1, "nothing pending");
    }

    /// A gap or a repeat in the replies' sequence is an error, not output.
    #[test]
    fn a_sequence_gap_is_an_error() {
        let mut l = ledger();
        assert!(l.received(&reply(2, 1, 0)).is_err());
        let mut l = ledger();
        l.received(&reply(1, 1, 0)).expect("first");
        assert_eq!(l.received(&reply(1, 1, 0)).expect_err("a repeat").code(), tonic::Code::Internal);
    }
}
