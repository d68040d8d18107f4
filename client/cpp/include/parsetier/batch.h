// The multiplexed batch API: many request sessions over one ParseBatch stream, one client
// message per engine step.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "parsetier/client.h"

namespace parsetier {

namespace internal {
struct SentEntry;
struct WireMessage;
class BatchLedger;
}  // namespace internal

// One ParseBatch stream. A serving loop queues what each request did during the engine step
// (Open, Feed, Finish, Cancel), keyed by a name it chooses per request, and calls Step once: the
// queued entries go out as one message and the server's one reply comes back with the output of
// every session that produced any, each exactly what a Parse stream fed the same steps gives.
//
// A session's error (unknown model, bad token id, a per-session limit) is in its output
// (SessionError reads it) and the other sessions go on; Send, Recv and Step throw Error only when
// the stream itself ended (malformed framing, the stream's limits, the server going away). Send
// and Recv split Step for a loop that overlaps the round trip with its own work: replies come
// in order, one per Send. One thread drives a Batch. Destroying it unclosed cancels the stream.
//
// On the wire, every entry that is exactly one step of token ids (a Feed of one step, and
// nothing else queued for its key in this step) goes as a packed item (ParseBatchRequest.packed,
// docs/service.md "Packed steps"), and the packed outputs of the reply come back as the
// SessionOutputs they stand for, in the order of the step's entries: callers see the same
// outputs, in the same order, as if every entry went as a SessionInput.
//
// With resume on (ClientOptions::resume, the default, the same policy as Parse sessions) a
// broken stream (a dead or draining server, a lost connection, a proxy's reset) does not end the
// sessions: Recv opens a new stream through the same channel, with the policy's backoff and retry
// budget, resumes every live session there (docs/service.md, "Resume": one message re-opens every
// live session with its answered token ids, the steps not answered yet re-sent after it) and
// returns the next step's reply as if nothing had happened: one reply per step sent, each with
// the outputs an uninterrupted stream gives, in order, exactly once (an output whose sequence
// leaves a gap or repeats is an Error, not output). Send never reports such a break. An open
// refused with UNAVAILABLE (the server is draining or overloaded) moves the stream too. Sessions
// that ended with a status of their own are in their step's reply as before and are not resumed.
// The batch keeps, per live session, its answered token ids (one run, about 4 bytes per token;
// text and logprob steps whole) and the sequence and digest of its last output, and the steps
// not answered yet, as sent (each the very message written, moved in: no copy per step). With
// resume off (std::nullopt) it keeps nothing and a break is an Error.
class Batch {
 public:
  ~Batch();
  Batch(const Batch&) = delete;
  Batch& operator=(const Batch&) = delete;

  void Open(const std::string& key, const OpenOptions& options);
  void Feed(const std::string& key, const std::vector<::parsetier::Step>& steps);
  void FeedSteps(const std::string& key, const std::vector<v1::Step>& steps);  // e.g. LogprobStep's
  void Finish(const std::string& key, const FinishOptions& finish = {});
  // Drops the session (its output carries CANCELLED); what was queued for it this step is discarded.
  void Cancel(const std::string& key);

  void Send();                             // the queued entries, as one message
  std::vector<v1::SessionOutput> Recv();   // the reply to the oldest message sent (none: Error)
  std::vector<v1::SessionOutput> Step();   // Send, then Recv
  // Receives the replies still in flight, closes the stream and returns its status.
  grpc::Status Close();
  // Messages sent whose replies have not been received.
  int in_flight() const { return in_flight_; }
  // How many times the batch has moved its sessions to a new stream.
  int Resumes() const;

 private:
  friend class Client;
  friend class internal::Multiplexer;
  Batch(v1::ParserService::Stub& stub, std::function<void(grpc::ClientContext&)> prepare,
        std::optional<ResumePolicy> policy);
  v1::SessionInput& Entry(const std::string& key);
  // Opens a new stream. `replay` (a resume's first messages) is written to it by a thread of its
  // own, so that Recv reads the replies meanwhile; Send waits for it, so later steps follow it.
  void Start(std::vector<internal::WireMessage> replay);
  // Reads the next whole reply of the current stream into `outputs`, in its entries' order
  // (a reply that does not fit, or parts that do not join, throw Error); false once the stream
  // has ended.
  bool ReadReply(std::vector<v1::SessionOutput>& outputs);
  // The current stream's status, once it has ended or been cancelled (the replay writer stopped).
  grpc::Status EndStream();
  std::vector<v1::SessionOutput> RecvResuming();
  // Ends the stream after a failure: with its status, or with `cause` when that is set.
  [[noreturn]] void Fail(const grpc::Status& cause = grpc::Status::OK);

  // The multiplexer's use (ClientOptions::multiplex, src/mux.cc): one thread sends (SharedSend,
  // after queueing entries) while another receives (SharedRecv), so a message goes out while the
  // replies to earlier ones are still coming. shared_mu_ guards what both touch (the ledger, the
  // messages in flight, the current stream), never across a network wait; a resume or a failure
  // holds the writes (cancels the stream, waits for a write under way, admits none) while it
  // ends the stream and starts the next. With resume on, a message is recorded in the ledger
  // before it is written (a copy of it: its reply may come before the write returns).
  void SharedSend();  // throws Error once the batch has failed
  std::vector<v1::SessionOutput> SharedRecv();  // waits for a message in flight
  void SharedStop();  // ends the stream: SharedRecv throws, SharedSend too
  void HoldWrites();
  void ReleaseWrites();
  // Locked on a shared batch (else not locked: one thread drives it).
  std::unique_lock<std::mutex> SharedLock();
  bool shared_ = false;
  std::mutex shared_mu_;
  std::condition_variable shared_cv_;
  bool shared_writing_ = false;    // SharedSend is writing to the current stream
  bool shared_held_ = false;       // the receiver is ending the stream: no write may start
  bool shared_replaying_ = false;  // a resume's replay is being written: later messages follow it
  bool shared_failed_ = false;
  bool shared_stopped_ = false;

  v1::ParserService::Stub& stub_;
  std::function<void(grpc::ClientContext&)> prepare_;  // every stream's deadline and token
  std::optional<ResumePolicy> policy_;
  std::unique_ptr<internal::BatchLedger> ledger_;  // with resume on
  std::unique_ptr<grpc::ClientContext> context_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::ParseBatchRequest, v1::ParseBatchResponse>> stream_;
  std::thread replaying_;  // writes a replay to the current stream
  bool write_failed_ = false;  // the current stream took no more writes (resume on: Recv moves it)
  bool stream_ended_ = false;  // the current stream's Finish has been called
  v1::ParseBatchRequest pending_;               // the queued entries, all as SessionInputs
  std::unordered_map<std::string, int> index_;  // key -> its entry in pending_
  // Per message in flight on the current stream, oldest first: its entries' keys and which went
  // packed (empty when none did), to put the reply in the entries' order.
  std::deque<std::vector<internal::SentEntry>> sent_;
  std::string parts_;  // a reply sent in parts, so far
  bool in_parts_ = false;
  int in_flight_ = 0;
  bool closed_ = false;
  grpc::Status status_;
};

// The status a session ended with in this output (CANCELLED after a Cancel), or nullopt when it
// carries output.
std::optional<Error> SessionError(const v1::SessionOutput& output);

}  // namespace parsetier
