//! Resume for the batch API: a broken `ParseBatch` stream's sessions move, together, to a new
//! stream (docs/service.md, "Resume"). Free of I/O; [`crate::Batch`] drives it.
//!
//! Each session keeps its `Open`, its answered history, its pending entries (each tagged with the
//! caller's step it was sent in), and the sequence and digest of its last output. The server
//! answers every client message with one reply, so the reply to message `j` answers every entry
//! of message `j`. After a break, [`BatchLedger::replay`] re-opens every live session in ONE
//! message (its history as one packed run, its first pending entry in the same entry) and
//! re-sends the other pending entries in the following messages; entries of keys with no live
//! session (and those sent to a session after its end, unanswered) are re-sent as they were, and
//! get their status again. Outputs are sorted back into the caller's steps by their tags, so the
//! caller receives one reply per step it sent, with the outputs of an uninterrupted stream,
//! exactly once.

use std::collections::{HashMap, VecDeque};

use crate::error::{Error, Result};
use crate::pb;
use crate::session_ledger::append_answered;

/// `google.rpc.Code` of a refused open (the server is draining or overloaded): move instead.
const UNAVAILABLE: i32 = 14;

struct Session {
    key: String,
    open: pb::Open,
    history: Vec<pb::Step>,
    pending: VecDeque<(u64, pb::SessionInput, usize)>, // (index on the stream, entry, caller's step)
    sent: u64,
    sequence: u64,
    digest: u32,
    opened_at: usize,
    sending: bool, // entries may still follow (no finish or cancel sent yet)
    ended: bool,   // its end (final or status) was received
}

impl Session {
    fn send(&mut self, entry: pb::SessionInput, step: usize) -> u64 {
        self.sent += 1;
        self.pending.push_back((self.sent, entry, step));
        self.sent
    }

    fn answer(&mut self, through: u64) {
        while self.pending.front().is_some_and(|(index, _, _)| *index <= through) {
            if let Some((_, entry, _)) = self.pending.pop_front() {
                append_answered(&mut self.history, entry.steps);
            }
        }
    }

    fn received(&mut self, out: &pb::SessionOutput) -> Result<()> {
        if out.sequence != self.sequence + 1 {
            return Err(Error::protocol(format!(
                "session {:?} output {} after {}: a gap or a repeat",
                self.key, out.sequence, self.sequence
            )));
        }
        self.sequence = out.sequence;
        self.digest = out.output_digest;
        self.answer(out.client_messages);
        Ok(())
    }

    /// Renumbers the pending entries on a new stream from `first`.
    fn restart(&mut self, first: u64) {
        for (i, pending) in self.pending.iter_mut().enumerate() {
            pending.0 = first + i as u64;
        }
        self.sent = first + self.pending.len() as u64 - 1;
    }

    fn point(&self) -> pb::Open {
        let mut open = self.open.clone();
        open.resume = Some(pb::ResumePoint {
            sequence: self.sequence,
            history: self.history.clone(),
            output_digest: self.digest,
        });
        open
    }
}

/// A caller's step not delivered yet.
struct Step {
    keys: Vec<String>,
    orphans: Vec<(String, pb::SessionInput)>, // entries of no session, re-sent as they are
    outputs: HashMap<String, pb::SessionOutput>,
    until: u64, // the reply on the current stream after which it is complete
}

/// One entry of a message on the current stream: its key, its session, the caller's step, its
/// index in the session on this stream.
type Carried = Vec<(String, Option<usize>, usize, u64)>;

/// The resume state of one batch stream.
#[derive(Default)]
pub(crate) struct BatchLedger {
    sessions: Vec<Option<Session>>, // by id; None once forgotten
    order: Vec<usize>,              // sessions live or with pending entries, in the order opened
    live: HashMap<String, usize>,
    steps: VecDeque<Step>,
    step: usize, // steps sent so far
    carried: VecDeque<Carried>,
    sent: u64,
    received: u64,
    pub(crate) resumes: usize,
    moving: bool,
    pub(crate) must_move: bool, // a reply refused an open with UNAVAILABLE: move now
}

impl BatchLedger {
    fn delivered(&self) -> usize {
        self.step - self.steps.len()
    }

    pub(crate) fn in_flight(&self) -> usize {
        self.steps.len()
    }

    fn session(&mut self, id: usize) -> Option<&mut Session> {
        self.sessions.get_mut(id).and_then(Option::as_mut)
    }

