// Replies larger than the server's --max-reply-bytes, which it sends in parts, reach the caller
// whole through Session and Batch. tests/test_cpp_client.py starts a server with a small limit
// and runs this program with PARSETIER_PARTS_SERVER (its host:port) and PARSETIER_PARTS_LIMIT.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "parsetier/batch.h"
#include "parsetier/client.h"
#include "test_support.h"

namespace {

using parsetier_test::Env;
namespace v1 = parsetier::v1;

constexpr uint32_t kHello = 9707;  // "Hello"
constexpr size_t kIds = 100000;    // 500 kB of content, in the deltas and again in the final

struct Parts : ::testing::Test {
  parsetier::Client client{Env("PARSETIER_PARTS_SERVER"), {parsetier::InsecureCredentials()}};
  size_t limit = std::stoul(Env("PARSETIER_PARTS_LIMIT"));
  std::vector<uint32_t> step = std::vector<uint32_t>(kIds, kHello);
  std::string want = [] {
    std::string text;
    for (size_t i = 0; i < kIds; ++i) text += "Hello";
    return text;
  }();

  parsetier::OpenOptions Open() { return parsetier_test::Qwen3Plain(std::chrono::seconds(60)); }
};

TEST_F(Parts, RawStreamIsInParts) {
  grpc::ClientContext context;
  auto stream = client.stub().Parse(&context);
  v1::ParseRequest request;
  *request.mutable_open() = Open().ToProto();
  request.add_steps()->mutable_token_ids()->Add(step.begin(), step.end());
  request.mutable_finish();
  ASSERT_TRUE(stream->Write(request));
  stream->WritesDone();
  int parts = 0;
  for (v1::ParseResponse reply; stream->Read(&reply); ++parts) {
    EXPECT_TRUE(reply.has_part());
    EXPECT_LE(reply.ByteSizeLong(), limit);
  }
  EXPECT_TRUE(stream->Finish().ok());
  EXPECT_GE(parts, 2) << "the reply should exceed the limit";
}

TEST_F(Parts, SessionJoinsThem) {
  parsetier::StreamResult result = client.ParseStream(Open(), {step});
  std::string content;
  for (const v1::Delta& delta : result.deltas) content += delta.content();
  EXPECT_EQ(content.size(), want.size());
  EXPECT_TRUE(content == want);
  EXPECT_TRUE(result.final.message().content() == want);
}

TEST_F(Parts, BatchJoinsThem) {
  auto batch = client.OpenBatch(std::chrono::seconds(60));
  batch->Open("big", Open());
  batch->Feed("big", {step});
  batch->Finish("big");
  std::vector<v1::SessionOutput> outputs = batch->Step();
  ASSERT_EQ(outputs.size(), 1u);
  EXPECT_TRUE(outputs[0].final().message().content() == want);
  EXPECT_TRUE(batch->Close().ok());
}

}  // namespace
