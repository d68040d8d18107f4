// WireJoin: the sessions of a request's n > 1 choices joined into one response, as the Go
// client's TestWireJoin (two choices over a ParseBatch stream against PARSETIER_SERVER) and
// without a server (ordering, failure, bodies joined byte for byte).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include "parsetier/batch.h"
#include "parsetier/wire_join.h"
#include "test_support.h"

namespace {

namespace v1 = parsetier::v1;

using parsetier_test::kImEnd;
using parsetier_test::kOutput;
using parsetier_test::kTools;

parsetier::Client& SharedClient() {
  const char* target = std::getenv("PARSETIER_SERVER");
  static parsetier::Client client(target ? target : "", {parsetier::InsecureCredentials()});
  return client;
}

v1::ParseResponse Reply(const std::string& wire, std::optional<std::string> last = std::nullopt) {
  v1::ParseResponse reply;
  reply.set_wire(wire);
  if (last) reply.mutable_final()->set_wire(*last);
  return reply;
}

google::protobuf::Struct Json(const std::string& text) {
  google::protobuf::Struct out;
  auto status = google::protobuf::util::JsonStringToMessage(text, &out);
  EXPECT_TRUE(status.ok()) << status.ToString() << ": " << text;
  return out;
}

// One choice's bytes pass through unchanged, whatever the dialect: a gateway joins every
// request's sessions with one WireJoin, n = 1 included.
TEST(WireJoin, OneChoicePassesThrough) {
  const std::string body = R"({"id":"msg_1","type":"message","content":[{"type":"text","text":"<&>"}]})";
  parsetier::WireJoin join(1, false);
  EXPECT_EQ(join.Add(0, Reply("", body)), body);
  EXPECT_TRUE(join.ended());
  parsetier::WireJoin events(1, true);
  std::string first = events.Add(0, Reply("event: a\n\n"));
  std::string last = events.Add(0, Reply("event: b\n\n", "event: c\n\n"));
  EXPECT_EQ(first + last, "event: a\n\nevent: b\n\nevent: c\n\n");
  EXPECT_TRUE(events.ended());
  EXPECT_THROW(parsetier::WireJoin(0, true), std::invalid_argument);
}

// Streamed: choice 1's events wait for choice 0's first; only the last final goes out.
TEST(WireJoin, StreamedChoicesStartInIndexOrder) {
  parsetier::WireJoin join(2, true);
  EXPECT_EQ(join.Add(1, Reply("one-a ")), "");
  EXPECT_EQ(join.Add(0, Reply("zero-a ")), "zero-a one-a ");
  EXPECT_EQ(join.Add(1, Reply("one-b ", "one-end ")), "one-b ");
  EXPECT_EQ(join.Add(0, Reply("zero-b ", "zero-end ")), "zero-b zero-end ");
  EXPECT_TRUE(join.ended());
  EXPECT_EQ(join.Add(0, Reply("late")), "");
  EXPECT_THROW(join.Add(2, Reply("")), std::out_of_range);
}

// A batch output that ended its session with a status ends the response with its bytes; so does
// a Parse session's Error, through Fail.
TEST(WireJoin, AFailedChoiceEndsTheResponse) {
  parsetier::WireJoin join(2, true);
  EXPECT_EQ(join.Add(1, Reply("held ")), "");
  v1::SessionOutput failed;
  failed.mutable_status()->set_wire("error");
  EXPECT_EQ(join.Add(0, failed), "error");
  EXPECT_TRUE(join.ended());
  EXPECT_EQ(join.Add(1, Reply("more")), "");
  parsetier::WireJoin other(2, true);
  EXPECT_EQ(other.Fail(parsetier::Error(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "x"), "event")), "event");
  EXPECT_EQ(other.Fail(parsetier::Error(grpc::StatusCode::INVALID_ARGUMENT, "x")), "");
}

// Bodies: entries sorted by their index (whatever the feeding order), strings with brackets,
// quotes and escapes kept byte for byte, the last body's other members kept.
TEST(WireJoin, BodiesJoinInIndexOrder) {
  auto entry = [](int index) {
    return R"({"text":"a\"]}[\\", "index" : )" + std::to_string(index) + R"(, "x":[1,{"y":null}]})";
  };
  auto body = [&](int index, int usage) {
    return R"({ "id" : "c", "choices" : [ )" + entry(index) + R"( ], "usage":{"n":)" + std::to_string(usage) + "}}";
  };
  parsetier::WireJoin join(3, false);
  EXPECT_EQ(join.Add(2, Reply("", body(2, 7))), "");
  EXPECT_EQ(join.Add(0, Reply("", body(0, 5))), "");
  EXPECT_EQ(join.Add(1, Reply("", body(1, 9))),
            R"({ "id" : "c", "choices" : [)" + entry(0) + "," + entry(1) + "," + entry(2) + R"(], "usage":{"n":9}})");
  parsetier::WireJoin broken(2, false);
  broken.Add(0, Reply("", R"({"choices":[{"index":0}]})"));
  EXPECT_THROW(broken.Add(1, Reply("", R"({"id":"c"})")), parsetier::Error);
}

