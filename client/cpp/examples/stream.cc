// Streams a recorded model output through a parsetier session and prints each delta as it
// arrives, then the final result.
//
//   parsetier_stream [--server HOST:PORT] [--model NAME] [--tools-json JSON] [RECORDING]
//
// RECORDING holds one decode step per line, the step's token ids separated by spaces (a
// serving stack's log of its forward passes). Without it, a built-in Qwen3 output is used:
// reasoning, an answer and two get_weather calls. The server defaults to $PARSETIER_SERVER,
// else 127.0.0.1:50051.
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "parsetier/client.h"

namespace {

const std::vector<uint32_t> kQwen3Output = {
    151667, 198,   23657, 9104,  624,   151668, 271,   40129, 2176,   9720,  624,    151657, 198,
    4913,   606,   788,   330,   455,   69364,  497,   330,   16370,  788,   5212,   8926,   788,
    330,    59604, 95642, 151658, 198,  151657, 198,   4913,  606,    788,   330,    455,    69364,
    497,    330,   16370, 788,   5212,  8926,   788,   330,   52854,  16032, 95642,  151658};
constexpr uint32_t kImEnd = 151645;
const char* kWeatherTools =
    R"([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", )"
    R"("properties": {"city": {"type": "string"}}, "required": ["city"]}}}])";

std::vector<parsetier::Step> ReadRecording(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::vector<parsetier::Step> steps;
  for (std::string line; std::getline(in, line);) {
    std::istringstream ids(line);
    parsetier::Step step;
    for (uint64_t id; ids >> id;) step.push_back(static_cast<uint32_t>(id));
    if (!step.empty()) steps.push_back(std::move(step));
  }
  return steps;
}

void PrintDelta(const parsetier::v1::Delta& delta) {
  if (!delta.reasoning().empty()) std::cout << "reasoning: " << delta.reasoning() << "\n";
  if (!delta.content().empty()) std::cout << "content:   " << delta.content() << "\n";
  for (const auto& call : delta.tool_calls()) {
    std::cout << "tool[" << call.index() << "]:   ";
    if (!call.name().empty()) std::cout << call.name() << " (" << call.id() << ") ";
    std::cout << call.arguments() << "\n";
  }
}

}  // namespace

int main(int argc, char** argv) {
  const char* env_server = std::getenv("PARSETIER_SERVER");
  std::string server = env_server ? env_server : "127.0.0.1:50051";
  parsetier::OpenOptions open;
  open.model = "qwen3";
  open.tools_json = kWeatherTools;
  open.request_id = "cpp-example";
  std::string recording;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if ((arg == "--server" || arg == "--model" || arg == "--tools-json") && i + 1 < argc) {
      std::string value = argv[++i];
      (arg == "--server" ? server : arg == "--model" ? open.model : open.tools_json) = value;
    } else if (!arg.empty() && arg[0] != '-') {
      recording = arg;
    } else {
      std::cerr << "usage: " << argv[0] << " [--server HOST:PORT] [--model NAME] [--tools-json JSON] [RECORDING]\n";
      return 2;
    }
  }

  try {
    std::vector<parsetier::Step> steps;
    if (recording.empty()) {
      for (uint32_t id : kQwen3Output) steps.push_back({id});
    } else {
      steps = ReadRecording(recording);
    }
    parsetier::Client client(server, {parsetier::InsecureCredentials()});

    // Push delivery: deltas are printed on gRPC's thread while this one sends the steps.
    std::mutex print;
    parsetier::SessionCallbacks callbacks;
    callbacks.on_message = [&](const parsetier::v1::ParseResponse& message) {
      std::lock_guard<std::mutex> lock(print);
      for (const auto& delta : message.deltas()) PrintDelta(delta);
    };
    std::unique_ptr<parsetier::Session> session = client.Open(open, callbacks);
    for (const parsetier::Step& step : steps) {
      if (!session->Send(step)) break;  // the server ended the stream; Wait says why
    }
    session->Finish(recording.empty() ? parsetier::FinishOptions::StopToken(kImEnd) : parsetier::FinishOptions{});
    grpc::Status status = session->Wait();
    if (!status.ok()) throw parsetier::Error(status);

    const parsetier::v1::Final final = *session->Final();
    std::cout << "finish_reason: " << parsetier::v1::FinishReason_Name(final.finish_reason())
              << "\ncompletion_tokens: " << final.usage().completion_tokens()
              << "\nreasoning_tokens: " << final.usage().reasoning_tokens()
              << "\ntool_calls: " << final.message().tool_calls_size() << "\n";
  } catch (const parsetier::Error& error) {
    std::cerr << "parsetier_stream: " << error.what() << "\n";
    return 1;
  } catch (const std::exception& error) {
    std::cerr << "parsetier_stream: " << error.what() << "\n";
    return 1;
  }
  return 0;
}
