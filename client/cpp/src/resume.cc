// What both APIs' resume share: see resume.h.
#include "resume.h"

#include <random>
#include <utility>

namespace parsetier::internal {

bool Retryable(const grpc::Status& status, const grpc::ClientContext& context) {
  const auto& trailers = context.GetServerTrailingMetadata();
  if (trailers.count(kFaultTrailer) > 0) return false;
  switch (status.error_code()) {
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::CANCELLED:
    case grpc::StatusCode::INTERNAL:
    case grpc::StatusCode::UNKNOWN:
      return true;
    default:
      return trailers.count(kHandoffTrailer) > 0;
  }
}

std::chrono::milliseconds Backoff(const ResumePolicy& policy, int attempt) {
  thread_local std::mt19937 random{std::random_device{}()};
  std::chrono::milliseconds delay = policy.max_backoff;
  if (attempt < 30 && policy.initial_backoff * (int64_t{1} << attempt) < delay) {
    delay = policy.initial_backoff * (int64_t{1} << attempt);
  }
  std::uniform_real_distribution<double> jitter(0.5, 1.0);
  return std::chrono::milliseconds(static_cast<int64_t>(delay.count() * jitter(random)));
}

bool PlainIds(const v1::Step& step) {
  return step.token_ids_size() > 0 && step.text().empty() && step.text_tokens() == 0 && !step.has_logprobs();
}

void History::AddIds(const uint32_t* ids, size_t size) {
  if (size == 0) return;
  if (!run_) steps_.Add();
  run_ = true;
  steps_.Mutable(steps_.size() - 1)->mutable_token_ids()->Add(ids, ids + size);
}

void History::Add(const google::protobuf::RepeatedPtrField<v1::Step>& steps) {
  for (const v1::Step& step : steps) {
    if (PlainIds(step)) {
      AddIds(step.token_ids().data(), step.token_ids_size());
    } else {
      *steps_.Add() = step;
      run_ = false;
    }
  }
}

void History::Take(google::protobuf::RepeatedPtrField<v1::Step>& steps) {
  for (v1::Step& step : steps) {
    if (PlainIds(step)) {
      AddIds(step.token_ids().data(), step.token_ids_size());
    } else {
      *steps_.Add() = std::move(step);
      run_ = false;
    }
  }
}

void History::Point(uint64_t sequence, uint32_t digest, v1::ResumePoint& point) const {
  point.set_sequence(sequence);
  point.set_output_digest(digest);
  *point.mutable_history() = steps_;
}

}  // namespace parsetier::internal
