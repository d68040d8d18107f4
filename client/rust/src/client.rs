//! The connection: [`ClientBuilder`] chooses transport security, a bearer token, keepalive and
//! resume; [`Client`] makes the unary calls and opens sessions and batches.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};
use tonic::Code;

use crate::error::{Error, Result};
use crate::options::{Finish, OpenOptions};
use crate::pb;
use crate::pb::parser_service_client::ParserServiceClient;
use crate::render::{RenderOptions, Rendered};
use crate::resume::ResumePolicy;

/// The largest message the client receives: the server's default `--max-reply-bytes` (a server
/// never sends more than its own limit; larger replies arrive in parts, which the client joins).
pub const MAX_REPLY_BYTES: usize = 64 << 20;

/// How many messages a session or batch holds that its stream has not taken yet, by default
/// ([`ClientBuilder::send_capacity`]): past that, sends wait (back-pressure). 64 decode steps
/// are a few milliseconds of a fast engine's output, enough to ride out a scheduling hiccup,
/// and bound what a stalled server can make the client keep.
pub const SEND_CAPACITY: usize = 64;

/// The generated stub with the client's bearer token on every call.
pub type Stub = ParserServiceClient<InterceptedService<Channel, Auth>>;

/// Client keepalive. The server runs gRPC core's default ping policy: a ping at most every
/// 5 minutes while no data flows, none on a connection without calls, GOAWAY `too_many_pings`
/// after repeated violations. [`Keepalive::default`] stays inside it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Keepalive {
    /// Idle time before a ping.
    pub interval: Duration,
    /// How long the server has to answer a ping before the connection is treated as dead.
    pub timeout: Duration,
    /// Ping on a connection without calls too (the server's default policy forbids it).
    pub while_idle: bool,
}

impl Default for Keepalive {
    /// 5 minutes, 20 s timeout, no pings without calls: as the Go and C++ clients.
    fn default() -> Self {
        Keepalive { interval: Duration::from_secs(300), timeout: Duration::from_secs(20), while_idle: false }
    }
}

/// TLS settings: the CA that verifies the server (the system roots without one) and, for
/// mutual TLS, the client's certificate and key.
#[derive(Clone, Debug, Default)]
pub struct Tls {
    ca_pem: Option<Vec<u8>>,
    identity: Option<(Vec<u8>, Vec<u8>)>,
    domain: Option<String>,
}

impl Tls {
    /// Verifies the server against the system's root certificates.
    pub fn system_roots() -> Self {
        Tls::default()
    }

    /// Loads PEM files: `ca` verifies the server (`None`: the system roots); `cert` and `key`
    /// are the client's for mutual TLS (both or neither).
    pub fn from_files(ca: Option<&Path>, cert: Option<&Path>, key: Option<&Path>) -> Result<Self> {
        let read = |what: &str, path: &Path| {
            std::fs::read(path).map_err(|e| Error::config(format!("{what} {}: {e}", path.display())))
        };
        let mut tls = Tls::default();
        if let Some(ca) = ca {
            let pem = read("CA file", ca)?;
            if !String::from_utf8_lossy(&pem).contains("-----BEGIN CERTIFICATE-----") {
                return Err(Error::config(format!("CA file {} holds no PEM certificate", ca.display())));
            }
            tls.ca_pem = Some(pem);
        }
        match (cert, key) {
            (Some(cert), Some(key)) => {
                tls.identity = Some((read("client certificate", cert)?, read("client key", key)?))
            }
            (None, None) => {}
            _ => return Err(Error::config("mutual TLS needs both a certificate and a key file")),
        }
        Ok(tls)
    }

    /// The name to verify the server's certificate against, when it is not the target's host.
    pub fn domain(mut self, name: impl Into<String>) -> Self {
        self.domain = Some(name.into());
        self
    }

