// parsetier C++ client: token ids in, OpenAI-style reasoning / content / tool-call deltas out.
//
// One Session is one Parse stream, so one request: Client::Open starts it, Session::Send carries
// each decode step, Session::Finish says why generation stopped, and the replies come either
// from Session::Next (pull, from any one thread) or through SessionCallbacks (push, on gRPC's
// threads). Errors are parsetier::Error, which carries the gRPC status code the server sent.
// Everything the contract offers stays reachable through the generated types (parsetier::v1).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "parsetier/v1/parsetier.grpc.pb.h"
#include "parsetier/v1/parsetier.pb.h"

namespace parsetier {

// A failed call: the gRPC status code and message that ended it (see docs/service.md for what
// each code means), for example NOT_FOUND for an unknown model or INVALID_ARGUMENT for a token
// id outside the model's vocabulary.
class Error : public std::runtime_error {
 public:
  explicit Error(const grpc::Status& status, std::string wire = "");
  Error(grpc::StatusCode code, const std::string& message);

  grpc::StatusCode code() const { return code_; }
  // The server's message, without the "CODE: " prefix what() has.
  const std::string& message() const { return message_; }
  // The error in the wire dialect of the call that failed, when the server sent it (a Render, or
  // a ParseOnce or Parse session with OpenOptions::wire; WireJoin::Fail forwards it): the API's
  // error body, or a stream's error event, to forward to the caller; a body with
  // http_status() (docs/service.md, "Errors in the dialect"); empty otherwise.
  const std::string& wire() const { return wire_; }
  // The HTTP status that goes with an error body of this code: the one the openai and anthropic
  // SDKs map to their error classes (400, 401, 403, 404, 429, 503, 504; 500 for any other).
  int http_status() const;

 private:
  grpc::StatusCode code_;
  std::string message_;
  std::string wire_;
};

// The canonical name of a status code ("NOT_FOUND", "INVALID_ARGUMENT", ...).
const char* StatusCodeName(grpc::StatusCode code);

// How sessions resume after a broken stream (docs/service.md, "Resume"): a dead, draining or
// unreachable server, a lost connection, a proxy's reset. `attempts` is the retry budget:
// reconnects in a row that may fail (refused, unreachable) before the last error ends the
// session; it is renewed whenever a new stream is accepted. Backoff doubles from
// `initial_backoff` up to `max_backoff`, with jitter, so a fleet's clients do not reconnect in
// lock step. The same policy, and defaults, as the Python and Go clients.
struct ResumePolicy {
  int attempts = 20;
  std::chrono::milliseconds initial_backoff{50};
  std::chrono::milliseconds max_backoff{1000};
};

// The largest message a Client built from a target receives: the server's default
// --max-reply-bytes (larger replies come in parts, which Session and Batch join). gRPC's default
// of 4 MiB is too small for a final result that repeats a long output. A channel given to Client
// keeps its own limit.
constexpr int kMaxReplyBytes = 64 << 20;

// Multiplexed sessions (issue 40; docs/clients.md, "Multiplexed sessions"): Client::Open returns
// the same Session, but the client's sessions ride one shared ParseBatch stream instead of a Parse
// stream each. Their sends are coalesced into one message per flush: `flush_interval` after the
// first send queued (zero: as soon as the client's flushing thread is free; what is sent while it
// writes goes in its next message), or at once when `max_batch` sessions have a message queued;
// at most 64 messages go unanswered (then flushes, and senders, wait). A session has one entry
// per message, so each of its replies is exactly its Parse stream's.
struct MultiplexOptions {
  std::chrono::microseconds flush_interval{0};
  int max_batch = 1024;  // entries per message (the server's default limit is 2,048)
};

// How a Client connects. Transport security is an explicit choice: set `credentials` to
// InsecureCredentials() for a loopback or sidecar hop, or to TLS credentials; a Client without
// credentials is an std::invalid_argument.
struct ClientOptions {
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  // Sent as "authorization: Bearer <token>" on every call, for servers started with
  // --auth-tokens (empty: none). It goes over plaintext too (a sidecar hop, a mesh that encrypts
  // the network): only combine it with InsecureCredentials() where the network is trusted.
  std::string bearer_token;
  // Keepalive within the server's policy (gRPC core's default: at most one ping per 5 minutes
  // without data, none without calls); more frequent pings get the connection closed with
  // GOAWAY too_many_pings. Change them only together with the server.
  std::chrono::milliseconds keepalive_time{std::chrono::minutes(5)};
  std::chrono::milliseconds keepalive_timeout{std::chrono::seconds(20)};
  // Any other channel arguments (load-balancing policy, message sizes, ...), applied last.
  std::function<void(grpc::ChannelArguments&)> channel_arguments;
  // Resume on failover, on by default as in the Python and Go clients: a session keeps its
  // history (about 4 bytes per token) and continues on a new stream when its stream breaks.
  // std::nullopt turns it off: a broken stream ends the session with its status.
  std::optional<ResumePolicy> resume = ResumePolicy{};
  // Set: the client's sessions share one ParseBatch stream (MultiplexOptions above).
  std::optional<MultiplexOptions> multiplex;
};

// Plaintext (loopback, sidecar, private network behind a TLS-terminating proxy).
std::shared_ptr<grpc::ChannelCredentials> InsecureCredentials();
// TLS with the given PEM roots (empty: the system roots); a client certificate chain and key
// (PEM) make it mutual TLS.
std::shared_ptr<grpc::ChannelCredentials> TlsCredentials(const std::string& root_certs_pem = "",
                                                         const std::string& cert_chain_pem = "",
                                                         const std::string& private_key_pem = "");

// TLS from PEM files: ca_file verifies the server ("" for the system roots); cert_file and
// key_file are the client's certificate for mutual TLS (both "" without one). Throws
// std::invalid_argument when a file cannot be read or only one of cert and key is given.
std::shared_ptr<grpc::ChannelCredentials> TlsCredentialsFromFiles(const std::string& ca_file,
                                                                  const std::string& cert_file = "",
                                                                  const std::string& key_file = "");

// The session's Open message, as plain fields. `customize` may set any other Open field.
struct OpenOptions {
  std::string model;
  std::string request_id;  // only appears in the server's logs
  std::string tools_json;  // the OpenAI request's "tools" array, verbatim JSON
  // OpenAI's tool_choice: "" (unset: auto), "auto", "none", "required", or a function's name.
  std::string tool_choice;
  std::optional<bool> thinking;             // the chat template's thinking switch
  std::vector<uint32_t> prompt_token_ids;   // the prompt's tail
  v1::OutputKind output = v1::OUTPUT_KIND_UNSPECIFIED;  // deltas unless set
  bool complete_tool_calls = false;
  bool return_token_ids = false;  // each step's ids on the delta it produced (Delta::token_ids)
  // Render the output as a public API's bytes (Open.wire: OpenAI chat or completions, Anthropic
  // Messages, OpenAI Responses): each reply's wire() and its final().wire(), in that order, are
  // the bytes to forward to the caller unchanged (Wire below joins them).
  std::optional<v1::WireOptions> wire;
  // The whole session's (or unary call's) deadline; zero means none.
  std::chrono::milliseconds timeout{0};
  std::function<void(v1::Open&)> customize;

