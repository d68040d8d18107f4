// The C++ client against a real parsetier server (PARSETIER_SERVER=host:port; the pytest
// driver tests/test_cpp_client.py starts one). The same scenarios as the Go client's tests, an
// error-code table, callbacks, cancellation and several concurrent sessions.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <future>
#include <limits>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <google/protobuf/util/message_differencer.h>

#include "parsetier/client.h"
#include "test_support.h"

namespace {

using google::protobuf::util::MessageDifferencer;
namespace v1 = parsetier::v1;

using parsetier_test::kImEnd;
using parsetier_test::kOutput;
using parsetier_test::kTools;
using parsetier_test::SharedClient;
constexpr uint32_t kOutOfVocabulary = 10000000;
constexpr uint32_t kHello = 9707;  // "Hello"

std::string ServerTarget() {
  const char* target = std::getenv("PARSETIER_SERVER");
  return target ? target : "";
}

parsetier::OpenOptions Qwen3(const std::string& request_id = "") {
  parsetier::OpenOptions open;
  open.model = "qwen3";
  open.tools_json = kTools;
  open.request_id = request_id;
  open.timeout = std::chrono::seconds(60);
  return open;
}

std::vector<parsetier::Step> OnePerStep(const std::vector<uint32_t>& ids) {
  std::vector<parsetier::Step> steps;
  for (uint32_t id : ids) steps.push_back({id});
  return steps;
}

v1::AssistantMessage WantMessage() {
  v1::AssistantMessage message;
  message.set_reasoning("Need weather.");
  message.set_content("Checking both cities.");
  for (const char* city : {"Paris", "Tokyo"}) {
    v1::ToolCall* call = message.add_tool_calls();
    call->set_name("get_weather");
    call->set_arguments(std::string(R"({"city": ")") + city + R"("})");
  }
  return message;
}

v1::AssistantMessage WithoutIds(v1::AssistantMessage message) {
  for (auto& call : *message.mutable_tool_calls()) call.clear_id();
  return message;
}

// Rebuilds the message from deltas as a chat-completions client would, checking the fragment
// rules: a call's id and name come once, on its first fragment; calls start in index order.
v1::AssistantMessage JoinDeltas(const std::vector<v1::Delta>& deltas) {
  v1::AssistantMessage joined;
  for (const v1::Delta& delta : deltas) {
    joined.mutable_reasoning()->append(delta.reasoning());
    joined.mutable_content()->append(delta.content());
    for (const v1::ToolCallDelta& fragment : delta.tool_calls()) {
      int index = static_cast<int>(fragment.index());
      if (index == joined.tool_calls_size()) {
        EXPECT_FALSE(fragment.id().empty() || fragment.name().empty()) << "first fragment lacks id or name";
        v1::ToolCall* call = joined.add_tool_calls();
        call->set_id(fragment.id());
        call->set_name(fragment.name());
      } else {
        EXPECT_LT(index, joined.tool_calls_size()) << "call started out of order";
        EXPECT_TRUE(fragment.id().empty() && fragment.name().empty()) << "id or name repeated";
        if (index > joined.tool_calls_size()) continue;
      }
      joined.mutable_tool_calls(index)->mutable_arguments()->append(fragment.arguments());
    }
  }
  return joined;
}

std::vector<v1::Delta> DeltasOf(const std::vector<v1::ParseResponse>& messages) {
  std::vector<v1::Delta> deltas;
  for (const auto& message : messages) deltas.insert(deltas.end(), message.deltas().begin(), message.deltas().end());
  return deltas;
}

void CheckFinal(const v1::Final& final) {
  EXPECT_EQ(final.finish_reason(), v1::FINISH_REASON_TOOL_CALLS);
  EXPECT_EQ(final.usage().completion_tokens(), kOutput.size());
  EXPECT_EQ(final.usage().reasoning_tokens(), 5u);
  EXPECT_TRUE(MessageDifferencer::Equals(WithoutIds(final.message()), WantMessage()))
      << final.message().DebugString();
  for (const auto& call : final.message().tool_calls()) {
    EXPECT_EQ(call.id().rfind("chatcmpl-tool-", 0), 0u) << call.id();
  }
}

// Streams the output through a Session, steps batched per_message to a message, sending on
// one thread while this one pulls replies, and checks the stream's contract.
std::vector<v1::ParseResponse> RunSession(size_t per_message, const std::string& request_id = "cpp-client-test") {
  std::unique_ptr<parsetier::Session> session = SharedClient().Open(Qwen3(request_id));
  size_t sent_messages = 0;
  std::thread sender([&] {
    for (size_t start = 0; start < kOutput.size(); start += per_message) {
      std::vector<parsetier::Step> steps;
      for (size_t i = start; i < std::min(start + per_message, kOutput.size()); ++i) steps.push_back({kOutput[i]});
      EXPECT_TRUE(session->SendSteps(steps));
      ++sent_messages;
    }
    EXPECT_TRUE(session->Finish(parsetier::FinishOptions::StopToken(kImEnd)));
  });
  std::vector<v1::ParseResponse> messages;
  while (std::optional<v1::ParseResponse> message = session->Next()) messages.push_back(std::move(*message));
  sender.join();
  EXPECT_TRUE(session->Wait().ok());

  // Sequence counts 1, 2, 3...; only the last message carries Final; client_messages never
  // decreases and on the last message counts every message sent (open, steps, finish).
  uint64_t last_client_messages = 0;
  for (size_t i = 0; i < messages.size(); ++i) {
    EXPECT_EQ(messages[i].sequence(), i + 1);
    EXPECT_GE(messages[i].client_messages(), last_client_messages);
    last_client_messages = messages[i].client_messages();
    EXPECT_EQ(messages[i].has_final(), i + 1 == messages.size()) << "message " << i + 1;
  }
  EXPECT_EQ(last_client_messages, 1 + sent_messages + 1);
  EXPECT_TRUE(session->Final().has_value());
  return messages;
}

google::protobuf::Struct ParseJson(const std::string& json) {
  google::protobuf::Struct out;
  auto status = google::protobuf::util::JsonStringToMessage(json, &out);
  EXPECT_TRUE(status.ok()) << status.ToString() << ": " << json;
  return out;
}

size_t CodePoints(const std::string& utf8) {
  size_t count = 0;
  for (char c : utf8) count += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return count;
}

std::vector<v1::ParseResponse> Drain(parsetier::Session& session) {
  std::vector<v1::ParseResponse> messages;
  while (std::optional<v1::ParseResponse> message = session.Next()) messages.push_back(*message);
  return messages;
}

parsetier::OpenOptions Model(const std::string& name) {
  parsetier::OpenOptions open;
  open.model = name;
  open.timeout = std::chrono::seconds(30);
  return open;
}

class LiveServer : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(ServerTarget().empty())
        << "PARSETIER_SERVER is not set: run a server (`make serve`) and set it to its host:port, "
           "or run tests/test_cpp_client.py, which starts one";
  }
};

