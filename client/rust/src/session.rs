//! One request session: a `Parse` stream (or, after a break, the streams it resumed on).
//!
//! A task of its own drives the stream: it writes what the caller sends, receives and joins the
//! server's replies, and (with resume on) moves the session to a new stream when one breaks. The
//! caller holds a [`SessionSender`] (cheap to clone) and a [`Replies`] stream, together in a
//! [`Session`] or apart after [`Session::split`], so one task can send while another receives.
//!
//! Sends are bounded: the task takes a caller's message only when the stream has room for it
//! (its channel to the transport holds [`crate::ClientBuilder::send_capacity`] messages, and
//! HTTP/2 flow control holds the rest back), so a server that reads slowly makes `send` wait
//! instead of letting messages pile up in memory. Replies are never held back: the server
//! sends at most one per message it reads, and the task reads them as they come.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_core::Stream;
use tokio::sync::mpsc;
use tokio_stream::wrappers::{ReceiverStream, UnboundedReceiverStream};
use tokio_stream::StreamExt;
use tonic::Streaming;

use crate::client::{Client, Targets};
use crate::error::{Error, Result};
use crate::options::{Finish, OpenOptions};
use crate::parts::{Joiner, Received};
use crate::pb;
use crate::resume::{retryable, ResumePolicy};
use crate::session_ledger::Ledger;

/// One request session. Send steps with [`Session::send`], end with [`Session::finish`], read
/// replies with [`Session::recv`] (or as a `Stream`); the last reply carries the `Final`
/// result. Receive while sending (from another task after [`Session::split`], or interleaved):
/// the server answers only messages that produced output.
///
/// Dropping the session (both halves) before its final reply cancels it on the server.
pub struct Session {
    sender: SessionSender,
    replies: Replies,
}

/// The sending half of a session. A send waits while the session already holds
/// [`crate::ClientBuilder::send_capacity`] messages the stream has not taken (back-pressure), and
/// never reports a broken stream that the session will resume; after the session has ended
/// sends are [`Error::Ended`].
#[derive(Clone)]
pub struct SessionSender {
    commands: Commands,
}

/// Where a session's messages go: its stream's task, or the client's shared stream.
#[derive(Clone)]
enum Commands {
    Stream(mpsc::Sender<pb::ParseRequest>),
    Multiplexed(Arc<crate::mux::MuxSender>),
}

/// The receiving half of a session: the server's replies in order, each whole (parts joined),
/// ending after the reply that carries `Final`, or with the status that ended the session.
pub struct Replies {
    inner: UnboundedReceiverStream<Result<pb::ParseResponse>>,
    final_message: Option<pb::Final>,
    resumes: Arc<AtomicUsize>,
}

impl Client {
    /// Opens a session. It returns once the server has accepted the `Open` (an unknown model is
    /// `NotFound` here, bad options `InvalidArgument`); with resume on, a refusal from a server
    /// that is draining is retried within the policy's budget.
    pub async fn open(&self, options: OpenOptions) -> Result<Session> {
        if let Some(mux) = &self.mux {
            return self.open_multiplexed(mux, options).await;
        }
        let mut open = options.into_message();
        open.resumable = self.resume.is_some();
        let policy = self.resume;
        let mut ledger = Ledger::new(open);
        let capacity = self.send_capacity;
        let (address, out, inbound) =
            connect_retrying(&self.targets, policy.as_ref(), &mut ledger, capacity, 0).await?;
        let (commands_tx, commands) = mpsc::channel(capacity);
        let (replies_tx, replies) = mpsc::unbounded_channel();
        let resumes = Arc::new(AtomicUsize::new(0));
        let task = Driver {
            targets: self.targets.clone(),
            address,
            policy,
            ledger,
            out: Some(out),
            capacity,
            pending: None,
            inbound,
            joiner: Joiner::default(),
            commands,
            commands_open: true,
            replies: replies_tx,
            resumes: resumes.clone(),
            breaks: 0,
        };
        tokio::spawn(task.run());
        Ok(Session {
            sender: SessionSender { commands: Commands::Stream(commands_tx) },
            replies: Replies { inner: UnboundedReceiverStream::new(replies), final_message: None, resumes },
        })
    }

