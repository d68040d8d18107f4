package parsetier_test

// TestSecure checks TLS, mutual TLS and bearer tokens against a server started with --tls-cert,
// --tls-key, --tls-client-ca and --auth-tokens. tests/test_go_client.py starts that server, makes
// the certificates and runs this test alone (-run TestSecure), with PARSETIER_SECURE_* naming the
// server and the files; the plain run leaves it out by name (-skip TestSecure).

import (
	"context"
	"os"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	parsetier "github.com/parsetier/parsetier/client/go"
)

func secureEnv(t *testing.T, name string) string {
	t.Helper()
	value := os.Getenv(name)
	if value == "" {
		t.Fatalf("%s is not set: run this test through tests/test_go_client.py", name)
	}
	return value
}

func TestSecure(t *testing.T) {
	target := secureEnv(t, "PARSETIER_SECURE_SERVER")
	ca := secureEnv(t, "PARSETIER_SECURE_CA")
	cert := secureEnv(t, "PARSETIER_SECURE_CLIENT_CERT")
	key := secureEnv(t, "PARSETIER_SECURE_CLIENT_KEY")
	token := secureEnv(t, "PARSETIER_SECURE_TOKEN")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	dial := func(t *testing.T, certFile, keyFile string, opts ...parsetier.ClientOption) *parsetier.Client {
		t.Helper()
		cfg, err := parsetier.TLSConfig(ca, certFile, keyFile)
		if err != nil {
			t.Fatal(err)
		}
		client, err := parsetier.NewClient(target, append([]parsetier.ClientOption{parsetier.WithTLS(cfg)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = client.Close() })
		return client
	}
	wantCode := func(t *testing.T, err error, code codes.Code) {
		t.Helper()
		if status.Code(err) != code {
			t.Fatalf("got %v, want %v", err, code)
		}
	}

	t.Run("MutualTLSAndToken", func(t *testing.T) {
		client := dial(t, cert, key, parsetier.WithToken(token))
		final, _, err := client.ParseStream(ctx, "qwen3", [][]uint32{{9707}, {0}}, parsetier.Finish{})
		if err != nil {
			t.Fatal(err)
		}
		if got := final.GetMessage().GetContent(); got != "Hello!" {
			t.Fatalf("content %q", got)
		}
		reply, err := client.ParseOnce(ctx, "qwen3", []uint32{9707, 0}, parsetier.Finish{})
		if err != nil || reply.GetFinal().GetMessage().GetContent() != "Hello!" {
			t.Fatalf("ParseOnce: %v %v", reply, err)
		}
	})
	t.Run("MissingToken", func(t *testing.T) {
		_, err := dial(t, cert, key).ListModels(ctx)
		wantCode(t, err, codes.Unauthenticated)
		_, err = dial(t, cert, key).Open(ctx, "qwen3")
		wantCode(t, err, codes.Unauthenticated)
	})
	t.Run("WrongToken", func(t *testing.T) {
		_, err := dial(t, cert, key, parsetier.WithToken("not-the-token")).ListModels(ctx)
		wantCode(t, err, codes.Unauthenticated)
	})
	t.Run("NoClientCertificate", func(t *testing.T) {
		_, err := dial(t, "", "", parsetier.WithToken(token)).ListModels(ctx)
		wantCode(t, err, codes.Unavailable)
	})
	t.Run("TLSConfigErrors", func(t *testing.T) {
		if _, err := parsetier.TLSConfig(ca, cert, ""); err == nil {
			t.Fatal("a certificate without its key was accepted")
		}
		if _, err := parsetier.TLSConfig(key, "", ""); err == nil {
			t.Fatal("a key file was accepted as a CA bundle")
		}
	})
}
