// Session: one Parse stream on gRPC's callback API (ClientBidiReactor).
//
// The callback API is used, not the synchronous one, because it alone tells a refused Open
// (a trailers-only response) from an accepted one: OnReadInitialMetadataDone(false). Writes are
// queued, since a reactor allows one write in flight; a hold keeps the call open while the
// client may still write, and is released once the writer is finished (WritesDone sent, a write
// failed, the session was cancelled, or the server ended the stream).
#include <condition_variable>
#include <deque>
#include <mutex>

#include "parsetier/client.h"

namespace parsetier {

namespace {
constexpr size_t kMaxQueuedWrites = 64;  // Send blocks beyond this many unwritten messages
}  // namespace

class SessionReactor : public grpc::ClientBidiReactor<v1::ParseRequest, v1::ParseResponse> {
 public:
  // `prepare` sets the call's deadline and credentials metadata on the context.
  SessionReactor(v1::ParserService::Stub& stub, const OpenOptions& options, SessionCallbacks callbacks,
                 const std::function<void(grpc::ClientContext&)>& prepare)
      : callbacks_(std::move(callbacks)) {
    prepare(context_);
    stub.async()->Parse(&context_, this);
    v1::ParseRequest open;
    *open.mutable_open() = options.ToProto();
    AddHold();  // released by ReleaseWriter
    writing_ = true;
    current_ = std::move(open);
    StartWrite(&current_);
    StartRead(&incoming_);
    StartCall();
  }

  // Waits for the server's verdict on the Open: headers (accepted) or a status (refused).
  void AwaitAccepted() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return accepted_ || done_; });
    if (!accepted_) {
      cv_.wait(lock, [&] { return done_; });
      throw Error(status_.ok() ? grpc::Status(grpc::StatusCode::INTERNAL,
                                              "parsetier: stream ended before the server accepted Open")
                               : status_);
    }
  }

  bool Enqueue(v1::ParseRequest message, bool last) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return queue_.size() < kMaxQueuedWrites || writer_closed_; });
    if (writer_closed_ || finish_queued_) return false;
    finish_queued_ = last;
    queue_.push_back(std::move(message));
    if (writing_) return true;
    writing_ = true;
    current_ = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    StartWrite(&current_);  // outside the lock: gRPC may run OnWriteDone inline
    return true;
  }

  std::optional<v1::ParseResponse> Next() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !messages_.empty() || done_; });
    if (!messages_.empty()) {
      v1::ParseResponse message = std::move(messages_.front());
      messages_.pop_front();
      return message;
    }
    if (!status_.ok()) throw Error(status_);
    return std::nullopt;
  }

  grpc::Status Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return done_; });
    return status_;
  }

  void Cancel() {
    std::unique_lock<std::mutex> lock(mu_);
    if (done_) return;
    lock.unlock();
    context_.TryCancel();  // outside the lock: gRPC may run reactions inline
    lock.lock();
    writer_closed_ = true;
    queue_.clear();
    cv_.notify_all();  // a Send waiting for room gives up
    ReleaseWriterIfIdle(lock);
  }

  bool Ended() {
    std::lock_guard<std::mutex> lock(mu_);
    return done_;
  }

  std::optional<v1::Final> Final() {
    std::lock_guard<std::mutex> lock(mu_);
    return final_;
  }

  // --- reactions, on gRPC's threads ---------------------------------------------------------

  void OnReadInitialMetadataDone(bool ok) override {
    std::lock_guard<std::mutex> lock(mu_);
    accepted_ = ok;
    cv_.notify_all();
  }

  void OnWriteDone(bool ok) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (!ok) writer_closed_ = true;  // the stream is over; OnDone brings its status
    if (writer_closed_) {
      queue_.clear();
      writing_ = false;
      cv_.notify_all();
      ReleaseWriterIfIdle(lock);
      return;
    }
    if (!queue_.empty()) {
      current_ = std::move(queue_.front());
      queue_.pop_front();
      cv_.notify_all();
      lock.unlock();
      StartWrite(&current_);
      return;
    }
    if (finish_queued_) {
      writer_closed_ = true;
      lock.unlock();
      StartWritesDone();  // its completion releases the hold
      return;
    }
    writing_ = false;
    if (read_ended_) {
      writer_closed_ = true;
      ReleaseWriterIfIdle(lock);
    }
  }

  void OnWritesDoneDone(bool /*ok*/) override {
    std::unique_lock<std::mutex> lock(mu_);
    writing_ = false;
    ReleaseWriterIfIdle(lock);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      // The server has ended the stream: a writer with nothing in flight stops holding it open.
      std::unique_lock<std::mutex> lock(mu_);
      read_ended_ = true;
      writer_closed_ = true;
      queue_.clear();
      cv_.notify_all();
      ReleaseWriterIfIdle(lock);
      return;
    }
    if (incoming_.has_final()) {
      std::lock_guard<std::mutex> lock(mu_);
      final_ = incoming_.final();
    }
    if (callbacks_.on_message) {
      callbacks_.on_message(incoming_);
    } else {
      std::lock_guard<std::mutex> lock(mu_);
      messages_.push_back(std::move(incoming_));
      cv_.notify_all();
    }
    incoming_.Clear();
    StartRead(&incoming_);
  }

  void OnDone(const grpc::Status& status) override {
    grpc::Status result = status;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (result.ok() && !final_) {
        result = grpc::Status(grpc::StatusCode::INTERNAL, "parsetier: stream ended without a final message");
      }
    }
    if (callbacks_.on_done) callbacks_.on_done(result);
    std::lock_guard<std::mutex> lock(mu_);
    status_ = result;
    done_ = true;
    cv_.notify_all();
  }

 private:
  // Releases the hold once, when no write is in flight and none will come. Called with mu_ held.
  void ReleaseWriterIfIdle(std::unique_lock<std::mutex>& lock) {
    if (writing_ || hold_released_ || !writer_closed_) return;
    hold_released_ = true;
    lock.unlock();
    RemoveHold();
  }

  grpc::ClientContext context_;
  SessionCallbacks callbacks_;
  v1::ParseRequest current_;   // the write in flight
  v1::ParseResponse incoming_;  // the read in flight

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<v1::ParseRequest> queue_;
  std::deque<v1::ParseResponse> messages_;
  std::optional<v1::Final> final_;
  grpc::Status status_;
  bool accepted_ = false;
  bool writing_ = false;
  bool finish_queued_ = false;
  bool writer_closed_ = false;
  bool read_ended_ = false;
  bool hold_released_ = false;
  bool done_ = false;
};

