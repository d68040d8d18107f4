//! One request session: a `Parse` stream (or, after a break, the streams it resumed on).
//!
//! A task of its own drives the stream: it writes what the caller sends, receives and joins the
//! server's replies, and (with resume on) moves the session to a new stream when one breaks. The
//! caller holds a [`SessionSender`] (cheap, never blocks) and a [`Replies`] stream, together in a
//! [`Session`] or apart after [`Session::split`], so one task can send while another receives.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_core::Stream;
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
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

/// The sending half of a session. Sends never block and never report a broken stream that the
/// session will resume; after the session has ended they are [`Error::Ended`].
#[derive(Clone)]
pub struct SessionSender {
    commands: mpsc::UnboundedSender<pb::ParseRequest>,
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
        let mut open = options.into_message();
        open.resumable = self.resume.is_some();
        let policy = self.resume;
        let mut ledger = Ledger::new(open);
        let (address, out, inbound) = connect_retrying(&self.targets, policy.as_ref(), &mut ledger, 0).await?;
        let (commands_tx, commands) = mpsc::unbounded_channel();
        let (replies_tx, replies) = mpsc::unbounded_channel();
        let resumes = Arc::new(AtomicUsize::new(0));
        let task = Driver {
            targets: self.targets.clone(),
            address,
            policy,
            ledger,
            out: Some(out),
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
            sender: SessionSender { commands: commands_tx },
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
        let session = self.open(options).await?;
        for step in steps {
            session.send([step])?;
        }
        session.finish(finish)?;
        let (_, replies) = session.split();
        let mut deltas = replies.deltas();
        let mut collected = Vec::new();
        while let Some(delta) = deltas.recv().await {
            collected.push(delta?);
        }
        let final_message = deltas.final_message().cloned();
        final_message.map(|f| (f, collected)).ok_or_else(|| Error::protocol("stream ended without a final message"))
    }
}

impl Session {
    /// Sends decode steps (each the token ids of one forward pass) in one message. Several
    /// steps per message give the same result as one message each; none is a keep-alive.
    pub fn send<S: Into<Vec<u32>>>(&self, steps: impl IntoIterator<Item = S>) -> Result<()> {
        self.sender.send(steps)
    }

    /// Sends ready-made steps (a [`crate::logprob_step`], a text step) in one message.
    pub fn send_steps(&self, steps: Vec<pb::Step>) -> Result<()> {
        self.sender.send_steps(steps)
    }

    /// Ends the output; the server answers with the reply that carries `Final`.
    pub fn finish(&self, finish: Finish) -> Result<()> {
        self.sender.finish(finish)
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
    pub fn send<S: Into<Vec<u32>>>(&self, steps: impl IntoIterator<Item = S>) -> Result<()> {
        let steps = steps.into_iter().map(|ids| pb::Step { token_ids: ids.into(), ..Default::default() }).collect();
        self.send_steps(steps)
    }

    /// As [`Session::send_steps`].
    pub fn send_steps(&self, steps: Vec<pb::Step>) -> Result<()> {
        self.put(pb::ParseRequest { steps, ..Default::default() })
    }

    /// As [`Session::finish`].
    pub fn finish(&self, finish: Finish) -> Result<()> {
        self.put(pb::ParseRequest { finish: Some(finish.into_message()), ..Default::default() })
    }

    fn put(&self, msg: pb::ParseRequest) -> Result<()> {
        self.commands.send(msg).map_err(|_| Error::Ended)
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

type Outbound = mpsc::UnboundedSender<pb::ParseRequest>;

/// Opens a stream whose first message is the ledger's `Open` (with its resume point once the
/// session has moved) and waits for the server to accept it (its response headers).
async fn connect(targets: &Targets, ledger: &mut Ledger) -> std::result::Result<Connected, tonic::Status> {
    let (out, rx) = mpsc::unbounded_channel();
    for msg in ledger.restart() {
        let _ = out.send(msg);
    }
    let (address, mut stub) = targets.pick();
    let response = stub.parse(UnboundedReceiverStream::new(rx)).await;
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
    mut attempt: u32,
) -> Result<Connected> {
    loop {
        match connect(targets, ledger).await {
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
    out: Option<Outbound>, // None once the sending side is closed (after Finish)
    inbound: Streaming<pb::ParseResponse>,
    joiner: Joiner,
    commands: mpsc::UnboundedReceiver<pb::ParseRequest>,
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
                command = self.commands.recv(), if self.commands_open => match command {
                    Some(msg) => self.write(msg),
                    None => {
                        // Every sender is gone: close the sending side, so the server ends
                        // the stream (without a Finish, with its status) rather than wait.
                        self.commands_open = false;
                        self.out = None;
                    }
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

    /// Writes a caller's message to the current stream (and records it in the ledger).
    fn write(&mut self, msg: pb::ParseRequest) {
        let finish = msg.finish.is_some();
        self.ledger.sent(&msg);
        if let Some(out) = &self.out {
            let _ = out.send(msg); // a broken stream shows on the receiving side
        }
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
            connect_retrying(&self.targets, Some(&policy), &mut self.ledger, self.breaks).await?;
        self.address = address;
        self.inbound = inbound;
        self.out = if self.ledger.finish_sent() { None } else { Some(out) };
        self.resumes.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}
