//! Multiplexed sessions ([`crate::ClientBuilder::multiplex`]): the client's sessions ride one
//! shared `ParseBatch` stream instead of a `Parse` stream each. [`Client::open`] returns the same
//! [`crate::Session`], and each session's replies are exactly its own `Parse` stream's
//! (`client_messages` being the session's own count), but the sends of all sessions go out
//! coalesced, one message per flush, which the server reads and answers as one.
//!
//! One task drives the stream. The sessions' messages reach it through one shared queue (a
//! session holds at most `send_capacity` messages not flushed yet: past it, its sends wait), and
//! each message of the stream carries one entry per session: a session's next message waits in
//! the task for the flush that carries its last. The task flushes `flush_interval` after the
//! first queued message; with zero, once the server has answered the message before (or half a
//! millisecond after it went out, if it has not), so that the sends made while the server works
//! go out together, about an engine step of every session per message. It routes the replies.
//! A session's error stays in it; dropping it cancels it on the server. With resume on, the batch
//! ledger keeps every session's history and a broken stream moves all live sessions to a new
//! one, as the batch API does.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, Notify, Semaphore};
use tokio::time::Instant;
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

/// With a zero flush interval, how long a flush waits for the reply to the message before.
const IDLE_WAIT: Duration = Duration::from_micros(500);

/// What the sessions and the task share: the sessions' messages in the order sent (`None`: the
/// session's senders are all gone), and the task's wake-up.
pub(crate) struct MuxShared {
    queue: Mutex<Vec<(u64, Option<Sent>)>>,
    notify: Notify,
    next_id: AtomicU64,
    opens: mpsc::Sender<MuxOpen>,
}

impl MuxShared {
    fn push(&self, id: u64, msg: Option<Sent>) {
        let was_empty = {
            let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
            queue.push((id, msg));
            queue.len() == 1
        };
        if was_empty {
            self.notify.notify_one();
        }
    }

    /// A new session's id and sending side; the task learns of it from [`MuxShared::join`].
    pub(crate) fn sender(self: &Arc<Self>, capacity: usize) -> MuxSender {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        MuxSender { id, shared: self.clone(), room: Arc::new(Semaphore::new(capacity)) }
    }

    /// Registers a session with the task.
    pub(crate) async fn join(&self, open: MuxOpen) -> Result<()> {
        self.opens.send(open).await.map_err(|_| Error::Ended)
    }
}

/// What a session's message carries on a shared stream (a `ParseRequest` is mostly its `Open`,
/// which a message never has here: the queue moves the small part only).
pub(crate) struct Sent {
    steps: Vec<pb::Step>,
    finish: Option<Box<pb::Finish>>,
}

/// A multiplexed session's sending side (shared by the clones of its `SessionSender`): dropping
/// the last one before a `Finish` cancels the session on the server.
pub(crate) struct MuxSender {
    pub(crate) id: u64,
    shared: Arc<MuxShared>,
    pub(crate) room: Arc<Semaphore>, // one permit per message the session may have unflushed
}

impl MuxSender {
    pub(crate) async fn send(&self, msg: pb::ParseRequest) -> Result<()> {
        self.room.acquire().await.map_err(|_| Error::Ended)?.forget(); // back when flushed
        self.shared.push(self.id, Some(Sent { steps: msg.steps, finish: msg.finish.map(Box::new) }));
        Ok(())
    }
}

impl Drop for MuxSender {
    fn drop(&mut self) {
        self.shared.push(self.id, None);
    }
}

/// A session joining the shared stream: its `Open`, where its replies go.
pub(crate) struct MuxOpen {
    pub(crate) id: u64,
    pub(crate) open: pb::Open,
    pub(crate) room: Arc<Semaphore>,
    pub(crate) replies: mpsc::UnboundedSender<Result<pb::ParseResponse>>,
    pub(crate) resumes: Arc<AtomicUsize>,
    pub(crate) admitted: oneshot::Sender<Result<()>>,
}

