// What resuming needs on either API, Parse sessions (session.cc) and ParseBatch streams
// (batch.cc): which statuses a move survives, the backoff between attempts, and the record of a
// session's answered history kept for re-opening (docs/service.md, "Resume").
#pragma once

#include <chrono>
#include <cstdint>

#include <grpcpp/grpcpp.h>

#include "parsetier/client.h"

namespace parsetier::internal {

// The trailing metadata keys of the proto's retry rule (the comment on ParserService): the
// server's own fault, never retried, and a hand-off, always retried.
inline constexpr const char* kFaultTrailer = "parsetier-fault";
inline constexpr const char* kHandoffTrailer = "parsetier-handoff";

// Whether a session survives `status`, which ended the call of `context`, by resuming elsewhere:
// the proto's retry rule. Never the server's own fault (kFaultTrailer); always a hand-off
// (kHandoffTrailer); else UNAVAILABLE, CANCELLED (a cancel of the caller's own never gets here),
// INTERNAL and UNKNOWN, which a parsetier server never sends unmarked (a reset on the way, a
// proxy's answer that is not gRPC). Every other status is the request's own. No message text.
bool Retryable(const grpc::Status& status, const grpc::ClientContext& context);

// How long to wait before reconnect `attempt` (0-based): doubling from the policy's initial
// backoff up to its maximum, jittered to 50-100% so a fleet's clients do not reconnect in lock step.
std::chrono::milliseconds Backoff(const ResumePolicy& policy, int attempt);

// A session's answered steps, as a resume point carries them (ResumePoint.history): consecutive
// steps of plain token ids merged into one run (about 4 bytes per token), text and logprob steps
// kept as they were sent.
class History {
 public:
  void AddIds(const uint32_t* ids, size_t size);
  void Add(const google::protobuf::RepeatedPtrField<v1::Step>& steps);
  // Add, moving the steps that are kept whole (text, logprobs) out of `steps` instead of copying.
  void Take(google::protobuf::RepeatedPtrField<v1::Step>& steps);
  // The resume point of a session whose last reply had `sequence` and `digest`.
  void Point(uint64_t sequence, uint32_t digest, v1::ResumePoint& point) const;

 private:
  google::protobuf::RepeatedPtrField<v1::Step> steps_;
  bool run_ = false;  // the last step is a run of plain ids (later ids join it)
};

// Whether `step` is plain token ids: no text, text_tokens or logprobs.
bool PlainIds(const v1::Step& step);

}  // namespace parsetier::internal