TEST_F(LiveServer, ListModelsHasQwen3) {
  bool found = false;
  for (const auto& model : SharedClient().ListModels()) {
    found |= model.name() == "qwen3" && model.tokenizer_available();
  }
  EXPECT_TRUE(found);
}

TEST_F(LiveServer, SessionOneTokenPerMessage) {
  std::vector<v1::ParseResponse> messages = RunSession(1);
  ASSERT_FALSE(messages.empty());
  const v1::Final& final = messages.back().final();
  CheckFinal(final);
  EXPECT_TRUE(MessageDifferencer::Equals(JoinDeltas(DeltasOf(messages)), final.message()));
  // Streaming, not buffering: at most one server message per client message, and the first
  // call's arguments arrive in several fragments.
  EXPECT_LE(messages.size(), kOutput.size() + 1);
  EXPECT_GE(messages.size(), 10u);
  int fragments = 0;
  for (const auto& delta : DeltasOf(messages)) {
    for (const auto& fragment : delta.tool_calls()) fragments += fragment.index() == 0;
  }
  EXPECT_GE(fragments, 2);
}

TEST_F(LiveServer, SessionSeveralStepsPerMessage) {
  v1::AssistantMessage one = WithoutIds(JoinDeltas(DeltasOf(RunSession(1))));
  for (size_t per_message : {size_t{2}, size_t{5}, kOutput.size()}) {
    std::vector<v1::ParseResponse> batched = RunSession(per_message);
    CheckFinal(batched.back().final());
    EXPECT_TRUE(MessageDifferencer::Equals(WithoutIds(JoinDeltas(DeltasOf(batched))), one)) << per_message;
  }
}

