// Multiplexer: a client's sessions as entries of one shared ParseBatch stream.
//
// The sessions queue their messages (one entry per session per message: a session's later
// messages wait in its backlog, at most kMuxBacklog of them, until its last has been taken); the
// flushing thread takes what is queued as one message and sends it on a shared Batch (which keeps
// the batch ledger and resumes on a break: the replies go on exactly once); the receiving thread
// reads the replies in order and routes their outputs to the sessions as the ParseResponses their
// own Parse streams would have sent (client_messages being the session's own count). With
// flush_interval 0 a flush waits while a message is unanswered (at most kMuxIdleWait), so what
// the sessions send while the server works goes out together; flush_interval waits that long
// after the first entry instead. One mutex guards the queue and every session; callbacks run on
// the receiving thread without it.
#include "mux.h"

#include <algorithm>

namespace parsetier {
namespace internal {

namespace {
constexpr size_t kMuxInFlight = 64;  // messages sent and not answered: past it, flushes wait
// With flush_interval 0, a flush waits while a message is unanswered, for at most this long
// after that message went out: the sends made while the server works on a message go in the
// next one together (about an engine step of every session), and a server that does not answer
// (stopped, or slow) still gets the sessions' messages, as their own Parse streams would.
constexpr auto kMuxIdleWait = std::chrono::microseconds(500);
}  // namespace

Multiplexer::Multiplexer(Client& client, MultiplexOptions options) : client_(client), options_(options) {
  thread_ = std::thread([this] { Run(); });
}

Multiplexer::~Multiplexer() { Stop(); }

void Multiplexer::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    if (batch_) batch_->SharedStop();  // a flush waiting or writing, and the receiver, return
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Multiplexer::RunLater(std::unique_lock<std::mutex>& lock, Later& later) {
  if (later.empty()) return;
  lock.unlock();
  for (std::function<void()>& call : later) call();
  later.clear();
  lock.lock();
}

void Multiplexer::Queue(Entry entry) {
  const std::string key = entry.session->key;
  auto [found, inserted] = entries_.try_emplace(key);
  found->second = std::move(entry);
  if (inserted) {
    if (order_.empty()) first_queued_ = MuxClock::now();
    order_.push_back(key);
    // The flushing thread waits for the first entry, or for a full message: not for each one.
    if (order_.size() == 1 || order_.size() == static_cast<size_t>(std::max(1, options_.max_batch))) {
      wake_.notify_one();
    }
  }
}

template <typename Ready>
void Multiplexer::Await(std::unique_lock<std::mutex>& lock, const std::shared_ptr<MuxSession>& s, Ready ready) {
  while (!ready()) {
    if (!s->deadline || s->done) {  // an ended session's callbacks are running: no deadline left
      s->cv.wait(lock);
    } else if (s->cv.wait_until(lock, *s->deadline) == std::cv_status::timeout && !ready()) {
      Later later;
      End(s, grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "parsetier: deadline exceeded"), later, true);
      RunLater(lock, later);
    }
  }
}

void Multiplexer::End(const std::shared_ptr<MuxSession>& s, const grpc::Status& status, Later& later, bool drop,
                      std::string wire) {
  if (s->done) return;
  s->done = true;
  s->status = status;
  s->wire = std::move(wire);
  auto live = sessions_.find(s->key);
  if (live != sessions_.end() && live->second == s) sessions_.erase(live);
  s->backlog.clear();  // nobody will read their answers
  if (drop) {
    auto queued = entries_.find(s->key);
    if (queued != entries_.end() && queued->second.open) {  // the server never saw it
      entries_.erase(queued);
      order_.erase(std::find(order_.begin(), order_.end(), s->key));
    } else {
      Entry cancel;
      cancel.session = s;
      cancel.cancel = true;
      cancel.counts = false;
      Queue(std::move(cancel));
    }
  } else if (entries_.count(s->key) > 0) {  // its next message: nobody will read its answer
    entries_.erase(s->key);
    order_.erase(std::find(order_.begin(), order_.end(), s->key));
  }
  s->cv.notify_all();
  if (!s->callbacks.on_message && !s->callbacks.on_done) {
    s->finished = true;
    return;
  }
  // After its replies' on_message calls, queued before: Wait returns once every callback has run.
  later.push_back([this, s, status] {
    if (s->admitted && s->callbacks.on_done) s->callbacks.on_done(status);
    std::lock_guard<std::mutex> lock(mu_);
    s->finished = true;
    s->cv.notify_all();
  });
}

std::shared_ptr<MuxSession> Multiplexer::Open(v1::Open open, SessionCallbacks callbacks,
                                              std::chrono::milliseconds timeout) {
  auto s = std::make_shared<MuxSession>();
  s->mux = shared_from_this();
  s->callbacks = std::move(callbacks);
  if (timeout.count() > 0) s->deadline = MuxClock::now() + timeout;
  std::unique_lock<std::mutex> lock(mu_);
  if (stopping_) throw Error(grpc::StatusCode::CANCELLED, "parsetier: the client was closed");
  s->key = std::to_string(++next_key_);
  sessions_[s->key] = s;
  Entry entry;
  entry.session = s;
  entry.open = std::move(open);
  s->queued = true;
  Queue(std::move(entry));
  Await(lock, s, [&] { return s->admitted || s->done; });
  if (!s->admitted) {
    throw Error(s->status, s->wire);
  }
  return s;
}

bool Multiplexer::Record(const std::shared_ptr<MuxSession>& s, std::vector<Step> ids, std::vector<v1::Step> steps,
                         std::optional<FinishOptions> finish) {
  std::unique_lock<std::mutex> lock(mu_);
  if (s->finish_recorded || s->done) return false;
  Await(lock, s, [&] { return s->backlog.size() < kMuxBacklog || s->done; });
  if (s->done) return false;
  Entry entry;
  entry.ids = std::move(ids);
  entry.steps = std::move(steps);
  entry.finish = std::move(finish);
  s->finish_recorded = entry.finish.has_value();
  if (s->queued) {  // one entry per session per message: this one goes in a later message
    s->backlog.push_back(std::move(entry));
    return true;
  }
  entry.session = s;
  s->queued = true;
  Queue(std::move(entry));
  return true;
}

std::optional<v1::ParseResponse> Multiplexer::Next(const std::shared_ptr<MuxSession>& s) {
  std::unique_lock<std::mutex> lock(mu_);
  Await(lock, s, [&] { return !s->replies.empty() || s->done; });
  if (!s->replies.empty()) {
    v1::ParseResponse reply = std::move(s->replies.front());
    s->replies.pop_front();
    return reply;
  }
  if (!s->status.ok()) throw Error(s->status, s->wire);
  return std::nullopt;
}

grpc::Status Multiplexer::Wait(const std::shared_ptr<MuxSession>& s) {
  std::unique_lock<std::mutex> lock(mu_);
  Await(lock, s, [&] { return s->finished; });
  return s->status;
}

void Multiplexer::Cancel(const std::shared_ptr<MuxSession>& s) {
  std::unique_lock<std::mutex> lock(mu_);
  Later later;
  End(s, grpc::Status(grpc::StatusCode::CANCELLED, "parsetier: session cancelled"), later, true);
  RunLater(lock, later);
}

std::optional<v1::Final> Multiplexer::Final(const std::shared_ptr<MuxSession>& s) {
  std::lock_guard<std::mutex> lock(mu_);
  return s->final;
}

int Multiplexer::Resumes(const std::shared_ptr<MuxSession>& s) {
  std::lock_guard<std::mutex> lock(mu_);
  return s->resumes;
}

void Multiplexer::Route(std::vector<v1::SessionOutput>& outputs, uint64_t number,
                        const std::vector<std::shared_ptr<MuxSession>>& opening, Later& later) {
  for (v1::SessionOutput& output : outputs) {
    auto live = sessions_.find(output.key());
    if (live == sessions_.end()) continue;  // dropped meanwhile
    std::shared_ptr<MuxSession> s = live->second;
    uint64_t count = 0;
    while (!s->counts.empty() && s->counts.front().first <= number) {
      count = s->counts.front().second;
      s->counts.pop_front();
    }
    const bool status = output.has_status();
    if (!status || output.deltas_size() > 0 || output.events_size() > 0 || !output.wire().empty()) {
      auto reply = std::make_shared<v1::ParseResponse>();
      reply->set_sequence(output.sequence());
      reply->set_client_messages(count);
      reply->mutable_deltas()->Swap(output.mutable_deltas());
      reply->mutable_events()->Swap(output.mutable_events());
      if (output.has_final()) {
        *reply->mutable_final() = output.final();
        s->final = output.final();
      }
      reply->set_output_digest(output.output_digest());
      reply->set_wire(std::move(*output.mutable_wire()));
      if (s->callbacks.on_message) {
        later.push_back([s, reply] { s->callbacks.on_message(*reply); });
      } else {
        s->replies.push_back(std::move(*reply));
        s->cv.notify_all();
      }
    }
    if (status) {
      grpc::Status ended(static_cast<grpc::StatusCode>(output.status().code()), output.status().message());
      End(s, ended, later, false, output.status().wire());
    } else if (output.has_final()) {
      End(s, grpc::Status::OK, later, false);
    }
  }
  for (const std::shared_ptr<MuxSession>& s : opening) {
    if (s->done) continue;
    s->admitted = true;
    s->cv.notify_all();
  }
}

void Multiplexer::FailAll(const grpc::Status& status, Later& later) {
  std::unordered_map<std::string, std::shared_ptr<MuxSession>> sessions;
  sessions.swap(sessions_);
  entries_.clear();
  order_.clear();
  for (auto& [key, s] : sessions) End(s, status, later, false);
}

void Multiplexer::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  Later later;
  while (true) {
    // Sessions past their deadline end here too (a session nobody waits on, with callbacks).
    std::optional<MuxClock::time_point> nearest;
    const MuxClock::time_point now = MuxClock::now();
    std::vector<std::shared_ptr<MuxSession>> expired;
    for (auto& [key, s] : sessions_) {
      if (!s->deadline) continue;
      if (*s->deadline <= now) {
        expired.push_back(s);
      } else if (!nearest || *s->deadline < *nearest) {
        nearest = s->deadline;
      }
    }
    for (const std::shared_ptr<MuxSession>& s : expired) {
      End(s, grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "parsetier: deadline exceeded"), later, true);
    }
    RunLater(lock, later);
    if (stopping_) break;
    if (order_.empty()) {
      if (nearest) {
        wake_.wait_until(lock, *nearest);
      } else {
        wake_.wait(lock);
      }
      continue;
    }
    const size_t max_batch = static_cast<size_t>(std::max(1, options_.max_batch));
    if (options_.flush_interval.count() > 0 && order_.size() < max_batch &&
        MuxClock::now() < first_queued_ + options_.flush_interval) {
      wake_.wait_until(lock, first_queued_ + options_.flush_interval,
                       [&] { return stopping_ || order_.size() >= max_batch; });
      continue;
    }
    if (options_.flush_interval.count() == 0 && batch_ && !batch_dead_ && !flights_.empty() &&
        order_.size() < max_batch && MuxClock::now() < last_sent_ + kMuxIdleWait) {
      wake_.wait_until(lock, last_sent_ + kMuxIdleWait,
                       [&] { return stopping_ || batch_dead_ || flights_.empty() || order_.size() >= max_batch; });
      continue;
    }
    if (batch_ && !batch_dead_ && flights_.size() >= kMuxInFlight) {  // back-pressure
      auto room = [&] { return stopping_ || batch_dead_ || flights_.size() < kMuxInFlight; };
      if (nearest) {
        wake_.wait_until(lock, *nearest, room);
      } else {
        wake_.wait(lock, room);
      }
      continue;
    }
    if (!batch_ || batch_dead_) {  // a new shared stream, with its receiving thread
      if (batch_) batch_->SharedStop();
      lock.unlock();
      if (receiver_.joinable()) receiver_.join();
      batch_.reset();
      std::unique_ptr<Batch> batch = client_.OpenBatch();
      batch->shared_ = true;
      lock.lock();
      batch_ = std::move(batch);
      batch_dead_ = false;
      flights_.clear();
      receiver_ = std::thread([this, batch = batch_.get()] { Receive(batch); });
      continue;  // the queue may have changed meanwhile
    }

