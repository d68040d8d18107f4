// Session: one request session over one Parse stream or, after a break, the streams it resumed on.
//
// Each stream is a StreamReactor on gRPC's callback API (ClientBidiReactor). The callback API is
// used, not the synchronous one, because it alone tells a refused Open (a trailers-only
// response) from an accepted one: OnReadInitialMetadataDone(false). A reactor allows one write in
// flight, so a stream writes the session's messages in order, one after the other; a hold
// keeps the call open while it may still write, released once its writer is finished (WritesDone
// sent, a write failed, the session was cancelled, or the server ended the stream).
//
// SessionCore is the session: its ledger (the messages not answered yet, the answered history,
// the sequence and digest of the last reply), the messages waiting for Next, the outcome. One mutex guards it and every stream's
// state. Streams come one after the other: a new one is opened only after the previous one's
// OnDone, on the core's resumer thread (backoff sleeps must not run on gRPC's threads), following
// docs/service.md, "Resume".
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "parsetier/client.h"
#include "mux.h"
#include "parts.h"
#include "resume.h"
#include "wire.h"

namespace parsetier {

namespace {

constexpr size_t kMaxQueuedWrites = 64;  // Send blocks beyond this many unwritten messages

// The client messages of one session after its Open, in the order sent, until they leave: once
// written with resume off, once answered with resume on (the pending messages a resumed stream
// re-sends after its Open). On any stream the Open is message 1, so pending message k is message
// first_ + k of the current stream.
class Pending {
 public:
  explicit Pending(bool keep) : keep_(keep) {}

  void Record(v1::ParseRequest message) { messages_.push_back(std::make_shared<v1::ParseRequest>(std::move(message))); }

  // Messages a stream whose next message is number `next` has not had yet.
  size_t Unwritten(uint64_t next) const { return first_ + messages_.size() - next; }

  // Message `number` of the current stream, to write: streams write in order.
  std::shared_ptr<const v1::ParseRequest> Take(uint64_t number) {
    std::shared_ptr<const v1::ParseRequest> message = messages_[number - first_];
    if (!keep_) Answered(number, nullptr);
    return message;
  }

  // The messages through `number` are answered: they join `history` (with resume on).
  void Answered(uint64_t number, internal::History* history) {
    while (!messages_.empty() && first_ <= number) {
      if (history != nullptr) history->Add(messages_.front()->steps());
      messages_.pop_front();
      ++first_;
    }
  }

  // A new stream: its Open is message 1, the pending messages follow.
  void Restart() { first_ = 2; }

 private:
  bool keep_;
  std::deque<std::shared_ptr<const v1::ParseRequest>> messages_;
  uint64_t first_ = 2;
};

}  // namespace

class SessionCore;

// One Parse stream of a session. Its fields are guarded by the core's mutex.
class StreamReactor : public grpc::ClientBidiReactor<v1::ParseRequest, v1::ParseResponse> {
 public:
  StreamReactor(SessionCore& core, bool resumed) : core_(core), resumed_(resumed) {}

  // Writes the Open and starts the call; before any reaction can run.
  void Start(v1::ParserService::Stub& stub, v1::ParseRequest open,
             const std::function<void(grpc::ClientContext&)>& prepare) {
    prepare(context_);
    stub.async()->Parse(&context_, this);
    AddHold();  // released by Pump once nothing more will be written
    writing_ = true;
    open_ = std::move(open);
    StartWrite(&open_);
    StartRead(&incoming_);
    StartCall();
  }

  // Ends the stream now; its OnDone follows with CANCELLED.
  void Cancel() {
    context_.TryCancel();  // without the lock: gRPC may run reactions inline
    std::unique_lock<std::mutex> lock(Mutex());
    writer_closed_ = true;
    Pump(lock);
  }

  // Writes what this stream has not had yet, closes its sending side after the Finish, or
  // releases the hold once nothing more will be written. Called with the lock held; may release it.
  void Pump(std::unique_lock<std::mutex>& lock);