    /// The caller's next step goes out on the current stream with these entries.
    pub(crate) fn sent(&mut self, entries: &[pb::SessionInput]) {
        self.step += 1;
        self.sent += 1;
        let step = self.step;
        let mut carried = Carried::with_capacity(entries.len());
        let mut record = Step {
            keys: Vec::with_capacity(entries.len()),
            orphans: Vec::new(),
            outputs: HashMap::new(),
            until: self.sent,
        };
        for entry in entries {
            let key = entry.key.clone();
            record.keys.push(key.clone());
            let live = self.live.get(&key).copied();
            let opens = entry.open.is_some() && !entry.cancel;
            let sending = live.and_then(|id| self.sessions[id].as_ref()).is_some_and(|s| s.sending);
            if opens && !sending {
                // A new session (a reopened key too): its opening entry is its message 1.
                let id = self.sessions.len();
                let mut session = Session {
                    key: key.clone(),
                    open: entry.open.clone().unwrap_or_default(),
                    history: Vec::new(),
                    pending: VecDeque::new(),
                    sent: 0,
                    sequence: 0,
                    digest: 0,
                    opened_at: step,
                    sending: entry.finish.is_none(),
                    ended: false,
                };
                let first = pb::SessionInput {
                    key: key.clone(),
                    steps: entry.steps.clone(),
                    finish: entry.finish.clone(),
                    ..Default::default()
                };
                session.send(first, step);
                self.sessions.push(Some(session));
                self.order.push(id);
                self.live.insert(key.clone(), id);
                carried.push((key, Some(id), step, 1));
                continue;
            }
            let Some(id) = live else {
                if !entry.cancel {
                    record.orphans.push((key.clone(), entry.clone())); // a cancel of no session answers nothing
                }
                carried.push((key, None, step, 0));
                continue;
            };
            let Some(session) = self.session(id) else { continue };
            if entry.cancel || entry.finish.is_some() {
                session.sending = false;
            }
            let index = session.send(entry.clone(), step);
            carried.push((key, Some(id), step, index));
        }
        self.steps.push_back(record);
        self.carried.push_back(carried);
    }