TEST_F(LiveServer, ParseStreamEqualsParseOnce) {
  parsetier::FinishOptions stop = parsetier::FinishOptions::StopToken(kImEnd);
  parsetier::OpenOptions options = Qwen3();
  // Tool call ids derive from the request id, so the two requests' ids agree. (With neither a
  // request id nor prompt ids a session draws a random seed: ids never repeat across requests.)
  options.request_id = "cpp-stream-equals-once";
  parsetier::StreamResult stream = SharedClient().ParseStream(options, OnePerStep(kOutput), stop);
  CheckFinal(stream.final);
  EXPECT_TRUE(MessageDifferencer::Equals(JoinDeltas(stream.deltas), stream.final.message()));

  v1::ParseOnceResponse once = SharedClient().ParseOnce(options, kOutput, stop);
  CheckFinal(once.final());
  EXPECT_EQ(once.deltas_size(), 0);
  EXPECT_TRUE(MessageDifferencer::Equals(once.final().message(), stream.final.message()));
  EXPECT_TRUE(MessageDifferencer::Equals(once.final().usage(), stream.final.usage()));
}

TEST_F(LiveServer, WireBytesToForward) {
  parsetier::FinishOptions stop = parsetier::FinishOptions::StopToken(kImEnd);
  parsetier::OpenOptions options = Qwen3();
  options.output = v1::OUTPUT_KIND_FINAL_ONLY;
  v1::WireOptions wire;
  wire.set_dialect(v1::WIRE_DIALECT_OPENAI_CHAT);
  wire.set_response_id("chatcmpl-cpp");
  wire.set_model("served");
  wire.set_stream(true);
  wire.set_include_usage(true);
  options.wire = wire;
  parsetier::StreamResult stream = SharedClient().ParseStream(options, OnePerStep(kOutput), stop);
  CheckFinal(stream.final);
  EXPECT_EQ(stream.wire.rfind("data: {\"id\":\"chatcmpl-cpp\",\"object\":\"chat.completion.chunk\"", 0), 0u);
  EXPECT_NE(stream.wire.find("\"finish_reason\":\"tool_calls\""), std::string::npos);
  EXPECT_NE(stream.wire.find("\"id\":\"call_"), std::string::npos);
  const std::string done = "data: [DONE]\n\n";
  ASSERT_GE(stream.wire.size(), done.size());
  EXPECT_EQ(stream.wire.substr(stream.wire.size() - done.size()), done);
  EXPECT_EQ(stream.final.wire().substr(stream.final.wire().size() - done.size()), done);

  options.wire->set_dialect(v1::WIRE_DIALECT_ANTHROPIC_MESSAGES);
  options.wire->set_stream(false);
  v1::ParseOnceResponse once = SharedClient().ParseOnce(options, kOutput, stop);
  EXPECT_TRUE(once.wire().empty());
  EXPECT_EQ(once.final().wire().rfind("{\"id\":\"chatcmpl-cpp\",\"type\":\"message\"", 0), 0u);
  EXPECT_NE(once.final().wire().find("\"stop_reason\":\"tool_use\""), std::string::npos);
}

// n > 1: one session per choice; the last to finish carries the others' usage
// (FinishOptions::other_choices_usage), so its closing bytes count every choice while its
// Final.usage stays its own, streamed and in a body.
TEST_F(LiveServer, SeveralChoicesUsageCountsEveryChoice) {
  parsetier::OpenOptions first = Qwen3("cpp-n-choices");
  first.output = v1::OUTPUT_KIND_FINAL_ONLY;
  v1::WireOptions wire;
  wire.set_dialect(v1::WIRE_DIALECT_OPENAI_CHAT);
  wire.set_response_id("chatcmpl-n");
  wire.set_stream(true);
  wire.set_include_usage(true);
  first.wire = wire;
  parsetier::OpenOptions second = first;
  second.customize = [](v1::Open& open) { open.set_choice_index(1); };
  const std::vector<uint32_t> cut(kOutput.begin(), kOutput.begin() + 20);
  parsetier::FinishOptions length;
  length.reason = v1::FINISH_REASON_LENGTH;

  const parsetier::FinishOptions stop = parsetier::FinishOptions::StopToken(kImEnd);
  parsetier::StreamResult one = SharedClient().ParseStream(first, OnePerStep(kOutput), stop);
  const parsetier::FinishOptions last_finish = length.WithOtherChoicesUsage({one.final});
  ASSERT_TRUE(last_finish.other_choices_usage.has_value());
  EXPECT_TRUE(MessageDifferencer::Equals(*last_finish.other_choices_usage, one.final.usage()));
  EXPECT_FALSE(length.other_choices_usage.has_value());  // a copy: the original stays as it was
  EXPECT_TRUE(MessageDifferencer::Equals(last_finish.ToProto().other_choices_usage(), one.final.usage()));
  parsetier::StreamResult two = SharedClient().ParseStream(second, OnePerStep(cut), last_finish);

  EXPECT_EQ(two.final.usage().completion_tokens(), cut.size());  // the session's own
  v1::Usage total = parsetier::SumUsage({one.final, two.final});
  EXPECT_EQ(total.completion_tokens(), one.final.usage().completion_tokens() + cut.size());
  EXPECT_GT(total.reasoning_tokens(), one.final.usage().reasoning_tokens());
  auto counts = [](const v1::Usage& usage) {
    return "\"completion_tokens\":" + std::to_string(usage.completion_tokens()) + ",";
  };
  auto reasoning = [](const v1::Usage& usage) {
    return "\"reasoning_tokens\":" + std::to_string(usage.reasoning_tokens()) + "}";
  };
  EXPECT_NE(two.wire.find("\"choices\":[{\"index\":1,"), std::string::npos);
  EXPECT_NE(two.final.wire().find(counts(total)), std::string::npos) << two.final.wire();
  EXPECT_NE(two.final.wire().find(reasoning(total)), std::string::npos) << two.final.wire();
  EXPECT_NE(one.final.wire().find(counts(one.final.usage())), std::string::npos) << one.final.wire();

  second.wire->set_stream(false);  // a body: its usage counts every choice too
  v1::ParseOnceResponse body = SharedClient().ParseOnce(second, cut, last_finish);
  EXPECT_TRUE(MessageDifferencer::Equals(body.final().usage(), two.final.usage()));
  EXPECT_NE(body.final().wire().find(counts(total)), std::string::npos) << body.final().wire();
  EXPECT_EQ(parsetier::SumUsage({}).completion_tokens(), 0u);
}