  void OnReadInitialMetadataDone(bool ok) override;
  void OnWriteDone(bool ok) override {
    std::unique_lock<std::mutex> lock(Mutex());
    writing_ = false;
    if (!ok) writer_closed_ = true;
    Pump(lock);
    if (!ok) WriteFailed();
  }
  void OnWritesDoneDone(bool ok) override {
    std::unique_lock<std::mutex> lock(Mutex());
    writing_ = false;
    Pump(lock);
    if (!ok) WriteFailed();
  }
  // A stream that cannot write is of no more use, but its call need not be over: a write can fail
  // on a call gRPC has meanwhile retried on a new connection (transparent retry after its first
  // connection died), whose server then waits for messages that never come. Ending the call makes
  // sure OnDone comes (with the call's status, or CANCELLED, which resumes).
  void WriteFailed() { context_.TryCancel(); }
  void OnReadDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;

 private:
  friend class SessionCore;
  std::mutex& Mutex();

  SessionCore& core_;
  const bool resumed_;  // opened with a resume point
  grpc::ClientContext context_;
  v1::ParseRequest open_;       // the first write
  std::shared_ptr<const v1::ParseRequest> current_;  // a later write in flight
  v1::ParseResponse incoming_;  // the read in flight
  std::string parts_;           // a reply sent in parts, so far
  bool in_parts_ = false;

  bool started_ = false;  // Start has returned: Cancel may act on it
  uint64_t next_ = 2;  // the number of the next message to write (the Open, 1, is written by Start)
  bool accepted_ = false;
  bool writing_ = false;
  bool writes_done_ = false;
  bool writer_closed_ = false;
  bool read_ended_ = false;
  bool hold_released_ = false;
  bool done_ = false;
  grpc::Status status_;
};

class SessionCore {
 public:
  SessionCore(v1::ParserService::Stub& stub, v1::Open open, SessionCallbacks callbacks,
              std::function<void(grpc::ClientContext&)> prepare, std::optional<ResumePolicy> policy)
      : stub_(stub),
        open_(std::move(open)),
        callbacks_(std::move(callbacks)),
        prepare_(std::move(prepare)),
        policy_(policy),
        pending_(policy.has_value()) {
    if (policy_) open_.set_resumable(true);
  }

