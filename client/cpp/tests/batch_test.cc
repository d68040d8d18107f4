// The C++ batch API (ParseBatch) against a real server (PARSETIER_SERVER), as the Go client's
// batch tests: many sessions one token per step, session errors, the stream's own errors, and
// the packed wire form (a client interceptor counts what the ParseBatch messages carried, so the
// tests know the packed path is the one that ran).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <google/protobuf/util/message_differencer.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/support/client_interceptor.h>

#include "parsetier/batch.h"
#include "test_support.h"

namespace {

using google::protobuf::util::MessageDifferencer;
namespace v1 = parsetier::v1;

using parsetier_test::kImEnd;
using parsetier_test::kOutput;
using parsetier_test::kTools;
using parsetier_test::SharedClient;

parsetier::OpenOptions Qwen3(const std::string& request_id) {
  parsetier::OpenOptions open;
  open.model = "qwen3";
  open.tools_json = kTools;
  open.request_id = request_id;
  return open;
}

grpc::StatusCode CodeOf(const v1::SessionOutput& output) {
  std::optional<parsetier::Error> error = parsetier::SessionError(output);
  return error ? error->code() : grpc::StatusCode::OK;
}

// What the ParseBatch streams of a client carried on the wire.
struct WireTally {
  std::atomic<int> packed_sent{0};    // packed items sent
  std::atomic<int> entries_sent{0};   // SessionInputs sent
  std::atomic<int> counted_sent{0};   // messages whose packed items carried token_counts
  std::atomic<int> packed_recv{0};    // packed outputs received
  std::atomic<int> sessions_recv{0};  // SessionOutputs received
};

class WireCounter : public grpc::experimental::Interceptor {
 public:
  explicit WireCounter(WireTally& tally) : tally_(tally) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    using grpc::experimental::InterceptionHookPoints;
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_MESSAGE)) {
      if (auto* request = static_cast<const v1::ParseBatchRequest*>(methods->GetSendMessage())) {
        tally_.packed_sent += request->packed().keys_size();
        tally_.entries_sent += request->sessions_size();
        if (request->packed().token_counts_size() > 0) ++tally_.counted_sent;
      }
    }
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_MESSAGE)) {
      if (auto* reply = static_cast<const v1::ParseBatchResponse*>(methods->GetRecvMessage())) {
        tally_.packed_recv += reply->packed().keys_size();
        tally_.sessions_recv += reply->sessions_size();
      }
    }
    methods->Proceed();
  }

 private:
  WireTally& tally_;
};

class WireCounterFactory : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit WireCounterFactory(WireTally& tally) : tally_(tally) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(grpc::experimental::ClientRpcInfo* info) override {
    if (std::string(info->method()) != "/parsetier.v1.ParserService/ParseBatch") return nullptr;
    return new WireCounter(tally_);
  }

 private:
  WireTally& tally_;
};

// A client of the test server whose ParseBatch streams `tally` counts.
parsetier::Client CountedClient(WireTally& tally) {
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> factories;
  factories.push_back(std::make_unique<WireCounterFactory>(tally));
  const char* target = std::getenv("PARSETIER_SERVER");
  return parsetier::Client(grpc::experimental::CreateCustomChannelWithInterceptors(
      target ? target : "", grpc::InsecureChannelCredentials(), grpc::ChannelArguments(), std::move(factories)));
}

// A Parse stream's deltas and final result for `messages`, each a message of steps.
parsetier::StreamResult ParseMessages(parsetier::Client& client, const parsetier::OpenOptions& open,
                                      const std::vector<std::vector<parsetier::Step>>& messages,
                                      const parsetier::FinishOptions& finish) {
  std::unique_ptr<parsetier::Session> session = client.Open(open);
  std::thread sender([&] {
    for (const auto& steps : messages) session->SendSteps(steps);
    session->Finish(finish);
  });
  parsetier::StreamResult result;
  try {
    while (auto message = session->Next()) {
      result.deltas.insert(result.deltas.end(), message->deltas().begin(), message->deltas().end());
    }
  } catch (...) {
    sender.join();
    throw;
  }
  sender.join();
  result.final = *session->Final();
  return result;
}