TEST_F(LiveServer, Options) {
  parsetier::OpenOptions none = Qwen3();
  none.tool_choice = "none";
  none.output = v1::OUTPUT_KIND_DELTAS;
  parsetier::FinishOptions stop_string;
  stop_string.stop_string = "Observation:";
  v1::ParseOnceResponse response = SharedClient().ParseOnce(none, kOutput, stop_string);
  EXPECT_EQ(response.final().message().tool_calls_size(), 0);
  EXPECT_EQ(response.final().finish_reason(), v1::FINISH_REASON_STOP);
  ASSERT_GT(response.deltas_size(), 0);
  std::vector<v1::Delta> deltas(response.deltas().begin(), response.deltas().end());
  EXPECT_TRUE(MessageDifferencer::Equals(JoinDeltas(deltas), response.final().message()));

  parsetier::OpenOptions named = Qwen3();
  named.tool_choice = "get_weather";  // a forced function: STOP stays STOP
  response = SharedClient().ParseOnce(named, kOutput, parsetier::FinishOptions::StopToken(kImEnd));
  EXPECT_EQ(response.final().finish_reason(), v1::FINISH_REASON_STOP);
  EXPECT_TRUE(MessageDifferencer::Equals(WithoutIds(response.final().message()), WantMessage()));
}

// The constraint for a request's options, in both forms.
TEST_F(LiveServer, BuildConstraint) {
  parsetier::OpenOptions open = Qwen3();
  open.tool_choice = "required";
  open.thinking = false;
  v1::BuildConstraintResponse response = SharedClient().BuildConstraint(open);
  EXPECT_EQ(response.structural_tag_json().rfind(R"({"type": "structural_tag")", 0), 0u)
      << response.structural_tag_json();
  ASSERT_EQ(response.triggers_size(), 1);
  EXPECT_EQ(response.triggers(0), "<tool_call>");
  EXPECT_EQ(response.reasoning(), v1::CONSTRAINT_REASONING_NONE);
  EXPECT_NE(response.lark_grammar().find("get_weather"), std::string::npos) << response.lark_grammar();
}

// The entries of OpenAI chat's logprobs.content in a session's streamed wire bytes, joined
// across its chunks, read back with protobuf's JSON parser.
std::vector<google::protobuf::Value> ChatLogprobsInWire(const std::string& wire) {
  std::vector<google::protobuf::Value> content;
  size_t at = 0;
  while (at < wire.size()) {
    size_t end = wire.find("\n\n", at);
    std::string event = wire.substr(at, end - at);
    at = end == std::string::npos ? wire.size() : end + 2;
    EXPECT_EQ(event.rfind("data: ", 0), 0u) << event;
    std::string data = event.substr(6);
    if (data == "[DONE]") continue;
    google::protobuf::Struct chunk = ParseJson(data);
    for (const auto& choice : chunk.fields().at("choices").list_value().values()) {
      const google::protobuf::Value& logprobs = choice.struct_value().fields().at("logprobs");
      if (!logprobs.has_struct_value()) continue;
      for (const auto& entry : logprobs.struct_value().fields().at("content").list_value().values()) {
        content.push_back(entry);
      }
    }
  }
  return content;
}

