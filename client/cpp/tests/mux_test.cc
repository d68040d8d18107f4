// Multiplexed sessions (ClientOptions::multiplex) against a real server: the session API over one
// shared ParseBatch stream. Each session's replies are its own Parse stream's, byte for byte
// (client_messages included: the session's own count); a session's error, cancel or deadline
// stays in that session. PARSETIER_SERVER=host:port, as for client_test.cc.
#include <gtest/gtest.h>

#include <cstdlib>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "parsetier/client.h"
#include "test_support.h"

namespace {

namespace v1 = parsetier::v1;
using parsetier_test::kImEnd;
using parsetier_test::kOutput;
using parsetier_test::kTools;

std::string Target() {
  const char* target = std::getenv("PARSETIER_SERVER");
  return target ? target : "";
}

parsetier::ClientOptions Options(bool multiplex, std::chrono::microseconds flush_interval = {}) {
  parsetier::ClientOptions options;
  options.credentials = parsetier::InsecureCredentials();
  if (multiplex) options.multiplex = parsetier::MultiplexOptions{flush_interval, 1024};
  return options;
}

parsetier::OpenOptions Qwen3(const std::string& request_id, const std::optional<v1::WireOptions>& wire) {
  parsetier::OpenOptions open;
  open.model = "qwen3";
  open.tools_json = kTools;
  open.request_id = request_id;
  open.wire = wire;
  open.timeout = std::chrono::seconds(60);
  return open;
}

// One session: the recorded output one token per message, sent from a thread of its own while
// this one pulls the replies.
std::vector<v1::ParseResponse> OneSession(parsetier::Client& client, const parsetier::OpenOptions& options) {
  std::unique_ptr<parsetier::Session> session = client.Open(options);
  std::thread sender([&] {
    for (uint32_t id : kOutput) EXPECT_TRUE(session->Send({id}));
    EXPECT_TRUE(session->Finish(parsetier::FinishOptions::StopToken(kImEnd)));
  });
  std::vector<v1::ParseResponse> replies;
  while (std::optional<v1::ParseResponse> reply = session->Next()) replies.push_back(std::move(*reply));
  sender.join();
  EXPECT_TRUE(session->Wait().ok());
  EXPECT_TRUE(session->Final().has_value());
  return replies;
}

// `sessions` sessions at once on `client`, each from a thread of its own.
std::vector<std::vector<v1::ParseResponse>> Sessions(parsetier::Client& client, int sessions,
                                                     const std::optional<v1::WireOptions>& wire) {
  std::vector<std::future<std::vector<v1::ParseResponse>>> running;
  for (int i = 0; i < sessions; ++i) {
    running.push_back(std::async(std::launch::async, [&client, &wire, i] {
      return OneSession(client, Qwen3("cpp-mux-" + std::to_string(i), wire));
    }));
  }
  std::vector<std::vector<v1::ParseResponse>> all;
  for (auto& session : running) all.push_back(session.get());
  return all;
}

std::string Serialized(const std::vector<v1::ParseResponse>& replies) {
  std::string bytes;
  for (const v1::ParseResponse& reply : replies) {
    std::string one;
    EXPECT_TRUE(reply.SerializeToString(&one));
    bytes += std::to_string(one.size()) + ":" + one;
  }
  return bytes;
}

std::string WireOf(const std::vector<v1::ParseResponse>& replies) {
  std::string bytes;
  for (const v1::ParseResponse& reply : replies) bytes += parsetier::Wire(reply);
  return bytes;
}

class MuxLive : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_FALSE(Target().empty()) << "PARSETIER_SERVER is not set"; }
};

TEST_F(MuxLive, SessionsGetTheirParseStreamsReplies) {
  parsetier::Client parse(Target(), Options(false));
  parsetier::Client mux(Target(), Options(true));
  std::vector<std::vector<v1::ParseResponse>> want = Sessions(parse, 6, std::nullopt);
  std::vector<std::vector<v1::ParseResponse>> got = Sessions(mux, 6, std::nullopt);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_FALSE(got[i].empty());
    EXPECT_EQ(got[i].back().final().finish_reason(), v1::FINISH_REASON_TOOL_CALLS);
    EXPECT_EQ(got[i].back().final().message().tool_calls_size(), 2);
    EXPECT_EQ(got[i].back().client_messages(), kOutput.size() + 2);  // open, one per token, finish
    EXPECT_EQ(Serialized(got[i]), Serialized(want[i])) << "session " << i;
  }

  // A flush bound coalesces as well, and changes nothing in the replies.
  parsetier::Client bounded(Target(), Options(true, std::chrono::microseconds(200)));
  std::vector<std::vector<v1::ParseResponse>> again = Sessions(bounded, 6, std::nullopt);
  for (size_t i = 0; i < again.size(); ++i) EXPECT_EQ(Serialized(again[i]), Serialized(want[i])) << i;
}

