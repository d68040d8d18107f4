//! Resume for the batch API (docs/service.md, "Resume"): each session keeps its `Open`, answered
//! history, pending entries (tagged with the caller's step they were sent in), sequence and
//! digest. The reply to message `j` answers every entry of message `j`. After a break,
//! [`BatchLedger::replay`] re-opens every live session in ONE message (its first pending entry in
//! the same entry), then each key's other unanswered entries, one message each; entries of no live
//! session are re-sent as they were. Outputs are sorted back into the caller's steps by their
//! tags. Free of I/O; [`crate::Batch`] drives it.

use std::collections::{HashMap, VecDeque};

use crate::batch_packed::packable;
use crate::error::{Error, Result};
use crate::pb;
use crate::session_ledger::append_answered;

/// `google.rpc.Code` of a refused open (the server is draining or overloaded): move instead.
const UNAVAILABLE: i32 = 14;

/// A pending entry: the usual one (one step of token ids, no open, finish or cancel) as its ids,
/// any other whole, so that keeping a step costs its ids rather than a copy of a 472-byte entry.
enum Kept {
    Ids(Vec<u32>),
    Entry(Box<pb::SessionInput>),
}

impl Kept {
    fn of(entry: &pb::SessionInput) -> Kept {
        if packable(entry) {
            Kept::Ids(entry.steps[0].token_ids.clone())
        } else {
            Kept::Entry(Box::new(entry.clone()))
        }
    }

    /// The entry as it was sent, for a replay.
    fn input(&self, key: &str) -> pb::SessionInput {
        match self {
            Kept::Ids(ids) => pb::SessionInput {
                key: key.to_owned(),
                steps: vec![pb::Step { token_ids: ids.clone(), ..Default::default() }],
                ..Default::default()
            },
            Kept::Entry(entry) => (**entry).clone(),
        }
    }
}

/// `ids`, answered, at the end of a history (joining its last run of plain ids).
fn append_ids(history: &mut Vec<pb::Step>, ids: Vec<u32>) {
    if ids.is_empty() {
        return;
    }
    match history.last_mut() {
        Some(last) if last.logprobs.is_none() && !last.token_ids.is_empty() => last.token_ids.extend_from_slice(&ids),
        _ => history.push(pb::Step { token_ids: ids, ..Default::default() }),
    }
}

struct Session {
    key: String,
    open: pb::Open,
    history: Vec<pb::Step>,
    pending: VecDeque<(u64, Kept, usize)>, // (index on the stream, entry, caller's step)
    sent: u64,
    sequence: u64,
    digest: u32,
    opened_at: usize,
    sending: bool, // entries may still follow (no finish or cancel sent yet)
    ended: bool,   // its end (final or status) was received
}

