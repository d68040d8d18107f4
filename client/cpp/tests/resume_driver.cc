// The C++ client's driver for the resume scenario corpus (tests/resume_scenarios/README.md): it
// reads one driver script (a JSON line) on stdin, runs its ops through the client's public API —
// the batch API, or one Parse session per key (with the argument "multiplex", sessions of a
// multiplexed client: ClientOptions::multiplex) — prints {"paused": NAME} at each pause and waits
// for a line on stdin, and ends with one {"result": ...} line. It knows no scenario:
// tests/test_resume_scenarios.py expands the corpus and judges. JSON is read and written as
// google.protobuf.Struct, so the driver needs nothing but protobuf.
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "parsetier/batch.h"
#include "parsetier/client.h"

namespace {

using google::protobuf::ListValue;
using google::protobuf::Struct;
using google::protobuf::Value;
namespace v1 = parsetier::v1;

std::string Base64(const std::string& bytes) {
  static const char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < bytes.size(); i += 3) {
    uint32_t chunk = static_cast<uint8_t>(bytes[i]) << 16;
    if (i + 1 < bytes.size()) chunk |= static_cast<uint8_t>(bytes[i + 1]) << 8;
    if (i + 2 < bytes.size()) chunk |= static_cast<uint8_t>(bytes[i + 2]);
    for (size_t k = 0; k < 4; ++k) out += i + k <= bytes.size() ? kAlphabet[(chunk >> (18 - 6 * k)) & 63] : '=';
  }
  return out;
}

template <typename Message>
Value Encoded(const Message& message) {
  std::string bytes;
  google::protobuf::io::StringOutputStream stream(&bytes);
  google::protobuf::io::CodedOutputStream coded(&stream);
  coded.SetSerializationDeterministic(true);
  message.SerializeToCodedStream(&coded);
  coded.Trim();
  Value value;
  value.set_string_value(Base64(bytes));
  return value;
}

Value Failure(grpc::StatusCode code, const std::string& message) {
  Value value;
  auto& fields = *value.mutable_struct_value()->mutable_fields();
  fields["code"].set_string_value(parsetier::StatusCodeName(code));
  fields["message"].set_string_value(message);
  return value;
}

Value Null() {
  Value value;
  value.set_null_value(google::protobuf::NULL_VALUE);
  return value;
}

void Say(const Struct& line) {
  std::string json;
  (void)google::protobuf::util::MessageToJsonString(line, &json);
  std::cout << json << std::endl;
}

void Pause(const std::string& name) {
  Struct line;
  (*line.mutable_fields())["paused"].set_string_value(name);
  Say(line);
  std::string ignored;
  std::getline(std::cin, ignored);
}

const Value& Field(const Struct& s, const std::string& name) {
  static const Value kNone;
  auto found = s.fields().find(name);
  return found == s.fields().end() ? kNone : found->second;
}

std::vector<uint32_t> Ids(const Value& list) {
  std::vector<uint32_t> ids;
  for (const Value& id : list.list_value().values()) ids.push_back(static_cast<uint32_t>(id.number_value()));
  return ids;
}

parsetier::OpenOptions Open(const Struct& spec) {
  static const std::map<std::string, v1::OutputKind> kOutputs = {
      {"deltas", v1::OUTPUT_KIND_DELTAS},
      {"events", v1::OUTPUT_KIND_EVENTS},
      {"both", v1::OUTPUT_KIND_DELTAS_AND_EVENTS},
      {"final", v1::OUTPUT_KIND_FINAL_ONLY}};
  parsetier::OpenOptions options;
  options.model = Field(spec, "model").string_value();
  options.request_id = Field(spec, "request_id").string_value();
  options.tools_json = Field(spec, "tools_json").string_value();
  options.prompt_token_ids = Ids(Field(spec, "prompt_token_ids"));
  auto output = kOutputs.find(Field(spec, "output").string_value());
  options.output = output == kOutputs.end() ? v1::OUTPUT_KIND_DELTAS : output->second;
  return options;
}

parsetier::FinishOptions Finish(const Struct& action) {
  const std::string& reason = Field(action, "reason").string_value();
  parsetier::FinishOptions finish;
  if (reason == "length") finish.reason = v1::FINISH_REASON_LENGTH;
  if (reason == "abort") finish.reason = v1::FINISH_REASON_ABORT;
  return finish;
}