// Wire dialects: the bytes to forward are the Parse stream's, byte for byte.
TEST_F(MuxLive, WireDialectsGiveTheParseStreamsBytes) {
  parsetier::Client parse(Target(), Options(false));
  parsetier::Client mux(Target(), Options(true));
  for (v1::WireDialect dialect : {v1::WIRE_DIALECT_OPENAI_CHAT, v1::WIRE_DIALECT_ANTHROPIC_MESSAGES,
                                  v1::WIRE_DIALECT_OPENAI_RESPONSES}) {
    v1::WireOptions wire;
    wire.set_dialect(dialect);
    wire.set_response_id("resp-cpp-mux");
    wire.set_model("served");
    wire.set_stream(true);
    wire.set_include_usage(true);
    wire.set_created(1700000000);
    std::vector<std::vector<v1::ParseResponse>> want = Sessions(parse, 2, wire);
    std::vector<std::vector<v1::ParseResponse>> got = Sessions(mux, 2, wire);
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_FALSE(WireOf(want[i]).empty()) << v1::WireDialect_Name(dialect);
      EXPECT_EQ(WireOf(got[i]), WireOf(want[i])) << v1::WireDialect_Name(dialect);
      EXPECT_EQ(Serialized(got[i]), Serialized(want[i])) << v1::WireDialect_Name(dialect);
    }
  }
}

// A refused open throws from Open, a bad id ends its own session only, and the others go on.
TEST_F(MuxLive, ErrorsStayInTheirSession) {
  parsetier::Client mux(Target(), Options(true));
  try {
    parsetier::OpenOptions unknown = Qwen3("", std::nullopt);
    unknown.model = "no-such-model";
    mux.Open(unknown);
    ADD_FAILURE() << "an unknown model was accepted";
  } catch (const parsetier::Error& error) {
    EXPECT_EQ(error.code(), grpc::StatusCode::NOT_FOUND) << error.what();
  }
  std::unique_ptr<parsetier::Session> bad = mux.Open(Qwen3("cpp-mux-bad", std::nullopt));
  std::unique_ptr<parsetier::Session> good = mux.Open(Qwen3("cpp-mux-good", std::nullopt));
  EXPECT_TRUE(bad->Send({10000000}));
  for (uint32_t id : kOutput) EXPECT_TRUE(good->Send({id}));
  EXPECT_TRUE(good->Finish(parsetier::FinishOptions::StopToken(kImEnd)));
  try {
    while (bad->Next()) {
    }
    ADD_FAILURE() << "the bad session ended without its error";
  } catch (const parsetier::Error& error) {
    EXPECT_EQ(error.code(), grpc::StatusCode::INVALID_ARGUMENT) << error.what();
    EXPECT_NE(error.message().find("10000000"), std::string::npos) << error.message();
  }
  EXPECT_EQ(bad->Wait().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_FALSE(bad->Send({kOutput[0]}));
  while (good->Next()) {
  }
  EXPECT_TRUE(good->Wait().ok());
  ASSERT_TRUE(good->Final().has_value());
  EXPECT_EQ(good->Final()->finish_reason(), v1::FINISH_REASON_TOOL_CALLS);
}

// Cancel, a deadline and a destroyed session end only themselves (CANCELLED, DEADLINE_EXCEEDED);
// push delivery works as on Parse; the client's other sessions go on.
TEST_F(MuxLive, CancelDeadlineAndCallbacks) {
  parsetier::Client mux(Target(), Options(true));
  std::unique_ptr<parsetier::Session> cancelled = mux.Open(Qwen3("", std::nullopt));
  EXPECT_TRUE(cancelled->Send({kOutput[0]}));
  cancelled->Cancel();
  EXPECT_EQ(cancelled->Wait().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_FALSE(cancelled->Send({kOutput[1]}));
  cancelled->Cancel();  // again: harmless

  parsetier::OpenOptions short_lived = Qwen3("", std::nullopt);
  short_lived.timeout = std::chrono::milliseconds(300);
  std::unique_ptr<parsetier::Session> late = mux.Open(short_lived);
  try {
    while (late->Next()) {
    }
    ADD_FAILURE() << "no deadline";
  } catch (const parsetier::Error& error) {
    EXPECT_EQ(error.code(), grpc::StatusCode::DEADLINE_EXCEEDED) << error.what();
  }
  for (int i = 0; i < 5; ++i) {  // destroyed with messages queued and in flight
    std::unique_ptr<parsetier::Session> abandoned = mux.Open(Qwen3("", std::nullopt));
    for (size_t j = 0; j < 5; ++j) abandoned->Send({kOutput[j]});
  }

  std::vector<v1::ParseResponse> pushed;  // only touched by the callbacks, one at a time
  std::promise<grpc::Status> done;
  parsetier::SessionCallbacks callbacks;
  callbacks.on_message = [&](const v1::ParseResponse& reply) { pushed.push_back(reply); };
  callbacks.on_done = [&](const grpc::Status& status) { done.set_value(status); };
  std::unique_ptr<parsetier::Session> session = mux.Open(Qwen3("cpp-mux-callbacks", std::nullopt), callbacks);
  for (uint32_t id : kOutput) ASSERT_TRUE(session->Send({id}));
  ASSERT_TRUE(session->Finish(parsetier::FinishOptions::StopToken(kImEnd)));
  EXPECT_TRUE(done.get_future().get().ok());
  ASSERT_FALSE(pushed.empty());
  EXPECT_EQ(pushed.back().final().finish_reason(), v1::FINISH_REASON_TOOL_CALLS);
  EXPECT_FALSE(session->Next().has_value());

  parsetier::Client parse(Target(), Options(false));
  EXPECT_EQ(Serialized(pushed), Serialized(OneSession(parse, Qwen3("cpp-mux-callbacks", std::nullopt))));
}

}  // namespace