    fn config(&self) -> ClientTlsConfig {
        let mut config = ClientTlsConfig::new();
        config = match &self.ca_pem {
            Some(pem) => config.ca_certificate(Certificate::from_pem(pem)),
            None => config.with_native_roots(),
        };
        if let Some((cert, key)) = &self.identity {
            config = config.identity(Identity::from_pem(cert, key));
        }
        if let Some(domain) = &self.domain {
            config = config.domain_name(domain.clone());
        }
        config
    }
}

/// Sends `authorization: Bearer <token>` on every call when a token is set.
#[derive(Clone, Debug, Default)]
pub struct Auth(Option<MetadataValue<Ascii>>);

impl tonic::service::Interceptor for Auth {
    fn call(&mut self, mut request: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(token) = &self.0 {
            request.metadata_mut().insert("authorization", token.clone());
        }
        Ok(request)
    }
}

enum Security {
    Unchosen,
    Plaintext,
    Tls(Tls),
}

/// Configures a [`Client`]. Transport security is a choice the caller makes: one of
/// [`ClientBuilder::tls`] or [`ClientBuilder::insecure`] is required.
pub struct ClientBuilder {
    target: String,
    security: Security,
    token: Option<String>,
    keepalive: Keepalive,
    resume: Option<ResumePolicy>,
    connect_timeout: Option<Duration>,
    send_capacity: usize,
    multiplex: Option<Duration>,
}

impl ClientBuilder {
    /// Plaintext, for parsetier next to the serving stack (loopback, a sidecar, a private
    /// network behind a TLS-terminating proxy).
    pub fn insecure(mut self) -> Self {
        self.security = Security::Plaintext;
        self
    }

    /// TLS with these settings.
    pub fn tls(mut self, tls: Tls) -> Self {
        self.security = Security::Tls(tls);
        self
    }

    /// Sends `authorization: Bearer <token>` on every call (servers started with
    /// `--auth-tokens`). It goes on plaintext connections too: only over a trusted network there.
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// Replaces [`Keepalive::default`]; pings more frequent than the server permits get the
    /// connection closed with GOAWAY.
    pub fn keepalive(mut self, keepalive: Keepalive) -> Self {
        self.keepalive = keepalive;
        self
    }

    /// How sessions resume after a broken stream ([`ResumePolicy::default`] unless changed).
    pub fn resume(mut self, policy: ResumePolicy) -> Self {
        self.resume = Some(policy);
        self
    }

    /// Turns resume off: a broken stream ends the session with its status.
    pub fn without_resume(mut self) -> Self {
        self.resume = None;
        self
    }

    /// How many messages each session (and batch) may hold that its stream has not taken yet;
    /// a send past that waits until the stream takes one ([`SEND_CAPACITY`] unless set; at
    /// least 1). HTTP/2 flow control holds back what the server has not read, so a slow server
    /// slows the sender instead of filling the client's memory.
    pub fn send_capacity(mut self, messages: usize) -> Self {
        self.send_capacity = messages;
        self
    }

    /// Multiplexed sessions: [`Client::open`]'s sessions ride one shared `ParseBatch` stream
    /// (the same [`crate::Session`] API, each session's replies its own `Parse` stream's), their
    /// messages coalesced into one per flush, `flush_interval` after the first of them (zero:
    /// once the server has answered the message before, or 0.5 ms after it went out). See the
    /// `mux` module.
    pub fn multiplex(mut self, flush_interval: Duration) -> Self {
        self.multiplex = Some(flush_interval);
        self
    }

