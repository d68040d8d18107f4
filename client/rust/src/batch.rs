//! The batch API: many request sessions over one `ParseBatch` stream, one message per engine
//! step.

use std::collections::{HashMap, VecDeque};

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::StreamExt;
use tonic::Streaming;

use crate::batch_ledger::BatchLedger;
use crate::batch_packed::{in_entry_order, packable, unpack_outputs, wire_request, SentEntry};
use crate::client::{Client, Targets};
use crate::error::{Error, Result};
use crate::options::{Finish, OpenOptions};
use crate::parts::{Joiner, Received};
use crate::pb;
use crate::resume::{retryable, ResumePolicy};

/// One `ParseBatch` stream: many sessions, each named by a key the caller chooses, and one round
/// trip per engine step. A serving loop queues what each request did during the step
/// ([`Batch::open`], [`Batch::feed`], [`Batch::finish`], [`Batch::cancel`]) and calls
/// [`Batch::step`]: the queued entries go out as one message, and the server's one reply comes
/// back with the output of every session that produced any, in the order of the entries. A
/// session's output is exactly what a `Parse` stream fed the same steps produces.
///
/// Session errors (an unknown model, a bad id, a per-session limit) do not fail the step: they
/// are in that session's output ([`session_error`] reads them). `step`/`recv` fail only when the
/// stream itself ended, which ends every session on it. [`Batch::send`] and [`Batch::recv`]
/// split a step for a loop that overlaps the round trip with its own work; `send` waits while
/// [`crate::ClientBuilder::send_capacity`] steps are queued that the stream has not taken
/// (back-pressure), so a loop that only sends stalls once the server stops reading: receive
/// what is in flight.
///
/// Entries that are one step of token ids of an open session go packed
/// (`ParseBatchRequest.packed`); their packed outputs come back as `SessionOutput`s.
pub struct Batch {
    targets: Targets,
    address: usize, // the current stream's
    policy: Option<ResumePolicy>,
    ledger: Option<BatchLedger>, // with resume on
    out: Option<mpsc::Sender<pb::ParseBatchRequest>>,
    capacity: usize, // of each stream's outbound channel
    inbound: Streaming<pb::ParseBatchResponse>,
    joiner: Joiner,
    order: Vec<pb::SessionInput>,
    index: HashMap<String, usize>,
    sent: VecDeque<Vec<SentEntry>>,
    failed: Option<Error>,
}

impl Client {
    /// Opens a `ParseBatch` stream. With resume on (the default), a broken stream (a dead or
    /// draining server, a lost connection, a proxy's reset) does not end its sessions: `recv`
    /// opens a new stream, re-opens every live session there at its resume point and returns
    /// the next step's reply as if nothing had happened. An open refused with `Unavailable` (a
    /// draining or overloaded server) moves the stream too.
    pub async fn batch(&self) -> Result<Batch> {
        let (address, out, inbound) = open_stream(&self.targets, Vec::new(), self.send_capacity).await?;
        Ok(Batch {
            targets: self.targets.clone(),
            address,
            policy: self.resume,
            ledger: self.resume.map(|_| BatchLedger::default()),
            out: Some(out),
            capacity: self.send_capacity,
            inbound,
            joiner: Joiner::default(),
            order: Vec::new(),
            index: HashMap::new(),
            sent: VecDeque::new(),
            failed: None,
        })
    }
}

impl Batch {
    /// The queued entry for `key`: one per session per step, so an open, its first steps and
    /// even a finish travel together.
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

    /// Queues opening session `key` with these options.
    pub fn open(&mut self, key: &str, options: OpenOptions) {
        let mut open = options.into_message();
        open.resumable = self.ledger.is_some();
        self.entry(key).open = Some(open);
    }

    /// Queues one decode step (the token ids of one forward pass) of session `key`.
    pub fn feed(&mut self, key: &str, token_ids: impl Into<Vec<u32>>) {
        let step = pb::Step { token_ids: token_ids.into(), ..Default::default() };
        self.entry(key).steps.push(step);
    }

