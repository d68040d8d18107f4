// Client: the channel, the unary calls, and the plain option structs' mapping to the proto.
#include <fstream>
#include <sstream>
#include <thread>

#include "parsetier/client.h"
#include "mux.h"
#include "wire.h"

namespace parsetier {

namespace {

std::string Describe(grpc::StatusCode code, const std::string& message) {
  return std::string(StatusCodeName(code)) + ": " + message;
}

void Check(const grpc::Status& status) {
  if (!status.ok()) throw Error(status);
}

// Throws a failed unary call's status with the error in its wire dialect.
void Check(const grpc::Status& status, const grpc::ClientContext& context) {
  if (!status.ok()) throw Error(status, internal::WireTrailer(context));
}

std::string ReadFile(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::invalid_argument(std::string("parsetier: cannot read the ") + what + " " + path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

Error::Error(const grpc::Status& status, std::string wire) : Error(status.error_code(), status.error_message()) {
  wire_ = std::move(wire);
}

int Error::http_status() const {
  switch (code_) {
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::FAILED_PRECONDITION:
    case grpc::StatusCode::OUT_OF_RANGE: return 400;
    case grpc::StatusCode::UNAUTHENTICATED: return 401;
    case grpc::StatusCode::PERMISSION_DENIED: return 403;
    case grpc::StatusCode::NOT_FOUND: return 404;
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return 429;
    case grpc::StatusCode::DEADLINE_EXCEEDED: return 504;
    case grpc::StatusCode::UNAVAILABLE: return 503;
    default: return 500;
  }
}

Error::Error(grpc::StatusCode code, const std::string& message)
    : std::runtime_error(Describe(code, message)), code_(code), message_(message) {}

const char* StatusCodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK: return "OK";
    case grpc::StatusCode::CANCELLED: return "CANCELLED";
    case grpc::StatusCode::UNKNOWN: return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND: return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS: return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED: return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED: return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE: return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED: return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL: return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE: return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS: return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED: return "UNAUTHENTICATED";
    default: return "UNKNOWN_CODE";
  }
}

std::shared_ptr<grpc::ChannelCredentials> InsecureCredentials() { return grpc::InsecureChannelCredentials(); }

std::shared_ptr<grpc::ChannelCredentials> TlsCredentials(const std::string& root_certs_pem,
                                                         const std::string& cert_chain_pem,
                                                         const std::string& private_key_pem) {
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = root_certs_pem;
  options.pem_cert_chain = cert_chain_pem;
  options.pem_private_key = private_key_pem;
  return grpc::SslCredentials(options);
}

std::shared_ptr<grpc::ChannelCredentials> TlsCredentialsFromFiles(const std::string& ca_file,
                                                                  const std::string& cert_file,
                                                                  const std::string& key_file) {
  if (cert_file.empty() != key_file.empty()) {
    throw std::invalid_argument("parsetier: mutual TLS needs both a certificate and a key file");
  }
  return TlsCredentials(ca_file.empty() ? "" : ReadFile(ca_file, "CA file"),
                        cert_file.empty() ? "" : ReadFile(cert_file, "client certificate"),
                        key_file.empty() ? "" : ReadFile(key_file, "client key"));
}

v1::Open OpenOptions::ToProto() const {
  v1::Open open;
  open.set_model(model);
  open.set_request_id(request_id);
  open.set_tools_json(tools_json);
  if (tool_choice == "auto") {
    open.mutable_tool_choice()->set_mode(v1::TOOL_CHOICE_MODE_AUTO);
  } else if (tool_choice == "none") {
    open.mutable_tool_choice()->set_mode(v1::TOOL_CHOICE_MODE_NONE);
  } else if (tool_choice == "required") {
    open.mutable_tool_choice()->set_mode(v1::TOOL_CHOICE_MODE_REQUIRED);
  } else if (!tool_choice.empty()) {
    open.mutable_tool_choice()->set_function_name(tool_choice);
  }
  if (thinking) open.set_thinking(*thinking);
  open.mutable_prompt_token_ids()->Add(prompt_token_ids.begin(), prompt_token_ids.end());
  open.set_output(output);
  open.set_complete_tool_calls(complete_tool_calls);
  open.set_return_token_ids(return_token_ids);
  if (wire) *open.mutable_wire() = *wire;
  if (customize) customize(open);
  return open;
}

std::string Wire(const v1::ParseResponse& reply) {
  if (!reply.has_final()) return reply.wire();
  return reply.wire() + reply.final().wire();
}

v1::Step LogprobStep(const std::vector<uint32_t>& token_ids, const std::vector<float>& logprobs,
                     const std::vector<std::vector<Alternative>>& top) {
  v1::Step step;
  step.mutable_token_ids()->Add(token_ids.begin(), token_ids.end());
  v1::StepLogprobs* lp = step.mutable_logprobs();
  lp->mutable_token_logprobs()->Add(logprobs.begin(), logprobs.end());
  for (const auto& position : top) {
    for (const Alternative& alternative : position) {
      lp->add_top_token_ids(alternative.token_id);
      lp->add_top_logprobs(alternative.logprob);
    }
  }
  return step;
}

std::vector<v1::TokenLogprob> Logprobs(const std::vector<v1::Delta>& deltas) {
  std::vector<v1::TokenLogprob> out;
  for (const v1::Delta& delta : deltas) out.insert(out.end(), delta.logprobs().begin(), delta.logprobs().end());
  return out;
}

FinishOptions FinishOptions::StopToken(uint32_t id) {
  FinishOptions finish;
  finish.stop_token_id = id;
  return finish;
}

FinishOptions FinishOptions::WithOtherChoicesUsage(const std::vector<v1::Final>& others) const {
  FinishOptions finish = *this;
  finish.other_choices_usage = SumUsage(others);
  return finish;
}

v1::Finish FinishOptions::ToProto() const {
  v1::Finish finish;
  finish.set_reason(reason);
  if (stop_token_id) finish.set_stop_token_id(*stop_token_id);
  if (stop_string) finish.set_stop_string(*stop_string);
  if (other_choices_usage) *finish.mutable_other_choices_usage() = *other_choices_usage;
  return finish;
}

v1::Usage SumUsage(const std::vector<v1::Final>& finals) {
  v1::Usage sum;
  for (const v1::Final& final : finals) {
    sum.set_completion_tokens(sum.completion_tokens() + final.usage().completion_tokens());
    sum.set_reasoning_tokens(sum.reasoning_tokens() + final.usage().reasoning_tokens());
  }
  return sum;
}

namespace {

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& target, const ClientOptions& options) {
  if (!options.credentials) {
    throw std::invalid_argument(
        "parsetier: ClientOptions.credentials is unset: use TlsCredentials(), or InsecureCredentials() "
        "for a plaintext loopback or sidecar hop");
  }
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, static_cast<int>(options.keepalive_time.count()));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, static_cast<int>(options.keepalive_timeout.count()));
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 0);
  args.SetMaxReceiveMessageSize(kMaxReplyBytes);
  if (options.channel_arguments) options.channel_arguments(args);
  return grpc::CreateCustomChannel(target, options.credentials, args);
}

}  // namespace