    /// Bounds how long making a connection may take.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = Some(timeout);
        self
    }

    /// The client. The connection is made lazily, on the first call; a configuration error
    /// (no security chosen, a malformed target or token) is `Error::Config`.
    pub fn build(self) -> Result<Client> {
        if self.send_capacity == 0 {
            return Err(Error::config("send_capacity must be at least 1"));
        }
        let scheme = match &self.security {
            Security::Unchosen => return Err(Error::config(
                "no transport security chosen: call tls(...), or insecure() for a plaintext loopback or sidecar hop",
            )),
            Security::Plaintext => "http",
            Security::Tls(_) => "https",
        };
        let auth = match &self.token {
            Some(token) => Auth(Some(
                format!("Bearer {token}")
                    .parse()
                    .map_err(|_| Error::config("the token is not a valid header value"))?,
            )),
            None => Auth(None),
        };
        let stubs = addresses(&self.target)
            .into_iter()
            .map(|address| {
                let channel = self.endpoint(scheme, address)?.connect_lazy();
                Ok(ParserServiceClient::with_interceptor(channel, auth.clone())
                    .max_decoding_message_size(MAX_REPLY_BYTES))
            })
            .collect::<Result<Vec<_>>>()?;
        let targets = Targets { stubs: stubs.into(), current: Arc::new(AtomicUsize::new(0)) };
        let mux = self.multiplex.map(|interval| Arc::new(MuxHandle { interval, task: tokio::sync::OnceCell::new() }));
        Ok(Client { targets, resume: self.resume, send_capacity: self.send_capacity, mux })
    }

    fn endpoint(&self, scheme: &str, address: &str) -> Result<Endpoint> {
        let uri = if address.contains("://") { address.to_owned() } else { format!("{scheme}://{address}") };
        let mut endpoint = Endpoint::from_shared(uri.clone())
            .map_err(|e| Error::config(format!("target {uri:?}: {e}")))?
            .http2_keep_alive_interval(self.keepalive.interval)
            .keep_alive_timeout(self.keepalive.timeout)
            .keep_alive_while_idle(self.keepalive.while_idle)
            .tcp_nodelay(true);
        if let Some(timeout) = self.connect_timeout {
            endpoint = endpoint.connect_timeout(timeout);
        }
        if let Security::Tls(tls) = &self.security {
            endpoint = endpoint.tls_config(tls.config()).map_err(|e| Error::config(format!("TLS: {e}")))?;
        }
        Ok(endpoint)
    }
}

/// The addresses of a target: `host:port`, a URI, or a list as gRPC writes it
/// (`ipv4:127.0.0.1:4001,127.0.0.1:4002`, or the addresses comma-separated).
fn addresses(target: &str) -> Vec<&str> {
    let list = target.strip_prefix("ipv4:").or_else(|| target.strip_prefix("dns:///")).unwrap_or(target);
    list.split(',').map(str::trim).filter(|a| !a.is_empty()).collect()
}

/// The target's addresses, each with its own connection, used as gRPC's pick_first does: every
/// call goes to the current one, and a call or stream that finds it gone moves the client on to
/// the next (so a resumed session lands on a server that is still there).
#[derive(Clone)]
pub(crate) struct Targets {
    stubs: Arc<[Stub]>,
    current: Arc<AtomicUsize>,
}

impl Targets {
    /// The current address's index and stub.
    pub(crate) fn pick(&self) -> (usize, Stub) {
        let index = self.current.load(Ordering::Relaxed) % self.stubs.len();
        (index, self.stubs[index].clone())
    }

    /// A call through address `index` found the server or the connection gone: move on (once,
    /// however many calls saw it).
    pub(crate) fn failed(&self, index: usize) {
        let next = (index + 1) % self.stubs.len();
        let _ = self.current.compare_exchange(index, next, Ordering::Relaxed, Ordering::Relaxed);
    }

    /// Notes how a call through address `index` ended.
    pub(crate) fn note<T>(&self, index: usize, result: &std::result::Result<T, tonic::Status>) {
        if result.as_ref().err().is_some_and(gone) {
            self.failed(index);
        }
    }
}

/// Whether `status` says the server or the connection is gone (not a refusal of the call).
pub(crate) fn gone(status: &tonic::Status) -> bool {
    status.code() == Code::Unavailable || crate::error::local_transport_failure(status)
}
/// A connection to one parsetier server (or one balanced target). Cheap to clone; clones share
/// the connection. Calls need a tokio runtime.
#[derive(Clone)]
pub struct Client {
    pub(crate) targets: Targets,
    pub(crate) resume: Option<ResumePolicy>,
    pub(crate) send_capacity: usize,
    pub(crate) mux: Option<Arc<MuxHandle>>,
}