    /// Queues already-detokenized text of session `key`, standing for `tokens` output tokens.
    pub fn feed_text(&mut self, key: &str, text: impl Into<String>, tokens: u32) {
        let step = pb::Step { text: text.into(), text_tokens: tokens, ..Default::default() };
        self.entry(key).steps.push(step);
    }

    /// Queues ready-made steps (a [`crate::logprob_step`]...) of session `key`.
    pub fn feed_steps(&mut self, key: &str, steps: Vec<pb::Step>) {
        self.entry(key).steps.extend(steps);
    }

    /// Queues the end of session `key`'s output; its output in the reply carries `final`.
    pub fn finish(&mut self, key: &str, finish: Finish) {
        self.entry(key).finish = Some(finish.into_message());
    }

    /// Queues dropping session `key` (its output carries the status `Cancelled`); what was
    /// queued for it in this step is discarded.
    pub fn cancel(&mut self, key: &str) {
        let entry = self.entry(key);
        *entry = pb::SessionInput { key: std::mem::take(&mut entry.key), cancel: true, ..Default::default() };
    }

    /// How many times the batch has moved its sessions to a new stream.
    pub fn resumes(&self) -> usize {
        self.ledger.as_ref().map_or(0, |l| l.resumes)
    }

    /// Steps sent whose replies have not been received yet.
    pub fn in_flight(&self) -> usize {
        self.ledger.as_ref().map_or(self.sent.len(), BatchLedger::in_flight)
    }

    /// Sends the queued entries as one message (one engine step) and starts a new step; waits
    /// while the stream has no room (see [`Batch`]). An error is the status that ended the
    /// stream.
    pub async fn send(&mut self) -> Result<()> {
        if let Some(error) = &self.failed {
            return Err(Error::Status(tonic::Status::new(error.code(), error.message())));
        }
        let entries = std::mem::take(&mut self.order);
        self.index.clear();
        match &mut self.ledger {
            Some(ledger) => ledger.sent(&entries), // it keeps the entries whole, to re-send them
            None => self.sent.push_back(entries.iter().map(|e| (e.key.clone(), packable(e))).collect()),
        }
        if let Some(out) = &self.out {
            let _ = out.send(wire_request(entries)).await; // a broken stream shows in recv
        }
        Ok(())
    }

    /// The reply to the oldest step sent: the output of each session that produced deltas,
    /// events, a final result or ended with a status, in the order of that step's entries.
    pub async fn recv(&mut self) -> Result<Vec<pb::SessionOutput>> {
        if let Some(error) = &self.failed {
            return Err(Error::Status(tonic::Status::new(error.code(), error.message())));
        }
        match self.recv_reply().await {
            Ok(outs) => Ok(outs),
            Err(error) => {
                self.failed = Some(Error::Status(tonic::Status::new(error.code(), error.message())));
                Err(error)
            }
        }
    }

    async fn recv_reply(&mut self) -> Result<Vec<pb::SessionOutput>> {
        if self.ledger.is_some() {
            return self.recv_resuming().await;
        }
        if self.sent.is_empty() {
            return Err(Error::Status(tonic::Status::failed_precondition("parsetier: no step in flight")));
        }
        let reply = match self.joiner.next(&mut self.inbound).await? {
            Received::Reply(reply) => reply,
            Received::End => return Err(Error::protocol("ParseBatch stream ended before its reply")),
            Received::Broken(status) => return Err(status.into()),
        };
        let entries = self.sent.pop_front().unwrap_or_default();
        let packed = unpack_outputs(reply.packed)?;
        in_entry_order(&entries, reply.sessions, packed)
    }