// Two choices of one chat request over a ParseBatch stream, their outputs fed to WireJoin with
// choice 1 ahead of choice 0: the joined stream starts every choice in index order, ends with
// one usage chunk counting both and one [DONE]; the joined body holds both choices in index
// order and the usage of both.
TEST(WireJoinLive, TwoChoicesOfABatch) {
  for (bool stream : {true, false}) {
    SCOPED_TRACE(stream ? "stream" : "body");
    auto batch = SharedClient().OpenBatch(std::chrono::seconds(60));
    parsetier::WireJoin join(2, stream);
    v1::WireOptions wire;
    wire.set_dialect(v1::WIRE_DIALECT_OPENAI_CHAT);
    wire.set_response_id("chatcmpl-n");
    wire.set_stream(stream);
    wire.set_include_usage(true);
    const std::vector<std::string> keys = {"c0", "c1"};
    for (size_t i = 0; i < keys.size(); ++i) {
      parsetier::OpenOptions open;
      open.model = "qwen3";
      open.tools_json = kTools;
      open.request_id = "cpp-join";
      open.output = v1::OUTPUT_KIND_FINAL_ONLY;
      open.wire = wire;
      open.customize = [i](v1::Open& message) { message.set_choice_index(static_cast<uint32_t>(i)); };
      batch->Open(keys[i], open);
    }
    std::string out;
    std::map<std::string, v1::Final> finals;
    auto feed = [&](std::vector<v1::SessionOutput> outputs) {
      std::sort(outputs.begin(), outputs.end(), [](const auto& a, const auto& b) { return a.key() > b.key(); });
      for (const v1::SessionOutput& output : outputs) {  // c1 first
        out += join.Add(output.key() == "c0" ? 0 : 1, output);
        if (output.has_final()) finals[output.key()] = output.final();
      }
    };
    for (uint32_t id : kOutput) {
      batch->Feed("c0", {{id}});
      batch->Feed("c1", {{id}});
      feed(batch->Step());
    }
    const parsetier::FinishOptions stop = parsetier::FinishOptions::StopToken(kImEnd);
    batch->Finish("c0", stop);
    feed(batch->Step());
    ASSERT_EQ(finals.count("c0"), 1u);
    batch->Finish("c1", stop.WithOtherChoicesUsage({finals["c0"]}));
    feed(batch->Step());
    EXPECT_TRUE(batch->Close().ok());
    ASSERT_TRUE(join.ended());
    const double total = finals["c0"].usage().completion_tokens() + finals["c1"].usage().completion_tokens();
    if (!stream) {
      google::protobuf::Struct body = Json(out);
      const auto& choices = body.fields().at("choices").list_value().values();
      ASSERT_EQ(choices.size(), 2) << out;
      EXPECT_EQ(choices[0].struct_value().fields().at("index").number_value(), 0);
      EXPECT_EQ(choices[1].struct_value().fields().at("index").number_value(), 1);
      EXPECT_EQ(choices[1].struct_value().fields().at("finish_reason").string_value(), "tool_calls");
      EXPECT_EQ(body.fields().at("usage").struct_value().fields().at("completion_tokens").number_value(), total);
      continue;
    }
    const std::string done = "data: [DONE]\n\n";
    ASSERT_GE(out.size(), done.size());
    EXPECT_EQ(out.substr(out.size() - done.size()), done);
    EXPECT_EQ(out.find("[DONE]"), out.size() - done.size() + 6) << "one [DONE]";
    std::vector<double> seen;
    int usages = 0;
    for (size_t at = 0; at < out.size() - done.size();) {
      size_t end = out.find("\n\n", at);
      ASSERT_NE(end, std::string::npos);
      std::string event = out.substr(at, end - at);
      at = end + 2;
      ASSERT_EQ(event.rfind("data: ", 0), 0u) << event;
      google::protobuf::Struct chunk = Json(event.substr(6));
      auto usage = chunk.fields().find("usage");
      if (usage != chunk.fields().end() && usage->second.has_struct_value()) {
        ++usages;
        EXPECT_EQ(usage->second.struct_value().fields().at("completion_tokens").number_value(), total);
      }
      for (const auto& choice : chunk.fields().at("choices").list_value().values()) {
        double index = choice.struct_value().fields().at("index").number_value();
        if (std::find(seen.begin(), seen.end(), index) == seen.end()) seen.push_back(index);
      }
    }
    EXPECT_EQ(seen, (std::vector<double>{0, 1}));
    EXPECT_EQ(usages, 1);
  }
}

// A choice's Parse session that fails ends the response with its error in the dialect: the
// Error Session::Next throws carries it (wire()), and Fail forwards it.
TEST(WireJoinLive, AFailedParseSessionEndsTheResponse) {
  parsetier::OpenOptions open;
  open.model = "qwen3";
  v1::WireOptions wire;
  wire.set_dialect(v1::WIRE_DIALECT_OPENAI_CHAT);
  wire.set_response_id("chatcmpl-e");
  wire.set_stream(true);
  open.wire = wire;
  open.customize = [](v1::Open& message) { message.set_choice_index(1); };
  auto session = SharedClient().Open(open);
  ASSERT_TRUE(session->SendSteps(std::vector<parsetier::Step>{{9707}, {10000000}}));
  parsetier::WireJoin join(2, true);
  std::string out;
  std::optional<parsetier::Error> failed;
  try {
    while (std::optional<v1::ParseResponse> reply = session->Next()) out += join.Add(1, *reply);
  } catch (const parsetier::Error& error) {
    failed = error;
  }
  ASSERT_TRUE(failed.has_value());
  EXPECT_EQ(failed->code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(out, "") << "choice 1's events wait for choice 0's first";
  out = join.Fail(*failed);
  EXPECT_EQ(out.rfind("data: {\"error\":", 0), 0u) << out;
  EXPECT_EQ(out, failed->wire());
  EXPECT_TRUE(join.ended());
  EXPECT_EQ(join.Fail(*failed), "");
}

}  // namespace
