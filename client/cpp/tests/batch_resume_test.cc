// The batch API resumes too: a ParseBatch stream's sessions survive the loss of their server,
// together, with every step's reply exactly as an uninterrupted run gives it. tests/test_cpp_client.py
// starts the servers and runs this program with
//   PARSETIER_BATCH_RESUME_SPARE=host:port      the server the sessions move to;
//   PARSETIER_BATCH_RESUME_KILL=pid@host:port   SIGKILLed mid-run;
//   PARSETIER_BATCH_RESUME_DRAIN=pid@host:port  sent SIGTERM mid-run (it hands the streams off);
//   PARSETIER_BATCH_RESUME_EDGE=pid@host:port   SIGKILLed with pipelined steps unanswered;
//   PARSETIER_BATCH_RESUME_REFUSE=pid@host:port sent SIGTERM while a batch stream on it is idle;
//   PARSETIER_BATCH_RESUME_PROXY=host:port, PARSETIER_BATCH_RESUME_PROXIED_KILL=pid@host:port
//                                               nginx, and a backend of its to SIGKILL.
// Unless through nginx, the resuming client's target lists the victim first, then the spare
// (pick_first), so every stream starts on the victim and must move. Each run's replies (step by step, session by
// session, field by field) are compared with an uninterrupted run of the same steps on the spare
// with resume off, so sequence numbers have no gap and no repeat.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <google/protobuf/util/message_differencer.h>

#include "parsetier/batch.h"
#include "test_support.h"