    /// Receives with resume on: replies are sorted into the caller's steps by the ledger; a
    /// break moves every live session to a new stream.
    async fn recv_resuming(&mut self) -> Result<Vec<pb::SessionOutput>> {
        let mut breaks = 0;
        let mut broken: Option<tonic::Status> = None; // a new stream could not be opened
        loop {
            let ledger = self.ledger.as_mut().ok_or_else(|| Error::protocol("no ledger"))?;
            if let Some(outs) = ledger.ready() {
                return Ok(outs);
            }
            if ledger.in_flight() == 0 {
                return Err(Error::Status(tonic::Status::failed_precondition("parsetier: no step in flight")));
            }
            let received = match broken.take() {
                Some(status) => Received::Broken(status),
                None => self.joiner.next(&mut self.inbound).await?,
            };
            let status = match received {
                Received::Reply(reply) => {
                    let mut outs = reply.sessions;
                    outs.extend(unpack_outputs(reply.packed)?);
                    ledger.received(outs)?;
                    breaks = 0;
                    if !ledger.must_move {
                        continue;
                    }
                    tonic::Status::unavailable("parsetier: a server refused to open a session (draining or overloaded)")
                }
                Received::End => return Err(Error::protocol("ParseBatch stream ended before its reply")),
                Received::Broken(status) => status,
            };
            let policy = self.policy.unwrap_or_default();
            if !retryable(&status) || breaks >= policy.attempts {
                return Err(status.into());
            }
            if breaks > 0 {
                tokio::time::sleep(policy.backoff(breaks - 1)).await;
            }
            breaks += 1;
            self.targets.failed(self.address);
            let replay = ledger.replay().into_iter().map(wire_request).collect();
            match open_stream(&self.targets, replay, self.capacity).await {
                Ok((address, out, inbound)) => {
                    self.address = address;
                    self.out = Some(out);
                    self.inbound = inbound;
                    self.joiner = Joiner::default();
                }
                // Unreachable or refused: the next turn retries from the ledger.
                Err(Error::Status(status)) if retryable(&status) => broken = Some(status),
                Err(error) => return Err(error),
            }
        }
    }

    /// Sends the queued entries and waits for their reply.
    pub async fn step(&mut self) -> Result<Vec<pb::SessionOutput>> {
        self.send().await?;
        self.recv().await
    }

    /// Ends the stream: receives the replies still in flight, closes the sending side and
    /// returns the stream's status (`Ok` for OK). Sessions still open are dropped by the server.
    pub async fn close(mut self) -> Result<()> {
        while self.in_flight() > 0 {
            self.recv().await?;
        }
        self.out = None;
        match self.joiner.next(&mut self.inbound).await? {
            Received::Reply(_) => Err(Error::protocol("a ParseBatch reply to no step")),
            Received::End => Ok(()),
            // Every reply has arrived: with resume on, a break now loses nothing.
            Received::Broken(status) if self.ledger.is_some() && retryable(&status) => Ok(()),
            Received::Broken(status) => Err(status.into()),
        }
    }
}

/// Opens a `ParseBatch` stream through the current address with `first` (a replay) ahead of
/// what the batch writes to the returned sender (`capacity` messages at most), and waits for
/// the server to accept it.
pub(crate) async fn open_stream(
    targets: &Targets,
    first: Vec<pb::ParseBatchRequest>,
    capacity: usize,
) -> Result<(usize, mpsc::Sender<pb::ParseBatchRequest>, Streaming<pb::ParseBatchResponse>)> {
    let (out, rx) = mpsc::channel(capacity);
    let (address, mut stub) = targets.pick();
    let response = stub.parse_batch(tokio_stream::iter(first).chain(ReceiverStream::new(rx))).await;
    targets.note(address, &response);
    Ok((address, out, response?.into_inner()))
}

/// The status a session ended with in `out` (`Cancelled` after a cancel), or `None` when `out`
/// carries output.
pub fn session_error(out: &pb::SessionOutput) -> Option<Error> {
    out.status.as_ref().map(|s| Error::Status(tonic::Status::new(tonic::Code::from(s.code), s.message.clone())))
}
