// The batch API's resume ledger: see batch_resume.h.
#include "batch_resume.h"

#include <algorithm>
#include <map>
#include <utility>

namespace parsetier::internal {

namespace {

// google.rpc.Code of a refused open (the server is draining or overloaded): move instead.
constexpr int32_t kUnavailable = static_cast<int32_t>(grpc::StatusCode::UNAVAILABLE);

// The usual entry: one step of token ids (not empty) of an open session, and nothing else.
bool OneStepOfIds(const v1::SessionInput& entry) {
  if (entry.has_open() || entry.has_finish() || entry.cancel() || entry.steps_size() != 1) return false;
  const v1::Step& step = entry.steps(0);
  return step.token_ids_size() > 0 && step.text().empty() && step.text_tokens() == 0 && !step.has_logprobs();
}

}  // namespace

// One session as the caller opened it: its history (the open entry is message 0, with the steps
// and finish it carried) and what has been received of it.
struct BatchLedger::Session {
  Session(const v1::SessionInput& entry, int step) : key(entry.key()), open(entry.open()), opened_at(step) {
    if (entry.steps_size() > 0 || entry.has_finish()) {
      first.emplace();
      *first->mutable_steps() = entry.steps();
      if (entry.has_finish()) *first->mutable_finish() = entry.finish();
    }
    sending = !entry.has_finish();
  }

  // Entries sent so far, a cancel included.
  size_t messages() const { return record.size() + (cancelled ? 1 : 0); }

  // A later entry, but not the usual one of token ids (recorded as ids).
  void Add(const v1::SessionInput& entry) {
    if (entry.cancel()) {
      cancelled = true;
      sending = false;
      return;
    }
    v1::ParseRequest message;
    *message.mutable_steps() = entry.steps();
    if (entry.has_finish()) {
      *message.mutable_finish() = entry.finish();
      sending = false;
    }
    if (entry.has_open()) *message.mutable_open() = entry.open();  // a second open: the server ends the session
    record.Record(message);
  }

  // Entry `index` as it is re-sent on a new stream (the open with the resume point).
  v1::SessionInput Entry(size_t index) const {
    v1::SessionInput entry;
    entry.set_key(key);
    if (index == record.size()) {
      entry.set_cancel(true);
      return entry;
    }
    if (index == 0) {
      v1::Open& resumed = *entry.mutable_open() = open;
      resumed.mutable_resume()->set_client_messages(client_messages);
      resumed.mutable_resume()->set_sequence(sequence);
      if (first) {
        *entry.mutable_steps() = first->steps();
        if (first->has_finish()) *entry.mutable_finish() = first->finish();
      }
      return entry;
    }
    v1::ParseRequest message = record.Message(index);
    if (message.has_open()) entry.mutable_open()->Swap(message.mutable_open());
    if (message.has_finish()) entry.mutable_finish()->Swap(message.mutable_finish());
    entry.mutable_steps()->Swap(message.mutable_steps());
    return entry;
  }