    // Take the next message's entries.
    const uint64_t number = ++taken_;
    std::vector<Entry> taken;
    std::vector<std::shared_ptr<MuxSession>> opening, next;
    while (!order_.empty() && taken.size() < max_batch) {
      auto found = entries_.find(order_.front());
      order_.pop_front();
      Entry entry = std::move(found->second);
      entries_.erase(found);
      MuxSession& s = *entry.session;
      if (!entry.cancel) {
        s.queued = false;
        if (!s.backlog.empty()) next.push_back(entry.session);
      }
      if (entry.counts) s.counts.emplace_back(number, ++s.messages);
      if (entry.open) opening.push_back(entry.session);
      taken.push_back(std::move(entry));
    }
    for (const std::shared_ptr<MuxSession>& s : next) {  // their next messages go in the next message
      Entry entry = std::move(s->backlog.front());
      s->backlog.pop_front();
      if (s->backlog.size() == kMuxBacklog / 2) s->cv.notify_all();  // a Send waiting for room goes on
      entry.session = s;
      s->queued = true;
      Queue(std::move(entry));
    }
    if (!order_.empty()) first_queued_ = MuxClock::now();
    flights_.push_back({number, std::move(opening)});
    Batch* batch = batch_.get();
    lock.unlock();

    grpc::Status failed;
    try {
      for (Entry& entry : taken) {
        const std::string& key = entry.session->key;
        if (entry.cancel) {
          batch->Cancel(key);
        } else if (entry.open) {
          OpenOptions options;
          options.customize = [&entry](v1::Open& open) { open = std::move(*entry.open); };
          batch->Open(key, options);
        } else if (entry.finish) {
          batch->Finish(key, *entry.finish);
        } else if (!entry.steps.empty()) {
          batch->FeedSteps(key, entry.steps);
        } else {
          batch->Feed(key, entry.ids);  // a lone step of ids goes packed
        }
      }
      batch->SharedSend();
      last_sent_ = MuxClock::now();
    } catch (const Error& error) {
      failed = grpc::Status(error.code(), error.message());
      if (failed.ok()) failed = grpc::Status(grpc::StatusCode::INTERNAL, "parsetier: the shared stream failed");
    }
    taken.clear();
    lock.lock();
    if (!failed.ok()) {  // the stream failed (its receiver ends its sessions): these end too
      batch_dead_ = true;
      FailAll(failed, later);
    }
  }
  FailAll(grpc::Status(grpc::StatusCode::CANCELLED, "parsetier: the client was closed"), later);
  RunLater(lock, later);
  if (batch_) batch_->SharedStop();
  lock.unlock();
  if (receiver_.joinable()) receiver_.join();
  batch_.reset();
}

void Multiplexer::Receive(Batch* batch) {
  Later later;
  while (true) {
    const int before = batch->Resumes();
    std::vector<v1::SessionOutput> outputs;
    grpc::Status failed;
    try {
      outputs = batch->SharedRecv();
    } catch (const Error& error) {
      failed = grpc::Status(error.code(), error.message());
      if (failed.ok()) failed = grpc::Status(grpc::StatusCode::INTERNAL, "parsetier: the shared stream failed");
    }
    std::unique_lock<std::mutex> lock(mu_);
    if (!failed.ok()) {  // it does not move (resume off, the budget spent, stopped): its sessions end
      batch_dead_ = true;
      FailAll(failed, later);
      wake_.notify_all();
      RunLater(lock, later);
      return;
    }
    const int moved = batch->Resumes() - before;
    if (moved > 0) {
      for (auto& [key, s] : sessions_) s->resumes += moved;
    }
    Flight flight = std::move(flights_.front());
    flights_.pop_front();
    Route(outputs, flight.number, flight.opening, later);
    wake_.notify_all();  // room for the next flush
    RunLater(lock, later);
  }
}

}  // namespace internal
}  // namespace parsetier