    /// A session on the client's shared `ParseBatch` stream (`ClientBuilder::multiplex`).
    async fn open_multiplexed(&self, mux: &crate::client::MuxHandle, options: OpenOptions) -> Result<Session> {
        let task = mux
            .task
            .get_or_init(|| async {
                crate::mux::spawn(self.targets.clone(), self.resume, mux.interval, self.send_capacity)
            })
            .await;
        let sender = task.sender(self.send_capacity); // dropped with this future: the task cancels the open
        let (replies_tx, replies) = mpsc::unbounded_channel();
        let (admitted_tx, admitted) = tokio::sync::oneshot::channel();
        let resumes = Arc::new(AtomicUsize::new(0));
        let open = crate::mux::MuxOpen {
            id: sender.id,
            open: options.into_message(),
            room: sender.room.clone(),
            replies: replies_tx,
            resumes: resumes.clone(),
            admitted: admitted_tx,
        };
        task.join(open).await?;
        admitted.await.map_err(|_| Error::Ended)??;
        Ok(Session {
            sender: SessionSender { commands: Commands::Multiplexed(Arc::new(sender)) },
            replies: Replies { inner: UnboundedReceiverStream::new(replies), final_message: None, resumes },
        })
    }

    /// Runs a whole session: opens it, sends each step in its own message (as a decode loop
    /// would), finishes, and returns the `Final` result and every delta in order. For replaying
    /// recorded outputs and for tests; a serving stack generating live uses a [`Session`].
    pub async fn parse_stream(
        &self,
        options: OpenOptions,
        steps: impl IntoIterator<Item = Vec<u32>>,
        finish: Finish,
    ) -> Result<(pb::Final, Vec<pb::Delta>)> {
        let steps: Vec<Vec<u32>> = steps.into_iter().collect();
        let session = self.open(options).await?;
        let (sender, replies) = session.split();
        // Sending and receiving at once: a send waits for room, which reading the replies makes.
        let sending = async move {
            for step in steps {
                sender.send([step]).await?;
            }
            sender.finish(finish).await
        };
        let receiving = async {
            let mut deltas = replies.deltas();
            let mut collected = Vec::new();
            while let Some(delta) = deltas.recv().await {
                collected.push(delta?);
            }
            Ok::<_, Error>((deltas, collected))
        };
        let (sent, received) = tokio::join!(sending, receiving);
        let (deltas, collected) = received?;
        sent?;
        let final_message = deltas.final_message().cloned();
        final_message.map(|f| (f, collected)).ok_or_else(|| Error::protocol("stream ended without a final message"))
    }
}

impl Session {
    /// Sends decode steps (each the token ids of one forward pass) in one message. Several
    /// steps per message give the same result as one message each; none is a keep-alive. Waits
    /// while the session holds `send_capacity` messages the stream has not taken.
    pub async fn send<S: Into<Vec<u32>>>(&self, steps: impl IntoIterator<Item = S>) -> Result<()> {
        self.sender.send(steps).await
    }

    /// Sends ready-made steps (a [`crate::logprob_step`], a text step) in one message.
    pub async fn send_steps(&self, steps: Vec<pb::Step>) -> Result<()> {
        self.sender.send_steps(steps).await
    }

    /// Ends the output; the server answers with the reply that carries `Final`.
    pub async fn finish(&self, finish: Finish) -> Result<()> {
        self.sender.finish(finish).await
    }

    /// The next reply: `None` after the final one (or after the error that ended the session).
    pub async fn recv(&mut self) -> Option<Result<pb::ParseResponse>> {
        self.replies.recv().await
    }

    /// The session's outcome, once its final reply has been received.
    pub fn final_message(&self) -> Option<&pb::Final> {
        self.replies.final_message()
    }

