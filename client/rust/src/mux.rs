//! Multiplexed sessions ([`crate::ClientBuilder::multiplex`]): the client's sessions ride one
//! shared `ParseBatch` stream instead of a `Parse` stream each. [`Client::open`] returns the same
//! [`crate::Session`], and each session's replies are exactly its own `Parse` stream's
//! (`client_messages` being the session's own count), but the sends of all sessions go out
//! coalesced, one message per flush, which the server reads and answers as one.
//!
//! One task drives the stream: it takes each session's messages from the session's bounded
//! channel (one entry per session per message: a session's next message waits in its channel
//! for the flush that carries its last, so a fast sender meets back-pressure and the others
//! coalesce), flushes `flush_interval` after the first queued message (zero: once every ready
//! message is taken), and routes the replies. A session's error stays in it; dropping it cancels
//! it on the server. With resume on, the batch ledger keeps every session's history and a broken
//! stream moves all live sessions to a new one, as the batch API does.

use std::collections::{HashMap, VecDeque};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_core::Stream;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{StreamExt, StreamMap};
use tonic::Streaming;

use crate::batch::open_stream;
use crate::batch_ledger::BatchLedger;
use crate::batch_packed::{in_entry_order, packable, unpack_outputs, wire_request, SentEntry};
use crate::client::Targets;
use crate::error::{Error, Result};
use crate::parts::{Joiner, Received};
use crate::pb;
use crate::resume::{retryable, ResumePolicy};

/// Entries that make a flush at once (the server's default limit of items per message is 2,048).
const MAX_BATCH: usize = 1024;

/// A session joining the shared stream: its `Open`, its messages, where its replies go.
pub(crate) struct MuxOpen {
    pub(crate) open: pb::Open,
    pub(crate) inputs: mpsc::Receiver<pb::ParseRequest>,
    pub(crate) replies: mpsc::UnboundedSender<Result<pb::ParseResponse>>,
    pub(crate) resumes: Arc<AtomicUsize>,
    pub(crate) admitted: oneshot::Sender<Result<()>>,
}

/// A session's messages, then `None` once its senders are gone.
type Inputs = Pin<Box<dyn Stream<Item = Option<pb::ParseRequest>> + Send>>;

struct Rider {
    replies: mpsc::UnboundedSender<Result<pb::ParseResponse>>,
    resumes: Arc<AtomicUsize>,
    admitted: Option<oneshot::Sender<Result<()>>>,
    messages: u64,
    counts: VecDeque<(usize, u64)>, // per entry not answered: (the stream's message, the count)
    finished: bool,
}

struct Link {
    address: usize,
    out: mpsc::Sender<pb::ParseBatchRequest>,
    inbound: Streaming<pb::ParseBatchResponse>,
    joiner: Joiner,
}

/// The task behind a multiplexed client.
pub(crate) struct MuxTask {
    targets: Targets,
    policy: Option<ResumePolicy>,
    interval: Duration,
    capacity: usize,
    opens: mpsc::Receiver<MuxOpen>,
    opens_open: bool,
    inputs: StreamMap<String, Inputs>,
    parked: HashMap<String, Inputs>, // sessions with an entry queued: their next message waits
    riders: HashMap<String, Rider>,
    order: Vec<pb::SessionInput>,
    index: HashMap<String, usize>,
    opening: Vec<String>,
    openings: VecDeque<Vec<String>>, // per message in flight: the sessions whose open it carries
    taken: usize,
    routed: usize,
    link: Option<Link>,
    ledger: Option<BatchLedger>,
    sent: VecDeque<Vec<SentEntry>>, // resume off: each message's entries
    flush_at: Option<Instant>,
    next_key: u64,
}

/// Starts the task of a multiplexed client; sessions join it through the returned sender.
pub(crate) fn spawn(
    targets: Targets,
    policy: Option<ResumePolicy>,
    interval: Duration,
    capacity: usize,
) -> mpsc::Sender<MuxOpen> {
    let (tx, opens) = mpsc::channel(capacity);
    let task = MuxTask {
        targets,
        policy,
        interval,
        capacity,
        opens,
        opens_open: true,
        inputs: StreamMap::new(),
        parked: HashMap::new(),
        riders: HashMap::new(),
        order: Vec::new(),
        index: HashMap::new(),
        opening: Vec::new(),
        openings: VecDeque::new(),
        taken: 0,
        routed: 0,
        link: None,
        ledger: policy.map(|_| BatchLedger::default()),
        sent: VecDeque::new(),
        flush_at: None,
        next_key: 0,
    };
    tokio::spawn(task.run());
    tx
}

async fn next_reply(link: &mut Option<Link>) -> Result<Received<pb::ParseBatchResponse>> {
    match link {
        Some(link) => link.joiner.next(&mut link.inbound).await,
        None => std::future::pending().await,
    }
}