namespace {

using parsetier_test::Env;
using parsetier_test::InsecureOptions;
using parsetier_test::kImEnd;
using parsetier_test::kOutput;
using parsetier_test::kTools;
using parsetier_test::ParseVictim;
using parsetier_test::SameReply;
using parsetier_test::Victim;
namespace v1 = parsetier::v1;

constexpr int kSessions = 60;
constexpr int kStreams = 2;  // batch streams (one serving loop each) sharing the sessions
constexpr int kProxiedStreams = 4;  // behind nginx, which balances streams over its backends
constexpr auto kStepPause = std::chrono::milliseconds(10);  // so every stream is mid-way at the signal

using Reply = std::vector<v1::SessionOutput>;

// One session of a serving loop: opened at step `open_at` with its first token, then one token
// per step, finishing with its last; lengths, output kinds and finishes vary.
struct Planned {
  std::string key;
  size_t open_at;
  size_t length;
  bool events;
  bool stop_token;
};

// Stream `stream`'s share of the sessions, of `streams`.
std::vector<Planned> PlanFor(int stream, int streams = kStreams) {
  std::vector<Planned> plan;
  for (int i = stream; i < kSessions; i += streams) {
    plan.push_back({"s" + std::to_string(stream) + "-" + std::to_string(i), static_cast<size_t>(i % 5),
                    30 + static_cast<size_t>(i * 7) % (kOutput.size() - 29), i % 3 == 0, i % 2 == 0});
  }
  return plan;
}

size_t StepsOf(const std::vector<Planned>& plan) {
  size_t steps = 0;
  for (const Planned& p : plan) steps = std::max(steps, p.open_at + p.length);
  return steps;
}

parsetier::OpenOptions OpenFor(const std::string& key, bool events) {
  parsetier::OpenOptions open;
  open.model = "qwen3";
  open.tools_json = kTools;
  open.request_id = key;
  if (events) open.output = v1::OUTPUT_KIND_DELTAS_AND_EVENTS;
  return open;
}

void Queue(parsetier::Batch& batch, const std::vector<Planned>& plan, size_t k) {
  for (const Planned& p : plan) {
    if (k == p.open_at) batch.Open(p.key, OpenFor(p.key, p.events));
    if (k < p.open_at || k >= p.open_at + p.length) continue;
    batch.Feed(p.key, {{kOutput[k - p.open_at]}});
    if (k + 1 == p.open_at + p.length) {
      batch.Finish(p.key, p.stop_token ? parsetier::FinishOptions::StopToken(kImEnd) : parsetier::FinishOptions{});
    }
  }
}

struct Loop {  // one serving loop's replies, resumes and the error that ended it (if any)
  std::vector<Reply> replies;
  int resumes = 0;
  std::optional<parsetier::Error> error;
};

// One serving loop: a step, its reply, a short pause (`progress` counts the steps done), the next.
Loop Drive(parsetier::Client& client, const std::vector<Planned>& plan, std::atomic<size_t>* progress) {
  Loop run;
  std::unique_ptr<parsetier::Batch> batch = client.OpenBatch(std::chrono::seconds(120));
  try {
    for (size_t k = 0; k < StepsOf(plan); ++k) {
      Queue(*batch, plan, k);
      run.replies.push_back(batch->Step());
      if (progress != nullptr) {
        ++*progress;
        std::this_thread::sleep_for(kStepPause);
      }
    }
    grpc::Status closed = batch->Close();
    if (!closed.ok()) run.error = parsetier::Error(closed);
  } catch (const parsetier::Error& error) {
    run.error = error;
  }
  run.resumes = batch->Resumes();
  return run;
}

void ExpectSameReplies(const std::vector<Reply>& got, const std::vector<Reply>& want, const std::string& label) {
  ASSERT_EQ(got.size(), want.size()) << label << ": replies";
  for (size_t k = 0; k < want.size(); ++k) {
    ASSERT_EQ(got[k].size(), want[k].size()) << label << " step " << k << ": outputs";
    for (size_t i = 0; i < want[k].size(); ++i) {
      EXPECT_TRUE(SameReply(got[k][i], want[k][i]))
          << label << " step " << k << " output " << i << ":\n"
          << got[k][i].DebugString() << "want:\n"
          << want[k][i].DebugString();
    }
  }
}

int Finals(const std::vector<Loop>& runs) {
  int finals = 0;
  for (const Loop& run : runs) {
    for (const Reply& reply : run.replies) {
      for (const v1::SessionOutput& output : reply) finals += output.has_final();
    }
  }
  return finals;
}

// Every serving loop (of `streams`) uninterrupted on `target`, resume off.
std::vector<Loop> Reference(const std::string& target, int streams = kStreams) {
  parsetier::Client spare(target, InsecureOptions(std::nullopt));
  std::vector<Loop> runs;
  for (int s = 0; s < streams; ++s) runs.push_back(Drive(spare, PlanFor(s, streams), nullptr));
  for (const Loop& run : runs) EXPECT_FALSE(run.error) << run.error->what();
  EXPECT_EQ(Finals(runs), kSessions);
  return runs;
}

// The serving loops (of `streams`) through `client`; `victim` gets `signal_number` once 40% of
// all steps are done, and `alongside` runs meanwhile. Checks every reply against `want` and that
// every session ended with its final result. Returns the loops.
std::vector<Loop> RunThrough(parsetier::Client& client, const Victim& victim, int signal_number, int streams,
                             const std::vector<Loop>& want, const std::function<void()>& alongside) {
  std::atomic<size_t> progress{0};
  std::vector<std::future<Loop>> loops;
  size_t total = 0;
  for (int s = 0; s < streams; ++s) {
    total += StepsOf(PlanFor(s, streams));
    loops.push_back(
        std::async(std::launch::async, [&, s] { return Drive(client, PlanFor(s, streams), &progress); }));
  }
  std::future<void> side = std::async(std::launch::async, alongside);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (progress < total * 4 / 10 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const size_t signalled_at = progress;
  EXPECT_LT(signalled_at, total) << "the loops ended before the signal";
  EXPECT_EQ(kill(victim.pid, signal_number), 0) << "cannot signal " << victim.pid;
  std::vector<Loop> got;
  for (auto& loop : loops) got.push_back(loop.get());
  side.get();
  std::cout << victim.target << ": " << kSessions << " sessions on " << streams << " streams, signal " << signal_number
            << " at " << signalled_at << "/" << total << " steps; resumes per stream";
  for (const Loop& run : got) std::cout << " " << run.resumes;
  std::cout << "\n";
  for (int s = 0; s < streams; ++s) {
    EXPECT_FALSE(got[s].error) << "stream " << s << ": " << got[s].error->what();
    ExpectSameReplies(got[s].replies, want[s].replies, "stream " + std::to_string(s));
  }
  EXPECT_EQ(Finals(got), kSessions);
  return got;
}

// The serving loops through a resuming client whose target lists the victim (`victim_env`)
// first, then the spare, while `alongside` runs (a loop straight to the victim with resume off):
// every reply as the uninterrupted run on the spare gives it (returned), each stream moved once.
std::vector<Loop> ResumeThrough(const char* victim_env, int signal_number, const std::function<void()>& alongside) {
  std::vector<Loop> want = Reference(Env("PARSETIER_BATCH_RESUME_SPARE"));
  Victim victim = ParseVictim(Env(victim_env));
  EXPECT_GT(victim.pid, 0);
  if (victim.pid <= 0) return want;
  parsetier::Client client("ipv4:" + victim.target + "," + Env("PARSETIER_BATCH_RESUME_SPARE"),
                           InsecureOptions(parsetier::ResumePolicy{}));
  std::vector<Loop> got = RunThrough(client, victim, signal_number, kStreams, want, alongside);
  for (int s = 0; s < kStreams; ++s) EXPECT_EQ(got[s].resumes, 1) << "stream " << s;
  return want;
}

// A SIGKILL mid-run: every stream moves to the spare, every reply as uninterrupted. A loop with
// resume off straight to the victim gets the break as an Error (UNAVAILABLE), before its end.
TEST(BatchResume, SigkillMidRun) {
  Victim victim = ParseVictim(Env("PARSETIER_BATCH_RESUME_KILL"));
  Loop unresumed;
  ResumeThrough("PARSETIER_BATCH_RESUME_KILL", SIGKILL, [&] {
    parsetier::Client direct(victim.target, InsecureOptions(std::nullopt));
    std::atomic<size_t> steps{0};
    unresumed = Drive(direct, PlanFor(0), &steps);
  });
  ASSERT_TRUE(unresumed.error) << "resume off: the kill did not end the stream";
  EXPECT_EQ(unresumed.error->code(), grpc::StatusCode::UNAVAILABLE) << unresumed.error->what();
  EXPECT_LT(unresumed.replies.size(), StepsOf(PlanFor(0)));
  EXPECT_EQ(unresumed.resumes, 0);
}

// A SIGTERM mid-run: the draining server hands the resuming streams off, and they complete on the
// spare as uninterrupted. A loop with resume off on it is not handed off: it gets the drain's
// grace and completes there, as uninterrupted too.
TEST(BatchResume, SigtermHandsOff) {
  Victim victim = ParseVictim(Env("PARSETIER_BATCH_RESUME_DRAIN"));
  Loop unresumed;
  std::vector<Loop> want = ResumeThrough("PARSETIER_BATCH_RESUME_DRAIN", SIGTERM, [&] {
    parsetier::Client direct(victim.target, InsecureOptions(std::nullopt));
    std::atomic<size_t> steps{0};
    unresumed = Drive(direct, PlanFor(0), &steps);
  });
  EXPECT_FALSE(unresumed.error) << unresumed.error->what();
  ExpectSameReplies(unresumed.replies, want[0].replies, "resume off, draining");
}

// Behind nginx (the deploy config), the streams spread over two backends and one is SIGKILLed:
// the streams on it reconnect through nginx and resume on the other, every reply as
// uninterrupted. The client pings every second, as deploy/README.md asks of clients behind nginx.
TEST(BatchResume, SigkillBehindNginx) {
  Victim victim = ParseVictim(Env("PARSETIER_BATCH_RESUME_PROXIED_KILL"));
  ASSERT_GT(victim.pid, 0);
  std::vector<Loop> want = Reference(Env("PARSETIER_BATCH_RESUME_SPARE"), kProxiedStreams);
  parsetier::Client client(Env("PARSETIER_BATCH_RESUME_PROXY"), parsetier_test::BehindNginx());
  std::vector<Loop> got = RunThrough(client, victim, SIGKILL, kProxiedStreams, want, [] {});
  int resumes = 0;
  for (const Loop& run : got) resumes += run.resumes;
  EXPECT_GE(resumes, 1) << "no stream moved";
  EXPECT_LT(resumes, kProxiedStreams) << "nginx put every stream on the victim";
}

// Steps sent ahead, full of what a resume must replay faithfully: a session that finishes, one
// cancelled, a key opened again after its session ended, entries for a key with no session, a
// bad token id (the session's own error) and entries sent to that session before its error was
// received (a step, then an open, which the server takes for a new session), an empty step. The
// server answers steps 8-12 (finish, cancel, the bad id), is then stopped (SIGSTOP) so that it
// answers nothing of steps 13-23 (the entries after the error, the reopened keys, a finish and a
// cancel), and killed once the replies to 8-12 are received: every reply is as an uninterrupted
// run gives it. `victim` is null for that run.
std::vector<Reply> Pipelined(parsetier::Client& client, const Victim* victim, int* resumes) {
  const std::vector<std::pair<std::string, size_t>> fed = {  // each session's last step of ids
      {"keep", 23}, {"done", 11}, {"gone", 11}, {"bad", 11}, {"late", 15}, {"drop", 16}};
  auto queue = [&](parsetier::Batch& batch, size_t k) {
    for (const auto& [key, last] : fed) {
      if (k == 0) batch.Open(key, OpenFor("cpp-edge-" + key, false));
      if (k <= last && k != 19) batch.Feed(key, {{kOutput[k % kOutput.size()]}});  // step 19 is empty
    }
    if (k == 12) {
      batch.Finish("done");
      batch.Cancel("gone");
      batch.Feed("bad", {{1000000000}});  // outside the vocabulary: that session's error
      batch.Feed("nobody", {{kOutput[0]}});  // no such session: answered with a status
    }
    if (k == 13) batch.Feed("bad", {{kOutput[0]}});  // sent before bad's error is received
    if (k == 15) batch.Open("bad", OpenFor("cpp-edge-bad-again", false));  // a new session, as it turns out
    if (k >= 15 && k <= 17) batch.Feed("bad", {{kOutput[k]}});
    if (k == 14) {
      batch.Open("done", OpenFor("cpp-edge-done-again", false));  // the key is free again
      batch.Cancel("nobody");  // cancels nothing
    }
    if (k >= 14 && k != 19) batch.Feed("done", {{kOutput[k]}});
    if (k == 16) batch.Finish("late");
    if (k == 17) batch.Cancel("drop");
  };
  std::vector<Reply> replies;
  std::unique_ptr<parsetier::Batch> batch = client.OpenBatch(std::chrono::seconds(60));
  for (size_t k = 0; k < 8; ++k) {
    queue(*batch, k);
    replies.push_back(batch->Step());
  }
  for (size_t k = 8; k < 13; ++k) {
    queue(*batch, k);
    batch->Send();
  }
  if (victim != nullptr) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // it answers steps 8-12 meanwhile
    EXPECT_EQ(kill(victim->pid, SIGSTOP), 0) << "cannot stop " << victim->pid;
  }
  for (size_t k = 13; k < 24; ++k) {  // unanswered until the kill
    queue(*batch, k);
    batch->Send();
  }
  // Should the stopped server not have answered 8-12, the watchdog kills it: a resume then
  // replays those steps too (and this run checks less than it means to, but nothing wrong).
  std::atomic<bool> received{false};
  std::thread watchdog;
  if (victim != nullptr) {
    watchdog = std::thread([&] {
      for (int i = 0; i < 1000 && !received; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      if (!received) kill(victim->pid, SIGKILL);
    });
  }
  for (size_t k = 8; k < 13; ++k) replies.push_back(batch->Recv());
  if (victim != nullptr) {
    received = true;
    watchdog.join();
    kill(victim->pid, SIGKILL);
  }
  while (batch->in_flight() > 0) replies.push_back(batch->Recv());
  batch->Finish("keep");
  batch->Finish("done");
  batch->Finish("bad");
  replies.push_back(batch->Step());
  EXPECT_TRUE(batch->Close().ok());
  *resumes = batch->Resumes();
  return replies;
}

TEST(BatchResume, PipelinedEdgeCasesResumeExactly) {
  Victim victim = ParseVictim(Env("PARSETIER_BATCH_RESUME_EDGE"));
  ASSERT_GT(victim.pid, 0);
  parsetier::Client spare(Env("PARSETIER_BATCH_RESUME_SPARE"), InsecureOptions(std::nullopt));
  int resumes = 0;
  std::vector<Reply> want = Pipelined(spare, nullptr, &resumes);
  EXPECT_EQ(resumes, 0);
  parsetier::Client client("ipv4:" + victim.target + "," + Env("PARSETIER_BATCH_RESUME_SPARE"),
                           InsecureOptions(parsetier::ResumePolicy{}));
  std::vector<Reply> got = Pipelined(client, &victim, &resumes);
  EXPECT_EQ(resumes, 1);
  ExpectSameReplies(got, want, "pipelined");
  std::map<std::string, grpc::StatusCode> codes;  // each key's first status
  for (const Reply& reply : got) {
    for (const v1::SessionOutput& output : reply) {
      std::optional<parsetier::Error> error = parsetier::SessionError(output);
      if (error) codes.emplace(output.key(), error->code());
    }
  }
  EXPECT_EQ(codes["bad"], grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(codes["gone"], grpc::StatusCode::CANCELLED);
  EXPECT_EQ(codes["drop"], grpc::StatusCode::CANCELLED);
  EXPECT_NE(codes.count("nobody"), 0u);
  EXPECT_EQ(codes.count("keep"), 0u);
  EXPECT_EQ(codes.count("late"), 0u);
  // The entry sent to bad after its error has its status, as on the uninterrupted stream.
  ASSERT_GT(got.size(), 13u);
  auto bad = [](const v1::SessionOutput& output) { return output.key() == "bad"; };
  auto after = std::find_if(got[13].begin(), got[13].end(), bad);
  ASSERT_NE(after, got[13].end()) << "no reply to bad's entry after its error";
  EXPECT_TRUE(after->has_status());
  // The open sent after it was a new session, which the last step finished.
  auto last = std::find_if(got.back().begin(), got.back().end(), bad);
  ASSERT_NE(last, got.back().end());
  EXPECT_TRUE(last->has_final()) << last->DebugString();
}

// A batch that reaches no server retries within the budget, then the last status surfaces.
TEST(BatchResume, UnreachableSpendsTheBudget) {
  parsetier::Client nowhere("127.0.0.1:1", InsecureOptions(parsetier_test::QuickBudget()));
  std::unique_ptr<parsetier::Batch> batch = nowhere.OpenBatch(std::chrono::seconds(30));
  batch->Open("s", OpenFor("cpp-nowhere", false));
  try {
    batch->Step();
    ADD_FAILURE() << "Step reached nothing and did not throw";
  } catch (const parsetier::Error& error) {
    EXPECT_EQ(error.code(), grpc::StatusCode::UNAVAILABLE) << error.what();
  }
  EXPECT_EQ(batch->Resumes(), 0);
}

// Two sessions one after the other, each one step (open, all its ids, finish) of its own.
std::vector<Reply> OneAfterTheOther(parsetier::Batch& batch, const std::function<void()>& between) {
  std::vector<Reply> replies;
  std::vector<parsetier::Step> steps;
  for (uint32_t id : kOutput) steps.push_back({id});
  for (const std::string key : {"first", "second"}) {
    batch.Open(key, OpenFor("cpp-refused-" + key, false));
    batch.Feed(key, steps);
    batch.Finish(key, parsetier::FinishOptions::StopToken(kImEnd));
    replies.push_back(batch.Step());
    if (key == "first") between();
  }
  return replies;
}

// A draining server leaves an idle batch stream (no session open) alone and refuses an open on it
// with UNAVAILABLE: not the session's error but a reason to move, so the stream moves and the
// session opens elsewhere; the reply is as on the spare directly. A session with resume off keeps
// the victim draining (it is not handed off) for half a second more, then completes there; until
// the victim exits, pick_first keeps its connection, so the moves land on it and are refused too
// (within the retry budget), then on the spare.
TEST(BatchResume, RefusedOpenMovesTheStream) {
  Victim victim = ParseVictim(Env("PARSETIER_BATCH_RESUME_REFUSE"));
  ASSERT_GT(victim.pid, 0);
  parsetier::Client spare(Env("PARSETIER_BATCH_RESUME_SPARE"), InsecureOptions(std::nullopt));
  std::vector<Reply> want = OneAfterTheOther(*spare.OpenBatch(std::chrono::seconds(60)), [] {});
  parsetier::Client direct(victim.target, InsecureOptions(std::nullopt));
  parsetier::OpenOptions plain = OpenFor("cpp-refused-keep", false);
  std::unique_ptr<parsetier::Session> keep = direct.Open(plain);
  ASSERT_TRUE(keep->Send({kOutput[0]}));
  parsetier::Client client("ipv4:" + victim.target + "," + Env("PARSETIER_BATCH_RESUME_SPARE"),
                           InsecureOptions(parsetier::ResumePolicy{}));
  std::unique_ptr<parsetier::Batch> batch = client.OpenBatch(std::chrono::seconds(60));
  std::thread finisher;
  std::vector<Reply> got = OneAfterTheOther(*batch, [&] {
    EXPECT_EQ(kill(victim.pid, SIGTERM), 0) << "cannot signal " << victim.pid;
    // Draining once it refuses a new session (UNAVAILABLE), which it does within a few seconds.
    for (int i = 0; i < 500; ++i) {
      try {
        direct.Open(plain)->Cancel();
      } catch (const parsetier::Error& error) {
        EXPECT_EQ(error.code(), grpc::StatusCode::UNAVAILABLE) << error.what();
        finisher = std::thread([&] {
          std::this_thread::sleep_for(std::chrono::milliseconds(500));
          keep->Finish(parsetier::FinishOptions::StopToken(kImEnd));
        });
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ADD_FAILURE() << "the victim did not start draining";
  });
  if (finisher.joinable()) finisher.join();
  EXPECT_TRUE(keep->Wait().ok()) << keep->Wait().error_message();
  EXPECT_EQ(batch->Resumes(), 1);  // refused attempts are not moves
  ASSERT_EQ(got.size(), want.size());
  ExpectSameReplies(got, want, "refused open");
  EXPECT_TRUE(batch->Close().ok());
}

}  // namespace