/// A multiplexed client's shared stream: its task, started by the first `open`.
pub(crate) struct MuxHandle {
    pub(crate) interval: Duration,
    pub(crate) task: tokio::sync::OnceCell<Arc<crate::mux::MuxShared>>,
}

impl Client {
    /// A builder for a client of `target`: `"host:port"`, a URI such as `"http://host:port"`,
    /// or several addresses (`"ipv4:127.0.0.1:4001,127.0.0.1:4002"`) used in order as gRPC's
    /// pick_first does. Resume is on with [`ResumePolicy::default`].
    pub fn builder(target: impl Into<String>) -> ClientBuilder {
        ClientBuilder {
            target: target.into(),
            security: Security::Unchosen,
            token: None,
            keepalive: Keepalive::default(),
            resume: Some(ResumePolicy::default()),
            connect_timeout: None,
            send_capacity: SEND_CAPACITY,
            multiplex: None,
        }
    }

    /// The generated stub (of the current address), for calls this crate does not wrap.
    pub fn stub(&self) -> Stub {
        self.targets.pick().1
    }

    /// Whether (and how) sessions resume after a broken stream.
    pub fn resume_policy(&self) -> Option<&ResumePolicy> {
        self.resume.as_ref()
    }

    /// The models the server parses for, sorted by name.
    pub async fn list_models(&self) -> Result<Vec<pb::ModelInfo>> {
        let (index, mut stub) = self.targets.pick();
        let reply = stub.list_models(pb::ListModelsRequest {}).await;
        self.targets.note(index, &reply);
        Ok(reply?.into_inner().models)
    }

    /// Parses a whole output with the unary call: the same result as a session fed every token
    /// at once. The reply holds only `final` unless the options ask for deltas or events.
    pub async fn parse_once(
        &self,
        open: OpenOptions,
        token_ids: Vec<u32>,
        finish: Finish,
    ) -> Result<pb::ParseOnceResponse> {
        let request = pb::ParseOnceRequest {
            open: Some(open.into_message()),
            token_ids,
            finish: Some(finish.into_message()),
            ..Default::default()
        };
        self.parse_once_request(request).await
    }

    /// The unary call with a request built by the caller (text output, logprobs...).
    pub async fn parse_once_request(&self, request: pb::ParseOnceRequest) -> Result<pb::ParseOnceResponse> {
        let (index, mut stub) = self.targets.pick();
        let reply = stub.parse_once(request).await;
        self.targets.note(index, &reply);
        Ok(reply?.into_inner())
    }

    /// Renders an API request (its JSON body, in its dialect) for the model: the prompt's token
    /// ids, the sampling parameters, the decoding constraint and the output session's `Open`
    /// (docs/render.md). A bad body is `InvalidArgument` naming its JSON path, an unknown model
    /// `NotFound`; [`Error::wire`](crate::Error::wire) is then the API's error body to forward.
    pub async fn render(&self, options: RenderOptions) -> Result<Rendered> {
        let (index, mut stub) = self.targets.pick();
        let reply = stub.render(options.into_message()).await;
        self.targets.note(index, &reply);
        Ok(reply?.into_inner().into())
    }

    /// The decoding constraint for a request with these options, derived from the model's
    /// format: an xgrammar structural tag and an equivalent llguidance Lark grammar.
    pub async fn build_constraint(&self, open: OpenOptions) -> Result<pb::BuildConstraintResponse> {
        let request = pb::BuildConstraintRequest { open: Some(open.into_message()) };
        let (index, mut stub) = self.targets.pick();
        let reply = stub.build_constraint(request).await;
        self.targets.note(index, &reply);
        Ok(reply?.into_inner())
    }
}