  v1::Open ToProto() const;
};

// How the output ended. The default is STOP with nothing matched.
struct FinishOptions {
  v1::FinishReason reason = v1::FINISH_REASON_STOP;  // STOP, LENGTH or ABORT
  std::optional<uint32_t> stop_token_id;             // e.g. Qwen3's <|im_end|> (151645)
  std::optional<std::string> stop_string;
  // With OpenOptions::wire and a request of n > 1 choices (one session per choice), on the
  // Finish of the last choice to finish only: the sum of the other choices' Final.usage
  // (SumUsage adds them up). That session's closing bytes (the usage chunk, a body's usage) then
  // count every choice, as the APIs report them; its Final.usage stays its own.
  std::optional<v1::Usage> other_choices_usage;

  static FinishOptions StopToken(uint32_t id);
  // A copy of this finish carrying the other choices' usage: SumUsage(others).
  FinishOptions WithOtherChoicesUsage(const std::vector<v1::Final>& others) const;
  v1::Finish ToProto() const;
};

// The sum of `finals`' usage (completion and reasoning tokens): for n > 1 choices, what the last
// choice's FinishOptions::other_choices_usage carries.
v1::Usage SumUsage(const std::vector<v1::Final>& finals);

// One decode step: the token ids one forward pass produced.
using Step = std::vector<uint32_t>;

// One top-k entry the generate side reports at a position: an id and its logprob.
struct Alternative {
  uint32_t token_id;
  float logprob;
};

// An id step carrying its logprobs: one logprob per id and, per id, the same number of
// alternatives (top[i] for token_ids[i], best first; empty for none). The server resolves every
// id to its text and bytes and puts them on the delta the step produced (Delta::logprobs). Send
// it with Session::SendSteps. Lengths that do not fit are INVALID_ARGUMENT from the server.
v1::Step LogprobStep(const std::vector<uint32_t>& token_ids, const std::vector<float>& logprobs,
                     const std::vector<std::vector<Alternative>>& top = {});

// The resolved logprobs of deltas, in order (a session's, or one message's), one entry per
// sampled token (token, logprob, bytes, text_offset, top_logprobs). OpenAI's JSON shapes of them
// are the server's to write: open the session with OpenOptions::wire (OpenAI chat or
// completions) and forward its wire bytes, which carry them.
std::vector<v1::TokenLogprob> Logprobs(const std::vector<v1::Delta>& deltas);

// The bytes a reply of a session opened with OpenOptions::wire carries for its caller: the reply's
// wire(), then, on the last reply, its final().wire() (the closing events, or the whole body).
std::string Wire(const v1::ParseResponse& reply);

// Push delivery. Both run on gRPC's callback threads, one at a time and in order; they must not
// block for long (a slow callback delays this session's reads, not other sessions').
struct SessionCallbacks {
  // Every server message, in order; the last one carries the Final result.
  std::function<void(const v1::ParseResponse&)> on_message;
  // Once, when the session has ended: OK after the final message, else the status that ended it.
  std::function<void(const grpc::Status&)> on_done;
};

class SessionCore;
class Batch;
namespace internal {
class Multiplexer;
struct MuxSession;
}  // namespace internal

// One live request session: one Parse stream or, after a break, the streams it resumed on.
// Send/Finish may be called from one thread while another calls Next; Cancel, Final and Wait may
// be called from any thread. Destroying a session that has not ended cancels it (the server
// records CANCELLED) and waits until gRPC is done with it.
//
// On a multiplexed client (ClientOptions::multiplex) the session is an entry of the client's
// shared ParseBatch stream, with the same API and replies: one entry per session per message
// (Send waits while 64 of the session's messages are not flushed yet), callbacks run on the
// client's receiving thread (a slow one delays every session of the client), the session's timeout
// is counted by the client (DEADLINE_EXCEEDED) and Cancel drops it on the server (CANCELLED);
// a broken stream moves every live session to a new one, and Resumes counts the moves.
//
// With resume on (ClientOptions::resume, the default) a broken stream is not the session's end:
// the session reconnects with backoff, opens a new stream on whichever server the target
// reaches, re-opens there with its answered token ids, re-sends the messages not answered yet
// (docs/service.md, "Resume") and goes on delivering the next message as if nothing had
// happened; Send blocks meanwhile instead of failing. Statuses
// that are the request's own (INVALID_ARGUMENT, NOT_FOUND, DEADLINE_EXCEEDED...) end the session
// as before, and so does the last error once the retry budget is spent.
class Session {
 public:
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Sends one decode step in its own message. Returns false when the stream has already ended:
  // Next or Wait then say why. Blocks while many earlier messages are still being written
  // (flow control), so never call it from a callback.
  bool Send(const Step& step);
  // Sends several steps in one message: the same result as one message each, fewer messages.
  // No steps at all is a keep-alive against the server's idle timeout.
  bool SendSteps(const std::vector<Step>& steps);
  // Sends ready-made steps (LogprobStep's, or text steps) in one message.
  bool SendSteps(const std::vector<v1::Step>& steps);
  // Ends the output and closes the sending side; the server answers with the final message.
  bool Finish(const FinishOptions& finish = {});