  ~SessionCore() {
    Cancel();
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return done_ && AllStreamsDone(); });  // gRPC may not touch a stream after OnDone
    stopping_ = true;
    cv_.notify_all();
    lock.unlock();
    if (resumer_.joinable()) resumer_.join();
  }

  // Opens the first stream and waits for the server's verdict; throws Error if it refused.
  void Open() {
    grpc::Status status = Connect(std::nullopt);
    if (status.ok()) return;
    std::lock_guard<std::mutex> lock(mu_);
    status_ = status;
    done_ = finishing_ = true;  // no on_done: the caller gets the Error instead
    throw Error(status, wire_);
  }

  bool Record(v1::ParseRequest message, bool finish) {
    std::unique_lock<std::mutex> lock(mu_);
    if (finish_recorded_) return false;
    cv_.wait(lock, [&] {
      if (finishing_ || cancelled_) return true;
      if (current_ == nullptr) return false;  // resuming
      if (current_->writer_closed_) return !policy_;
      return pending_.Unwritten(current_->next_) < kMaxQueuedWrites;
    });
    if (finishing_ || cancelled_ || current_->writer_closed_) return false;
    pending_.Record(std::move(message));
    finish_recorded_ = finish;
    current_->Pump(lock);
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
    if (!status_.ok()) throw Error(status_, wire_);
    return std::nullopt;
  }

  grpc::Status Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return done_; });
    return status_;
  }

  void Cancel() {
    std::unique_lock<std::mutex> lock(mu_);
    if (finishing_) return;
    cancelled_ = true;
    cv_.notify_all();  // a Send waiting for room and a resumer's backoff give up
    StreamReactor* live = nullptr;
    for (auto& stream : streams_) {
      if (stream->started_ && !stream->done_) live = stream.get();
    }
    if (live == nullptr && !resume_wanted_ && !resuming_) {
      // Between streams with no resumer at work: nothing else will end the session.
      Finish(lock, grpc::Status(grpc::StatusCode::CANCELLED, "parsetier: session cancelled"));
      return;
    }
    lock.unlock();
    if (live != nullptr) live->Cancel();
  }

  std::optional<v1::Final> Final() {
    std::lock_guard<std::mutex> lock(mu_);
    return final_;
  }

  int Resumes() {
    std::lock_guard<std::mutex> lock(mu_);
    return resumes_;
  }

 private:
  friend class StreamReactor;

  bool AllStreamsDone() const {
    for (const auto& stream : streams_) {
      if (!stream->done_) return false;
    }
    return true;
  }

  // Opens a stream with the session's Open (resuming from `point` unless unset) and waits until
  // the server has accepted it, retrying refusals within the resume budget. Without the lock.
  grpc::Status Connect(const std::optional<v1::ResumePoint>& point) {
    for (int attempt = 0;; ++attempt) {
      StreamReactor* stream;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (cancelled_) return grpc::Status(grpc::StatusCode::CANCELLED, "parsetier: session cancelled");
        streams_.push_back(std::make_unique<StreamReactor>(*this, point.has_value()));
        stream = streams_.back().get();
      }
      v1::ParseRequest open;
      *open.mutable_open() = open_;
      if (point) *open.mutable_open()->mutable_resume() = *point;
      stream->Start(stub_, std::move(open), prepare_);
      std::unique_lock<std::mutex> lock(mu_);
      stream->started_ = true;
      if (cancelled_) {  // Cancel skipped this stream while it was starting
        lock.unlock();
        stream->Cancel();
        lock.lock();
      }
      cv_.wait(lock, [&] { return stream->accepted_ || stream->done_; });
      if (stream->accepted_) return grpc::Status::OK;
      grpc::Status status = stream->status_;
      wire_ = internal::WireTrailer(stream->context_);
      if (status.ok()) {
        status = grpc::Status(grpc::StatusCode::INTERNAL, "parsetier: stream ended before the server accepted Open");
      }
      if (!policy_ || cancelled_ || !internal::Retryable(status, stream->context_)) return status;
      if (attempt >= policy_->attempts) return status;
      if (cv_.wait_for(lock, internal::Backoff(*policy_, attempt), [&] { return cancelled_; })) {
        return grpc::Status(grpc::StatusCode::CANCELLED, "parsetier: session cancelled");
      }
    }
  }

  // The resumer thread: opens a new stream whenever the current one broke, until the session ends.
  void ResumeLoop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      cv_.wait(lock, [&] { return resume_wanted_ || stopping_; });
      if (!resume_wanted_) return;
      resume_wanted_ = false;
      resuming_ = true;
      v1::ResumePoint point;
      history_.Point(sequence_, digest_, point);
      pending_.Restart();
      lock.unlock();
      grpc::Status status = Connect(point);
      lock.lock();
      resuming_ = false;
      if (!status.ok()) Finish(lock, status);
    }
  }

  // A stream was accepted (OnReadInitialMetadataDone); with the lock held.
  void Accepted(StreamReactor* stream) {
    current_ = stream;
    if (stream->resumed_) ++resumes_;
    cv_.notify_all();
  }

  // A whole reply arrived on the current stream (OnReadDone), or `broken` says why it cannot be
  // read: checks it continues what was received, records the resume point, and delivers it.
  // Returns false when the stream must be cancelled (the session ends with the failure).
  bool Received(v1::ParseResponse& message, const grpc::Status& broken) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!broken.ok()) {
      failure_ = broken;
      return false;
    }
    if (policy_ && message.sequence() != sequence_ + 1) {
      failure_ = grpc::Status(grpc::StatusCode::INTERNAL,
                              "parsetier: message " + std::to_string(message.sequence()) + " after " +
                                  std::to_string(sequence_) + ": a gap or a repeat");
      return false;
    }
    sequence_ = message.sequence();
    if (policy_) {
      digest_ = message.output_digest();
      pending_.Answered(message.client_messages(), &history_);
    }
    if (message.has_final()) final_ = message.final();
    if (callbacks_.on_message) {
      lock.unlock();
      callbacks_.on_message(message);  // one at a time: the next read starts after this returns
      return true;
    }
    messages_.push_back(std::move(message));
    cv_.notify_all();
    return true;
  }

  // A stream ended (OnDone): a refused Open is Connect's to judge; the current stream's end is the
  // session's, unless it broke and the session resumes.
  void StreamDone(StreamReactor* stream, const grpc::Status& status) {
    std::unique_lock<std::mutex> lock(mu_);
    stream->done_ = true;
    stream->status_ = status;
    cv_.notify_all();
    if (stream != current_) return;
    current_ = nullptr;
    wire_ = internal::WireTrailer(stream->context_);
    if (failure_) return Finish(lock, *failure_);
    if (final_) return Finish(lock, policy_ ? grpc::Status::OK : status);  // with resume: complete
    if (policy_ && !cancelled_ && internal::Retryable(status, stream->context_)) {
      resume_wanted_ = true;
      if (!resumer_.joinable()) resumer_ = std::thread([this] { ResumeLoop(); });
      return;
    }
    Finish(lock, status.ok() ? grpc::Status(grpc::StatusCode::INTERNAL, "parsetier: stream ended without a final message")
                             : status);
  }

  // Ends the session once, with the lock held (released while on_done runs).
  void Finish(std::unique_lock<std::mutex>& lock, const grpc::Status& status) {
    if (finishing_) return;
    finishing_ = true;
    cv_.notify_all();
    lock.unlock();
    if (callbacks_.on_done) callbacks_.on_done(status);
    lock.lock();
    status_ = status;
    done_ = true;
    cv_.notify_all();
  }

  v1::ParserService::Stub& stub_;
  v1::Open open_;
  SessionCallbacks callbacks_;
  std::function<void(grpc::ClientContext&)> prepare_;
  std::optional<ResumePolicy> policy_;

  std::mutex mu_;
  std::condition_variable cv_;
  Pending pending_;
  internal::History history_;  // with resume on: the answered steps
  bool finish_recorded_ = false;
  uint64_t sequence_ = 0;  // of the last message received
  uint32_t digest_ = 0;
  std::deque<v1::ParseResponse> messages_;  // for Next
  std::string wire_;  // the error in the dialect, from the trailers of the last stream that ended
  std::optional<v1::Final> final_;
  std::optional<grpc::Status> failure_;  // a reply out of sequence, or parts that do not join
  StreamReactor* current_ = nullptr;     // the accepted stream, until its OnDone
  std::vector<std::unique_ptr<StreamReactor>> streams_;
  int resumes_ = 0;
  bool resume_wanted_ = false;  // the current stream broke; the resumer opens the next
  bool resuming_ = false;       // the resumer is connecting
  bool cancelled_ = false;
  bool finishing_ = false;  // the outcome is decided (on_done may still be running)
  bool done_ = false;
  bool stopping_ = false;
  grpc::Status status_;
  std::thread resumer_;
};

