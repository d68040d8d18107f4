//! A Rust client for parsetier, the parse tier: token ids in, OpenAI-style reasoning, content and
//! tool-call deltas (and semantic events) out, over gRPC (the contract is `proto/parsetier/v1/parsetier.proto`,
//! compiled into [`pb`] when the crate builds).
//!
//! ```no_run
//! use parsetier_client::{Client, Finish, OpenOptions};
//! # async fn run() -> parsetier_client::Result<()> {
//! let client = Client::builder("127.0.0.1:50051").insecure().build()?;
//! let mut session = client.open(OpenOptions::new("qwen3")).await?;
//! session.send([[9707u32]]).await?; // one decode step: "Hello"
//! session.finish(Finish::stop_token(151645)).await?;
//! while let Some(reply) = session.recv().await {
//!     for delta in reply?.deltas {
//!         print!("{}", delta.content);
//!     }
//! }
//! # Ok(()) }
//! ```
//!
//! [`Client::render`] is the call before generation: an API request's body in, the prompt's ids
//! and the output session's `Open` out ([`Rendered::open_options`] goes to [`Client::open`]
//! unchanged).
//!
//! One [`Session`] is one request (a `Parse` stream); a [`Batch`] carries many over one
//! `ParseBatch` stream, one message per engine step. With resume on (the default), both survive
//! a broken stream by moving to another server (docs/service.md, "Resume").

mod batch;
mod batch_ledger;
mod batch_packed;
mod client;
mod error;
mod logprobs;
mod mux;
mod options;
mod parts;
mod render;
mod resume;
mod session;
mod session_ledger;
mod wire;
mod wire_join;

/// The generated messages and stub of `parsetier.v1`.
pub mod pb {
    #![allow(missing_docs, clippy::all)]
    tonic::include_proto!("parsetier.v1");
}

pub use batch::{session_error, Batch};
pub use client::{Auth, Client, ClientBuilder, Keepalive, Stub, Tls, MAX_REPLY_BYTES, SEND_CAPACITY};
pub use error::{Code, Error, Result};
pub use logprobs::{logprob_step, logprobs, rune_offset, Alternative};
pub use options::{Finish, OpenOptions};
pub use render::{RenderOptions, Rendered};
pub use resume::{retryable, ResumePolicy};
pub use session::{Deltas, Replies, Session, SessionSender, Wire};
pub use wire::{wire_of, WireReply};
pub use wire_join::WireJoin;