  // Pull delivery (sessions opened without callbacks): the next server message, blocking until
  // it comes; std::nullopt after the final one. Throws Error with the status that ended the
  // session otherwise.
  std::optional<v1::ParseResponse> Next();

  // Blocks until the session has ended and returns its status (OK after the final message).
  grpc::Status Wait();
  // Ends the session now; the server sees CANCELLED. Safe to call at any time, more than once.
  void Cancel();
  // The session's outcome once the final message has arrived.
  std::optional<v1::Final> Final() const;
  // How many times the session has moved to a new stream.
  int Resumes() const;

 private:
  friend class Client;
  explicit Session(std::unique_ptr<SessionCore> core);
  explicit Session(std::shared_ptr<internal::MuxSession> mux);
  std::unique_ptr<SessionCore> core_;
  std::shared_ptr<internal::MuxSession> mux_;  // on a multiplexed client, instead of core_
};

// The result of a whole stream in one call.
struct StreamResult {
  v1::Final final;
  std::vector<v1::Delta> deltas;
  std::string wire;  // with OpenOptions::wire: every byte to forward, in order
};

// A Render request (docs/render.md): an API request's body, as the gateway received it (JSON of a
// /v1/chat/completions, /v1/completions, /v1/responses or /v1/messages request), in its dialect.
struct RenderOptions {
  std::string model;  // a model the server knows (ListModels)
  v1::WireDialect dialect = v1::WIRE_DIALECT_UNSPECIFIED;  // e.g. v1::WIRE_DIALECT_OPENAI_CHAT
  std::string request_json;
  std::string request_id;   // the Open's request id (tool call ids derive from it)
  std::string response_id;  // the id the output bodies show; empty: derived from request_id
  int64_t created = 0;      // the Unix time the output bodies show
  // A Jinja template instead of the model's: PERMISSION_DENIED unless the server runs with
  // --trust-request-templates.
  std::string chat_template;
  bool return_prompt_text = false;  // also return RenderResult::prompt_text
  std::chrono::milliseconds timeout{0};  // the call's deadline; zero means none