std::string JsonBytes(const google::protobuf::Value& entry) {
  std::string out;
  for (const auto& byte : entry.struct_value().fields().at("bytes").list_value().values()) {
    out += static_cast<char>(byte.number_value());
  }
  return out;
}

// Logprob steps come back resolved: the tokens join to the output, bytes split a character
// across steps as the vocabulary does, and the alternatives are resolved in the same context.
// Opened with OpenOptions::wire, the session's bytes carry the same entries in OpenAI chat's
// JSON, written by the server (the client shapes none of it).
TEST_F(LiveServer, LogprobStepsResolve) {
  // Qwen3's "Hi 你好 🎉👍🏽": 11162, 236, 231 are " 🎉" split over three tokens.
  const std::vector<uint32_t> emoji = {13048, 220, 108386, 11162, 236, 231, 144349, 145375};
  parsetier::OpenOptions open = Model("qwen3");
  open.return_token_ids = true;
  v1::WireOptions chat;
  chat.set_dialect(v1::WIRE_DIALECT_OPENAI_CHAT);
  chat.set_response_id("chatcmpl-lp");
  chat.set_stream(true);
  open.wire = chat;
  auto session = SharedClient().Open(open);
  for (size_t i = 0; i < emoji.size(); ++i) {
    std::vector<std::vector<parsetier::Alternative>> top = {{{emoji[i], -0.25f}, {13048, -3.0f}}};
    ASSERT_TRUE(session->SendSteps({parsetier::LogprobStep({emoji[i]}, {-static_cast<float>(i) / 4}, top)}));
  }
  ASSERT_TRUE(session->Finish());
  std::vector<v1::ParseResponse> replies = Drain(*session);
  std::vector<v1::Delta> deltas = DeltasOf(replies);
  std::vector<v1::TokenLogprob> logprobs = parsetier::Logprobs(deltas);
  ASSERT_EQ(logprobs.size(), emoji.size());
  std::string tokens, bytes;
  for (size_t i = 0; i < logprobs.size(); ++i) {
    tokens += (i ? "|" : "") + logprobs[i].token();
    bytes += logprobs[i].bytes();
    EXPECT_EQ(logprobs[i].token_id(), emoji[i]);
    EXPECT_FLOAT_EQ(logprobs[i].logprob(), -static_cast<float>(i) / 4);
  }
  EXPECT_EQ(tokens, "Hi| |你好| ||🎉|👍|🏽");
  EXPECT_EQ(bytes, "Hi 你好 🎉👍🏽");
  ASSERT_EQ(logprobs[5].top_logprobs_size(), 2);
  EXPECT_EQ(logprobs[5].top_logprobs(0).token(), "🎉");
  EXPECT_EQ(logprobs[5].top_logprobs(1).token(), "\xEF\xBF\xBDHi");  // U+FFFD, then "Hi"
  size_t ids = 0;
  for (const auto& delta : deltas) ids += delta.token_ids_size();
  EXPECT_EQ(ids, emoji.size());

  std::string wire;
  for (const v1::ParseResponse& reply : replies) wire += parsetier::Wire(reply);
  std::vector<google::protobuf::Value> content = ChatLogprobsInWire(wire);
  ASSERT_EQ(content.size(), logprobs.size()) << wire;
  for (size_t i = 0; i < content.size(); ++i) {
    const auto& entry = content[i].struct_value().fields();
    EXPECT_EQ(entry.at("token").string_value(), logprobs[i].token());
    EXPECT_EQ(entry.at("logprob").number_value(), logprobs[i].logprob());
    EXPECT_EQ(JsonBytes(content[i]), logprobs[i].bytes());
    const auto& top = entry.at("top_logprobs").list_value().values();
    ASSERT_EQ(top.size(), logprobs[i].top_logprobs_size());
    for (int j = 0; j < top.size(); ++j) {
      EXPECT_EQ(top[j].struct_value().fields().at("token").string_value(), logprobs[i].top_logprobs(j).token());
      EXPECT_EQ(top[j].struct_value().fields().at("logprob").number_value(), logprobs[i].top_logprobs(j).logprob());
      EXPECT_EQ(JsonBytes(top[j]), logprobs[i].top_logprobs(j).bytes());
    }
  }
}

