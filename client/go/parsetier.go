// Package parsetier is a Go client for the parsetier parse service
// (protos/parsetier/v1/parsetier.proto, package parsetier.v1).
//
// A serving stack streams the token ids its model generates and gets back OpenAI-style
// reasoning, content and tool-call deltas. One bidirectional Parse stream is one request
// session: Client.Open starts it with the model and request options, Session.Send carries each
// decode step as it is produced, Session.Finish says why generation stopped, and Session.Recv
// (or the Session.Deltas iterator) reads the server's messages, the last of which carries the
// Final result. Client.ParseStream does all of that in one call, and Client.ParseOnce parses a
// whole output with the unary RPC.
//
// A Client is made with NewClient, which asks for transport security explicitly (WithTLS,
// WithTransportCredentials, or WithInsecure for a loopback or sidecar hop), or with FromConn
// around a connection the caller already has. Everything the contract offers stays reachable
// through the generated types in parsetierpb and Client.Stub.
package parsetier

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"

	pb "github.com/parsetier/parsetier/client/go/parsetierpb"
)

// Client is a connection to one parsetier server (or one balanced target). It is safe for
// concurrent use: open as many sessions on it as you like.
type Client struct {
	stub   pb.ParserServiceClient
	conn   *grpc.ClientConn // nil when FromConn was given the caller's connection
	resume *ResumePolicy    // nil: resume off
	mux    *muxer           // nil: a Parse stream per session (see WithMultiplex)
}

// ClientOption configures NewClient.
type ClientOption func(*clientConfig)

type clientConfig struct {
	creds     credentials.TransportCredentials
	keepalive keepalive.ClientParameters
	grpcOpts  []grpc.DialOption
	resume    *ResumePolicy
	noResume  bool

	multiplex     bool
	flushInterval time.Duration
}

// ErrNoCredentials is NewClient's answer when no option chose the transport security.
var ErrNoCredentials = errors.New("parsetier: no transport credentials: " +
	"pass WithTLS or WithTransportCredentials, or WithInsecure for a plaintext loopback or sidecar hop")

// WithInsecure makes the connection plaintext, which suits parsetier next to the serving stack
// (loopback, a sidecar, a private network behind a TLS-terminating proxy).
func WithInsecure() ClientOption {
	return func(c *clientConfig) { c.creds = insecure.NewCredentials() }
}

// WithTLS makes the connection TLS with cfg (nil: the system roots, the target's host name).
// Put a client certificate in cfg.Certificates for mutual TLS.
func WithTLS(cfg *tls.Config) ClientOption {
	return func(c *clientConfig) { c.creds = credentials.NewTLS(cfg) }
}

// TLSConfig loads PEM files into a tls.Config for WithTLS: caFile is the CA bundle that verifies
// the server ("" for the system roots), certFile and keyFile the client's certificate for mutual
// TLS (both "" without one).
func TLSConfig(caFile, certFile, keyFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("parsetier: CA file: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("parsetier: CA file %s holds no PEM certificate", caFile)
		}
	}
	if (certFile == "") != (keyFile == "") {
		return nil, errors.New("parsetier: mutual TLS needs both a certificate and a key file")
	}
	if certFile != "" {
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("parsetier: client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// WithToken sends token as "authorization: Bearer <token>" on every call, for servers started
// with --auth-tokens. It is sent on plaintext connections too (a sidecar hop, a mesh that
// encrypts the network): only use it with WithInsecure where the network is trusted.
func WithToken(token string) ClientOption {
	return WithDialOptions(grpc.WithPerRPCCredentials(bearerToken(token)))
}

type bearerToken string

func (b bearerToken) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (bearerToken) RequireTransportSecurity() bool { return false }

// WithTransportCredentials uses creds as the connection's transport security.
func WithTransportCredentials(creds credentials.TransportCredentials) ClientOption {
	return func(c *clientConfig) { c.creds = creds }
}

// WithKeepalive replaces DefaultKeepalive. Pings more frequent than the server permits get the
// connection closed with GOAWAY (too_many_pings), so change it together with the server's policy.
func WithKeepalive(params keepalive.ClientParameters) ClientOption {
	return func(c *clientConfig) { c.keepalive = params }
}

// WithDialOptions passes grpc.DialOptions through (interceptors, a service config for
// round_robin, per-RPC credentials...). They apply after this package's own, so they win.
func WithDialOptions(opts ...grpc.DialOption) ClientOption {
	return func(c *clientConfig) { c.grpcOpts = append(c.grpcOpts, opts...) }
}

// DefaultKeepalive is the client keepalive NewClient uses. It matches what the server permits:
// parsetier runs gRPC core's default ping policy, which accepts a ping at most every 5 minutes
// while no data flows and none on a connection without calls, and closes the connection after
// repeated violations. So the client pings after 5 idle minutes, only while a session is open,
// and gives the server 20 s to answer before it treats the connection as dead.
func DefaultKeepalive() keepalive.ClientParameters {
	return keepalive.ClientParameters{Time: 5 * time.Minute, Timeout: 20 * time.Second, PermitWithoutStream: false}
}

// MaxReplyBytes is the largest message NewClient's connection receives: the server's default
// --max-reply-bytes (a server never sends more than its own; larger replies come in parts).
// gRPC-Go's default of 4 MiB is too small for a final result that repeats a long output. A
// connection given to FromConn keeps its own limit.
const MaxReplyBytes = 64 << 20

// NewClient returns a client for target ("host:port", or any gRPC target such as
// "dns:///parsetier.internal:50051"). One option must choose the transport security; without
// one it returns ErrNoCredentials. The connection is made lazily, on the first RPC.
func NewClient(target string, opts ...ClientOption) (*Client, error) {
	cfg := clientConfig{keepalive: DefaultKeepalive()}
	for _, opt := range opts {
		opt(&cfg)
	}
	if cfg.creds == nil {
		return nil, ErrNoCredentials
	}
	dial := append([]grpc.DialOption{
		grpc.WithTransportCredentials(cfg.creds),
		grpc.WithKeepaliveParams(cfg.keepalive),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxReplyBytes)),
	}, cfg.grpcOpts...)
	conn, err := grpc.NewClient(target, dial...)
	if err != nil {
		return nil, err
	}
	if cfg.resume == nil && !cfg.noResume {
		policy := DefaultResumePolicy()
		cfg.resume = &policy
	}
	return cfg.multiplexed(&Client{stub: pb.NewParserServiceClient(conn), conn: conn, resume: cfg.resume}), nil
}