  v1::RenderRequest ToProto() const;
};

// A rendered request: what the engine generates from, and the output session's Open. Give
// prompt_token_ids and sampling to the engine (and constraint, when set, to its sampler), then
// open the output session with Options() (Options(i) for choice i of n > 1).
struct RenderResult {
  // The prompt: the model's own chat template applied to the request, tokenized with its real
  // tokenizer.
  std::vector<uint32_t> prompt_token_ids;
  // The output session's Open: model, request id, tools, tool choice, thinking, the prompt's tail,
  // stop strings and ids, and wire (the request's own dialect, stream, model, response id).
  v1::Open open;
  v1::SamplingParams sampling;  // max tokens, temperature, stop ids, n, ...
  // The decoding constraint when the request forces a tool or asks for a JSON format.
  std::optional<v1::BuildConstraintResponse> constraint;
  std::string prompt_text;  // with RenderOptions::return_prompt_text

  // How many choices the request asked for (n; 1 when unset).
  uint32_t n() const { return sampling.n() > 0 ? sampling.n() : 1; }
  // Options that send `open` unchanged, with choice_index `choice`: for Client::Open, ParseOnce,
  // ParseStream, Batch::Open or BuildConstraint. Their customize sets the whole message, so it
  // wins over the plain fields; set `timeout` as usual.
  OpenOptions Options(uint32_t choice = 0) const;
};

// A connection to one parsetier server (or one balanced target). Thread-safe: open as many
// sessions on it as you like, from any threads.
class Client {
 public:
  Client(const std::string& target, const ClientOptions& options);
  explicit Client(std::shared_ptr<grpc::ChannelInterface> channel, std::string bearer_token = "",
                  std::optional<ResumePolicy> resume = ResumePolicy{},
                  std::optional<MultiplexOptions> multiplex = std::nullopt);
  // Ends the multiplexed sessions still open (CANCELLED). Sessions must not outlive their Client.
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Starts a session (multiplexed: an entry of the shared stream, see MultiplexOptions) and
  // waits until the server has accepted its Open, so an unknown model
  // (NOT_FOUND) or bad options (INVALID_ARGUMENT) throw Error here rather than later; with resume
  // on, a refusal that another server may not give (UNAVAILABLE: draining, unreachable) is
  // retried within the policy's budget.
  std::unique_ptr<Session> Open(const OpenOptions& options, SessionCallbacks callbacks = {});

  // A multiplexed ParseBatch stream (include "parsetier/batch.h"), resuming on failover with
  // resume on; `timeout` bounds the whole batch, every stream it resumes on included (zero: none).
  std::unique_ptr<Batch> OpenBatch(std::chrono::milliseconds timeout = std::chrono::milliseconds(0));

  // The whole output with the unary RPC: the same result as a stream fed every token at once.
  v1::ParseOnceResponse ParseOnce(const OpenOptions& options, const std::vector<uint32_t>& token_ids,
                                  const FinishOptions& finish = {});

  // A recorded output replayed as a stream, each step its own message, sent while receiving.
  StreamResult ParseStream(const OpenOptions& options, const std::vector<Step>& steps,
                           const FinishOptions& finish = {});

  // The decoding constraint for a request with these options (tools, tool_choice, thinking,
  // prompt tail): an xgrammar structural tag and the same language as an llguidance Lark grammar.
  v1::BuildConstraintResponse BuildConstraint(const OpenOptions& options);

  // Renders an API request for the model (docs/render.md): the prompt's token ids, the sampling
  // parameters, the decoding constraint and the output session's Open. Throws Error:
  // INVALID_ARGUMENT naming the body's JSON path, NOT_FOUND for an unknown model, ...; its wire()
  // is then the API's error body in the request's dialect.
  RenderResult Render(const RenderOptions& options);

  // The server's models, sorted by name.
  std::vector<v1::ModelInfo> ListModels(std::chrono::milliseconds timeout = std::chrono::seconds(30));

  // The generated stub, for calls this class does not wrap.
  v1::ParserService::Stub& stub() { return *stub_; }

 private:
  // Sets the deadline and the token on a call's context.
  void Prepare(grpc::ClientContext& context, std::chrono::milliseconds timeout) const;
  // What sets them on every stream of a session or batch that may resume: one deadline, `timeout`
  // from now (zero: none), shared by all of them.
  std::function<void(grpc::ClientContext&)> Preparer(std::chrono::milliseconds timeout) const;

  std::shared_ptr<grpc::ChannelInterface> channel_;
  std::unique_ptr<v1::ParserService::Stub> stub_;
  std::string bearer_token_;
  std::optional<ResumePolicy> resume_;
  std::shared_ptr<internal::Multiplexer> mux_;  // with ClientOptions::multiplex
};

}  // namespace parsetier
