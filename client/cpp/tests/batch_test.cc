// The C++ batch API (ParseBatch) against a real server (PARSETIER_SERVER), as the Go client's
// batch tests: many sessions one token per step, session errors, the stream's own errors.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include <google/protobuf/util/message_differencer.h>

#include "parsetier/batch.h"
#include "test_support.h"

namespace {

using google::protobuf::util::MessageDifferencer;
namespace v1 = parsetier::v1;

using parsetier_test::kImEnd;
using parsetier_test::kOutput;
using parsetier_test::kTools;

parsetier::Client& SharedClient() {
  const char* target = std::getenv("PARSETIER_SERVER");
  static parsetier::Client client(target ? target : "", {parsetier::InsecureCredentials()});
  return client;
}

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

class BatchLive : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_NE(std::getenv("PARSETIER_SERVER"), nullptr) << "PARSETIER_SERVER is not set"; }
};

// Several sessions, one token each per engine step: each gets exactly what a Parse stream fed the
// same tokens gives (the same request id gives the same tool call ids).
TEST_F(BatchLive, ManySessionsOneTokenPerStep) {
  constexpr int kSessions = 6;
  auto batch = SharedClient().OpenBatch(std::chrono::seconds(60));
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