Client::Client(const std::string& target, const ClientOptions& options)
    : Client(MakeChannel(target, options), options.bearer_token, options.resume, options.multiplex) {}

Client::Client(std::shared_ptr<grpc::ChannelInterface> channel, std::string bearer_token,
               std::optional<ResumePolicy> resume, std::optional<MultiplexOptions> multiplex)
    : channel_(std::move(channel)),
      stub_(v1::ParserService::NewStub(channel_)),
      bearer_token_(std::move(bearer_token)),
      resume_(resume) {
  if (multiplex) mux_ = std::make_shared<internal::Multiplexer>(*this, *multiplex);
}

Client::~Client() {
  if (mux_) mux_->Stop();  // its sessions end (CANCELLED) and its thread stops using the stub
}

void Client::Prepare(grpc::ClientContext& context, std::chrono::milliseconds timeout) const {
  if (timeout.count() > 0) context.set_deadline(std::chrono::system_clock::now() + timeout);
  if (!bearer_token_.empty()) context.AddMetadata("authorization", "Bearer " + bearer_token_);
}

std::function<void(grpc::ClientContext&)> Client::Preparer(std::chrono::milliseconds timeout) const {
  std::optional<std::chrono::system_clock::time_point> deadline;
  if (timeout.count() > 0) deadline = std::chrono::system_clock::now() + timeout;
  return [deadline, token = bearer_token_](grpc::ClientContext& context) {
    if (deadline) context.set_deadline(*deadline);
    if (!token.empty()) context.AddMetadata("authorization", "Bearer " + token);
  };
}