async fn flush_due(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

impl MuxTask {
    async fn run(mut self) {
        loop {
            let in_flight = self.in_flight() > 0;
            tokio::select! {
                biased;
                open = self.opens.recv(), if self.opens_open => match open {
                    Some(open) => self.open(open),
                    None => self.opens_open = false,
                },
                Some((key, input)) = self.inputs.next(), if !self.inputs.is_empty() => self.input(key, input),
                received = next_reply(&mut self.link), if in_flight => {
                    if let Err(error) = self.received(received).await {
                        self.fail_all(&error);
                    }
                }
                _ = flush_due(self.flush_at) => {
                    if let Err(error) = self.flush().await {
                        self.fail_all(&error);
                    }
                }
            }
            if self.order.len() >= MAX_BATCH {
                if let Err(error) = self.flush().await {
                    self.fail_all(&error);
                }
            }
            if !self.opens_open && self.riders.is_empty() && self.order.is_empty() {
                return; // the client is gone and no session is left
            }
        }
    }

    fn in_flight(&self) -> usize {
        self.ledger.as_ref().map_or(self.sent.len(), BatchLedger::in_flight)
    }

    fn entry(&mut self, key: &str) -> &mut pb::SessionInput {
        let position = match self.index.get(key) {
            Some(&position) => position,
            None => {
                self.order.push(pb::SessionInput { key: key.to_owned(), ..Default::default() });
                self.index.insert(key.to_owned(), self.order.len() - 1);
                self.order.len() - 1
            }
        };
        &mut self.order[position]
    }

    fn due(&mut self) {
        if self.flush_at.is_none() {
            self.flush_at = Some(Instant::now() + self.interval);
        }
    }

    fn open(&mut self, open: MuxOpen) {
        self.next_key += 1;
        let key = format!("{:x}", self.next_key);
        let mut message = open.open;
        message.resumable = self.policy.is_some();
        self.entry(&key).open = Some(message);
        self.opening.push(key.clone());
        let inputs: Inputs = Box::pin(ReceiverStream::new(open.inputs).map(Some).chain(tokio_stream::iter([None])));
        self.inputs.insert(key.clone(), inputs);
        let counts = VecDeque::from([(self.taken + 1, 1)]);
        let rider = Rider {
            replies: open.replies,
            resumes: open.resumes,
            admitted: Some(open.admitted),
            messages: 1,
            counts,
            finished: false,
        };
        self.riders.insert(key, rider);
        self.due();
    }

    fn input(&mut self, key: String, input: Option<pb::ParseRequest>) {
        let step = self.taken + 1;
        let Some(rider) = self.riders.get_mut(&key) else { return };
        let Some(msg) = input else {
            // Every sender is gone before a Finish: the session is dropped on the server.
            if !rider.finished {
                self.cancel(&key);
                if let Some(rider) = self.riders.remove(&key) {
                    let _ = rider.replies.send(Err(Error::Ended));
                }
            }
            return;
        };
        rider.messages += 1;
        rider.counts.push_back((step, rider.messages));
        rider.finished |= msg.finish.is_some();
        let entry = self.entry(&key);
        entry.steps.extend(msg.steps);
        if msg.finish.is_some() {
            entry.finish = msg.finish;
        }
        if let Some(inputs) = self.inputs.remove(&key) {
            self.parked.insert(key, inputs); // its next message waits for this one's flush
        }
        self.due();
    }

    fn cancel(&mut self, key: &str) {
        let entry = self.entry(key);
        *entry = pb::SessionInput { key: key.to_owned(), cancel: true, ..Default::default() };
        self.inputs.remove(key);
        self.parked.remove(key);
        self.due();
    }

    async fn flush(&mut self) -> Result<()> {
        self.flush_at = None;
        let entries = std::mem::take(&mut self.order);
        self.index.clear();
        for (key, inputs) in self.parked.drain() {
            self.inputs.insert(key, inputs);
        }
        if entries.is_empty() {
            return Ok(());
        }
        if self.link.is_none() {
            let (address, out, inbound) = open_stream(&self.targets, Vec::new(), self.capacity).await?;
            self.link = Some(Link { address, out, inbound, joiner: Joiner::default() });
        }
        match &mut self.ledger {
            Some(ledger) => ledger.sent(&entries),
            None => self.sent.push_back(entries.iter().map(|e| (e.key.clone(), packable(e))).collect()),
        }
        self.openings.push_back(std::mem::take(&mut self.opening));
        self.taken += 1;
        if let Some(link) = &self.link {
            let _ = link.out.send(wire_request(entries)).await; // a broken stream shows on receiving
        }
        Ok(())
    }

    async fn received(&mut self, received: Result<Received<pb::ParseBatchResponse>>) -> Result<()> {
        let reply = match received? {
            Received::Reply(reply) => reply,
            Received::End => {
                return self.resume(tonic::Status::unavailable("parsetier: the ParseBatch stream ended")).await
            }
            Received::Broken(status) => return self.resume(status).await,
        };
        let packed = unpack_outputs(reply.packed)?;
        match &mut self.ledger {
            Some(ledger) => {
                let mut outs = reply.sessions;
                outs.extend(packed);
                ledger.received(outs)?;
                let mut steps = Vec::new();
                while let Some(outs) = ledger.ready() {
                    steps.push(outs);
                }
                let must_move = ledger.must_move;
                for outs in steps {
                    self.route(outs);
                }
                if must_move {
                    let status = tonic::Status::unavailable("parsetier: a server refused to open a session");
                    return self.resume(status).await;
                }
            }
            None => {
                let entries = self.sent.pop_front().unwrap_or_default();
                let outs = in_entry_order(&entries, reply.sessions, packed)?;
                self.route(outs);
            }
        }
        Ok(())
    }

    /// One message's outputs to their sessions, then its opens admitted.
    fn route(&mut self, outs: Vec<pb::SessionOutput>) {
        self.routed += 1;
        let step = self.routed;
        let opening = self.openings.pop_front().unwrap_or_default();
        for mut out in outs {
            let Some(rider) = self.riders.get_mut(&out.key) else { continue };
            let mut count = 0;
            while rider.counts.front().is_some_and(|(s, _)| *s <= step) {
                count = rider.counts.pop_front().map_or(0, |(_, c)| c);
            }
            let key = std::mem::take(&mut out.key);
            if let Some(status) = out.status.take() {
                let error = Error::Status(tonic::Status::new(tonic::Code::from(status.code), status.message));
                let rider = self.riders.remove(&key).expect("rider");
                match rider.admitted {
                    Some(admitted) => drop(admitted.send(Err(error))),
                    None => drop(rider.replies.send(Err(error))),
                }
                self.inputs.remove(&key);
                self.parked.remove(&key);
                continue;
            }
            let done = out.r#final.is_some();
            let reply = pb::ParseResponse {
                sequence: out.sequence,
                client_messages: count,
                deltas: out.deltas,
                events: out.events,
                r#final: out.r#final,
                output_digest: out.output_digest,
                wire: out.wire,
                ..Default::default()
            };
            if rider.replies.send(Ok(reply)).is_err() {
                self.riders.remove(&key); // the session was dropped: drop it on the server
                self.cancel(&key);
            } else if done {
                self.riders.remove(&key);
                self.inputs.remove(&key);
                self.parked.remove(&key);
            }
        }
        for key in opening {
            if let Some(admitted) = self.riders.get_mut(&key).and_then(|r| r.admitted.take()) {
                let _ = admitted.send(Ok(()));
            }
        }
    }

    /// Moves every live session to a new stream after `status` broke the current one, or ends.
    async fn resume(&mut self, status: tonic::Status) -> Result<()> {
        let (Some(policy), Some(_)) = (self.policy, &self.ledger) else { return Err(status.into()) };
        if !retryable(&status) {
            return Err(status.into());
        }
        let mut last = status;
        for attempt in 0..policy.attempts {
            if attempt > 0 {
                tokio::time::sleep(policy.backoff(attempt - 1)).await;
            }
            if let Some(link) = self.link.take() {
                self.targets.failed(link.address);
            }
            let replay = self.ledger.as_mut().map(|l| l.replay()).unwrap_or_default();
            let replay = replay.into_iter().map(wire_request).collect();
            match open_stream(&self.targets, replay, self.capacity).await {
                Ok((address, out, inbound)) => {
                    self.link = Some(Link { address, out, inbound, joiner: Joiner::default() });
                    for rider in self.riders.values() {
                        rider.resumes.fetch_add(1, Ordering::Relaxed);
                    }
                    return Ok(());
                }
                Err(Error::Status(status)) if retryable(&status) => last = status,
                Err(error) => return Err(error),
            }
        }
        Err(last.into())
    }

    /// The stream ended and does not move: every session on it ends with `error`; the next
    /// flush opens a new stream.
    fn fail_all(&mut self, error: &Error) {
        for (_, rider) in self.riders.drain() {
            let error = Error::Status(tonic::Status::new(error.code(), error.message()));
            match rider.admitted {
                Some(admitted) => drop(admitted.send(Err(error))),
                None => drop(rider.replies.send(Err(error))),
            }
        }
        self.inputs = StreamMap::new();
        self.parked.clear();
        self.order.clear();
        self.index.clear();
        self.opening.clear();
        self.openings.clear();
        self.sent.clear();
        self.taken = 0;
        self.routed = 0;
        self.link = None;
        self.ledger = self.policy.map(|_| BatchLedger::default());
        self.flush_at = None;
    }
}
