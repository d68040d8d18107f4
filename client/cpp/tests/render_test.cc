// Render against a live server, then the output session opened with the Open it returned,
// unchanged (PARSETIER_SERVER, as client_test.cc's LiveServer tests).
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "parsetier/client.h"
#include "test_support.h"

namespace {

namespace v1 = parsetier::v1;
using google::protobuf::Struct;
using google::protobuf::Value;
using parsetier_test::kImEnd;
using parsetier_test::kOutput;
using parsetier_test::kTools;
using parsetier_test::SharedClient;

// Qwen3's generation prompt, the end of every chat prompt: <|im_start|>assistant\n.
const std::vector<uint32_t> kGenerationPrompt = {151644, 77091, 198};

// The error Render throws for `options`; nothing, and a failure, when `what` renders instead.
std::optional<parsetier::Error> Refused(const parsetier::RenderOptions& options, const char* what) {
  try {
    SharedClient().Render(options);
  } catch (const parsetier::Error& error) {
    return error;
  }
  ADD_FAILURE() << what << " rendered";
  return std::nullopt;
}

Struct ParseJson(const std::string& json) {
  Struct out;
  auto status = google::protobuf::util::JsonStringToMessage(json, &out);
  EXPECT_TRUE(status.ok()) << status.ToString() << ": " << json;
  return out;
}

const Value& Field(const Struct& object, const std::string& name) {
  static const Value kNull;
  auto found = object.fields().find(name);
  return found == object.fields().end() ? kNull : found->second;
}

parsetier::RenderOptions Chat(const std::string& extra = "") {
  parsetier::RenderOptions render;
  render.model = "qwen3";
  render.dialect = v1::WIRE_DIALECT_OPENAI_CHAT;
  render.request_json = std::string(R"({"model": "served-name", "max_tokens": 64, )") + extra +
                        R"("messages": [{"role": "user", "content": "Weather in Paris and Tokyo?"}], "tools": )" +
                        kTools + "}";
  render.timeout = std::chrono::seconds(60);
  return render;
}

parsetier::FinishOptions StopAtImEnd() { return parsetier::FinishOptions::StopToken(kImEnd); }

std::vector<parsetier::Step> OnePerStep(const std::vector<uint32_t>& ids) {
  std::vector<parsetier::Step> steps;
  for (uint32_t id : ids) steps.push_back({id});
  return steps;
}

// The prompt ends in the generation prompt, the Open carries the request's tools and wire values,
// and the output parses, with that Open, into the calls and the chat completion body.
TEST(RenderLive, ThenParseWithItsOpen) {
  parsetier::RenderOptions render = Chat();
  render.request_id = "cpp-render";
  render.created = 1700000000;
  render.return_prompt_text = true;
  parsetier::RenderResult rendered = SharedClient().Render(render);
  const std::vector<uint32_t>& prompt = rendered.prompt_token_ids;
  ASSERT_GT(prompt.size(), 3u);
  EXPECT_TRUE(std::equal(kGenerationPrompt.begin(), kGenerationPrompt.end(), prompt.end() - 3));
  EXPECT_NE(rendered.prompt_text.find("<|im_start|>assistant\n"), std::string::npos);
  const v1::Open& open = rendered.open;
  EXPECT_EQ(open.model(), "qwen3");
  EXPECT_EQ(open.request_id(), "cpp-render");
  EXPECT_EQ(std::vector<uint32_t>(open.prompt_token_ids().begin(), open.prompt_token_ids().end()), prompt);
  EXPECT_NE(open.tools_json().find("get_weather"), std::string::npos);
  EXPECT_EQ(open.wire().dialect(), v1::WIRE_DIALECT_OPENAI_CHAT);
  EXPECT_EQ(open.wire().model(), "served-name");
  EXPECT_EQ(open.wire().created(), 1700000000);
  EXPECT_EQ(open.wire().prompt_tokens(), prompt.size());
  EXPECT_EQ(open.wire().response_id().rfind("chatcmpl-", 0), 0u) << open.wire().response_id();
  EXPECT_EQ(rendered.sampling.max_tokens(), 64u);
  EXPECT_EQ(rendered.n(), 1u);
  const auto& stops = rendered.sampling.stop_token_ids();
  EXPECT_NE(std::find(stops.begin(), stops.end(), kImEnd), stops.end());
  EXPECT_FALSE(rendered.constraint.has_value());

  parsetier::OpenOptions options = rendered.Options();
  options.timeout = std::chrono::seconds(60);
  parsetier::StreamResult result = SharedClient().ParseStream(options, OnePerStep(kOutput), StopAtImEnd());
  EXPECT_EQ(result.final.finish_reason(), v1::FINISH_REASON_TOOL_CALLS);
  ASSERT_EQ(result.final.message().tool_calls_size(), 2);
  EXPECT_EQ(result.final.message().tool_calls(0).arguments(), R"({"city": "Paris"})");
  Struct body = ParseJson(result.final.wire());  // not streamed: the whole chat completion body
  EXPECT_EQ(Field(body, "id").string_value(), open.wire().response_id());
  EXPECT_EQ(Field(body, "model").string_value(), "served-name");
  const Struct& choice = Field(body, "choices").list_value().values(0).struct_value();
  EXPECT_EQ(Field(choice, "finish_reason").string_value(), "tool_calls");
  EXPECT_EQ(Field(Field(body, "usage").struct_value(), "prompt_tokens").number_value(), prompt.size());
}

// An Anthropic Messages body renders; its Open answers in Anthropic's bytes (through ParseOnce).
TEST(RenderLive, AnthropicMessages) {
  parsetier::RenderOptions render;
  render.model = "qwen3";
  render.dialect = v1::WIRE_DIALECT_ANTHROPIC_MESSAGES;
  render.request_json = R"({"model": "claude-ish", "max_tokens": 100, "system": "Be brief.",
    "tools": [{"name": "get_weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}],
    "messages": [{"role": "user", "content": [{"type": "text", "text": "Weather in Paris and Tokyo?"}]}]})";
  parsetier::RenderResult rendered = SharedClient().Render(render);
  EXPECT_EQ(rendered.open.wire().dialect(), v1::WIRE_DIALECT_ANTHROPIC_MESSAGES);
  EXPECT_EQ(rendered.sampling.max_tokens(), 100u);
  v1::ParseOnceResponse once = SharedClient().ParseOnce(rendered.Options(), kOutput, StopAtImEnd());
  Struct message = ParseJson(once.final().wire());
  std::vector<std::string> kinds;
  for (const Value& block : Field(message, "content").list_value().values()) {
    kinds.push_back(Field(block.struct_value(), "type").string_value());
  }
  EXPECT_EQ(kinds, (std::vector<std::string>{"thinking", "text", "tool_use", "tool_use"}));
  EXPECT_EQ(Field(message, "stop_reason").string_value(), "tool_use");
}

// n choices are n sessions (Options(i)); a forced tool comes with its constraint.
TEST(RenderLive, ChoicesAndConstraint) {
  parsetier::RenderResult rendered = SharedClient().Render(Chat(R"("n": 3, "tool_choice": "required", )"));
  EXPECT_EQ(rendered.n(), 3u);
  EXPECT_EQ(rendered.Options(2).ToProto().choice_index(), 2u);
  EXPECT_EQ(rendered.Options().ToProto().model(), "qwen3");
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(rendered.Options().ToProto(), rendered.open));
  ASSERT_TRUE(rendered.constraint.has_value());
  EXPECT_FALSE(rendered.constraint->lark_grammar().empty());
}

