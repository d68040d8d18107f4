// What both APIs' resume share: see resume.h.
#include "resume.h"

#include <random>

namespace parsetier::internal {

namespace {

// How a parsetier server's own INTERNAL statuses begin (a bug it logged): not worth a retry.
constexpr const char* kServerFaults[] = {"internal server error", "internal error:"};

}  // namespace

bool Retryable(const grpc::Status& status) {
  switch (status.error_code()) {
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::CANCELLED:
      return true;
    case grpc::StatusCode::INTERNAL:
      for (const char* fault : kServerFaults) {
        if (status.error_message().rfind(fault, 0) == 0) return false;
      }
      return true;
    default:
      return false;
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

void MessageRecord::Record(const v1::ParseRequest& message) {
  bool plain = !message.has_finish() && !message.has_open();
  for (const v1::Step& step : message.steps()) plain = plain && step.token_ids_size() > 0 && !step.has_logprobs();
  if (plain) {
    for (const v1::Step& step : message.steps()) ids_.insert(ids_.end(), step.token_ids().begin(), step.token_ids().end());
  } else {
    whole_.emplace(ends_.size(), message);
  }
  ends_.push_back(ids_.size());
}

void MessageRecord::RecordIds(const google::protobuf::RepeatedField<uint32_t>& ids) {
  ids_.insert(ids_.end(), ids.begin(), ids.end());
  ends_.push_back(ids_.size());
}

v1::ParseRequest MessageRecord::Message(size_t index) const {
  auto whole = whole_.find(index);
  if (whole != whole_.end()) return whole->second;
  v1::ParseRequest message;
  if (ends_[index] > ends_[index - 1]) {
    message.add_steps()->mutable_token_ids()->Add(ids_.begin() + ends_[index - 1], ids_.begin() + ends_[index]);
  }
  return message;
}

}  // namespace parsetier::internal
