// Drives a parsetier server with many concurrent sessions of one recorded output and reports
// what it achieved, to measure a deployment (or this client) under a known load.
//
//   parsetier_load --server HOST:PORT --ids FILE [--sessions N] [--concurrency C]
//                  [--steps-per-message K] [--tools-json JSON] [--model NAME] [--stop-token ID] [--batch]
//                  [--no-resume] [--multiplex]
//
// FILE holds the output's token ids separated by white space. Each of C threads runs sessions
// back to back until N have run: it sends the whole output, each token its own decode step, K
// steps to a message, while the replies arrive through callbacks on gRPC's threads. With --batch,
// one thread drives one ParseBatch stream carrying C sessions at once instead (a serving loop's
// batch): each message holds every live session's next K steps, or its Finish, and a finished
// session's slot takes the next one. With --multiplex, the sessions are those of a multiplexed
// client (ClientOptions::multiplex, flushed when the flushing thread is free), the rest as
// without it. Prints one JSON line: tokens, sessions and wall-clock seconds.
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <iostream>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "parsetier/batch.h"
#include "parsetier/client.h"

namespace {

std::vector<uint32_t> ReadIds(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::vector<uint32_t> ids;
  for (uint64_t id; in >> id;) ids.push_back(static_cast<uint32_t>(id));
  if (ids.empty()) throw std::runtime_error(path + ": no token ids");
  return ids;
}

// One session: the output in messages of per_message one-token steps; returns its token count.
uint32_t RunSession(parsetier::Client& client, const parsetier::OpenOptions& open, const std::vector<uint32_t>& ids,
                    size_t per_message, uint32_t stop_token) {
  std::unique_ptr<parsetier::Session> session = client.Open(open, {[](const parsetier::v1::ParseResponse&) {}, {}});
  std::vector<parsetier::Step> steps;
  for (size_t i = 0; i < ids.size(); ++i) {
    steps.push_back({ids[i]});
    if (steps.size() == per_message || i + 1 == ids.size()) {
      if (!session->SendSteps(steps)) break;
      steps.clear();
    }
  }
  session->Finish(parsetier::FinishOptions::StopToken(stop_token));
  grpc::Status status = session->Wait();
  if (!status.ok()) throw parsetier::Error(status);
  return session->Final()->usage().completion_tokens();
}

// Sessions over one ParseBatch stream, `concurrency` live at once; returns the tokens they counted.
uint64_t RunBatch(parsetier::Client& client, const parsetier::OpenOptions& open, const std::vector<uint32_t>& ids,
                  long sessions, long concurrency, size_t per_message, uint32_t stop_token) {
  struct Slot {
    std::string key;
    size_t next = 0;
    bool finishing = false;
  };
  std::unique_ptr<parsetier::Batch> batch = client.OpenBatch();
  std::vector<std::optional<Slot>> slots(static_cast<size_t>(concurrency));
  uint64_t tokens = 0;
  long started = 0;
  while (true) {
    bool live = false;
    for (auto& slot : slots) {
      if (!slot && started < sessions) {
        slot = Slot{"s" + std::to_string(started++)};
        batch->Open(slot->key, open);
      }
      if (!slot) continue;
      live = true;
      if (slot->next < ids.size()) {
        std::vector<parsetier::Step> steps;
        for (; slot->next < ids.size() && steps.size() < per_message; ++slot->next) steps.push_back({ids[slot->next]});
        batch->Feed(slot->key, steps);
      } else {
        batch->Finish(slot->key, parsetier::FinishOptions::StopToken(stop_token));
        slot->finishing = true;
      }
    }
    if (!live) break;
    std::unordered_map<std::string, uint32_t> finals;
    for (const parsetier::v1::SessionOutput& output : batch->Step()) {
      if (std::optional<parsetier::Error> error = parsetier::SessionError(output)) throw *error;
      if (output.has_final()) finals[output.key()] = output.final().usage().completion_tokens();
    }
    for (auto& slot : slots) {
      if (slot && slot->finishing) {
        tokens += finals[slot->key];
        slot.reset();
      }
    }
  }
  grpc::Status status = batch->Close();
  if (!status.ok()) throw parsetier::Error(status);
  return tokens;
}

}  // namespace

int main(int argc, char** argv) {
  std::string server = "127.0.0.1:50051", ids_path;
  parsetier::OpenOptions open;
  open.model = "qwen3";
  long sessions = 100, concurrency = 8, per_message = 1, stop_token = 151645;
  bool batch = false;
  parsetier::ClientOptions options{parsetier::InsecureCredentials()};
  for (int i = 1; i < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--batch" || flag == "--no-resume" || flag == "--multiplex") {
      if (flag == "--batch") batch = true;
      if (flag == "--multiplex") options.multiplex = parsetier::MultiplexOptions{};
      if (flag == "--no-resume") options.resume = std::nullopt;  // no ledger is kept
      --i;  // a switch: no value
      continue;
    }
    if (i + 1 == argc) {
      std::cerr << "parsetier_load: " << flag << " needs a value\n";
      return 2;
    }
    std::string value = argv[i + 1];
    if (flag == "--server") server = value;
    else if (flag == "--ids") ids_path = value;
    else if (flag == "--model") open.model = value;
    else if (flag == "--tools-json") open.tools_json = value;
    else if (flag == "--sessions") sessions = std::stol(value);
    else if (flag == "--concurrency") concurrency = std::stol(value);
    else if (flag == "--steps-per-message") per_message = std::stol(value);
    else if (flag == "--stop-token") stop_token = std::stol(value);
    else {
      std::cerr << "parsetier_load: unknown flag " << flag << "\n";
      return 2;
    }
  }
  try {
    const std::vector<uint32_t> ids = ReadIds(ids_path);
    parsetier::Client client(server, options);
    if (batch) {
      auto start = std::chrono::steady_clock::now();
      uint64_t tokens = RunBatch(client, open, ids, sessions, concurrency, static_cast<size_t>(per_message),
                                 static_cast<uint32_t>(stop_token));
      double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::cout << "{\"tokens\": " << tokens << ", \"sessions\": " << sessions << ", \"seconds\": " << seconds << "}\n";
      return 0;
    }
    std::atomic<long> next{0};
    std::atomic<uint64_t> tokens{0};
    std::atomic<bool> failed{false};
    auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> workers;
    for (long w = 0; w < concurrency; ++w) {
      workers.emplace_back([&] {
        try {
          while (!failed && next.fetch_add(1) < sessions) {
            tokens += RunSession(client, open, ids, static_cast<size_t>(per_message), static_cast<uint32_t>(stop_token));
          }
        } catch (const std::exception& error) {
          std::cerr << "parsetier_load: " << error.what() << "\n";
          failed = true;
        }
      });
    }
    for (auto& worker : workers) worker.join();
    if (failed) return 1;
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::cout << "{\"tokens\": " << tokens << ", \"sessions\": " << sessions << ", \"seconds\": " << seconds << "}\n";
  } catch (const std::exception& error) {
    std::cerr << "parsetier_load: " << error.what() << "\n";
    return 1;
  }
  return 0;
}
