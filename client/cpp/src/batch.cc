// Batch: one ParseBatch stream driven by one thread, one round trip per engine step.
//
// The synchronous stream API fits here: the caller sends one message per step and reads one
// reply per message, in order, and a refused session does not end the stream (its status is in
// its output), so nothing needs the callback API's view of the stream's headers.
#include "parsetier/batch.h"
#include "batch_resume.h"
#include "packed.h"
#include "parts.h"
#include "resume.h"

namespace parsetier {

Batch::Batch(v1::ParserService::Stub& stub, std::function<void(grpc::ClientContext&)> prepare,
             std::optional<ResumePolicy> policy)
    : stub_(stub), prepare_(std::move(prepare)), policy_(policy) {
  if (policy_) ledger_ = std::make_unique<internal::BatchLedger>();
  Start({});
}

Batch::~Batch() {
  if (!stream_ended_) {
    context_->TryCancel();
    EndStream();  // CANCELLED; releases the call
  }
}

void Batch::Start(std::vector<internal::WireMessage> replay) {
  stream_.reset();  // an ended stream goes before its context
  context_ = std::make_unique<grpc::ClientContext>();
  prepare_(*context_);
  stream_ = stub_.ParseBatch(context_.get());
  stream_ended_ = write_failed_ = in_parts_ = false;
  parts_.clear();
  sent_.clear();
  if (replay.empty()) return;
  std::vector<v1::ParseBatchRequest> wire;
  wire.reserve(replay.size());
  for (internal::WireMessage& message : replay) {  // in their wire form already
    wire.push_back(std::move(message.request));
    sent_.push_back(std::move(message.sent));
  }
  shared_replaying_ = true;  // on a shared batch the caller holds shared_mu_
  replaying_ = std::thread([this, context = context_.get(), stream = stream_.get(), wire = std::move(wire)] {
    for (const v1::ParseBatchRequest& message : wire) {
      if (!stream->Write(message)) {
        context->TryCancel();  // broken again: Recv sees it, even on a call gRPC retried elsewhere
        break;
      }
    }
    {
      std::lock_guard<std::mutex> lock(shared_mu_);
      shared_replaying_ = false;
    }
    shared_cv_.notify_all();  // a SharedSend waiting for the replay
  });
}

std::unique_lock<std::mutex> Batch::SharedLock() {
  return shared_ ? std::unique_lock<std::mutex>(shared_mu_) : std::unique_lock<std::mutex>();
}

void Batch::HoldWrites() {
  if (!shared_) return;
  std::unique_lock<std::mutex> lock(shared_mu_);
  shared_held_ = true;
  // A write under way returns: the stream has ended, or the caller cancelled it (never here: the
  // status of a stream the server ended must stay the server's, for the retry rule).
  shared_cv_.wait(lock, [&] { return !shared_writing_; });
}

void Batch::ReleaseWrites() {
  if (!shared_) return;
  {
    std::lock_guard<std::mutex> lock(shared_mu_);
    shared_held_ = false;
  }
  shared_cv_.notify_all();
}

void Batch::SharedSend() {
  std::vector<internal::SentEntry> sent;
  v1::ParseBatchRequest message = internal::WireRequest(pending_, sent);
  index_.clear();
  std::unique_lock<std::mutex> lock(shared_mu_);
  shared_cv_.wait(lock, [&] { return shared_failed_ || shared_stopped_ || (!shared_held_ && !shared_replaying_); });
  if (shared_failed_ || shared_stopped_) {
    throw Error(status_.ok() ? grpc::Status(grpc::StatusCode::CANCELLED, "parsetier: the batch stream has ended")
                             : status_);
  }
  // Recorded before it is written: a reply may come at once, and a resume from now on re-sends it.
  if (ledger_) ledger_->Sent(v1::ParseBatchRequest(message), sent);
  sent_.push_back(std::move(sent));
  ++in_flight_;
  shared_cv_.notify_all();  // the receiver waits for a message in flight
  if (write_failed_) return;  // the receiver moves the stream (resume on) or ends it
  grpc::ClientContext* context = context_.get();
  auto* stream = stream_.get();
  shared_writing_ = true;
  lock.unlock();
  const bool written = stream->Write(message);
  lock.lock();
  shared_writing_ = false;
  if (!written && stream == stream_.get()) {
    write_failed_ = true;  // as Send: the call is ended for sure, Recv resumes or reports it
    context->TryCancel();
  }
  shared_cv_.notify_all();
}

std::vector<v1::SessionOutput> Batch::SharedRecv() {
  {
    std::unique_lock<std::mutex> lock(shared_mu_);
    shared_cv_.wait(lock, [&] { return in_flight_ > 0 || shared_stopped_; });
    if (shared_stopped_) throw Error(grpc::StatusCode::CANCELLED, "parsetier: the batch stream was stopped");
  }
  try {
    std::vector<v1::SessionOutput> outputs;
    if (ledger_) {
      outputs = RecvResuming();
    } else if (!ReadReply(outputs)) {
      Fail();
    }
    std::lock_guard<std::mutex> lock(shared_mu_);
    --in_flight_;
    return outputs;
  } catch (const Error&) {
    {
      std::lock_guard<std::mutex> lock(shared_mu_);
      shared_failed_ = true;
    }
    shared_cv_.notify_all();
    throw;
  }
}

void Batch::SharedStop() {
  {
    std::lock_guard<std::mutex> lock(shared_mu_);
    shared_stopped_ = true;
    context_->TryCancel();
  }
  shared_cv_.notify_all();
}

grpc::Status Batch::EndStream() {
  if (replaying_.joinable()) replaying_.join();  // its writes fail once the stream has ended
  stream_ended_ = true;
  return stream_->Finish();
}

v1::SessionInput& Batch::Entry(const std::string& key) {
  auto found = index_.find(key);
  if (found != index_.end()) return *pending_.mutable_sessions(found->second);
  index_.emplace(key, pending_.sessions_size());
  v1::SessionInput* entry = pending_.add_sessions();
  entry->set_key(key);
  return *entry;
}

void Batch::Open(const std::string& key, const OpenOptions& options) {
  v1::Open& open = *Entry(key).mutable_open() = options.ToProto();
  if (ledger_) open.set_resumable(true);  // a draining server hands the stream off
}

void Batch::Feed(const std::string& key, const std::vector<::parsetier::Step>& steps) {
  v1::SessionInput& entry = Entry(key);
  for (const ::parsetier::Step& ids : steps) entry.add_steps()->mutable_token_ids()->Add(ids.begin(), ids.end());
}

void Batch::FeedSteps(const std::string& key, const std::vector<v1::Step>& steps) {
  Entry(key).mutable_steps()->Add(steps.begin(), steps.end());
}

void Batch::Finish(const std::string& key, const FinishOptions& finish) {
  *Entry(key).mutable_finish() = finish.ToProto();
}

void Batch::Cancel(const std::string& key) {
  v1::SessionInput& entry = Entry(key);
  entry.Clear();
  entry.set_key(key);
  entry.set_cancel(true);
}

void Batch::Send() {
  if (closed_) throw Error(grpc::StatusCode::FAILED_PRECONDITION, "parsetier: the batch stream is closed");
  if (ledger_ && replaying_.joinable()) replaying_.join();
  std::vector<internal::SentEntry> sent;
  v1::ParseBatchRequest message = internal::WireRequest(pending_, sent);
  index_.clear();
  if (!write_failed_ && !stream_->Write(message)) {
    if (!ledger_) Fail();  // the stream has ended: its status says why
    // A break is Recv's to resume. The call is ended for sure: gRPC can fail a write on a call it
    // has transparently retried on a new connection, whose server would wait for it forever.
    write_failed_ = true;
    context_->TryCancel();
  }
  if (ledger_) ledger_->Sent(std::move(message), sent);  // kept as it went (written or not)
  sent_.push_back(std::move(sent));
  ++in_flight_;
}

bool Batch::ReadReply(std::vector<v1::SessionOutput>& outputs) {
  v1::ParseBatchResponse reply;
  grpc::Status broken;
  do {
    if (!stream_->Read(&reply)) return false;
  } while (!internal::JoinParts(reply, parts_, in_parts_, broken));  // a large reply comes in parts
  std::unique_lock<std::mutex> lock = SharedLock();
  if (broken.ok() && sent_.empty()) {
    broken = grpc::Status(grpc::StatusCode::INTERNAL, "parsetier: a ParseBatch reply to no message");
  }
  if (broken.ok()) outputs = internal::EntryOutputs(reply, sent_.front(), broken);
  if (!broken.ok()) {
    context_->TryCancel();
    if (lock.owns_lock()) lock.unlock();
    Fail(broken);
  }
  sent_.pop_front();
  return true;
}

std::vector<v1::SessionOutput> Batch::Recv() {
  if (closed_) throw Error(grpc::StatusCode::FAILED_PRECONDITION, "parsetier: the batch stream is closed");
  if (in_flight_ == 0) throw Error(grpc::StatusCode::FAILED_PRECONDITION, "parsetier: Recv with no message in flight");
  std::vector<v1::SessionOutput> outputs;
  if (ledger_) {
    outputs = RecvResuming();
  } else if (!ReadReply(outputs)) {
    Fail();
  }
  --in_flight_;
  return outputs;
}

std::vector<v1::SessionOutput> Batch::RecvResuming() {
  for (int attempt = 0;;) {
    {
      std::unique_lock<std::mutex> lock = SharedLock();
      if (std::optional<std::vector<v1::SessionOutput>> outputs = ledger_->Ready()) return std::move(*outputs);
    }
    grpc::Status status;
    std::vector<v1::SessionOutput> outputs;
    if (ReadReply(outputs)) {
      std::unique_lock<std::mutex> lock = SharedLock();
      grpc::Status unfit = ledger_->Received(outputs);
      const bool must_move = ledger_->must_move();
      if (lock.owns_lock()) lock.unlock();
      if (!unfit.ok()) {
        context_->TryCancel();
        Fail(unfit);
      }
      if (!must_move) {
        attempt = 0;  // progress renews the budget
        continue;
      }
      context_->TryCancel();
      HoldWrites();
      EndStream();
      status = grpc::Status(grpc::StatusCode::UNAVAILABLE,
                            "parsetier: a server refused to open a session (draining or overloaded)");
    } else {
      HoldWrites();  // no write starts on the ended stream (resume: until the next is started)
      status = EndStream();
      if (status.ok()) {
        status = grpc::Status(grpc::StatusCode::INTERNAL, "parsetier: ParseBatch stream ended before its reply");
        Fail(status);
      }
    }
    bool stopped = false;
    if (shared_) {
      std::lock_guard<std::mutex> lock(shared_mu_);
      stopped = shared_stopped_;
    }
    if (stopped) status = grpc::Status(grpc::StatusCode::CANCELLED, "parsetier: the batch stream was stopped");
    if (stopped || !internal::Retryable(status, *context_) || attempt >= policy_->attempts) Fail(status);
    std::this_thread::sleep_for(internal::Backoff(*policy_, attempt++));
    {
      std::unique_lock<std::mutex> lock = SharedLock();
      Start(ledger_->Replay());
    }
    ReleaseWrites();
  }
}

std::vector<v1::SessionOutput> Batch::Step() {
  Send();
  return Recv();
}

grpc::Status Batch::Close() {
  if (closed_) return status_;
  if (ledger_) {
    try {
      while (in_flight_ > 0) Recv();  // resumes if the stream breaks meanwhile
    } catch (const Error&) {
      return status_;  // what ended the batch
    }
    if (replaying_.joinable()) replaying_.join();
  }
  stream_->WritesDone();
  v1::ParseBatchResponse reply;
  while (stream_->Read(&reply)) {
  }
  in_flight_ = 0;
  sent_.clear();
  closed_ = true;
  status_ = EndStream();
  if (ledger_ && internal::Retryable(status_, *context_)) status_ = grpc::Status::OK;  // every reply came: a break loses nothing
  return status_;
}

void Batch::Fail(const grpc::Status& cause) {
  HoldWrites();  // on a shared batch: the sender's writes have stopped
  if (!stream_ended_) {
    v1::ParseBatchResponse ignored;
    while (stream_->Read(&ignored)) {
    }
    status_ = EndStream();
  }
  closed_ = true;
  if (!cause.ok()) status_ = cause;
  throw Error(status_.ok() ? grpc::Status(grpc::StatusCode::INTERNAL, "parsetier: ParseBatch stream ended early")
                           : status_);
}

int Batch::Resumes() const { return ledger_ ? ledger_->resumes() : 0; }

std::optional<Error> SessionError(const v1::SessionOutput& output) {
  if (!output.has_status()) return std::nullopt;
  return Error(static_cast<grpc::StatusCode>(output.status().code()), output.status().message());
}

std::unique_ptr<Batch> Client::OpenBatch(std::chrono::milliseconds timeout) {
  return std::unique_ptr<Batch>(new Batch(*stub_, Preparer(timeout), resume_));
}

}  // namespace parsetier
