// The batch API's resume ledger: see batch_resume.h.
#include "batch_resume.h"

#include <utility>

namespace parsetier::internal {

namespace {

// google.rpc.Code of a refused open (the server is draining or overloaded): move instead.
constexpr int32_t kUnavailable = static_cast<int32_t>(grpc::StatusCode::UNAVAILABLE);

bool Refused(const v1::SessionOutput* output) {
  return output != nullptr && output->has_status() && output->status().code() == kUnavailable;
}

// The output of `outputs[next]` when it is `key`'s (outputs are in the entries' order).
v1::SessionOutput* OutputOf(const std::string& key, std::vector<v1::SessionOutput>& outputs, size_t& next) {
  return next < outputs.size() && outputs[next].key() == key ? &outputs[next++] : nullptr;
}

}  // namespace

BatchLedger::BatchLedger() = default;
BatchLedger::~BatchLedger() = default;

void BatchLedger::Step::Add(const std::string& key, v1::SessionOutput& output) {
  auto [found, added] = outputs.try_emplace(key);
  if (added) keys.push_back(key);
  found->second = std::move(output);
}

void BatchLedger::Sent(const v1::ParseBatchRequest& message) {
  auto step = std::make_shared<Step>();
  step->entries.assign(message.sessions().begin(), message.sessions().end());  // a copy: kept until answered
  steps_.push_back(step);
  wire_.push_back({std::move(step), {}});
}

grpc::Status BatchLedger::Received(std::vector<v1::SessionOutput>& outputs) {
  if (wire_.empty()) return grpc::Status(grpc::StatusCode::INTERNAL, "parsetier: a ParseBatch reply to no message");
  Message message = std::move(wire_.front());
  wire_.pop_front();
  const bool moved = moving_;  // the first reply of a new stream: a move, unless it refuses an open
  moving_ = false;
  grpc::Status status =
      message.step != nullptr ? AnsweredStep(message.step, outputs) : AnsweredReopen(message.reopen, outputs);
  if (moved && !must_move_) ++resumes_;
  return status;
}

grpc::Status BatchLedger::AnsweredStep(const std::shared_ptr<Step>& shared, std::vector<v1::SessionOutput>& outputs) {
  Step& step = *shared;
  step.answered = true;
  size_t next = 0;
  for (size_t i = 0; i < step.entries.size(); ++i) {
    const v1::SessionInput& entry = step.entries[i];
    v1::SessionOutput* output = OutputOf(entry.key(), outputs, next);
    if (entry.has_open() && live_.count(entry.key()) == 0 && Refused(output)) {
      must_move_ = true;  // refused as draining or overloaded: another server opens it
      refused_.push_back({entry.key(), true, shared, i});
      ++step.held;
      continue;
    }
    grpc::Status status = Apply(entry, output);
    if (!status.ok()) return status;
    if (output != nullptr) step.Add(entry.key(), *output);
  }
  return grpc::Status::OK;
}

grpc::Status BatchLedger::AnsweredReopen(std::vector<Reopened>& items, std::vector<v1::SessionOutput>& outputs) {
  size_t next = 0;
  for (Reopened& item : items) {
    v1::SessionOutput* output = OutputOf(item.key, outputs, next);
    if (Refused(output)) {
      must_move_ = true;  // the session stays live, or its open refused: the next stream has it
      if (item.refused) refused_.push_back(std::move(item));
      continue;
    }
    if (item.refused) {
      --item.step->held;
      grpc::Status status = Apply(item.step->entries[item.entry], output);
      if (!status.ok()) return status;
      if (output != nullptr) item.step->Add(item.key, *output);
    } else if (output != nullptr && !steps_.empty()) {
      // A session that cannot resume here (an unknown model, a history that does not reproduce
      // the output): the oldest step the caller waits for carries its status.
      live_.erase(item.key);
      steps_.front()->Add(item.key, *output);
    }
  }
  return grpc::Status::OK;
}

grpc::Status BatchLedger::Apply(const v1::SessionInput& entry, const v1::SessionOutput* output) {
  auto found = live_.find(entry.key());
  if (found == live_.end()) {
    if (!entry.has_open() || entry.cancel() || (output != nullptr && output->has_status())) {
      return grpc::Status::OK;  // an entry of no session, or an open refused: the server keeps nothing
    }
    found = live_.emplace(entry.key(), Session{entry.open(), {}, 0, 0}).first;
  }
  Session& session = found->second;
  session.answered.Add(entry.steps());
  if (output == nullptr) return grpc::Status::OK;
  if (output->sequence() != 0) {
    if (output->sequence() != session.sequence + 1) {
      const std::string order = std::to_string(output->sequence()) + " after " + std::to_string(session.sequence);
      return grpc::Status(grpc::StatusCode::INTERNAL,
                          "parsetier: session \"" + entry.key() + "\" output " + order + ": a gap or a repeat");
    }
    session.sequence = output->sequence();
    session.digest = output->output_digest();
  }
  if (output->has_final() || output->has_status()) live_.erase(found);
  return grpc::Status::OK;
}

std::optional<std::vector<v1::SessionOutput>> BatchLedger::Ready() {
  if (steps_.empty() || !steps_.front()->answered || steps_.front()->held > 0) return std::nullopt;
  std::shared_ptr<Step> step = std::move(steps_.front());
  steps_.pop_front();
  std::vector<v1::SessionOutput> outputs;
  outputs.reserve(step->keys.size());
  for (const std::string& key : step->keys) outputs.push_back(std::move(step->outputs[key]));
  return outputs;
}

std::vector<v1::ParseBatchRequest> BatchLedger::Replay() {
  moving_ = true;
  must_move_ = false;
  for (Message& message : wire_) {  // a re-open not answered yet: its refused opens are still owed
    for (Reopened& item : message.reopen) {
      if (item.refused) refused_.push_back(std::move(item));
    }
  }
  std::vector<v1::ParseBatchRequest> messages(1);
  std::vector<Reopened> items;
  for (const auto& [key, session] : live_) {
    v1::SessionInput& entry = *messages[0].add_sessions();
    entry.set_key(key);
    v1::Open& open = *entry.mutable_open() = session.open;
    session.answered.Point(session.sequence, session.digest, *open.mutable_resume());
    items.push_back({key, false, nullptr, 0});
  }
  for (Reopened& item : refused_) {
    *messages[0].add_sessions() = item.step->entries[item.entry];
    items.push_back(std::move(item));
  }
  refused_.clear();
  wire_.clear();
  if (items.empty()) {
    messages.clear();
  } else {
    wire_.push_back({nullptr, std::move(items)});
  }
  for (const std::shared_ptr<Step>& step : steps_) {
    if (step->answered) continue;
    v1::ParseBatchRequest& message = messages.emplace_back();
    message.mutable_sessions()->Add(step->entries.begin(), step->entries.end());
    wire_.push_back({step, {}});
  }
  return messages;
}

}  // namespace parsetier::internal