struct Rider {
    replies: mpsc::UnboundedSender<Result<pb::ParseResponse>>,
    resumes: Arc<AtomicUsize>,
    admitted: Option<oneshot::Sender<Result<()>>>,
    room: Arc<Semaphore>,
    messages: u64,
    counts: VecDeque<(usize, u64)>, // per entry not answered: (the stream's message, the count)
    finished: bool,
    queued: bool,                    // has an entry in the next message
    held: usize,                     // its messages in that entry (permits to give back)
    backlog: VecDeque<Option<Sent>>, // its messages after that one
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
    shared: Arc<MuxShared>,
    opens: mpsc::Receiver<MuxOpen>,
    opens_open: bool,
    riders: HashMap<u64, Rider>,
    order: Vec<pb::SessionInput>,
    index: HashMap<u64, usize>, // the entry of each session queued, in `order`
    queued: Vec<u64>,           // the sessions whose messages the next flush takes
    opening: Vec<u64>,
    openings: VecDeque<Vec<u64>>, // per message in flight: the sessions whose open it carries
    taken: usize,
    routed: usize,
    link: Option<Link>,
    ledger: Option<BatchLedger>,
    sent: VecDeque<Vec<SentEntry>>, // resume off: each message's entries
    first_queued: Option<Instant>,
    last_sent: Instant,
}

/// Starts the task of a multiplexed client; sessions join it through the returned handle.
pub(crate) fn spawn(
    targets: Targets,
    policy: Option<ResumePolicy>,
    interval: Duration,
    capacity: usize,
) -> Arc<MuxShared> {
    let (tx, opens) = mpsc::channel(capacity);
    let shared = Arc::new(MuxShared {
        queue: Mutex::new(Vec::new()),
        notify: Notify::new(),
        next_id: AtomicU64::new(0),
        opens: tx,
    });
    let task = MuxTask {
        targets,
        policy,
        interval,
        capacity,
        shared: shared.clone(),
        opens,
        opens_open: true,
        riders: HashMap::new(),
        order: Vec::new(),
        index: HashMap::new(),
        queued: Vec::new(),
        opening: Vec::new(),
        openings: VecDeque::new(),
        taken: 0,
        routed: 0,
        link: None,
        ledger: policy.map(|_| BatchLedger::default()),
        sent: VecDeque::new(),
        first_queued: None,
        last_sent: Instant::now(),
    };
    tokio::spawn(task.run());
    shared
}

/// The key of session `id` on the stream.
fn key_of(id: u64) -> String {
    format!("{id:x}")
}