class BatchLive : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_NE(std::getenv("PARSETIER_SERVER"), nullptr) << "PARSETIER_SERVER is not set"; }
};

// Several sessions, one token each per engine step: each gets exactly what a Parse stream fed the
// same tokens gives (the same request id gives the same tool call ids), and the steps between
// the open and the finish went packed.
TEST_F(BatchLive, ManySessionsOneTokenPerStep) {
  constexpr int kSessions = 6;
  WireTally wire;
  parsetier::Client counted = CountedClient(wire);
  auto batch = counted.OpenBatch(std::chrono::seconds(60));
  std::map<std::string, std::vector<v1::Delta>> deltas;
  std::map<std::string, v1::Final> finals;
  auto collect = [&](const std::vector<v1::SessionOutput>& outputs) {
    for (const auto& output : outputs) {
      EXPECT_EQ(CodeOf(output), grpc::StatusCode::OK) << output.key() << ": " << output.status().message();
      deltas[output.key()].insert(deltas[output.key()].end(), output.deltas().begin(), output.deltas().end());
      if (output.has_final()) finals[output.key()] = output.final();
    }
  };
  for (size_t step = 0; step < kOutput.size(); ++step) {
    for (int i = 0; i < kSessions; ++i) {
      std::string key = "s" + std::to_string(i);
      if (step == 0) batch->Open(key, Qwen3("cpp-batch-" + std::to_string(i)));
      batch->Feed(key, {{kOutput[step]}});
      if (step + 1 == kOutput.size()) batch->Finish(key, parsetier::FinishOptions::StopToken(kImEnd));
    }
    collect(batch->Step());
  }
  EXPECT_EQ(batch->in_flight(), 0);
  EXPECT_TRUE(batch->Close().ok());
  // Every step but the first (with the open) and the last (with the finish) went packed, one id
  // each (no token_counts), and the plain text deltas came back packed.
  EXPECT_EQ(wire.packed_sent, kSessions * static_cast<int>(kOutput.size() - 2));
  EXPECT_EQ(wire.entries_sent, 2 * kSessions);
  EXPECT_EQ(wire.counted_sent, 0);
  EXPECT_GT(wire.packed_recv, 0);
  EXPECT_GT(wire.sessions_recv, 0);
  ASSERT_EQ(finals.size(), static_cast<size_t>(kSessions));
  for (int i = 0; i < kSessions; ++i) {
    std::string key = "s" + std::to_string(i);
    parsetier::StreamResult stream = SharedClient().ParseStream(
        Qwen3("cpp-batch-" + std::to_string(i)), [] {
          std::vector<parsetier::Step> steps;
          for (uint32_t id : kOutput) steps.push_back({id});
          return steps;
        }(), parsetier::FinishOptions::StopToken(kImEnd));
    EXPECT_TRUE(MessageDifferencer::Equals(finals[key], stream.final)) << key << "\n" << finals[key].DebugString();
    EXPECT_EQ(finals[key].finish_reason(), v1::FINISH_REASON_TOOL_CALLS);
    EXPECT_EQ(finals[key].message().tool_calls_size(), 2);
    ASSERT_EQ(deltas[key].size(), stream.deltas.size()) << key;
    for (size_t d = 0; d < stream.deltas.size(); ++d) {
      EXPECT_TRUE(MessageDifferencer::Equals(deltas[key][d], stream.deltas[d])) << key << " delta " << d;
    }
  }
}