std::mutex& StreamReactor::Mutex() { return core_.mu_; }

void StreamReactor::Pump(std::unique_lock<std::mutex>& lock) {
  if (writing_) return;  // its completion pumps again
  if (!writer_closed_) {
    if (!accepted_) return;  // the Open's verdict first
    if (core_.pending_.Unwritten(next_) > 0) {
      current_ = core_.pending_.Take(next_++);
      writing_ = true;
      core_.cv_.notify_all();  // room for Send
      lock.unlock();
      StartWrite(current_.get());  // without the lock: gRPC may run OnWriteDone inline
      return;
    }
    if (core_.finish_recorded_ && !writes_done_) {
      writes_done_ = writing_ = true;
      lock.unlock();
      StartWritesDone();
      return;
    }
    if (!writes_done_ && !read_ended_) return;  // idle until the next Send or Finish
    writer_closed_ = true;
  }
  if (hold_released_) return;
  hold_released_ = true;
  lock.unlock();
  RemoveHold();
}

void StreamReactor::OnReadInitialMetadataDone(bool ok) {
  std::unique_lock<std::mutex> lock(Mutex());
  accepted_ = ok;
  if (ok) core_.Accepted(this);
  core_.cv_.notify_all();
  Pump(lock);
}

void StreamReactor::OnReadDone(bool ok) {
  if (!ok) {
    // The server has ended the stream: a writer with nothing in flight stops holding it open.
    std::unique_lock<std::mutex> lock(Mutex());
    read_ended_ = writer_closed_ = true;
    Pump(lock);
    return;
  }
  grpc::Status broken;
  if (internal::JoinParts(incoming_, parts_, in_parts_, broken)) {  // else more parts are due
    if (!core_.Received(incoming_, broken)) context_.TryCancel();
  }
  incoming_.Clear();
  StartRead(&incoming_);
}

