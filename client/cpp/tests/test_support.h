// What the C++ tests share: the recorded output they stream (the real Qwen3 tokenizer's encoding
// of reasoning, an answer and two get_weather calls, as in the Go client's tests), its tools, and
// the environment variables tests/test_cpp_client.py passes.
#pragma once

#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "parsetier/client.h"

namespace parsetier_test {

// Whether two replies (ParseResponse, SessionOutput) are the same but for `client_messages`: it
// counts messages of the stream that carried the reply, so it restarts on a resumed stream.
template <typename Reply>
bool SameReply(const Reply& got, const Reply& want) {
  google::protobuf::util::MessageDifferencer differencer;
  differencer.IgnoreField(Reply::descriptor()->FindFieldByName("client_messages"));
  return differencer.Compare(got, want);
}

inline const std::vector<uint32_t> kOutput = {
    151667, 198,   23657, 9104,  624,   151668, 271,   40129, 2176,   9720,  624,    151657, 198,
    4913,   606,   788,   330,   455,   69364,  497,   330,   16370,  788,   5212,   8926,   788,
    330,    59604, 95642, 151658, 198,  151657, 198,   4913,  606,    788,   330,    455,    69364,
    497,    330,   16370, 788,   5212,  8926,   788,   330,   52854,  16032, 95642,  151658};
constexpr uint32_t kImEnd = 151645;  // <|im_end|>
inline const char* const kTools =
    R"([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", )"
    R"("properties": {"city": {"type": "string"}}, "required": ["city"]}}}])";

// A plain qwen3 session's options (no tools), with a deadline.
inline parsetier::OpenOptions Qwen3Plain(std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  parsetier::OpenOptions open;
  open.model = "qwen3";
  open.timeout = timeout;
  return open;
}

// An environment variable the driver sets; a failure naming it when unset.
inline std::string Env(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') {
    ADD_FAILURE() << name << " is not set: run this program through tests/test_cpp_client.py";
    return "";
  }
  return value;
}

// Plaintext client options with this resume policy (std::nullopt: resume off).
inline parsetier::ClientOptions InsecureOptions(std::optional<parsetier::ResumePolicy> resume) {
  parsetier::ClientOptions options;
  options.credentials = parsetier::InsecureCredentials();
  options.resume = resume;
  return options;
}

// The plaintext client of PARSETIER_SERVER that the live tests of one program share.
inline parsetier::Client& SharedClient() {
  static parsetier::Client client(Env("PARSETIER_SERVER"), {parsetier::InsecureCredentials()});
  return client;
}

// A retry budget spent in milliseconds: 3 attempts, backoff from 1 to 5 ms.
inline parsetier::ResumePolicy QuickBudget() {
  parsetier::ResumePolicy policy;
  policy.attempts = 3;
  policy.initial_backoff = std::chrono::milliseconds(1);
  policy.max_backoff = std::chrono::milliseconds(5);
  return policy;
}

// Resuming plaintext client options for a target behind nginx: a ping every second, as
// deploy/README.md asks of clients behind nginx, which may hold a stream's reset until the
// connection shows activity.
inline parsetier::ClientOptions BehindNginx() {
  parsetier::ClientOptions options = InsecureOptions(parsetier::ResumePolicy{});
  options.keepalive_time = std::chrono::seconds(1);
  options.keepalive_timeout = std::chrono::seconds(5);
  options.channel_arguments = [](grpc::ChannelArguments& args) {
    args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  };
  return options;
}

// A server a test signals mid-stream: its pid and target, passed as "pid@host:port".
struct Victim {
  pid_t pid = 0;
  std::string target;
};

inline Victim ParseVictim(const std::string& spec) {
  size_t at = spec.find('@');
  if (at == std::string::npos) return {};
  return {static_cast<pid_t>(std::stol(spec.substr(0, at))), spec.substr(at + 1)};
}

}  // namespace parsetier_test