// A session's error is in its output, the stream and the other sessions go on, and the key is
// free again once its session ended.
TEST_F(BatchLive, SessionErrors) {
  auto batch = SharedClient().OpenBatch(std::chrono::seconds(60));
  parsetier::OpenOptions unknown = Qwen3("");
  unknown.model = "no-such-model";
  batch->Open("good", Qwen3(""));
  batch->Feed("good", {{kOutput[0]}, {kOutput[1]}});
  batch->Open("bad", unknown);
  batch->Open("oov", Qwen3(""));
  batch->Feed("oov", {{10000000}});
  batch->Open("dropped", Qwen3(""));
  std::map<std::string, grpc::StatusCode> codes;
  for (const auto& output : batch->Step()) codes[output.key()] = CodeOf(output);
  EXPECT_EQ(codes["bad"], grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(codes["oov"], grpc::StatusCode::INVALID_ARGUMENT);

  batch->Cancel("dropped");
  batch->Open("bad", Qwen3(""));  // its key is free again
  batch->Feed("good", {{kOutput[2]}, {kOutput[3]}, {kOutput[4]}});
  codes.clear();
  for (const auto& output : batch->Step()) codes[output.key()] = CodeOf(output);
  EXPECT_EQ(codes["dropped"], grpc::StatusCode::CANCELLED);

  batch->Finish("good");
  batch->Finish("bad");
  bool good_final = false;
  for (const auto& output : batch->Step()) {
    EXPECT_EQ(CodeOf(output), grpc::StatusCode::OK) << output.key();
    if (output.key() == "good") good_final = output.has_final() && output.final().message().reasoning() == "Need weather.";
  }
  EXPECT_TRUE(good_final);
  EXPECT_TRUE(batch->Close().ok());
}

// One step mixes every kind of entry: opens (with their first tokens), one token id (packed, no
// token_counts needed), three ids in one step and empty keep-alive steps (packed, with
// token_counts), two steps in one entry (sent as it is), finishes, a cancel and a step of a
// session never opened (a packed item's error, FAILED_PRECONDITION). Every session's deltas and
// final equal a Parse stream's fed the same messages, and each step's outputs come in the order
// of its entries.
TEST_F(BatchLive, PackedAndUnpackedEntriesInOneStep) {
  constexpr uint32_t kHello = 9707;  // "Hello" in Qwen3
  using Messages = std::vector<std::vector<parsetier::Step>>;
  struct Plan {
    std::string key;
    int start;
    Messages messages;
  };
  const std::vector<uint32_t>& ids = kOutput;
  std::vector<Plan> plans;
  for (int i = 0; i < 12; ++i) {
    Messages messages;
    switch (i % 4) {
      case 0:  // one id per step
        for (uint32_t id : ids) messages.push_back({{id}});
        break;
      case 1:  // three ids in one step
        for (size_t k = 0; k < ids.size(); k += 3) {
          messages.push_back({parsetier::Step(ids.begin() + k, ids.begin() + std::min(k + 3, ids.size()))});
        }
        break;
      case 2:  // two steps in one entry
        for (size_t k = 0; k + 1 < ids.size(); k += 2) messages.push_back({{ids[k]}, {ids[k + 1]}});
        messages.push_back({{ids.back()}});
        break;
      case 3:  // a keep-alive (an empty step) before every fifth id
        for (size_t k = 0; k < ids.size(); ++k) {
          if (k % 5 == 0) messages.push_back({parsetier::Step{}});
          messages.push_back({{ids[k]}});
        }
        break;
    }
    plans.push_back({"mix-" + std::to_string(i), i * 2, std::move(messages)});
  }
  parsetier::OpenOptions open = Qwen3("cpp-batch-mix");
  const parsetier::FinishOptions finish = parsetier::FinishOptions::StopToken(kImEnd);
  WireTally wire;
  parsetier::Client counted = CountedClient(wire);
  auto batch = counted.OpenBatch(std::chrono::seconds(120));
  std::map<std::string, std::vector<v1::Delta>> deltas;
  std::map<std::string, v1::Final> finals;
  int last = 0;
  for (const Plan& plan : plans) last = std::max(last, plan.start + static_cast<int>(plan.messages.size()));
  bool ghost_refused = false;
  bool dropped_cancelled = false;
  for (int step = 0; step <= last; ++step) {
    std::vector<std::string> order;  // the keys in the order their entries were queued
    auto queue = [&](const std::string& key) {
      if (std::find(order.begin(), order.end(), key) == order.end()) order.push_back(key);
    };
    for (size_t n = 0; n < plans.size(); ++n) {
      const Plan& plan = plans[n];
      if (n == 5 && step == 7) {
        batch->Feed("ghost", {{kHello}});  // no such session: its error, between the others
        queue("ghost");
      }
      if (n == 3 && step < 12) {
        if (step == 0) batch->Open("dropped", Qwen3(""));
        if (step < 11) {
          batch->Feed("dropped", {{kHello}});
        } else {
          batch->Cancel("dropped");
        }
        queue("dropped");
      }
      const int m = step - plan.start;
      if (m < 0 || m > static_cast<int>(plan.messages.size())) continue;
      if (m == 0) batch->Open(plan.key, open);
      if (m < static_cast<int>(plan.messages.size())) {
        batch->Feed(plan.key, plan.messages[m]);
      } else {
        batch->Finish(plan.key, finish);
      }
      queue(plan.key);
    }
    int at = -1;
    for (const v1::SessionOutput& output : batch->Step()) {
      const std::string& key = output.key();
      const int i = static_cast<int>(std::find(order.begin(), order.end(), key) - order.begin());
      ASSERT_LT(i, static_cast<int>(order.size())) << "step " << step << ": an output of " << key << ", not queued";
      ASSERT_GT(i, at) << "step " << step << ": the output of " << key << " is out of the entries' order";
      at = i;
      const grpc::StatusCode code = CodeOf(output);
      if (key == "ghost") {
        EXPECT_EQ(code, grpc::StatusCode::FAILED_PRECONDITION) << output.status().message();
        ghost_refused = true;
      } else if (key == "dropped" && code != grpc::StatusCode::OK) {
        EXPECT_EQ(code, grpc::StatusCode::CANCELLED) << output.status().message();
        EXPECT_EQ(step, 11);
        dropped_cancelled = true;
      } else {
        ASSERT_EQ(code, grpc::StatusCode::OK) << "step " << step << ": " << key << ": " << output.status().message();
      }
      deltas[key].insert(deltas[key].end(), output.deltas().begin(), output.deltas().end());
      if (output.has_final()) finals[key] = output.final();
    }
  }
  EXPECT_TRUE(batch->Close().ok());
  EXPECT_TRUE(ghost_refused);
  EXPECT_TRUE(dropped_cancelled);
  EXPECT_FALSE(deltas["dropped"].empty());
  for (const Plan& plan : plans) {
    parsetier::StreamResult stream = ParseMessages(SharedClient(), open, plan.messages, finish);
    ASSERT_EQ(finals.count(plan.key), 1u) << plan.key << ": no final result";
    EXPECT_EQ(finals[plan.key].finish_reason(), v1::FINISH_REASON_TOOL_CALLS) << plan.key;
    EXPECT_TRUE(MessageDifferencer::Equals(finals[plan.key], stream.final))
        << plan.key << "\n" << finals[plan.key].DebugString() << "\nParse:\n" << stream.final.DebugString();
    ASSERT_EQ(deltas[plan.key].size(), stream.deltas.size()) << plan.key;
    for (size_t d = 0; d < stream.deltas.size(); ++d) {
      EXPECT_TRUE(MessageDifferencer::Equals(deltas[plan.key][d], stream.deltas[d])) << plan.key << " delta " << d;
    }
  }
  // Both forms went on the wire each way, and token_counts only when an item had other than one id.
  EXPECT_GT(wire.packed_sent, 0);
  EXPECT_GT(wire.counted_sent, 0);
  EXPECT_GT(wire.entries_sent, 0);
  EXPECT_GT(wire.packed_recv, 0);
  EXPECT_GT(wire.sessions_recv, 0);
}

// Malformed framing (an empty key) ends the stream, and Step throws its status.
TEST_F(BatchLive, EmptyKeyEndsTheStream) {
  auto batch = SharedClient().OpenBatch(std::chrono::seconds(30));
  batch->Open("", Qwen3(""));
  try {
    batch->Step();
    ADD_FAILURE() << "an empty key did not end the stream";
  } catch (const parsetier::Error& error) {
    EXPECT_EQ(error.code(), grpc::StatusCode::INVALID_ARGUMENT) << error.what();
  }
  EXPECT_THROW(batch->Step(), parsetier::Error);  // closed
}

}  // namespace
