// Multiplexed sessions: a client's sessions as entries of one shared ParseBatch stream
// (ClientOptions::multiplex, docs/clients.md "Multiplexed sessions").
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "parsetier/batch.h"
#include "parsetier/client.h"

namespace parsetier {
namespace internal {

using MuxClock = std::chrono::steady_clock;

struct MuxSession;

// One message of a session (or a Cancel) waiting for a message of the shared stream.
struct MuxEntry {
  std::shared_ptr<MuxSession> session;  // set once it is the session's entry in the next message
  std::optional<v1::Open> open;
  std::vector<Step> ids;
  std::vector<v1::Step> steps;
  std::optional<FinishOptions> finish;
  bool cancel = false;
  bool counts = true;  // a message of the session's own (a Cancel is not)
};

// Messages a session may have waiting behind its entry in the next message: past it, Send waits
// (back-pressure), and wakes once half of them have gone out.
constexpr size_t kMuxBacklog = 64;

// One multiplexed session. Every field is guarded by its Multiplexer's mutex.
struct MuxSession {
  std::shared_ptr<Multiplexer> mux;  // (the multiplexer holds live sessions only: no cycle once ended)
  std::string key;  // its key on the shared stream
  SessionCallbacks callbacks;
  std::optional<MuxClock::time_point> deadline;  // OpenOptions::timeout, counted here
  std::condition_variable cv;                    // its replies, its flushes, its end
  std::deque<v1::ParseResponse> replies;         // for Next
  std::optional<v1::Final> final;
  bool queued = false;           // has an entry in the next message
  std::deque<MuxEntry> backlog;  // its messages after that one, oldest first (Send waits when full)
  bool finish_recorded = false;  // Finish was sent: no more messages
  bool admitted = false;         // the server accepted its Open
  bool done = false;             // ended: replies drained, then status
  bool finished = false;         // ended, and its callbacks have all run (what Wait waits for)
  grpc::Status status;
  std::string wire;  // its error in the dialect, with a status of its own
  uint64_t messages = 0;  // its messages taken into the stream's messages, the Open included
  // Per message of the stream carrying one of its messages, not answered yet: that message's
  // number on the stream and the session's count (client_messages on its Parse stream).
  std::deque<std::pair<uint64_t, uint64_t>> counts;
  int resumes = 0;
};

// A client's shared stream: the sessions' queued entries, the thread that flushes them as one
// message of a shared Batch (which keeps the ledger and resumes on a break), and the thread that
// receives the replies, in order, and routes their outputs to the sessions. At most
// kMuxInFlight messages are unanswered: past it, flushes wait (and so do the senders).
class Multiplexer : public std::enable_shared_from_this<Multiplexer> {
 public:
  Multiplexer(Client& client, MultiplexOptions options);
  ~Multiplexer();
  // Ends the sessions still open (CANCELLED) and the stream, and joins the flushing thread: the
  // Client's destructor calls it, so nothing uses its stub afterwards.
  void Stop();

  // Registers a session, queues its Open and waits for the server's verdict (throws Error).
  std::shared_ptr<MuxSession> Open(v1::Open open, SessionCallbacks callbacks, std::chrono::milliseconds timeout);
  // One message of the session: ids steps (Batch::Feed), ready-made steps, or its Finish.
  bool Record(const std::shared_ptr<MuxSession>& s, std::vector<Step> ids, std::vector<v1::Step> steps,
              std::optional<FinishOptions> finish);
  std::optional<v1::ParseResponse> Next(const std::shared_ptr<MuxSession>& s);
  grpc::Status Wait(const std::shared_ptr<MuxSession>& s);
  void Cancel(const std::shared_ptr<MuxSession>& s);
  std::optional<v1::Final> Final(const std::shared_ptr<MuxSession>& s);
  int Resumes(const std::shared_ptr<MuxSession>& s);

 private:
  // A session's entry in the next message: exactly one of its messages, or a Cancel.
  using Entry = MuxEntry;
  using Later = std::vector<std::function<void()>>;  // callbacks to run without the lock

  void Run();
  void Receive(Batch* batch);  // the receiving thread of one shared Batch
  void Queue(Entry entry);  // with the lock held
  // Waits until `ready`, ending the session at its deadline.
  template <typename Ready>
  void Await(std::unique_lock<std::mutex>& lock, const std::shared_ptr<MuxSession>& s, Ready ready);
  // Ends s with `status` unless it has ended; `drop` sends a Cancel for it.
  void End(const std::shared_ptr<MuxSession>& s, const grpc::Status& status, Later& later, bool drop,
           std::string wire = "");
  void Route(std::vector<v1::SessionOutput>& outputs, uint64_t number,
             const std::vector<std::shared_ptr<MuxSession>>& opening, Later& later);
  void FailAll(const grpc::Status& status, Later& later);
  static void RunLater(std::unique_lock<std::mutex>& lock, Later& later);

  Client& client_;
  const MultiplexOptions options_;
  std::mutex mu_;
  std::condition_variable wake_;  // the flushing thread: something queued, a deadline, stopping
  std::unordered_map<std::string, std::shared_ptr<MuxSession>> sessions_;  // live, by key
  std::unordered_map<std::string, Entry> entries_;  // the next message's, by key
  std::deque<std::string> order_;                   // their keys, in the order queued
  MuxClock::time_point first_queued_;
  MuxClock::time_point last_sent_;  // when the last message went out
  uint64_t next_key_ = 0;
  uint64_t taken_ = 0;  // messages taken for the current stream
  bool stopping_ = false;
  // Per message in flight, oldest first: its number and the sessions whose Open it carries.
  struct Flight {
    uint64_t number;
    std::vector<std::shared_ptr<MuxSession>> opening;
  };
  std::deque<Flight> flights_;
  std::unique_ptr<Batch> batch_;  // made by the flushing thread at a flush that finds none alive
  bool batch_dead_ = false;       // it has failed: the next flush makes a new one
  std::thread receiver_;          // batch_'s receiving thread
  std::thread thread_;            // the flushing thread
};

}  // namespace internal
}  // namespace parsetier
