// Resume on failover: sessions whose server dies (SIGKILL) or drains (SIGTERM) mid-stream complete
// on another server, every reply byte-identical to an uninterrupted run. tests/test_cpp_client.py
// starts the servers and runs this program with
//   PARSETIER_RESUME_SPARE=host:port                  the server sessions move to;
//   PARSETIER_RESUME_KILL=pid@host:port               killed with SIGKILL mid-stream;
//   PARSETIER_RESUME_DRAIN=pid@host:port              sent SIGTERM mid-stream (it hands off);
//   PARSETIER_RESUME_PROXY=host:port, PARSETIER_RESUME_PROXIED_KILL=pid@host:port
//                                                     nginx, and a backend of its to SIGKILL.
// Unless through nginx, the client's target lists the victim first, then the spare (pick_first),
// so every session starts on the victim and must move.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <future>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include <google/protobuf/util/message_differencer.h>

#include "parsetier/client.h"
#include "test_support.h"

namespace {

using parsetier_test::kImEnd;
using parsetier_test::kOutput;
using parsetier_test::kTools;
namespace v1 = parsetier::v1;

constexpr int kSessions = 8;
constexpr auto kStepPause = std::chrono::milliseconds(10);  // so every session is mid-stream at the kill

using parsetier_test::Env;
using parsetier_test::InsecureOptions;
using parsetier_test::ParseVictim;
using parsetier_test::SameReply;
using parsetier_test::Victim;

// How session i is driven: 1 to 3 steps per message, pull or push delivery.
struct Plan {
  std::string request_id;
  size_t steps_per_message;
  bool push;
};

Plan PlanFor(int i, const std::string& prefix) {
  return {prefix + std::to_string(i), static_cast<size_t>(1 + i % 3), i % 2 == 1};
}

struct Outcome {  // one session's replies, status and resumes
  std::vector<v1::ParseResponse> replies;
  grpc::Status status;
  int resumes = 0;
};

// Streams the recorded output as `plan` says; `sent` counts the ids out (for the kill's timing).
Outcome Stream(parsetier::Client& client, const Plan& plan, std::atomic<size_t>* sent) {
  parsetier::OpenOptions open;
  open.model = "qwen3";
  open.tools_json = kTools;
  open.request_id = plan.request_id;
  open.output = v1::OUTPUT_KIND_DELTAS_AND_EVENTS;
  open.timeout = std::chrono::seconds(120);
  Outcome run;
  std::promise<grpc::Status> done;
  parsetier::SessionCallbacks callbacks;
  if (plan.push) {
    callbacks.on_message = [&](const v1::ParseResponse& reply) { run.replies.push_back(reply); };
    callbacks.on_done = [&](const grpc::Status& status) { done.set_value(status); };
  }
  std::unique_ptr<parsetier::Session> session = client.Open(open, callbacks);
  std::thread reader;
  if (!plan.push) {
    reader = std::thread([&] {
      try {
        while (std::optional<v1::ParseResponse> reply = session->Next()) run.replies.push_back(*reply);
        done.set_value(grpc::Status::OK);
      } catch (const parsetier::Error& error) {
        done.set_value(grpc::Status(error.code(), error.message()));
      }
    });
  }
  for (size_t k = 0; k < kOutput.size(); k += plan.steps_per_message) {
    std::vector<parsetier::Step> steps;
    for (size_t j = k; j < std::min(kOutput.size(), k + plan.steps_per_message); ++j) steps.push_back({kOutput[j]});
    if (!session->SendSteps(steps)) break;  // the session ended: its status says why
    if (sent != nullptr) *sent += steps.size();
    std::this_thread::sleep_for(kStepPause);
  }
  session->Finish(parsetier::FinishOptions::StopToken(kImEnd));
  run.status = done.get_future().get();
  if (reader.joinable()) reader.join();
  EXPECT_EQ(session->Wait().error_code(), run.status.error_code());
  run.resumes = session->Resumes();
  return run;
}

// Runs kSessions sessions at once through `client`, signalling the victim once 40% of all ids are
// out; also one session with resume off straight to the victim, which must fail.
std::vector<Outcome> RunThroughFailure(parsetier::Client& client, const Victim& victim, int signal_number,
                                   const std::string& prefix, Outcome* unresumed) {
  std::atomic<size_t> sent{0};
  std::vector<std::future<Outcome>> sessions;
  for (int i = 0; i < kSessions; ++i) {
    sessions.push_back(
        std::async(std::launch::async, [&, i] { return Stream(client, PlanFor(i, prefix), &sent); }));
  }
  parsetier::Client direct(victim.target, InsecureOptions(std::nullopt));
  std::future<Outcome> plain =
      std::async(std::launch::async, [&] { return Stream(direct, {prefix + "plain", 1, false}, nullptr); });
  const size_t total = kSessions * kOutput.size();
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (sent < total * 4 / 10 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_LT(sent.load(), total) << "the sessions ended before the signal";
  EXPECT_EQ(kill(victim.pid, signal_number), 0) << "cannot signal " << victim.pid;
  std::vector<Outcome> runs;
  for (auto& session : sessions) runs.push_back(session.get());
  *unresumed = plain.get();
  return runs;
}

// Every session's replies as an uninterrupted run on the spare gives them; with `every_moves`, each
// session resumed at least once (else at least one did).
void ExpectIdentical(const std::vector<Outcome>& runs, const std::string& prefix, bool every_moves = true) {
  parsetier::Client spare(Env("PARSETIER_RESUME_SPARE"), InsecureOptions(std::nullopt));
  int resumes = 0;
  for (const Outcome& run : runs) resumes += run.resumes;
  std::cout << prefix << ": " << runs.size() << " sessions, " << resumes << " resumes\n";
  EXPECT_GE(resumes, 1) << "no session moved";
  for (int i = 0; i < kSessions; ++i) {
    Outcome want = Stream(spare, PlanFor(i, prefix), nullptr);
    ASSERT_TRUE(want.status.ok()) << want.status.error_message();
    const Outcome& got = runs[i];
    EXPECT_TRUE(got.status.ok()) << "session " << i << ": " << got.status.error_message();
    if (every_moves) EXPECT_GE(got.resumes, 1) << "session " << i << " never moved off the victim";
    ASSERT_EQ(got.replies.size(), want.replies.size()) << "session " << i;
    for (size_t k = 0; k < want.replies.size(); ++k) {
      EXPECT_TRUE(SameReply(got.replies[k], want.replies[k]))
          << "session " << i << " reply " << k << ":\n" << got.replies[k].DebugString() << "want:\n"
          << want.replies[k].DebugString();
    }
    ASSERT_FALSE(got.replies.empty());
    EXPECT_EQ(got.replies.back().final().finish_reason(), v1::FINISH_REASON_TOOL_CALLS);
  }
}

// Sessions through a client whose target lists `victim_env`'s server first, then the spare; the
// victim gets `signal_number` mid-stream. Returns the session with resume off.
Outcome ResumeThrough(const char* victim_env, int signal_number, const std::string& prefix) {
  Victim victim = ParseVictim(Env(victim_env));
  EXPECT_GT(victim.pid, 0);
  if (victim.pid <= 0) return {};
  parsetier::Client client("ipv4:" + victim.target + "," + Env("PARSETIER_RESUME_SPARE"),
                           InsecureOptions(parsetier::ResumePolicy{}));
  Outcome unresumed;
  std::vector<Outcome> runs = RunThroughFailure(client, victim, signal_number, prefix, &unresumed);
  ExpectIdentical(runs, prefix);
  return unresumed;
}

TEST(Resume, SigkillMidStream) {
  Outcome unresumed = ResumeThrough("PARSETIER_RESUME_KILL", SIGKILL, "cpp-resume-kill-");
  // With resume off, the same failure ends the session with UNAVAILABLE.
  EXPECT_EQ(unresumed.status.error_code(), grpc::StatusCode::UNAVAILABLE) << unresumed.status.error_message();
  EXPECT_EQ(unresumed.resumes, 0);
}

TEST(Resume, SigtermHandsOff) {
  Outcome unresumed = ResumeThrough("PARSETIER_RESUME_DRAIN", SIGTERM, "cpp-resume-drain-");
  // A session that cannot resume gets the drain's grace and completes on the draining server.
  EXPECT_TRUE(unresumed.status.ok()) << unresumed.status.error_message();
}

// Behind nginx (the deploy config; PARSETIER_RESUME_PROXY), sessions spread over two backends and
// one backend is SIGKILLed (PARSETIER_RESUME_PROXIED_KILL): the sessions on it resume through nginx
// on the other. The client pings every second, as deploy/README.md asks of
// clients behind nginx, which may hold a stream's reset until the connection shows activity.
TEST(Resume, SigkillBehindNginx) {
  Victim victim = ParseVictim(Env("PARSETIER_RESUME_PROXIED_KILL"));
  ASSERT_GT(victim.pid, 0);
  parsetier::Client client(Env("PARSETIER_RESUME_PROXY"), parsetier_test::BehindNginx());
  Outcome unresumed;
  std::vector<Outcome> runs = RunThroughFailure(client, victim, SIGKILL, "cpp-resume-nginx-", &unresumed);
  ExpectIdentical(runs, "cpp-resume-nginx-", false);
}

// Refused opens are retried within the budget, then the last status surfaces.
TEST(Resume, UnreachableOpenSpendsTheBudget) {
  parsetier::Client nowhere("127.0.0.1:1", InsecureOptions(parsetier_test::QuickBudget()));
  parsetier::OpenOptions open;
  open.model = "qwen3";
  open.timeout = std::chrono::seconds(30);
  try {
    nowhere.Open(open);
    ADD_FAILURE() << "Open reached nothing and did not throw";
  } catch (const parsetier::Error& error) {
    EXPECT_EQ(error.code(), grpc::StatusCode::UNAVAILABLE) << error.what();
  }
}

}  // namespace
