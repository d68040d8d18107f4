// The multiplexed batch API: many request sessions over one ParseBatch stream, one client
// message per engine step.
#pragma once

#include <deque>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "parsetier/client.h"

namespace parsetier {

namespace internal {
struct SentEntry;
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

 private:
  friend class Client;
  Batch(v1::ParserService::Stub& stub, const std::function<void(grpc::ClientContext&)>& prepare);
  v1::SessionInput& Entry(const std::string& key);
  // Ends the stream after a failure: with its status, or with `cause` when that is set.
  [[noreturn]] void Fail(const grpc::Status& cause = grpc::Status::OK);

  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::ParseBatchRequest, v1::ParseBatchResponse>> stream_;
  v1::ParseBatchRequest pending_;               // the queued entries, all as SessionInputs
  std::unordered_map<std::string, int> index_;  // key -> its entry in pending_
  // Per message in flight, oldest first: its entries' keys and which went packed (empty when
  // none did), to put the reply in the entries' order.
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