fn id_of(key: &str) -> Option<u64> {
    u64::from_str_radix(key, 16).ok()
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
            let flush_at = self.flush_at();
            tokio::select! {
                biased;
                open = self.opens.recv(), if self.opens_open => match open {
                    Some(open) => self.open(open),
                    None => self.opens_open = false,
                },
                _ = self.shared.notify.notified() => self.inputs(),
                received = next_reply(&mut self.link), if in_flight => {
                    if let Err(error) = self.received(received).await {
                        self.fail_all(&error);
                    }
                }
                _ = flush_due(flush_at) => {
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

    /// When the queued entries go out: `interval` after the first of them; with a zero interval,
    /// at once when no message is unanswered, else `IDLE_WAIT` after the last one went out.
    fn flush_at(&self) -> Option<Instant> {
        let first = self.first_queued?;
        if !self.interval.is_zero() {
            return Some(first + self.interval);
        }
        if self.in_flight() == 0 {
            return Some(first);
        }
        Some(self.last_sent + IDLE_WAIT)
    }

    fn in_flight(&self) -> usize {
        self.ledger.as_ref().map_or(self.sent.len(), BatchLedger::in_flight)
    }

    fn entry(&mut self, id: u64) -> &mut pb::SessionInput {
        let position = match self.index.get(&id) {
            Some(&position) => position,
            None => {
                self.order.push(pb::SessionInput { key: key_of(id), ..Default::default() });
                self.index.insert(id, self.order.len() - 1);
                self.order.len() - 1
            }
        };
        if self.first_queued.is_none() {
            self.first_queued = Some(Instant::now());
        }
        &mut self.order[position]
    }

    fn open(&mut self, open: MuxOpen) {
        let id = open.id;
        let mut message = open.open;
        message.resumable = self.policy.is_some();
        self.entry(id).open = Some(message);
        self.opening.push(id);
        self.queued.push(id);
        let rider = Rider {
            replies: open.replies,
            resumes: open.resumes,
            admitted: Some(open.admitted),
            room: open.room,
            messages: 1,
            counts: VecDeque::from([(self.taken + 1, 1)]),
            finished: false,
            queued: true,
            held: 0,
            backlog: VecDeque::new(),
        };
        self.riders.insert(id, rider);
    }

    /// The sessions' messages sent since the last call. The opens waiting are taken first: a
    /// session's open reached the channel before any of its messages reached the queue.
    fn inputs(&mut self) {
        let inputs = std::mem::take(&mut *self.shared.queue.lock().unwrap_or_else(|e| e.into_inner()));
        while let Ok(open) = self.opens.try_recv() {
            self.open(open);
        }
        for (id, input) in inputs {
            match self.riders.get_mut(&id) {
                Some(rider) if rider.queued || !rider.backlog.is_empty() => rider.backlog.push_back(input),
                Some(_) => self.input(id, input),
                None => {} // it has ended (or its opener gave up before joining)
            }
        }
    }

    /// One message of session `id` (`None`: its senders are gone) into its entry in the next message.
    fn input(&mut self, id: u64, input: Option<Sent>) {
        let step = self.taken + 1;
        let Some(rider) = self.riders.get_mut(&id) else { return };
        let Some(msg) = input else {
            // Every sender is gone before a Finish: the session is dropped on the server.
            if !rider.finished {
                if let Some(rider) = self.riders.remove(&id) {
                    rider.room.close();
                    let _ = rider.replies.send(Err(Error::Ended));
                }
                self.cancel(id);
            }
            return;
        };
        rider.messages += 1;
        rider.counts.push_back((step, rider.messages));
        rider.finished |= msg.finish.is_some();
        rider.queued = true;
        rider.held += 1;
        self.queued.push(id);
        let entry = self.entry(id);
        if entry.steps.is_empty() {
            entry.steps = msg.steps; // the usual case: no copy of the steps
        } else {
            entry.steps.extend(msg.steps);
        }
        if let Some(finish) = msg.finish {
            entry.finish = Some(*finish);
        }
    }

    fn cancel(&mut self, id: u64) {
        let entry = self.entry(id);
        *entry = pb::SessionInput { key: key_of(id), cancel: true, ..Default::default() };
    }

    /// Ends session `id` here: its sends fail from now on and its queued messages are dropped.
    fn forget(&mut self, id: u64) -> Option<Rider> {
        let rider = self.riders.remove(&id)?;
        rider.room.close();
        Some(rider)
    }

    /// The sessions `queued` had their entries taken: room for their messages, and each one's
    /// next message into the next message of the stream.
    fn taken_from(&mut self, queued: Vec<u64>) {
        for id in queued {
            let Some(rider) = self.riders.get_mut(&id) else { continue };
            rider.queued = false;
            rider.room.add_permits(std::mem::take(&mut rider.held));
            if let Some(next) = rider.backlog.pop_front() {
                self.input(id, next);
            }
        }
    }

    async fn flush(&mut self) -> Result<()> {
        self.first_queued = None;
        let entries = std::mem::take(&mut self.order);
        self.index.clear();
        let queued = std::mem::take(&mut self.queued);
        if entries.is_empty() {
            self.taken_from(queued);
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
        self.taken_from(queued);
        if let Some(link) = &self.link {
            let _ = link.out.send(wire_request(entries)).await; // a broken stream shows on receiving
        }
        self.last_sent = Instant::now();
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
            let Some(id) = id_of(&out.key) else { continue };
            let Some(rider) = self.riders.get_mut(&id) else { continue };
            let mut count = 0;
            while rider.counts.front().is_some_and(|(s, _)| *s <= step) {
                count = rider.counts.pop_front().map_or(0, |(_, c)| c);
            }
            if let Some(status) = out.status.take() {
                let error = Error::Status(tonic::Status::new(tonic::Code::from(status.code), status.message));
                let rider = self.forget(id).expect("rider");
                match rider.admitted {
                    Some(admitted) => drop(admitted.send(Err(error))),
                    None => drop(rider.replies.send(Err(error))),
                }
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
                self.forget(id); // the session was dropped: drop it on the server
                self.cancel(id);
            } else if done {
                self.forget(id);
            }
        }
        for id in opening {
            if let Some(admitted) = self.riders.get_mut(&id).and_then(|r| r.admitted.take()) {
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
            rider.room.close();
            let error = Error::Status(tonic::Status::new(error.code(), error.message()));
            match rider.admitted {
                Some(admitted) => drop(admitted.send(Err(error))),
                None => drop(rider.replies.send(Err(error))),
            }
        }
        self.queued.clear();
        self.order.clear();
        self.index.clear();
        self.opening.clear();
        self.openings.clear();
        self.sent.clear();
        self.taken = 0;
        self.routed = 0;
        self.link = None;
        self.ledger = self.policy.map(|_| BatchLedger::default());
        self.first_queued = None;
    }
}
