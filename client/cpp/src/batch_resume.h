// Resume for the batch API: the batch ledger of docs/service.md ("Resume"), as the Go client's
// (batch_resume.go). It mirrors the server as of the last reply (the live sessions, each with its
// Open, answered history, sequence and digest) and keeps the caller's steps not answered yet as
// the very messages that went on the wire (packed items included; an answered open moves into
// its session). A replay re-opens every live session in one message, then re-sends those steps
// as they were: each gets the reply it would have had. Free of I/O; Batch (batch.cc) drives it.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "parsetier/v1/parsetier.pb.h"
#include "packed.h"
#include "resume.h"

namespace parsetier::internal {

class BatchLedger {
 public:
  BatchLedger();
  ~BatchLedger();

  // The caller's next step went out on the current stream as `message` (WireRequest's, with its
  // `sent`), kept until answered.
  void Sent(v1::ParseBatchRequest&& message, const std::vector<SentEntry>& sent);
  // The whole reply to the current stream's oldest unanswered message, its outputs in the order
  // of that message's entries (packed ones as the SessionOutputs they stand for). A session's
  // output whose sequence leaves a gap or repeats is an error (INTERNAL), returned; so is a reply
  // to no message.
  grpc::Status Received(std::vector<v1::SessionOutput>& outputs);
  // The oldest undelivered step's outputs, in the order of its entries, once all have come.
  std::optional<std::vector<v1::SessionOutput>> Ready();
  // The messages that start a new stream (see above), in their wire form. The current stream is
  // then the new one.
  std::vector<WireMessage> Replay();

  // Times the sessions moved to a new stream (counted at its first reply: attempts that failed
  // or whose first reply refused an open are not moves).
  int resumes() const { return resumes_; }
  // A reply refused an open with UNAVAILABLE (the server is draining or overloaded): not the
  // session's own error; the stream should move now, so another server opens it.
  bool must_move() const { return must_move_; }

 private:
  struct Session {
    v1::Open open;
    History answered;
    uint64_t sequence = 0;
    uint32_t digest = 0;
  };
  // One entry of a step as it was sent: a SessionInput of the message, or a packed item (one
  // step of plain token ids).
  struct Entry {
    const std::string* key;
    v1::SessionInput* input;  // null for a packed item
    int index;                // input's index in the message's sessions
    const uint32_t* ids;      // a packed item's ids
    int count;
  };
  // A caller's step whose reply the caller has not received: the message as it went on the wire.
  struct Step {
    v1::ParseBatchRequest message;
    std::vector<bool> packed;  // per entry, in order, whether it went packed (empty: none did)
    std::vector<std::string> keys;  // the reply's keys, in the entries' order
    std::unordered_map<std::string, v1::SessionOutput> outputs;
    bool answered = false;  // the server answered it (its outputs are in)
    int held = 0;           // its opens refused with UNAVAILABLE, re-sent and not answered yet
    void Add(const std::string& key, v1::SessionOutput& output);
    // The entries, in their order, read in place.
    std::vector<Entry> Entries();
    // The message again, for a new stream (a copy: the step stays until answered).
    WireMessage Resent() const;
  };
  // One entry of a re-open message: a live session's re-open, or an open refused earlier.
  struct Reopened {
    std::string key;
    bool refused = false;
    std::shared_ptr<Step> step;  // the refused open's
    int entry = 0;               // its index in step->message.sessions()
  };
  // A message on the current stream not answered yet: a step, or a re-open.
  struct Message {
    std::shared_ptr<Step> step;
    std::vector<Reopened> reopen;
  };

  grpc::Status AnsweredStep(const std::shared_ptr<Step>& step, std::vector<v1::SessionOutput>& outputs);
  grpc::Status AnsweredReopen(std::vector<Reopened>& items, std::vector<v1::SessionOutput>& outputs);
  // Does to the mirror what `entry` did on the server, which answered it with `output` (or null):
  // an open that starts a session moves into it, text and logprob steps into its history.
  grpc::Status Apply(const Entry& entry, const v1::SessionOutput* output);

  std::map<std::string, Session> live_;  // ordered: a deterministic replay
  std::deque<std::shared_ptr<Step>> steps_;  // not delivered yet, oldest first
  std::deque<Message> wire_;
  std::vector<Reopened> refused_;  // opens refused with UNAVAILABLE, re-sent by the next re-open
  int resumes_ = 0;
  bool moving_ = false;
  bool must_move_ = false;
};

}  // namespace parsetier::internal