  std::string key;
  v1::Open open;
  std::optional<v1::ParseRequest> first;  // the steps and finish the open entry carried
  MessageRecord record;                   // entry i >= 1 is message i
  uint64_t client_messages = 0;           // the resume point: of the last output received
  uint64_t sequence = 0;
  std::optional<size_t> ended_at;  // the entry whose output ended it (its final or its status)
  int opened_at;
  bool sending = true;  // entries may still follow (no finish or cancel sent yet)
  bool cancelled = false;
};

BatchLedger::BatchLedger() = default;
BatchLedger::~BatchLedger() = default;

void BatchLedger::Sent(const v1::ParseBatchRequest& message) {
  ++step_;
  ++sent_;
  auto carried = std::make_shared<CarriedMap>();
  carried->reserve(message.sessions_size());
  Step record;
  record.keys.reserve(message.sessions_size());
  for (const v1::SessionInput& entry : message.sessions()) {
    const std::string& key = entry.key();
    record.keys.push_back(key);
    auto found = live_.find(key);
    std::shared_ptr<Session> session = found == live_.end() ? nullptr : found->second;
    const bool sending = session != nullptr && session->sending;
    if (sending && OneStepOfIds(entry)) {
      (*carried)[key] = {session, step_, session->messages(), false};
      session->record.RecordIds(entry.steps(0).token_ids());
    } else if (entry.has_open() && !entry.cancel() && !sending) {
      if (session != nullptr) retiring_.push_back(session);
      session = std::make_shared<Session>(entry, step_);
      live_[key] = session;
      (*carried)[key] = {session, step_, 0, true};
    } else if (sending) {
      (*carried)[key] = {session, step_, session->messages(), false};
      session->Add(entry);
    } else if (entry.cancel()) {  // a cancel of no live session answers nothing: nothing to re-send
      (*carried)[key] = {nullptr, step_, 0, false};
    } else {  // no session takes it (none, or it has finished): answered with a status
      (*carried)[key] = {nullptr, step_, record.orphans.size(), false};
      record.orphans.push_back(entry);
    }
  }
  record.entries = carried;
  record.until = sent_;
  steps_.push_back(std::move(record));
  carried_.push_back(std::move(carried));
}

grpc::Status BatchLedger::Received(std::vector<v1::SessionOutput>& outputs) {
  if (carried_.empty()) return grpc::Status(grpc::StatusCode::INTERNAL, "parsetier: a ParseBatch reply to no message");
  std::shared_ptr<const CarriedMap> carried = std::move(carried_.front());
  carried_.pop_front();
  ++received_;
  const bool moved = moving_;  // the first reply of a new stream: a move, unless it refuses an open
  moving_ = false;
  const int delivered = this->delivered();
  for (v1::SessionOutput& output : outputs) {
    auto found = carried->find(output.key());
    const Carried c = found == carried->end() ? Carried{} : found->second;
    if (c.opens && output.has_status() && output.status().code() == kUnavailable) {
      must_move_ = true;  // refused as draining or overloaded: it stays live, another server opens it
      continue;
    }
    // After a session's end, the server answers its key's entries as those of no session (or of a
    // new session, for an open): they are not that session's output.
    Session* session = c.session.get();
    if (session != nullptr && !session->ended_at) {
      if (output.sequence() != 0) {
        if (output.sequence() != session->sequence + 1) {
          const std::string order = std::to_string(output.sequence()) + " after " + std::to_string(session->sequence);
          return grpc::Status(grpc::StatusCode::INTERNAL,
                              "parsetier: session \"" + session->key + "\" output " + order + ": a gap or a repeat");
        }
        session->client_messages = output.client_messages();
        session->sequence = output.sequence();
      }
      if (output.has_final() || output.has_status()) {
        session->ended_at = c.index;
        Ended(c.session);
      }
    }
    if (c.step > delivered) {
      std::string key = output.key();
      steps_[c.step - delivered - 1].outputs[std::move(key)] = std::move(output);
    }
  }
  if (moved && !must_move_) ++resumes_;
  return grpc::Status::OK;
}

void BatchLedger::Ended(const std::shared_ptr<Session>& session) {
  auto live = live_.find(session->key);
  if (live != live_.end() && live->second == session) {
    live_.erase(live);
    return;
  }
  auto retiring = std::find(retiring_.begin(), retiring_.end(), session);
  if (retiring != retiring_.end()) retiring_.erase(retiring);
}

std::optional<std::vector<v1::SessionOutput>> BatchLedger::Ready() {
  if (steps_.empty() || steps_.front().until > received_) return std::nullopt;
  Step step = std::move(steps_.front());
  steps_.pop_front();
  std::vector<v1::SessionOutput> outputs;
  outputs.reserve(step.outputs.size());
  for (const std::string& key : step.keys) {
    auto found = step.outputs.find(key);
    if (found != step.outputs.end()) outputs.push_back(std::move(found->second));
  }
  return outputs;
}

std::vector<std::shared_ptr<BatchLedger::Session>> BatchLedger::LiveInOrder() const {
  std::vector<std::shared_ptr<Session>> sessions;
  sessions.reserve(live_.size());
  for (const auto& [key, session] : live_) sessions.push_back(session);
  std::sort(sessions.begin(), sessions.end(), [](const auto& a, const auto& b) {
    return a->opened_at != b->opened_at ? a->opened_at < b->opened_at : a->key < b->key;
  });
  return sessions;
}

std::vector<v1::ParseBatchRequest> BatchLedger::Replay() {
  moving_ = true;
  must_move_ = false;
  const int delivered = this->delivered();
  // (session, entry index) -> the undelivered step it was sent in.
  std::map<std::pair<const Session*, size_t>, int> step_of;
  for (size_t n = 0; n < steps_.size(); ++n) {
    for (const auto& [key, c] : *steps_[n].entries) {
      if (c.session != nullptr) step_of[{c.session.get(), c.index}] = delivered + static_cast<int>(n) + 1;
    }
  }
  struct Item {
    std::shared_ptr<Session> session;  // null: an orphan
    size_t index;
    int step;
  };
  struct Group {
    int start;
    std::string key;
    std::vector<Item> items;
  };
  // Per key, its entries in the order they were first sent: sessions (a retiring one before the
  // key's new one) and entries of no session, each group starting at the step it began.
  std::vector<Group> groups;
  std::vector<std::shared_ptr<Session>> sessions = retiring_;
  for (auto& session : LiveInOrder()) sessions.push_back(std::move(session));
  for (const auto& session : sessions) {
    Group group{session->opened_at, session->key, {}};
    for (size_t i = 0; i < session->messages(); ++i) {
      auto found = step_of.find({session.get(), i});
      group.items.push_back({session, i, found == step_of.end() ? 0 : found->second});
    }
    groups.push_back(std::move(group));
  }
  for (size_t n = 0; n < steps_.size(); ++n) {
    const int number = delivered + static_cast<int>(n) + 1;
    // Entries sent to a session before its end (its own status, say) was received, and not
    // answered yet: the server answers them as entries of no session, so they are re-sent as such.
    for (const auto& [key, c] : *steps_[n].entries) {
      const Session* session = c.session.get();
      if (session == nullptr || !session->ended_at || c.index <= *session->ended_at) continue;
      if (c.index >= session->record.size() || steps_[n].outputs.count(key) > 0) continue;  // a cancel answers nothing
      groups.push_back({number, key, {{c.session, c.index, number}}});
    }
    for (size_t k = 0; k < steps_[n].orphans.size(); ++k) {
      groups.push_back({number, steps_[n].orphans[k].key(), {{nullptr, k, number}}});
    }
  }
  std::stable_sort(groups.begin(), groups.end(), [](const Group& a, const Group& b) { return a.start < b.start; });
  std::vector<std::string> keys;
  std::unordered_map<std::string, std::vector<Item>> lanes;
  size_t depth = 0;
  for (Group& group : groups) {
    auto [lane, added] = lanes.try_emplace(group.key);
    if (added) keys.push_back(group.key);
    for (Item& item : group.items) lane->second.push_back(std::move(item));
    depth = std::max(depth, lane->second.size());
  }
  carried_.clear();
  std::unordered_map<int, size_t> last_of;  // step -> the replay message (1-based) carrying its last entry
  std::vector<v1::ParseBatchRequest> messages(depth);
  for (size_t j = 0; j < depth; ++j) {
    auto carried = std::make_shared<CarriedMap>();
    for (const std::string& key : keys) {
      const std::vector<Item>& lane = lanes[key];
      if (j >= lane.size()) continue;
      const Item& item = lane[j];
      if (item.session != nullptr) {
        *messages[j].add_sessions() = item.session->Entry(item.index);
      } else {
        *messages[j].add_sessions() = steps_[item.step - delivered - 1].orphans[item.index];
      }
      (*carried)[key] = {item.session, item.step, item.index, item.session != nullptr && item.index == 0};
      if (item.step != 0) last_of[item.step] = j + 1;
    }
    carried_.push_back(std::move(carried));
  }
  sent_ = depth;
  received_ = 0;
  size_t until = 0;
  for (size_t n = 0; n < steps_.size(); ++n) {  // each completes after its last re-sent entry
    auto last = last_of.find(delivered + static_cast<int>(n) + 1);
    if (last != last_of.end()) until = std::max(until, last->second);
    steps_[n].until = until;
  }
  return messages;
}

}  // namespace parsetier::internal