// A completion session in OpenAI completions' dialect gets the four logprob lists in the body
// the server writes: a masked token's -infinity as -9999.0 (JSON has none), offsets in code
// points, repeated alternatives one key each (the last logprob).
TEST_F(LiveServer, CompletionLogprobsInTheWire) {
  const std::vector<uint32_t> emoji = {13048, 220, 108386, 11162, 236, 231, 144349, 145375};
  const float masked = -std::numeric_limits<float>::infinity();
  parsetier::OpenOptions open = Model("qwen3");
  open.output = v1::OUTPUT_KIND_FINAL_ONLY;
  v1::WireOptions completions;
  completions.set_dialect(v1::WIRE_DIALECT_OPENAI_COMPLETIONS);
  completions.set_response_id("cmpl-lp");
  open.wire = completions;
  open.customize = [](v1::Open& message) { message.mutable_completion()->set_skip_special_tokens(true); };
  auto session = SharedClient().Open(open);
  for (size_t i = 0; i < emoji.size(); ++i) {
    std::vector<std::vector<parsetier::Alternative>> top = {{{emoji[i], -0.5f}, {13048, masked}}};
    ASSERT_TRUE(session->SendSteps({parsetier::LogprobStep({emoji[i]}, {i == 1 ? masked : -0.5f}, top)}));
  }
  parsetier::FinishOptions length;
  length.reason = v1::FINISH_REASON_LENGTH;
  ASSERT_TRUE(session->Finish(length));
  std::string body;
  for (const v1::ParseResponse& reply : Drain(*session)) body += parsetier::Wire(reply);
  EXPECT_EQ(body.find("Infinity"), std::string::npos) << body;
  EXPECT_NE(body.find("-9999.0"), std::string::npos) << body;
  google::protobuf::Struct completion = ParseJson(body);
  const auto& choice = completion.fields().at("choices").list_value().values(0).struct_value().fields();
  EXPECT_EQ(choice.at("text").string_value(), "Hi 你好 🎉👍🏽");
  const auto& lists = choice.at("logprobs").struct_value().fields();
  const auto& tokens = lists.at("tokens").list_value().values();
  ASSERT_EQ(tokens.size(), static_cast<int>(emoji.size()));
  std::string before;  // the text before token i; offsets count its code points
  for (int i = 0; i < tokens.size(); ++i) {
    EXPECT_EQ(lists.at("text_offset").list_value().values(i).number_value(), CodePoints(before));
    EXPECT_EQ(lists.at("token_logprobs").list_value().values(i).number_value(), i == 1 ? -9999.0 : -0.5);
    before += tokens[i].string_value();
  }
  EXPECT_EQ(before, "Hi 你好 🎉👍🏽");
  const auto& first = lists.at("top_logprobs").list_value().values(0).struct_value().fields();
  EXPECT_EQ(first.size(), 1u);  // 13048 is "Hi" too: one key, the last logprob
  EXPECT_EQ(first.at("Hi").number_value(), -9999.0);
}

// Push delivery: every message reaches on_message in order, then on_done once with OK.
TEST_F(LiveServer, Callbacks) {
  std::vector<v1::ParseResponse> messages;  // only touched by the callbacks, one at a time
  std::promise<grpc::Status> done;
  parsetier::SessionCallbacks callbacks;
  callbacks.on_message = [&](const v1::ParseResponse& message) { messages.push_back(message); };
  callbacks.on_done = [&](const grpc::Status& status) { done.set_value(status); };
  std::unique_ptr<parsetier::Session> session = SharedClient().Open(Qwen3(), callbacks);
  for (uint32_t id : kOutput) ASSERT_TRUE(session->Send({id}));
  ASSERT_TRUE(session->Finish(parsetier::FinishOptions::StopToken(kImEnd)));
  grpc::Status status = done.get_future().get();
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_TRUE(session->Wait().ok());
  ASSERT_FALSE(messages.empty());
  CheckFinal(messages.back().final());
  EXPECT_TRUE(MessageDifferencer::Equals(JoinDeltas(DeltasOf(messages)), messages.back().final().message()));
  EXPECT_FALSE(session->Next().has_value());  // nothing queued for pull in callback mode
}

// Several sessions at once on one client, each from its own thread: every one gets its own,
// complete result.
TEST_F(LiveServer, ConcurrentSessions) {
  constexpr int kSessions = 8;
  std::vector<std::future<v1::Final>> results;
  for (int i = 0; i < kSessions; ++i) {
    results.push_back(std::async(std::launch::async, [i] {
      std::vector<v1::ParseResponse> messages = RunSession(1 + i % 3, "cpp-concurrent-" + std::to_string(i));
      return messages.back().final();
    }));
  }
  std::set<std::string> ids;
  for (auto& result : results) {
    v1::Final final = result.get();
    CheckFinal(final);
    for (const auto& call : final.message().tool_calls()) ids.insert(call.id());
  }
  EXPECT_EQ(ids.size(), 2u * kSessions) << "tool call ids derive from each session's request id";
}