Session::Session(std::unique_ptr<SessionReactor> reactor) : reactor_(std::move(reactor)) {}

Session::~Session() {
  if (!reactor_->Ended()) reactor_->Cancel();
  reactor_->Wait();  // gRPC may not touch the reactor after OnDone
}

bool Session::Send(const Step& step) {
  v1::ParseRequest message;
  message.add_steps()->mutable_token_ids()->Add(step.begin(), step.end());
  return reactor_->Enqueue(std::move(message), false);
}

bool Session::SendSteps(const std::vector<Step>& steps) {
  v1::ParseRequest message;
  for (const Step& ids : steps) {
    message.add_steps()->mutable_token_ids()->Add(ids.begin(), ids.end());
  }
  return reactor_->Enqueue(std::move(message), false);
}

bool Session::SendSteps(const std::vector<v1::Step>& steps) {
  v1::ParseRequest message;
  message.mutable_steps()->Add(steps.begin(), steps.end());
  return reactor_->Enqueue(std::move(message), false);
}

bool Session::Finish(const FinishOptions& finish) {
  v1::ParseRequest message;
  *message.mutable_finish() = finish.ToProto();
  return reactor_->Enqueue(std::move(message), true);
}

std::optional<v1::ParseResponse> Session::Next() { return reactor_->Next(); }
grpc::Status Session::Wait() { return reactor_->Wait(); }
void Session::Cancel() { reactor_->Cancel(); }
std::optional<v1::Final> Session::Final() const { return reactor_->Final(); }

std::unique_ptr<Session> Client::Open(const OpenOptions& options, SessionCallbacks callbacks) {
  auto reactor = std::make_unique<SessionReactor>(
      *stub_, options, std::move(callbacks), [&](grpc::ClientContext& context) { Prepare(context, options.timeout); });
  reactor->AwaitAccepted();  // on failure, the reactor is done: destroying it is safe
  return std::unique_ptr<Session>(new Session(std::move(reactor)));
}

}  // namespace parsetier