v1::ParseOnceResponse Client::ParseOnce(const OpenOptions& options, const std::vector<uint32_t>& token_ids,
                                        const FinishOptions& finish) {
  v1::ParseOnceRequest request;
  *request.mutable_open() = options.ToProto();
  request.mutable_token_ids()->Add(token_ids.begin(), token_ids.end());
  *request.mutable_finish() = finish.ToProto();
  grpc::ClientContext context;
  Prepare(context, options.timeout);
  v1::ParseOnceResponse response;
  Check(stub_->ParseOnce(&context, request, &response), context);
  return response;
}

v1::RenderRequest RenderOptions::ToProto() const {
  v1::RenderRequest request;
  request.set_model(model);
  request.set_dialect(dialect);
  request.set_request_json(request_json);
  request.set_request_id(request_id);
  request.set_response_id(response_id);
  request.set_created(created);
  request.set_chat_template(chat_template);
  request.set_return_prompt_text(return_prompt_text);
  return request;
}

OpenOptions RenderResult::Options(uint32_t choice) const {
  OpenOptions options;
  options.model = open.model();
  options.customize = [open = open, choice](v1::Open& message) {
    message = open;
    message.set_choice_index(choice);
  };
  return options;
}

RenderResult Client::Render(const RenderOptions& options) {
  grpc::ClientContext context;
  Prepare(context, options.timeout);
  v1::RenderResponse response;
  Check(stub_->Render(&context, options.ToProto(), &response), context);
  RenderResult result;
  result.prompt_token_ids.assign(response.prompt_token_ids().begin(), response.prompt_token_ids().end());
  result.open = std::move(*response.mutable_open());
  result.sampling = std::move(*response.mutable_sampling());
  if (response.has_constraint()) result.constraint = std::move(*response.mutable_constraint());
  result.prompt_text = std::move(*response.mutable_prompt_text());
  return result;
}

v1::BuildConstraintResponse Client::BuildConstraint(const OpenOptions& options) {
  v1::BuildConstraintRequest request;
  *request.mutable_open() = options.ToProto();
  grpc::ClientContext context;
  Prepare(context, options.timeout);
  v1::BuildConstraintResponse response;
  Check(stub_->BuildConstraint(&context, request, &response));
  return response;
}

std::vector<v1::ModelInfo> Client::ListModels(std::chrono::milliseconds timeout) {
  grpc::ClientContext context;
  Prepare(context, timeout);
  v1::ListModelsResponse response;
  Check(stub_->ListModels(&context, v1::ListModelsRequest(), &response));
  return {response.models().begin(), response.models().end()};
}

StreamResult Client::ParseStream(const OpenOptions& options, const std::vector<Step>& steps,
                                 const FinishOptions& finish) {
  std::unique_ptr<Session> session = Open(options);
  std::thread sender([&] {
    for (const Step& step : steps) {
      if (!session->Send(step)) return;  // the stream ended: Next reports why
    }
    session->Finish(finish);
  });
  StreamResult result;
  try {
    while (std::optional<v1::ParseResponse> message = session->Next()) {
      result.deltas.insert(result.deltas.end(), message->deltas().begin(), message->deltas().end());
      result.wire += Wire(*message);
    }
  } catch (...) {
    session->Cancel();  // unblocks the sender
    sender.join();
    throw;
  }
  sender.join();
  result.final = *session->Final();
  return result;
}

}  // namespace parsetier
