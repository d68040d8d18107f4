// Resume for the batch API: what a ParseBatch stream's sessions need to move, together, to a new
// stream. Free of I/O; Batch (batch.cc) drives it.
//
// The server resumes each session of a ParseBatch stream on its own (docs/service.md, "Resume"):
// its entry with Open carries its resume point, and its later entries are re-sent under the same
// key, one per message, as before. BatchLedger keeps what that takes for every live session (its
// history, token ids only, and its resume point) plus the steps whose replies the caller has not
// received yet. After a break, Replay gives the messages that open a new stream: every live
// session re-opened with its point and its history re-sent, entry j of every session in message
// j. The new stream's replies are sorted back into the caller's steps (each output carries its
// key, and every re-sent entry belongs to one step), so the caller receives one reply per step it
// sent, each with the outputs an uninterrupted stream gives, in the same order, exactly once. The
// same design as the Go (batch_resume.go) and Python (batch_resume.py) clients.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "parsetier/v1/parsetier.pb.h"
#include "resume.h"

namespace parsetier::internal {

class BatchLedger {
 public:
  BatchLedger();
  ~BatchLedger();

  // The caller's next step goes out on the current stream with these entries (as queued, before
  // packing).
  void Sent(const v1::ParseBatchRequest& step);
  // A whole reply of the current stream, its outputs in any order (packed ones as the
  // SessionOutputs they stand for): each goes to the step it answers. A session's output whose
  // sequence leaves a gap or repeats is an error (INTERNAL), returned; so is a reply to no message.
  grpc::Status Received(std::vector<v1::SessionOutput>& outputs);
  // The oldest undelivered step's outputs, in the order of its entries, once all have come.
  std::optional<std::vector<v1::SessionOutput>> Ready();
  // The messages that start a new stream: every live session re-opened at its resume point with
  // its history, and the unanswered entries of keys without one. The current stream is then the
  // new one (its replies go to Received).
  std::vector<v1::ParseBatchRequest> Replay();

  // Times the sessions moved to a new stream (counted at its first reply: attempts that failed
  // or whose first reply refused an open are not moves).
  int resumes() const { return resumes_; }
  // A reply refused an open with UNAVAILABLE (the server is draining or overloaded): not the
  // session's own error; the stream should move now, so another server opens it.
  bool must_move() const { return must_move_; }

 private:
  struct Session;
  // What one entry of a message on the current stream is: its session (null: an entry of no
  // session), the step it answers (0: delivered already), its index among the session's entries
  // (or among the step's orphans), and whether it opens the session.
  struct Carried {
    std::shared_ptr<Session> session;
    int step = 0;
    size_t index = 0;
    bool opens = false;
  };
  using CarriedMap = std::unordered_map<std::string, Carried>;
  // A step sent whose reply the caller has not received.
  struct Step {
    std::vector<std::string> keys;            // its entries' keys, in order
    std::shared_ptr<const CarriedMap> entries;  // as first sent
    std::vector<v1::SessionInput> orphans;    // entries for keys without a live session, re-sent as they are
    std::unordered_map<std::string, v1::SessionOutput> outputs;  // gathered so far
    size_t until = 0;                         // the reply on the current stream after which it is complete
  };

  int delivered() const { return step_ - static_cast<int>(steps_.size()); }
  void Ended(const std::shared_ptr<Session>& session);
  std::vector<std::shared_ptr<Session>> LiveInOrder() const;

  std::unordered_map<std::string, std::shared_ptr<Session>> live_;
  // Sessions whose key was opened again after their finish or cancel, but whose end has not been
  // received yet (they are replayed before the new one).
  std::vector<std::shared_ptr<Session>> retiring_;
  std::deque<Step> steps_;
  int step_ = 0;  // steps sent so far
  std::deque<std::shared_ptr<const CarriedMap>> carried_;  // per message on the current stream not answered yet
  size_t sent_ = 0;  // messages sent on the current stream
  size_t received_ = 0;
  int resumes_ = 0;
  bool moving_ = false;
  bool must_move_ = false;
};

}  // namespace parsetier::internal