// multiplexed gives c its shared stream when WithMultiplex asked for one.
func (cfg *clientConfig) multiplexed(c *Client) *Client {
	if cfg.multiplex {
		c.mux = newMuxer(c, cfg.flushInterval)
	}
	return c
}

// FromConn wraps a connection the caller made and keeps owning (Close leaves it open), or any
// grpc.ClientConnInterface such as a test fake. Its sessions resume with DefaultResumePolicy;
// pass WithoutResume (or WithResume) to change that.
func FromConn(conn grpc.ClientConnInterface, opts ...ClientOption) *Client {
	cfg := clientConfig{}
	for _, opt := range opts {
		opt(&cfg)
	}
	if cfg.resume == nil && !cfg.noResume {
		policy := DefaultResumePolicy()
		cfg.resume = &policy
	}
	return cfg.multiplexed(&Client{stub: pb.NewParserServiceClient(conn), resume: cfg.resume})
}

// Close closes the connection NewClient made; sessions still open on it fail.
func (c *Client) Close() error {
	if c.mux != nil {
		c.mux.stop()
	}
	if c.conn == nil {
		return nil
	}
	return c.conn.Close()
}

// Stub is the generated client, for calls this package does not wrap.
func (c *Client) Stub() pb.ParserServiceClient { return c.stub }

// ListModels returns the models the server parses for, sorted by name.
func (c *Client) ListModels(ctx context.Context) ([]*pb.ModelInfo, error) {
	resp, err := c.stub.ListModels(ctx, &pb.ListModelsRequest{})
	if err != nil {
		return nil, err
	}
	return resp.GetModels(), nil
}

// ParseOnce parses a whole output with the unary RPC: the same result as a session fed every
// token at once. The response holds only Final unless WithOutput asks for deltas or events.
func (c *Client) ParseOnce(ctx context.Context, model string, tokenIDs []uint32, finish Finish,
	opts ...OpenOption) (*pb.ParseOnceResponse, error) {
	var trailer metadata.MD
	reply, err := c.stub.ParseOnce(ctx, &pb.ParseOnceRequest{
		Open: openMessage(model, opts), TokenIds: tokenIDs, Finish: finish.message(),
	}, grpc.Trailer(&trailer))
	return reply, withWire(err, trailer) // WireError(err): the error in the dialect of WithWire
}

// BuildConstraint derives the decoding constraint for a request with these options (tools,
// tool choice, parallel calls, thinking, prompt tail) from the model's format: an xgrammar
// structural tag (StructuralTagJson) and an equivalent llguidance Lark grammar (LarkGrammar).
// A tool's "strict": true in WithToolsJSON enforces its parameters schema.
func (c *Client) BuildConstraint(ctx context.Context, model string, opts ...OpenOption) (*pb.BuildConstraintResponse, error) {
	return c.stub.BuildConstraint(ctx, &pb.BuildConstraintRequest{Open: openMessage(model, opts)})
}
