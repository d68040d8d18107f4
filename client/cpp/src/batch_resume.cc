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

std::vector<BatchLedger::Entry> BatchLedger::Step::Entries() {
  auto& sessions = *message.mutable_sessions();
  std::vector<Entry> entries;
  entries.reserve(packed.empty() ? sessions.size() : packed.size());
  if (packed.empty()) {
    for (int i = 0; i < sessions.size(); ++i) entries.push_back({&sessions[i].key(), &sessions[i], i, nullptr, 0});
    return entries;
  }
  const v1::PackedSteps& items = message.packed();
  const bool ones = items.token_counts_size() == 0;  // WireRequest leaves the counts out when all are 1
  int plain = 0;
  int item = 0;
  int offset = 0;
  for (bool is_packed : packed) {
    if (!is_packed) {
      entries.push_back({&sessions[plain].key(), &sessions[plain], plain, nullptr, 0});
      ++plain;
      continue;
    }
    const int count = ones ? 1 : static_cast<int>(items.token_counts(item));
    entries.push_back({&items.keys(item), nullptr, 0, items.token_ids().data() + offset, count});
    offset += count;
    ++item;
  }
  return entries;
}

WireMessage BatchLedger::Step::Resent() const {
  WireMessage wire{message, {}};
  if (packed.empty()) return wire;
  wire.sent.reserve(packed.size());
  int plain = 0;
  int item = 0;
  for (bool is_packed : packed) {
    wire.sent.push_back({is_packed ? message.packed().keys(item++) : message.sessions(plain++).key(), is_packed});
  }
  return wire;
}

void BatchLedger::Sent(v1::ParseBatchRequest&& message, const std::vector<SentEntry>& sent) {
  auto step = std::make_shared<Step>();
  step->message = std::move(message);
  step->packed.reserve(sent.size());
  for (const SentEntry& entry : sent) step->packed.push_back(entry.packed);
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
  for (const Entry& entry : step.Entries()) {
    v1::SessionOutput* output = OutputOf(*entry.key, outputs, next);
    if (entry.input != nullptr && entry.input->has_open() && live_.count(*entry.key) == 0 && Refused(output)) {
      must_move_ = true;  // refused as draining or overloaded: another server opens it
      refused_.push_back({*entry.key, true, shared, entry.index});
      ++step.held;
      continue;
    }
    grpc::Status status = Apply(entry, output);
    if (!status.ok()) return status;
    if (output != nullptr) step.Add(*entry.key, *output);
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
      v1::SessionInput& input = *item.step->message.mutable_sessions(item.entry);
      grpc::Status status = Apply({&input.key(), &input, item.entry, nullptr, 0}, output);
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

grpc::Status BatchLedger::Apply(const Entry& entry, const v1::SessionOutput* output) {
  const std::string& key = *entry.key;
  v1::SessionInput* input = entry.input;
  auto found = live_.find(key);
  if (found == live_.end()) {
    if (input == nullptr || !input->has_open() || input->cancel() || (output != nullptr && output->has_status())) {
      return grpc::Status::OK;  // an entry of no session, or an open refused: the server keeps nothing
    }
    found = live_.emplace(key, Session{std::move(*input->mutable_open()), {}, 0, 0}).first;
  }
  Session& session = found->second;
  if (input != nullptr) {
    session.answered.Add(*input->mutable_steps());
  } else {
    session.answered.AddIds(entry.ids, entry.count);
  }
  if (output == nullptr) return grpc::Status::OK;
  if (output->sequence() != 0) {
    if (output->sequence() != session.sequence + 1) {
      const std::string order = std::to_string(output->sequence()) + " after " + std::to_string(session.sequence);
      return grpc::Status(grpc::StatusCode::INTERNAL,
                          "parsetier: session \"" + key + "\" output " + order + ": a gap or a repeat");
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

std::vector<WireMessage> BatchLedger::Replay() {
  moving_ = true;
  must_move_ = false;
  for (Message& message : wire_) {  // a re-open not answered yet: its refused opens are still owed
    for (Reopened& item : message.reopen) {
      if (item.refused) refused_.push_back(std::move(item));
    }
  }
  std::vector<WireMessage> messages(1);  // the re-open: opens only, nothing packed
  v1::ParseBatchRequest& reopen = messages[0].request;
  std::vector<Reopened> items;
  for (const auto& [key, session] : live_) {
    v1::SessionInput& entry = *reopen.add_sessions();
    entry.set_key(key);
    v1::Open& open = *entry.mutable_open() = session.open;
    session.answered.Point(session.sequence, session.digest, *open.mutable_resume());
    items.push_back({key, false, nullptr, 0});
  }
  for (Reopened& item : refused_) {
    *reopen.add_sessions() = item.step->message.sessions(item.entry);
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
    messages.push_back(step->Resent());
    wire_.push_back({step, {}});
  }
  return messages;
}

}  // namespace parsetier::internal