    /// A reply of the current stream (its outputs, packed ones expanded): it answers every entry
    /// of its message.
    pub(crate) fn received(&mut self, outputs: Vec<pb::SessionOutput>) -> Result<()> {
        let carried = self.carried.pop_front().unwrap_or_default();
        self.received += 1;
        if self.moving {
            self.moving = false;
            self.resumes += 1;
        }
        let mut outputs: HashMap<String, pb::SessionOutput> = outputs.into_iter().map(|o| (o.key.clone(), o)).collect();
        let delivered = self.delivered();
        for (key, id, step, index) in carried {
            let output = outputs.remove(&key);
            if let Some(id) = id {
                let Some(session) = self.session(id) else { continue };
                let refused = output.as_ref().is_some_and(|o| o.status.as_ref().is_some_and(|s| s.code == UNAVAILABLE));
                if refused && index == 1 && !session.ended {
                    // Refused because this server is draining or overloaded, not the session's
                    // own error: it stays live and pending, and the stream moves.
                    self.must_move = true;
                    continue;
                }
                if let Some(out) = output.as_ref().filter(|o| o.sequence != 0 && !session.ended) {
                    session.received(out)?;
                }
                session.answer(index);
                let ends = output.as_ref().is_some_and(|o| o.r#final.is_some() || o.status.is_some());
                if ends {
                    self.end(id);
                } else if session.ended && session.pending.is_empty() {
                    self.forget(id);
                }
            }
            if step > delivered {
                if let Some(record) = self.steps.get_mut(step - delivered - 1) {
                    if id.is_none() {
                        record.orphans.retain(|(k, _)| *k != key); // answered: never re-sent
                    }
                    if let Some(out) = output {
                        record.outputs.insert(key, out);
                    }
                }
            }
        }
        Ok(())
    }

    /// Its end was received: entries pipelined after it are no longer its (the server answers
    /// them as entries of no session, or of a new one it opens, numbered from 1).
    fn end(&mut self, id: usize) {
        let Some(session) = self.session(id) else { return };
        session.ended = true;
        let (key, idle) = (session.key.clone(), session.pending.is_empty());
        if self.live.get(&key) == Some(&id) {
            self.live.remove(&key);
        }
        if idle {
            self.forget(id);
        }
    }

    fn forget(&mut self, id: usize) {
        self.order.retain(|&o| o != id);
        self.sessions[id] = None;
    }

    /// The oldest undelivered step's outputs once complete, in the order of its entries.
    pub(crate) fn ready(&mut self) -> Option<Vec<pb::SessionOutput>> {
        if self.steps.front()?.until > self.received {
            return None;
        }
        let mut step = self.steps.pop_front()?;
        Some(step.keys.iter().filter_map(|key| step.outputs.remove(key)).collect())
    }

    /// The messages that start a new stream: message 1 re-opens every live session at its resume
    /// point, with its first pending entry; each key's other unanswered entries follow, one
    /// message each. The current stream is then the new one.
    pub(crate) fn replay(&mut self) -> Vec<Vec<pb::SessionInput>> {
        self.moving = true;
        self.must_move = false;
        type Lane = Vec<(pb::SessionInput, Option<usize>, usize, u64)>;
        let mut groups: Vec<(usize, String, Lane)> = Vec::new();
        for &id in &self.order.clone() {
            let Some(session) = self.session(id) else { continue };
            session.restart(1);
            let mut lane: Lane = Vec::new();
            let mut rest: Vec<(pb::SessionInput, usize)> =
                session.pending.iter().map(|(_, entry, tag)| (entry.clone(), *tag)).collect();
            if !session.ended {
                // Re-opened with its point; the first pending entry rides along unless it is a
                // cancel or a second open (those keep an entry of their own).
                let mut opening =
                    pb::SessionInput { key: session.key.clone(), open: Some(session.point()), ..Default::default() };
                match rest.first() {
                    Some((first, tag)) if !first.cancel && first.open.is_none() => {
                        opening.steps = first.steps.clone();
                        opening.finish = first.finish.clone();
                        lane.push((opening, Some(id), *tag, 1));
                        rest.remove(0);
                    }
                    _ => {
                        session.restart(2);
                        lane.push((opening, Some(id), 0, 1));
                    }
                }
            }
            let start = lane.len() as u64 + 1;
            for (i, (entry, tag)) in rest.into_iter().enumerate() {
                lane.push((entry, Some(id), tag, start + i as u64));
            }
            if !lane.is_empty() {
                groups.push((session.opened_at, session.key.clone(), lane));
            }
        }
        let delivered = self.delivered();
        for (n, step) in self.steps.iter().enumerate() {
            let number = delivered + n + 1;
            for (key, entry) in &step.orphans {
                groups.push((number, key.clone(), vec![(entry.clone(), None, number, 0)]));
            }
        }
        groups.sort_by_key(|group| group.0);
        let mut keys: Vec<String> = Vec::new();
        let mut lanes: HashMap<String, Lane> = HashMap::new();
        for (_, key, lane) in groups {
            if !lanes.contains_key(&key) {
                keys.push(key.clone());
            }
            lanes.entry(key).or_default().extend(lane);
        }
        self.carried.clear();
        let depth = lanes.values().map(Vec::len).max().unwrap_or(0);
        let mut messages = Vec::with_capacity(depth);
        let mut last_of: HashMap<usize, u64> = HashMap::new();
        for j in 0..depth {
            let (mut message, mut carried) = (Vec::new(), Carried::new());
            for key in &keys {
                if let Some((entry, id, tag, index)) = lanes.get(key).and_then(|lane| lane.get(j)) {
                    message.push(entry.clone());
                    carried.push((key.clone(), *id, *tag, *index));
                    if *tag != 0 {
                        last_of.insert(*tag, j as u64 + 1);
                    }
                }
            }
            messages.push(message);
            self.carried.push_back(carried);
        }
        self.sent = depth as u64;
        self.received = 0;
        let mut until = 0;
        for (n, step) in self.steps.iter_mut().enumerate() {
            until = until.max(last_of.get(&(delivered + n + 1)).copied().unwrap_or(0));
            step.until = until; // complete after its last re-sent entry
        }
        messages
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(key: &str, open: bool, ids: &[u32]) -> pb::SessionInput {
        pb::SessionInput {
            key: key.into(),
            open: open.then(|| pb::Open { model: "qwen3".into(), resumable: true, ..Default::default() }),
            steps: vec![pb::Step { token_ids: ids.to_vec(), ..Default::default() }],
            ..Default::default()
        }
    }

    fn out(key: &str, sequence: u64, client_messages: u64) -> pb::SessionOutput {
        pb::SessionOutput { key: key.into(), sequence, client_messages, output_digest: 7, ..Default::default() }
    }

    /// After a break, every live session is re-opened in ONE message at its resume point (the
    /// answered history, the last sequence and digest) with its first unanswered entry; the new
    /// stream's replies come back as the caller's step, in its entries' order.
    #[test]
    fn replay_reopens_every_live_session_in_one_message() {
        let mut l = BatchLedger::default();
        l.sent(&[entry("a", true, &[1]), entry("b", true, &[9])]);
        l.received(vec![out("a", 1, 1)]).expect("reply 1");
        assert_eq!(l.ready().map(|o| o.len()), Some(1));
        l.sent(&[entry("b", false, &[3]), entry("a", false, &[2])]);
        let replay = l.replay();
        assert_eq!(replay.len(), 1, "one message re-opens both");
        for (reopened, (key, history, pending)) in
            replay[0].iter().zip([("a", vec![1], vec![2]), ("b", vec![9], vec![3])])
        {
            assert_eq!(reopened.key, key);
            let point = reopened.open.as_ref().and_then(|o| o.resume.as_ref()).expect("resume point");
            assert_eq!(point.history.iter().flat_map(|s| s.token_ids.clone()).collect::<Vec<_>>(), history);
            assert_eq!(reopened.steps[0].token_ids, pending, "the unanswered entry rides along");
        }
        assert!(l.ready().is_none());
        l.received(vec![out("a", 2, 1), out("b", 1, 1)]).expect("the new stream's reply");
        let step = l.ready().expect("step 2 complete");
        assert_eq!(step.iter().map(|o| o.key.as_str()).collect::<Vec<_>>(), ["b", "a"], "in the step's order");
        assert_eq!(l.resumes, 1);
        assert!(l.received(vec![]).is_ok() && l.ready().is_none(), "a reply to no step is ignored");
    }

    /// A gap in a session's sequence is an error.
    #[test]
    fn a_gap_is_an_error() {
        let mut l = BatchLedger::default();
        l.sent(&[entry("a", true, &[1])]);
        assert!(l.received(vec![out("a", 2, 1)]).is_err());
    }
}