// Destroying or cancelling a session midway ends it with CANCELLED and never hangs.
TEST_F(LiveServer, CancelAndDestroyMidway) {
  std::unique_ptr<parsetier::Session> session = SharedClient().Open(Qwen3());
  ASSERT_TRUE(session->Send({kOutput[0]}));
  session->Cancel();
  EXPECT_EQ(session->Wait().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_FALSE(session->Send({kOutput[1]}));
  try {
    while (session->Next()) {
    }
    ADD_FAILURE() << "Next after Cancel did not throw";
  } catch (const parsetier::Error& error) {
    EXPECT_EQ(error.code(), grpc::StatusCode::CANCELLED);
  }
  session->Cancel();  // again: harmless

  for (int i = 0; i < 20; ++i) {  // destroyed with writes and reads in flight
    std::unique_ptr<parsetier::Session> abandoned = SharedClient().Open(Qwen3());
    for (size_t j = 0; j < 10; ++j) abandoned->Send({kOutput[j]});
  }
}

// --- error codes --------------------------------------------------------------------------

struct ErrorCase {
  const char* name;
  grpc::StatusCode want;
  std::function<void()> call;  // throws parsetier::Error
};

std::vector<ErrorCase> ErrorCases() {
  parsetier::Client& client = SharedClient();
  parsetier::FinishOptions stop = parsetier::FinishOptions::StopToken(kImEnd);
  return {
      {"Open unknown model", grpc::StatusCode::NOT_FOUND, [&] { client.Open(Model("no-such-model")); }},
      {"ParseStream unknown model", grpc::StatusCode::NOT_FOUND,
       [&, stop] { client.ParseStream(Model("no-such-model"), OnePerStep(kOutput), stop); }},
      {"ParseOnce unknown model", grpc::StatusCode::NOT_FOUND,
       [&, stop] { client.ParseOnce(Model("no-such-model"), kOutput, stop); }},
      {"Session out-of-vocabulary id", grpc::StatusCode::INVALID_ARGUMENT,
       [&] {
         auto session = client.Open(Model("qwen3"));
         session->SendSteps(std::vector<parsetier::Step>{{kOutput[0], kOutput[1]}, {kOutOfVocabulary}});
         Drain(*session);  // deltas of the valid ids may come first
       }},
      {"ParseStream out-of-vocabulary id", grpc::StatusCode::INVALID_ARGUMENT,
       [&, stop] { client.ParseStream(Model("qwen3"), {{kOutput[0]}, {kOutOfVocabulary}}, stop); }},
      {"ParseOnce out-of-vocabulary id", grpc::StatusCode::INVALID_ARGUMENT,
       [&, stop] { client.ParseOnce(Model("qwen3"), {kOutOfVocabulary}, stop); }},
      {"tool_choice required without tools", grpc::StatusCode::INVALID_ARGUMENT,
       [&] {
         parsetier::OpenOptions open = Model("qwen3");
         open.tool_choice = "required";
         client.Open(open);
       }},
      {"malformed tools_json", grpc::StatusCode::INVALID_ARGUMENT,
       [&] {
         parsetier::OpenOptions open = Model("qwen3");
         open.tools_json = "[{";
         client.Open(open);
       }},
      {"TOOL_CALLS as a finish reason", grpc::StatusCode::INVALID_ARGUMENT,
       [&] {
         auto session = client.Open(Model("qwen3"));
         parsetier::FinishOptions finish;
         finish.reason = v1::FINISH_REASON_TOOL_CALLS;
         session->Finish(finish);
         Drain(*session);
       }},
      {"a second Open on the stream (raw stub)", grpc::StatusCode::FAILED_PRECONDITION,
       [&] {
         grpc::ClientContext context;  // Session cannot send Open twice; the generated stub can
         auto stream = client.stub().Parse(&context);
         v1::ParseRequest open;
         *open.mutable_open() = Model("qwen3").ToProto();
         stream->Write(open);
         stream->Write(open);
         stream->WritesDone();
         v1::ParseResponse ignored;
         while (stream->Read(&ignored)) {
         }
         grpc::Status status = stream->Finish();
         if (!status.ok()) throw parsetier::Error(status);
       }},
      {"too many steps in one message", grpc::StatusCode::RESOURCE_EXHAUSTED,
       [&] {
         auto session = client.Open(Model("qwen3"));
         session->SendSteps(std::vector<parsetier::Step>(4097, parsetier::Step{kOutput[1]}));
         Drain(*session);
       }},
      {"session deadline", grpc::StatusCode::DEADLINE_EXCEEDED,
       [&] {
         parsetier::OpenOptions open = Model("qwen3");
         open.timeout = std::chrono::milliseconds(300);
         auto session = client.Open(open);
         Drain(*session);  // nothing sent after Open: the deadline passes
       }},
      {"BuildConstraint unknown model", grpc::StatusCode::NOT_FOUND,
       [&] { client.BuildConstraint(Model("no-such-model")); }},
      {"BuildConstraint tool_choice naming no tool", grpc::StatusCode::INVALID_ARGUMENT,
       [&] {
         parsetier::OpenOptions open = Qwen3();
         open.tool_choice = "send_mail";
         client.BuildConstraint(open);
       }},
      {"logprobs that do not fit the step", grpc::StatusCode::INVALID_ARGUMENT,
       [&] {
         auto session = client.Open(Model("qwen3"));
         session->SendSteps({parsetier::LogprobStep({kOutput[1], kOutput[2]}, {-0.5f})});
         Drain(*session);
       }},
      {"server unreachable", grpc::StatusCode::UNAVAILABLE,
       [] {
         parsetier::Client nowhere("127.0.0.1:1", {parsetier::InsecureCredentials()});
         nowhere.ListModels(std::chrono::seconds(5));
       }},
  };
}

TEST_F(LiveServer, ErrorCodes) {
  for (const ErrorCase& test : ErrorCases()) {
    try {
      test.call();
      ADD_FAILURE() << test.name << ": no error, want " << parsetier::StatusCodeName(test.want);
    } catch (const parsetier::Error& error) {
      EXPECT_EQ(error.code(), test.want) << test.name << ": " << error.what();
      EXPECT_FALSE(error.message().empty()) << test.name;
      EXPECT_EQ(std::string(error.what()).rfind(parsetier::StatusCodeName(test.want), 0), 0u) << error.what();
    }
  }
}

TEST_F(LiveServer, ErrorNamesTheBadId) {
  auto session = SharedClient().Open(Model("qwen3"));
  session->Send({kOutOfVocabulary});
  try {
    Drain(*session);
    ADD_FAILURE() << "no error";
  } catch (const parsetier::Error& error) {
    EXPECT_NE(error.message().find("10000000"), std::string::npos) << error.message();
  }
}

// --- keepalive against the server's ping policy ------------------------------------------------

// One reply, some seconds of nothing, one more step and the finish, through `options`: the status.
grpc::Status QuietSession(parsetier::ClientOptions options) {
  options.resume = std::nullopt;  // a GOAWAY must end the session, not move it
  parsetier::Client client(ServerTarget(), options);
  auto session = client.Open(Model("qwen3"));
  try {
    session->Send({kHello});  // content: a reply at once
    if (!session->Next()) return session->Wait();
    std::this_thread::sleep_for(std::chrono::seconds(6));  // a 1 s pinger is GOAWAY'd after 3 or 4 pings
    session->Send({kHello});
    session->Finish();
    Drain(*session);
  } catch (const parsetier::Error& error) {
    return grpc::Status(error.code(), error.message());
  }
  return session->Wait();
}

// The server runs gRPC core's default ping policy (one ping per 5 minutes without data, none
// without calls). The defaults stay within it, so a quiet session completes; the negative control,
// a client pinging every second, is closed with GOAWAY too_many_pings in the same quiet spell.
TEST_F(LiveServer, KeepaliveDefaultsWithinServerPolicy) {
  parsetier::ClientOptions defaults{parsetier::InsecureCredentials()};
  EXPECT_GE(defaults.keepalive_time, std::chrono::minutes(5));
  EXPECT_GT(defaults.keepalive_timeout.count(), 0);
  std::future<grpc::Status> quiet = std::async(std::launch::async, [&] { return QuietSession(defaults); });

  parsetier::ClientOptions eager{parsetier::InsecureCredentials()};
  eager.keepalive_time = std::chrono::seconds(1);
  eager.channel_arguments = [](grpc::ChannelArguments& args) {
    args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
    args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);  // gRPC core stops after 2 by default
  };
  grpc::Status pinged = QuietSession(eager);
  EXPECT_EQ(pinged.error_code(), grpc::StatusCode::UNAVAILABLE) << pinged.error_message();

  grpc::Status status = quiet.get();
  EXPECT_TRUE(status.ok()) << parsetier::StatusCodeName(status.error_code()) << ": " << status.error_message();
}

TEST(ClientOptions, CredentialsAreRequired) {
  EXPECT_THROW(parsetier::Client("127.0.0.1:1", parsetier::ClientOptions{}), std::invalid_argument);
}

}  // namespace
