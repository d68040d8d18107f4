// What resuming needs on either API, Parse sessions (session.cc) and ParseBatch streams
// (batch.cc): the retry rule, the backoff, and a session's answered history (docs/service.md,
// "Resume").
#pragma once

#include <chrono>
#include <cstdint>

#include <grpcpp/grpcpp.h>

#include "parsetier/client.h"

namespace parsetier::internal {

// The proto's retry rule (the comment on ParserService), from the code and trailers of `status`,
// which ended the call of `context`. No message text.
bool Retryable(const grpc::Status& status, const grpc::ClientContext& context);

// How long to wait before reconnect `attempt` (0-based): doubling from the policy's initial
// backoff up to its maximum, jittered to 50-100% so a fleet's clients do not reconnect in lock step.
std::chrono::milliseconds Backoff(const ResumePolicy& policy, int attempt);

// Whether `step` is plain token ids: no text, text_tokens or logprobs.
bool PlainIds(const v1::Step& step);

// A session's answered steps (ResumePoint.history): consecutive plain id steps merged into one
// run, text and logprob steps kept whole.
class History {
 public:
  void AddIds(const uint32_t* ids, size_t size) {
    if (size == 0) return;
    if (steps_.empty() || !PlainIds(steps_[steps_.size() - 1])) steps_.Add();
    steps_.Mutable(steps_.size() - 1)->mutable_token_ids()->Add(ids, ids + size);
  }
  // Const steps are copied, others moved.
  template <typename Steps>
  void Add(Steps& steps) {
    for (auto& step : steps) {
      if (PlainIds(step)) {
        AddIds(step.token_ids().data(), step.token_ids_size());
      } else {
        *steps_.Add() = std::move(step);
      }
    }
  }
  // The resume point of a session whose last reply had `sequence` and `digest`.
  void Point(uint64_t sequence, uint32_t digest, v1::ResumePoint& point) const {
    point.set_sequence(sequence);
    point.set_output_digest(digest);
    *point.mutable_history() = steps_;
  }

 private:
  google::protobuf::RepeatedPtrField<v1::Step> steps_;
};

}  // namespace parsetier::internal