    /// How many times the session has moved to a new stream.
    pub fn resumes(&self) -> usize {
        self.replies.resumes()
    }

    /// The two halves, for sending from one task while receiving in another.
    pub fn split(self) -> (SessionSender, Replies) {
        (self.sender, self.replies)
    }
}

impl SessionSender {
    /// As [`Session::send`].
    pub async fn send<S: Into<Vec<u32>>>(&self, steps: impl IntoIterator<Item = S>) -> Result<()> {
        let steps = steps.into_iter().map(|ids| pb::Step { token_ids: ids.into(), ..Default::default() }).collect();
        self.send_steps(steps).await
    }

    /// As [`Session::send_steps`].
    pub async fn send_steps(&self, steps: Vec<pb::Step>) -> Result<()> {
        self.put(pb::ParseRequest { steps, ..Default::default() }).await
    }

    /// As [`Session::finish`].
    pub async fn finish(&self, finish: Finish) -> Result<()> {
        self.put(pb::ParseRequest { finish: Some(finish.into_message()), ..Default::default() }).await
    }

    async fn put(&self, msg: pb::ParseRequest) -> Result<()> {
        match &self.commands {
            Commands::Stream(commands) => commands.send(msg).await.map_err(|_| Error::Ended),
            Commands::Multiplexed(sender) => sender.send(msg).await,
        }
    }
}

impl Replies {
    /// The next reply: `None` after the final one (or after the error that ended the session).
    pub async fn recv(&mut self) -> Option<Result<pb::ParseResponse>> {
        std::future::poll_fn(|cx| Pin::new(&mut *self).poll_next(cx)).await
    }

    /// The session's outcome, once its final reply has been received.
    pub fn final_message(&self) -> Option<&pb::Final> {
        self.final_message.as_ref()
    }

    /// How many times the session has moved to a new stream.
    pub fn resumes(&self) -> usize {
        self.resumes.load(Ordering::Relaxed)
    }

    /// The deltas of the replies, in order across them.
    pub fn deltas(self) -> Deltas {
        Deltas { replies: self, buffered: VecDeque::new() }
    }

    /// With `Open.wire` ([`crate::OpenOptions::wire`]): the bytes to forward, as they come (each
    /// reply's `wire`, then `Final.wire`; empty pieces left out).
    pub fn wire(self) -> Wire {
        Wire { replies: self, buffered: VecDeque::new() }
    }
}

impl Stream for Replies {
    type Item = Result<pb::ParseResponse>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let item = Pin::new(&mut self.inner).poll_next(cx);
        if let Poll::Ready(Some(Ok(reply))) = &item {
            if let Some(final_message) = &reply.r#final {
                self.final_message = Some(final_message.clone());
            }
        }
        item
    }
}

impl Stream for Session {
    type Item = Result<pb::ParseResponse>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        Pin::new(&mut self.replies).poll_next(cx)
    }
}

/// A session's deltas, in order across its replies; [`Deltas::final_message`] holds the outcome
/// once the stream has ended.
pub struct Deltas {
    replies: Replies,
    buffered: VecDeque<pb::Delta>,
}

impl Deltas {
    /// The next delta; `None` once the final reply's deltas are all out.
    pub async fn recv(&mut self) -> Option<Result<pb::Delta>> {
        std::future::poll_fn(|cx| Pin::new(&mut *self).poll_next(cx)).await
    }

    /// The session's outcome, once its final reply has been received.
    pub fn final_message(&self) -> Option<&pb::Final> {
        self.replies.final_message()
    }
}

