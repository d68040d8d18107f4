// The C++ client's TLS, mutual TLS and bearer tokens against a server started with
// --tls-cert/--tls-key, --tls-client-ca and --auth-tokens. tests/test_cpp_client.py starts that
// server and runs this program with PARSETIER_SECURE_{SERVER,CA,CLIENT_CERT,CLIENT_KEY,TOKEN}.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "parsetier/client.h"
#include "test_support.h"

namespace {

using parsetier_test::Env;

struct Secure : ::testing::Test {
  std::string target = Env("PARSETIER_SECURE_SERVER");
  std::string ca = Env("PARSETIER_SECURE_CA");
  std::string cert = Env("PARSETIER_SECURE_CLIENT_CERT");
  std::string key = Env("PARSETIER_SECURE_CLIENT_KEY");
  std::string token = Env("PARSETIER_SECURE_TOKEN");

  parsetier::Client Dial(const std::string& cert_file, const std::string& key_file, const std::string& bearer) {
    parsetier::ClientOptions options;
    options.credentials = parsetier::TlsCredentialsFromFiles(ca, cert_file, key_file);
    options.bearer_token = bearer;
    return parsetier::Client(target, options);
  }
};

grpc::StatusCode CodeOf(const std::function<void()>& call) {
  try {
    call();
  } catch (const parsetier::Error& error) {
    return error.code();
  }
  return grpc::StatusCode::OK;
}

parsetier::OpenOptions Qwen3() { return parsetier_test::Qwen3Plain(); }

TEST_F(Secure, MutualTLSAndToken) {
  parsetier::Client client = Dial(cert, key, token);
  parsetier::StreamResult stream = client.ParseStream(Qwen3(), {{9707}, {0}});
  EXPECT_EQ(stream.final.message().content(), "Hello!");
  EXPECT_EQ(client.ParseOnce(Qwen3(), {9707, 0}).final().message().content(), "Hello!");
  EXPECT_FALSE(client.ListModels().empty());
}

TEST_F(Secure, MissingToken) {
  parsetier::Client client = Dial(cert, key, "");
  EXPECT_EQ(CodeOf([&] { client.ListModels(); }), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(CodeOf([&] { client.Open(Qwen3()); }), grpc::StatusCode::UNAUTHENTICATED);
}

TEST_F(Secure, WrongToken) {
  parsetier::Client client = Dial(cert, key, "not-the-token");
  EXPECT_EQ(CodeOf([&] { client.ParseOnce(Qwen3(), {9707}); }), grpc::StatusCode::UNAUTHENTICATED);
}

TEST_F(Secure, NoClientCertificate) {
  parsetier::Client client = Dial("", "", token);
  EXPECT_EQ(CodeOf([&] { client.ListModels(std::chrono::seconds(10)); }), grpc::StatusCode::UNAVAILABLE);
}

TEST_F(Secure, PlaintextToATLSServer) {
  parsetier::Client client(target, {parsetier::InsecureCredentials(), token});
  EXPECT_EQ(CodeOf([&] { client.ListModels(std::chrono::seconds(10)); }), grpc::StatusCode::UNAVAILABLE);
}

TEST_F(Secure, CredentialFileErrors) {
  EXPECT_THROW(parsetier::TlsCredentialsFromFiles(ca, cert, ""), std::invalid_argument);
  EXPECT_THROW(parsetier::TlsCredentialsFromFiles(ca + ".missing"), std::invalid_argument);
}

}  // namespace
