// What resuming needs on either API, Parse sessions (session.cc) and ParseBatch streams
// (batch.cc): which statuses a move survives, the backoff between attempts, and the record of a
// session's client messages kept for re-sending (docs/service.md, "Resume").
#pragma once

#include <chrono>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "parsetier/client.h"

namespace parsetier::internal {

// Whether a session survives `status` by resuming elsewhere: the server or the connection went
// away (UNAVAILABLE: refused, unreachable, draining, handed off), the stream was cut by a stopping
// server or reset by a proxy (CANCELLED; a cancel of the caller's own never gets here), or reset
// on the way (INTERNAL, e.g. "Received RST_STREAM", but not the server's own INTERNAL). Every
// other status is the request's own.
bool Retryable(const grpc::Status& status);

// How long to wait before reconnect `attempt` (0-based): doubling from the policy's initial
// backoff up to its maximum, jittered to 50-100% so a fleet's clients do not reconnect in lock step.
std::chrono::milliseconds Backoff(const ResumePolicy& policy, int attempt);

// The client messages of one session after its Open, numbered as the server counts them (the
// Open is 0), as kept for re-sending: token ids in one array (about 4 bytes per token), messages
// that are more than a run of ids (a Finish, an Open, text or logprob steps) whole. A message of
// several id steps is re-sent as one step of all its ids, which the server parses identically (it
// joins them).
class MessageRecord {
 public:
  // Messages so far, the Open included.
  size_t size() const { return ends_.size(); }

  void Record(const v1::ParseRequest& message);
  // The usual message: one step of these token ids.
  void RecordIds(const google::protobuf::RepeatedField<uint32_t>& ids);
  // Message `index` (>= 1) as it is re-sent.
  v1::ParseRequest Message(size_t index) const;

 private:
  std::vector<uint32_t> ids_;
  std::vector<size_t> ends_{0};  // message k >= 1 holds ids_[ends_[k - 1], ends_[k])
  std::unordered_map<size_t, v1::ParseRequest> whole_;
};

}  // namespace parsetier::internal
