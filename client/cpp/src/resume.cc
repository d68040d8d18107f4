// What both APIs' resume share: see resume.h.
#include "resume.h"

#include <random>

namespace parsetier::internal {

bool Retryable(const grpc::Status& status, const grpc::ClientContext& context) {
  const auto& trailers = context.GetServerTrailingMetadata();
  if (trailers.count("parsetier-fault") > 0) return false;
  switch (status.error_code()) {
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::CANCELLED:
    case grpc::StatusCode::INTERNAL:
    case grpc::StatusCode::UNKNOWN:
      return true;
    default:
      return trailers.count("parsetier-handoff") > 0;
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

}  // namespace parsetier::internal