// A refused request is the request's own status, with the API's error body to forward.
TEST(RenderLive, ErrorsCarryTheDialectsErrorBody) {
  parsetier::RenderOptions unknown = Chat();
  unknown.model = "no-such-model";
  if (std::optional<parsetier::Error> error = Refused(unknown, "an unknown model")) {
    EXPECT_EQ(error->code(), grpc::StatusCode::NOT_FOUND);
    EXPECT_EQ(error->http_status(), 404);
  }
  parsetier::RenderOptions image = Chat();
  image.request_json =
      R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]})";
  if (std::optional<parsetier::Error> error = Refused(image, "an image for a text model")) {
    EXPECT_EQ(error->code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_EQ(error->http_status(), 400);
    Struct wire = ParseJson(error->wire());
    const Struct& body = Field(wire, "error").struct_value();
    EXPECT_EQ(Field(body, "type").string_value(), "invalid_request_error");
    EXPECT_NE(Field(body, "message").string_value().find("messages[0].content[0]"), std::string::npos) << error->wire();
  }
  parsetier::RenderOptions no_dialect = Chat();
  no_dialect.dialect = v1::WIRE_DIALECT_UNSPECIFIED;
  if (std::optional<parsetier::Error> error = Refused(no_dialect, "a request without a dialect")) {
    EXPECT_EQ(error->code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_TRUE(error->wire().empty());
  }
}

}  // namespace
