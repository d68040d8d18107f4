// Batch: one ParseBatch stream driven by one thread, one round trip per engine step.
//
// The synchronous stream API fits here: the caller sends one message per step and reads one
// reply per message, in order, and a refused session does not end the stream (its status is in
// its output), so nothing needs the callback API's view of the stream's headers.
#include "parsetier/batch.h"
#include "packed.h"
#include "parts.h"

namespace parsetier {

Batch::Batch(v1::ParserService::Stub& stub, const std::function<void(grpc::ClientContext&)>& prepare) {
  prepare(context_);
  stream_ = stub.ParseBatch(&context_);
}

Batch::~Batch() {
  if (!closed_) {
    context_.TryCancel();
    stream_->Finish();  // CANCELLED; releases the call
  }
}

v1::SessionInput& Batch::Entry(const std::string& key) {
  auto found = index_.find(key);
  if (found != index_.end()) return *pending_.mutable_sessions(found->second);
  index_.emplace(key, pending_.sessions_size());
  v1::SessionInput* entry = pending_.add_sessions();
  entry->set_key(key);
  return *entry;
}

void Batch::Open(const std::string& key, const OpenOptions& options) { *Entry(key).mutable_open() = options.ToProto(); }

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
  std::vector<internal::SentEntry> sent;
  v1::ParseBatchRequest message = internal::WireRequest(pending_, sent);
  index_.clear();
  if (!stream_->Write(message)) Fail();  // the stream has ended: its status says why
  sent_.push_back(std::move(sent));
  ++in_flight_;
}

std::vector<v1::SessionOutput> Batch::Recv() {
  if (closed_) throw Error(grpc::StatusCode::FAILED_PRECONDITION, "parsetier: the batch stream is closed");
  if (sent_.empty()) throw Error(grpc::StatusCode::FAILED_PRECONDITION, "parsetier: Recv with no message in flight");
  v1::ParseBatchResponse reply;
  grpc::Status broken;
  do {
    if (!stream_->Read(&reply)) Fail();
  } while (!internal::JoinParts(reply, parts_, in_parts_, broken));  // a large reply comes in parts
  std::vector<v1::SessionOutput> outputs;
  if (broken.ok()) outputs = internal::EntryOutputs(reply, sent_.front(), broken);
  if (!broken.ok()) {
    context_.TryCancel();
    Fail(broken);
  }
  sent_.pop_front();
  --in_flight_;
  return outputs;
}

std::vector<v1::SessionOutput> Batch::Step() {
  Send();
  return Recv();
}

grpc::Status Batch::Close() {
  if (closed_) return status_;
  stream_->WritesDone();
  v1::ParseBatchResponse reply;
  while (stream_->Read(&reply)) {
  }
  in_flight_ = 0;
  sent_.clear();
  closed_ = true;
  status_ = stream_->Finish();
  return status_;
}

void Batch::Fail(const grpc::Status& cause) {
  v1::ParseBatchResponse ignored;
  while (stream_->Read(&ignored)) {
  }
  closed_ = true;
  status_ = stream_->Finish();
  if (!cause.ok()) status_ = cause;
  throw Error(status_.ok() ? grpc::Status(grpc::StatusCode::INTERNAL, "parsetier: ParseBatch stream ended early")
                           : status_);
}

std::optional<Error> SessionError(const v1::SessionOutput& output) {
  if (!output.has_status()) return std::nullopt;
  return Error(static_cast<grpc::StatusCode>(output.status().code()), output.status().message());
}

std::unique_ptr<Batch> Client::OpenBatch(std::chrono::milliseconds timeout) {
  return std::unique_ptr<Batch>(new Batch(*stub_, [&](grpc::ClientContext& context) { Prepare(context, timeout); }));
}

}  // namespace parsetier