Struct RunBatch(parsetier::Client& client, const Struct& script, std::chrono::milliseconds timeout) {
  Struct result;
  auto& fields = *result.mutable_fields();
  ListValue& replies = *fields["replies"].mutable_list_value();
  fields["error"] = Null();
  std::unique_ptr<parsetier::Batch> batch = client.OpenBatch(2 * timeout);
  auto receive = [&] {
    std::vector<v1::SessionOutput> outputs = batch->Recv();
    auto& reply = *replies.add_values()->mutable_struct_value()->mutable_fields();
    for (const v1::SessionOutput& output : outputs) reply[output.key()] = Encoded(output);
  };
  try {
    for (const Value& op : Field(script, "ops").list_value().values()) {
      const Struct& o = op.struct_value();
      if (o.fields().count("send") > 0) {
        for (const Value& a : Field(o, "send").list_value().values()) {
          const Struct& action = a.struct_value();
          const std::string& kind = Field(action, "op").string_value();
          const std::string& key = Field(action, "key").string_value();
          if (kind == "open") batch->Open(key, Open(Field(action, "open").struct_value()));
          if (kind == "feed") batch->Feed(key, {Ids(Field(action, "ids"))});
          if (kind == "finish") batch->Finish(key, Finish(action));
          if (kind == "cancel") batch->Cancel(key);
        }
        batch->Send();
      } else if (o.fields().count("receive") > 0) {
        const Value& count = Field(o, "receive");
        int n = count.has_number_value() ? static_cast<int>(count.number_value()) : batch->in_flight();
        for (int i = 0; i < n; ++i) receive();
      } else if (o.fields().count("pause") > 0) {
        Pause(Field(o, "pause").string_value());
      }
    }
    while (batch->in_flight() > 0) receive();
    grpc::Status status = batch->Close();
    if (!status.ok()) fields["error"] = Failure(status.error_code(), status.error_message());
  } catch (const parsetier::Error& error) {
    fields["error"] = Failure(error.code(), error.message());
  }
  fields["resumes"].set_number_value(batch->Resumes());
  return result;
}

// One Parse session's result, filled by its callbacks.
struct SessionRun {
  std::mutex mu;
  Struct result;
  std::unique_ptr<parsetier::Session> session;
};

Struct RunParse(parsetier::Client& client, const Struct& script, std::chrono::milliseconds timeout) {
  std::map<std::string, std::unique_ptr<SessionRun>> runs;
  for (const Value& op : Field(script, "ops").list_value().values()) {
    const Struct& o = op.struct_value();
    for (const Value& a : Field(o, "send").list_value().values()) {
      const Struct& action = a.struct_value();
      const std::string& kind = Field(action, "op").string_value();
      const std::string& key = Field(action, "key").string_value();
      if (kind == "open") {
        auto run = std::make_unique<SessionRun>();
        SessionRun* r = run.get();
        auto& fields = *r->result.mutable_fields();
        fields["replies"].mutable_list_value();
        fields["error"] = Null();
        parsetier::SessionCallbacks callbacks;
        callbacks.on_message = [r](const v1::ParseResponse& message) {
          std::lock_guard<std::mutex> lock(r->mu);
          *(*r->result.mutable_fields())["replies"].mutable_list_value()->add_values() = Encoded(message);
        };
        callbacks.on_done = [r](const grpc::Status& status) {
          std::lock_guard<std::mutex> lock(r->mu);
          if (!status.ok()) (*r->result.mutable_fields())["error"] = Failure(status.error_code(), status.error_message());
        };
        parsetier::OpenOptions options = Open(Field(action, "open").struct_value());
        options.timeout = 2 * timeout;
        try {
          r->session = client.Open(options, std::move(callbacks));
        } catch (const parsetier::Error& error) {
          fields["error"] = Failure(error.code(), error.message());
        }
        runs[key] = std::move(run);
        continue;
      }
      auto found = runs.find(key);
      if (found == runs.end() || found->second->session == nullptr) continue;
      parsetier::Session& session = *found->second->session;
      if (kind == "feed") session.Send(Ids(Field(action, "ids")));  // a break is on_done's to report
      if (kind == "finish") session.Finish(Finish(action));
    }
    if (o.fields().count("pause") > 0) Pause(Field(o, "pause").string_value());
  }
  Struct sessions;
  for (auto& [key, run] : runs) {
    if (run->session != nullptr) {
      run->session->Wait();
      (*run->result.mutable_fields())["resumes"].set_number_value(run->session->Resumes());
    } else {
      (*run->result.mutable_fields())["resumes"].set_number_value(0);
    }
    std::lock_guard<std::mutex> lock(run->mu);
    *(*sessions.mutable_fields())[key].mutable_struct_value() = run->result;
  }
  Struct result;
  *(*result.mutable_fields())["sessions"].mutable_struct_value() = sessions;
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  const bool multiplex = argc > 1 && std::string(argv[1]) == "multiplex";
  std::string line;
  std::getline(std::cin, line);
  Struct script;
  if (!google::protobuf::util::JsonStringToMessage(line, &script).ok()) {
    std::cerr << "script: not JSON" << std::endl;
    return 2;
  }
  parsetier::ClientOptions options;
  options.credentials = parsetier::InsecureCredentials();
  if (!Field(script, "resume").bool_value()) options.resume = std::nullopt;
  if (multiplex) options.multiplex = parsetier::MultiplexOptions{};
  const Value& keepalive = Field(script, "keepalive_ms");
  if (keepalive.has_number_value()) {
    options.keepalive_time = std::chrono::milliseconds(static_cast<int64_t>(keepalive.number_value()));
    options.channel_arguments = [](grpc::ChannelArguments& args) {
      args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
    };
  }
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(Field(script, "timeout").number_value() * 1000));
  parsetier::Client client(Field(script, "target").string_value(), options);
  Struct line_out;
  auto& result = *(*line_out.mutable_fields())["result"].mutable_struct_value();
  result = Field(script, "api").string_value() == "batch" ? RunBatch(client, script, timeout)
                                                          : RunParse(client, script, timeout);
  Say(line_out);
  return 0;
}