impl Session {
    /// A session opened by `entry` in `step`: the entry, without its open, is its message 1.
    fn new(entry: &pb::SessionInput, step: usize) -> Session {
        let mut session = Session {
            key: entry.key.clone(),
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
        session.send(Kept::of(&pb::SessionInput { open: None, ..entry.clone() }), step);
        session
    }

    fn send(&mut self, entry: Kept, step: usize) -> u64 {
        self.sent += 1;
        self.pending.push_back((self.sent, entry, step));
        self.sent
    }

    /// The pending entries through `index` are answered; `out`, when it carries output, must
    /// follow the last.
    fn answer(&mut self, index: u64, out: Option<&pb::SessionOutput>) -> Result<()> {
        if let Some(out) = out.filter(|o| o.sequence != 0 && !self.ended) {
            if out.sequence != self.sequence + 1 {
                let order = format!("output {} after {}: a gap or a repeat", out.sequence, self.sequence);
                return Err(Error::protocol(format!("session {:?} {order}", self.key)));
            }
            self.sequence = out.sequence;
            self.digest = out.output_digest;
        }
        let covered = self.pending.iter().take_while(|(i, _, _)| *i <= index).count();
        for (_, entry, _) in self.pending.drain(..covered) {
            match entry {
                Kept::Ids(ids) => append_ids(&mut self.history, ids),
                Kept::Entry(entry) => append_answered(&mut self.history, entry.steps),
            }
        }
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
        let (sequence, history, output_digest) = (self.sequence, self.history.clone(), self.digest);
        pb::Open { resume: Some(pb::ResumePoint { sequence, history, output_digest }), ..self.open.clone() }
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

    /// The caller's next step goes out on the current stream with these entries.
    pub(crate) fn sent(&mut self, entries: &[pb::SessionInput]) {
        self.step += 1;
        self.sent += 1;
        let step = self.step;
        let mut carried = Carried::with_capacity(entries.len());
        let keys = entries.iter().map(|entry| entry.key.clone()).collect();
        let mut record = Step { keys, orphans: Vec::new(), outputs: HashMap::new(), until: self.sent };
        for entry in entries {
            let key = entry.key.clone();
            let live = self.live.get(&key).copied();
            let sending = live.and_then(|id| self.sessions[id].as_ref()).is_some_and(|s| s.sending);
            if entry.open.is_some() && !entry.cancel && !sending {
                let id = self.sessions.len(); // a new session (a reopened key too)
                self.sessions.push(Some(Session::new(entry, step)));
                self.order.push(id);
                self.live.insert(key.clone(), id);
                carried.push((key, Some(id), step, 1));
            } else if let Some(session) = live.and_then(|id| self.sessions[id].as_mut()) {
                session.sending &= !(entry.cancel || entry.finish.is_some());
                carried.push((key, live, step, session.send(Kept::of(entry), step)));
            } else {
                if !entry.cancel {
                    record.orphans.push((key.clone(), entry.clone())); // a cancel of no session answers nothing
                }
                carried.push((key, None, step, 0));
            }
        }
        self.steps.push_back(record);
        self.carried.push_back(carried);
    }

    /// A reply of the current stream (its outputs, packed ones expanded): it answers every entry
    /// of its message.
    pub(crate) fn received(&mut self, outputs: Vec<pb::SessionOutput>) -> Result<()> {
        let carried = self.carried.pop_front().unwrap_or_default();
        self.received += 1;
        self.resumes += usize::from(std::mem::take(&mut self.moving));
        let mut outputs: HashMap<String, pb::SessionOutput> = outputs.into_iter().map(|o| (o.key.clone(), o)).collect();
        let delivered = self.delivered();
        for (key, id, step, index) in carried {
            let output = outputs.remove(&key);
            if let Some(session) = id.and_then(|id| self.sessions[id].as_mut()) {
                let refused = output.as_ref().and_then(|o| o.status.as_ref()).is_some_and(|s| s.code == UNAVAILABLE);
                if refused && index == 1 && !session.ended {
                    self.must_move = true; // draining or overloaded: it stays pending, the stream moves
                    continue;
                }
                session.answer(index, output.as_ref())?;
                let idle = session.pending.is_empty();
                if output.as_ref().is_some_and(|o| o.r#final.is_some() || o.status.is_some()) {
                    // Its end: entries pipelined after it are no longer its (the server answers
                    // them as entries of no session, or of a new one it opens, numbered from 1).
                    session.ended = true;
                    let key = session.key.clone();
                    if self.live.get(&key) == id.as_ref() {
                        self.live.remove(&key);
                    }
                    if idle {
                        self.forget(id);
                    }
                } else if session.ended && idle {
                    self.forget(id);
                }
            }
            if let Some(record) = step.checked_sub(delivered + 1).and_then(|n| self.steps.get_mut(n)) {
                if id.is_none() {
                    record.orphans.retain(|(k, _)| *k != key); // answered: never re-sent
                }
                if let Some(out) = output {
                    record.outputs.insert(key, out);
                }
            }
        }
        Ok(())
    }

    fn forget(&mut self, id: Option<usize>) {
        if let Some(id) = id {
            self.order.retain(|&o| o != id);
            self.sessions[id] = None;
        }
    }

    /// The oldest undelivered step's outputs once complete, in the order of its entries.
    pub(crate) fn ready(&mut self) -> Option<Vec<pb::SessionOutput>> {
        if self.steps.front()?.until > self.received {
            return None;
        }
        let mut step = self.steps.pop_front()?;
        Some(step.keys.iter().filter_map(|key| step.outputs.remove(key)).collect())
    }

    /// The messages that start a new stream (see the module docs); the current stream is then
    /// the new one.
    pub(crate) fn replay(&mut self) -> Vec<Vec<pb::SessionInput>> {
        self.moving = true;
        self.must_move = false;
        type Lane = Vec<(pb::SessionInput, Option<usize>, usize, u64)>;
        let mut groups: Vec<(usize, String, Lane)> = Vec::new();
        for &id in &self.order {
            let Some(session) = self.sessions[id].as_mut() else { continue };
            session.restart(1);
            let mut lane: Lane = Vec::new();
            let mut rest: Vec<(pb::SessionInput, usize)> =
                session.pending.iter().map(|(_, entry, tag)| (entry.input(&session.key), *tag)).collect();
            if !session.ended {
                // Re-opened at its point; the first pending entry rides along unless it is a
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
            lane.extend(rest.into_iter().zip(start..).map(|((entry, tag), i)| (entry, Some(id), tag, i)));
            if !lane.is_empty() {
                groups.push((session.opened_at, session.key.clone(), lane));
            }
        }
        let delivered = self.delivered();
        for (number, step) in (delivered + 1..).zip(&self.steps) {
            for (key, entry) in &step.orphans {
                groups.push((number, key.clone(), vec![(entry.clone(), None, number, 0)]));
            }
        }
        groups.sort_by_key(|group| group.0);
        let mut keys: Vec<String> = Vec::new(); // in order of first appearance
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
        let mut last_of: HashMap<usize, u64> = HashMap::new(); // step -> its last re-sent message
        for j in 0..depth {
            let (mut message, mut carried) = (Vec::new(), Carried::new());
            for (key, (entry, id, tag, index)) in keys.iter().filter_map(|key| Some((key, lanes[key].get(j)?))) {
                message.push(entry.clone());
                carried.push((key.clone(), *id, *tag, *index));
                if *tag != 0 {
                    last_of.insert(*tag, j as u64 + 1);
                }
            }
            messages.push(message);
            self.carried.push_back(carried);
        }
        self.sent = depth as u64;
        self.received = 0;
        let mut until = 0;
        for (number, step) in (delivered + 1..).zip(self.steps.iter_mut()) {
            until = until.max(last_of.get(&number).copied().unwrap_or(0));
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