impl Stream for Deltas {
    type Item = Result<pb::Delta>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            if let Some(delta) = self.buffered.pop_front() {
                return Poll::Ready(Some(Ok(delta)));
            }
            match Pin::new(&mut self.replies).poll_next(cx) {
                Poll::Ready(Some(Ok(reply))) => self.buffered.extend(reply.deltas),
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

/// A session's bytes to forward (see [`Replies::wire`]); [`Wire::final_message`] holds the
/// outcome once the stream has ended.
pub struct Wire {
    replies: Replies,
    buffered: VecDeque<Vec<u8>>,
}

impl Wire {
    /// The next piece of bytes; `None` once the final reply's are out.
    pub async fn recv(&mut self) -> Option<Result<Vec<u8>>> {
        std::future::poll_fn(|cx| Pin::new(&mut *self).poll_next(cx)).await
    }

    /// The session's outcome, once its final reply has been received.
    pub fn final_message(&self) -> Option<&pb::Final> {
        self.replies.final_message()
    }
}

impl Stream for Wire {
    type Item = Result<Vec<u8>>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            if let Some(piece) = self.buffered.pop_front() {
                return Poll::Ready(Some(Ok(piece)));
            }
            match Pin::new(&mut self.replies).poll_next(cx) {
                Poll::Ready(Some(Ok(mut reply))) => {
                    let final_wire = reply.r#final.as_mut().map(|f| std::mem::take(&mut f.wire));
                    let pieces = [std::mem::take(&mut reply.wire)].into_iter().chain(final_wire);
                    self.buffered.extend(pieces.filter(|piece| !piece.is_empty()));
                }
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

type Outbound = mpsc::Sender<pb::ParseRequest>;

/// Opens a stream whose first messages are the ledger's `Open` (with its resume point once the
/// session has moved) and what it re-sends, then what the session writes to the returned
/// sender (`capacity` messages at most), and waits for the server to accept it (its response
/// headers).
async fn connect(
    targets: &Targets,
    ledger: &mut Ledger,
    capacity: usize,
) -> std::result::Result<Connected, tonic::Status> {
    let (out, rx) = mpsc::channel(capacity);
    let first = tokio_stream::iter(ledger.restart());
    let (address, mut stub) = targets.pick();
    let response = stub.parse(first.chain(ReceiverStream::new(rx))).await;
    targets.note(address, &response);
    Ok((address, out, response?.into_inner()))
}

/// A stream the server accepted: the address it went to, its sending and receiving sides.
type Connected = (usize, Outbound, Streaming<pb::ParseResponse>);

/// [`connect`], retrying breaks within the policy's budget (no retries without a policy);
/// `attempt` is how much of the budget is already spent.
async fn connect_retrying(
    targets: &Targets,
    policy: Option<&ResumePolicy>,
    ledger: &mut Ledger,
    capacity: usize,
    mut attempt: u32,
) -> Result<Connected> {
    loop {
        match connect(targets, ledger, capacity).await {
            Ok(stream) => return Ok(stream),
            Err(status) => match policy {
                Some(policy) if retryable(&status) && attempt < policy.attempts => {
                    tokio::time::sleep(policy.backoff(attempt)).await;
                    attempt += 1;
                }
                _ => return Err(status.into()),
            },
        }
    }
}

/// The task behind a session.
struct Driver {
    targets: Targets,
    address: usize, // the current stream's
    policy: Option<ResumePolicy>,
    ledger: Ledger,
    out: Option<Outbound>,             // None once the sending side is closed (after Finish)
    capacity: usize,                   // of each stream's outbound channel
    pending: Option<pb::ParseRequest>, // taken from the caller, waiting for room on the stream
    inbound: Streaming<pb::ParseResponse>,
    joiner: Joiner,
    commands: mpsc::Receiver<pb::ParseRequest>,
    commands_open: bool,
    replies: mpsc::UnboundedSender<Result<pb::ParseResponse>>,
    resumes: Arc<AtomicUsize>,
    breaks: u32, // streams broken since the last reply: the part of the retry budget spent
}

impl Driver {
    async fn run(mut self) {
        if let Err(e) = self.drive().await {
            let _ = self.replies.send(Err(e));
        }
    }

    async fn drive(&mut self) -> Result<()> {
        loop {
            tokio::select! {
                _ = self.replies.closed() => return Ok(()), // the caller is gone: cancel the call
                // A caller's message is taken only when the last one has gone out: the bounded
                // channels carry the stream's back-pressure to the caller's sends.
                command = self.commands.recv(), if self.commands_open && self.pending.is_none() => match command {
                    Some(msg) => self.write(msg),
                    None => {
                        // Every sender is gone: close the sending side, so the server ends
                        // the stream (without a Finish, with its status) rather than wait.
                        self.commands_open = false;
                        self.out = None;
                    }
                },
                permit = reserve(&self.out), if self.pending.is_some() && self.out.is_some() => match permit {
                    Some(permit) => {
                        if let Some(msg) = self.pending.take() {
                            self.put(msg, permit);
                        }
                    }
                    // The stream's sending side is gone: the break shows on the receiving side,
                    // and the ledger re-sends what was not answered on the next stream.
                    None => self.out = None,
                },
                received = self.joiner.next(&mut self.inbound) => match received? {
                    Received::Reply(reply) => {
                        self.ledger.received(&reply)?;
                        self.breaks = 0;
                        let done = reply.r#final.is_some();
                        let _ = self.replies.send(Ok(reply));
                        if done {
                            self.drain().await;
                            return Ok(());
                        }
                    }
                    Received::End => return Err(Error::protocol("stream ended without a final message")),
                    Received::Broken(status) => self.resume(status).await?,
                },
            }
        }
    }

    /// Writes a caller's message to the current stream (and records it in the ledger), or keeps
    /// it pending while the stream has no room.
    fn write(&mut self, msg: pb::ParseRequest) {
        match self.out.as_ref().map(|out| out.clone().try_reserve_owned()) {
            Some(Ok(permit)) => self.put(msg, permit),
            Some(Err(mpsc::error::TrySendError::Full(_))) => self.pending = Some(msg),
            // No stream to write to (after Finish, or a broken one): the ledger re-sends it.
            Some(Err(mpsc::error::TrySendError::Closed(_))) | None => {
                self.out = None;
                self.ledger.sent(&msg);
            }
        }
    }

    /// Writes `msg` into the room `permit` holds on the current stream.
    fn put(&mut self, msg: pb::ParseRequest, permit: mpsc::OwnedPermit<pb::ParseRequest>) {
        let finish = msg.finish.is_some();
        self.ledger.sent(&msg);
        permit.send(msg);
        if finish {
            self.out = None; // closes the sending side, as the server expects after Finish
        }
    }

    /// After the final reply, reads the stream to its end, so the server records the session
    /// as complete (dropping the call now would reset it).
    async fn drain(&mut self) {
        self.out = None;
        while let Ok(Received::Reply(_)) = self.joiner.next(&mut self.inbound).await {}
    }

    /// Moves the session to a new stream after `status` broke the current one, or ends it.
    async fn resume(&mut self, status: tonic::Status) -> Result<()> {
        let Some(policy) = self.policy.filter(|_| retryable(&status) && self.ledger.resumable()) else {
            return Err(status.into());
        };
        if self.breaks >= policy.attempts {
            return Err(status.into()); // streams keep breaking before any reply: the budget is spent
        }
        if self.breaks > 0 {
            tokio::time::sleep(policy.backoff(self.breaks - 1)).await; // broke again before a reply
        }
        self.breaks += 1;
        self.ledger.broke();
        self.targets.failed(self.address);
        let (address, out, inbound) =
            connect_retrying(&self.targets, Some(&policy), &mut self.ledger, self.capacity, self.breaks).await?;
        self.address = address;
        self.inbound = inbound;
        self.out = if self.ledger.finish_sent() { None } else { Some(out) };
        self.resumes.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

/// Room for one message on `out`; `None` once its stream has stopped reading. (The sender is
/// cloned only when the future is polled: a disabled `select!` branch costs nothing.)
async fn reserve(out: &Option<Outbound>) -> Option<mpsc::OwnedPermit<pb::ParseRequest>> {
    out.clone()?.reserve_owned().await.ok()
}