void StreamReactor::OnDone(const grpc::Status& status) { core_.StreamDone(this, status); }

Session::Session(std::unique_ptr<SessionCore> core) : core_(std::move(core)) {}
Session::Session(std::shared_ptr<internal::MuxSession> mux) : mux_(std::move(mux)) {}

Session::~Session() {  // the core cancels an unfinished session and waits for gRPC
  if (!mux_) return;
  mux_->mux->Cancel(mux_);
  mux_->mux->Wait(mux_);  // its callbacks have all run
}

bool Session::Send(const Step& step) {
  if (mux_) return mux_->mux->Record(mux_, {step}, {}, std::nullopt);
  v1::ParseRequest message;
  message.add_steps()->mutable_token_ids()->Add(step.begin(), step.end());
  return core_->Record(std::move(message), false);
}

bool Session::SendSteps(const std::vector<Step>& steps) {
  if (mux_) return mux_->mux->Record(mux_, steps, {}, std::nullopt);
  v1::ParseRequest message;
  for (const Step& ids : steps) {
    message.add_steps()->mutable_token_ids()->Add(ids.begin(), ids.end());
  }
  return core_->Record(std::move(message), false);
}

bool Session::SendSteps(const std::vector<v1::Step>& steps) {
  if (mux_ && steps.empty()) return mux_->mux->Record(mux_, {}, {}, std::nullopt);  // a keep-alive
  if (mux_) return mux_->mux->Record(mux_, {}, steps, std::nullopt);
  v1::ParseRequest message;
  message.mutable_steps()->Add(steps.begin(), steps.end());
  return core_->Record(std::move(message), false);
}

bool Session::Finish(const FinishOptions& finish) {
  if (mux_) return mux_->mux->Record(mux_, {}, {}, finish);
  v1::ParseRequest message;
  *message.mutable_finish() = finish.ToProto();
  return core_->Record(std::move(message), true);
}

std::optional<v1::ParseResponse> Session::Next() { return mux_ ? mux_->mux->Next(mux_) : core_->Next(); }
grpc::Status Session::Wait() { return mux_ ? mux_->mux->Wait(mux_) : core_->Wait(); }
void Session::Cancel() { mux_ ? mux_->mux->Cancel(mux_) : core_->Cancel(); }
std::optional<v1::Final> Session::Final() const { return mux_ ? mux_->mux->Final(mux_) : core_->Final(); }
int Session::Resumes() const { return mux_ ? mux_->mux->Resumes(mux_) : core_->Resumes(); }

std::unique_ptr<Session> Client::Open(const OpenOptions& options, SessionCallbacks callbacks) {
  if (mux_) {  // an entry of the client's shared ParseBatch stream
    return std::unique_ptr<Session>(new Session(mux_->Open(options.ToProto(), std::move(callbacks), options.timeout)));
  }
  // Every stream of the session shares one deadline: the session's, not each stream's.
  auto core = std::make_unique<SessionCore>(*stub_, options.ToProto(), std::move(callbacks), Preparer(options.timeout),
                                            resume_);
  core->Open();  // on failure, every stream is done: destroying the core is safe
  return std::unique_ptr<Session>(new Session(std::move(core)));
}

}  // namespace parsetier
