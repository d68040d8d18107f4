// Package parsetier is a small Go client for the parsetier parse service
// (protos/parsetier/v1/parsetier.proto, package parsetier.v1).
//
// A serving stack streams the token ids its model generates and gets back OpenAI-style
// reasoning, content and tool-call deltas. One bidirectional Parse stream is one request
// session: Open it with the model and request options, Send each decode step as it is produced,
// Finish with why generation stopped, and Recv the server's messages, the last of which
// carries the Final result. ParseStream does all of that in one call, and ParseOnce parses a
// whole output with the unary RPC.
//
// The functions take the generated parsetierpb.ParserServiceClient interface rather than a concrete
// client, so callers that build their own *grpc.ClientConn (TLS, interceptors, load
// balancing) or a fake for tests need nothing else from this package; Dial is only a
// convenience for the plaintext loopback or sidecar case. Everything the contract offers stays
// reachable through the generated types in parsetierpb.
package parsetier

import (
	"context"
	"errors"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pb "github.com/parsetier/parsetier/client/go/parsetierpb"
)

// Client is a connection to one parsetier server. It embeds the generated stub, so it is a
// parsetierpb.ParserServiceClient and every RPC (ListModels included) is a method on it.
type Client struct {
	pb.ParserServiceClient
	conn *grpc.ClientConn
}

// Dial connects to a server at target ("host:port"). Without options the connection is
// plaintext, because parsetier is meant to run next to the serving stack (loopback or a
// sidecar); pass grpc.WithTransportCredentials to override that. The connection is made
// lazily, on the first RPC, as grpc.NewClient does.
func Dial(target string, opts ...grpc.DialOption) (*Client, error) {
	opts = append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)
	conn, err := grpc.NewClient(target, opts...)
	if err != nil {
		return nil, err
	}
	return &Client{ParserServiceClient: pb.NewParserServiceClient(conn), conn: conn}, nil
}

// Close closes the connection; sessions still open on it fail.
func (c *Client) Close() error { return c.conn.Close() }

// Finish reasons a client may send. ToolCalls is output-only (the server turns Stop into it
// when tool calls were made), so it is not offered here.
const (
	Stop   = pb.FinishReason_FINISH_REASON_STOP
	Length = pb.FinishReason_FINISH_REASON_LENGTH
	Abort  = pb.FinishReason_FINISH_REASON_ABORT
)

// MatchedStop is what stopped generation: a stop token (StopToken), a stop string
// (StopString), or nothing (NoStop, the zero value). It is a value type rather than a
// *uint32 because token id 0 is a real token and "nothing matched" must stay expressible.
type MatchedStop struct {
	kind  stopKind
	token uint32
	text  string
}

type stopKind uint8

const (
	noStop stopKind = iota
	stopToken
	stopString
)

// NoStop says no stop token or string matched (a length limit, an abort, or an end the
// caller cannot name).
var NoStop = MatchedStop{kind: noStop}

// StopToken says generation stopped on the stop token id (e.g. Qwen3's <|im_end|>, 151645),
// whether or not that token was also sent as part of the last step.
func StopToken(id uint32) MatchedStop { return MatchedStop{kind: stopToken, token: id} }

// StopString says generation stopped because the stop string s matched.
func StopString(s string) MatchedStop { return MatchedStop{kind: stopString, text: s} }

// Finish is how an output ended, for ParseStream and ParseOnce. The zero value is a Stop with
// nothing matched, the server's default.
type Finish struct {
	Reason  pb.FinishReason
	Matched MatchedStop
}

func (f Finish) message() *pb.Finish {
	m := &pb.Finish{Reason: f.Reason}
	switch f.Matched.kind {
	case stopToken:
		m.MatchedStop = &pb.Finish_StopTokenId{StopTokenId: f.Matched.token}
	case stopString:
		m.MatchedStop = &pb.Finish_StopString{StopString: f.Matched.text}
	}
	return m
}

// OpenOption sets a field of the session's Open message. It is a plain function so that a
// caller can set any Open field the helpers below do not cover.
type OpenOption func(*pb.Open)

// WithToolsJSON offers tools as the OpenAI request's "tools" array, verbatim JSON text, which
// suits stacks that forward a chat-completions request without decoding it.
func WithToolsJSON(tools string) OpenOption { return func(o *pb.Open) { o.ToolsJson = tools } }

// WithToolChoice sets OpenAI's tool_choice: "auto", "none", "required", or the name of the one
// function the model must call.
func WithToolChoice(choice string) OpenOption {
	return func(o *pb.Open) {
		if mode, ok := toolChoiceModes[choice]; ok {
			o.ToolChoice = &pb.ToolChoice{Choice: &pb.ToolChoice_Mode{Mode: mode}}
		} else {
			o.ToolChoice = &pb.ToolChoice{Choice: &pb.ToolChoice_FunctionName{FunctionName: choice}}
		}
	}
}

var toolChoiceModes = map[string]pb.ToolChoiceMode{
	"auto":     pb.ToolChoiceMode_TOOL_CHOICE_MODE_AUTO,
	"none":     pb.ToolChoiceMode_TOOL_CHOICE_MODE_NONE,
	"required": pb.ToolChoiceMode_TOOL_CHOICE_MODE_REQUIRED,
}

// WithThinking tells the parser whether the prompt was rendered with the chat template's
// thinking switch on, which decides whether the output starts inside reasoning.
func WithThinking(on bool) OpenOption { return func(o *pb.Open) { o.Thinking = &on } }

// WithPromptTokenIDs passes the prompt's token ids (its tail is enough), from which the parser
// sees whether the prompt already opened or closed reasoning.
func WithPromptTokenIDs(ids []uint32) OpenOption {
	return func(o *pb.Open) { o.PromptTokenIds = ids }
}

// WithRequestID tags the session with the caller's request id; it only appears in server logs.
func WithRequestID(id string) OpenOption { return func(o *pb.Open) { o.RequestId = id } }

// WithOutput chooses what the server sends while the session runs (deltas by default; events,
// both, or nothing until the final result).
func WithOutput(kind pb.OutputKind) OpenOption { return func(o *pb.Open) { o.Output = kind } }

// WithCompleteToolCalls delivers each tool call as one delta once it is complete and its
// arguments are validated, instead of streaming argument fragments.
func WithCompleteToolCalls() OpenOption { return func(o *pb.Open) { o.CompleteToolCalls = true } }

// Session is one request session: one Parse stream. As with any gRPC-Go stream, one goroutine
// may Send/Finish while another calls Recv, but neither side may be used from two goroutines
// at once. Recv from its own goroutine while sending: the server answers only the messages
// that produced output, so waiting for a reply after every Send can block forever, and a
// sender that never receives eventually stalls on flow control.
type Session struct {
	stream grpc.BidiStreamingClient[pb.ParseRequest, pb.ParseResponse]
	cancel context.CancelFunc
	final  *pb.Final
}

// Open starts a session for model. ctx bounds the whole session, not just this call. Open
// waits until the server has accepted the Open (it sends response headers then), so an
// unknown model (codes.NotFound) or bad options (codes.InvalidArgument) fail here instead of
// at some later Recv. Call Close when done with the session.
func Open(ctx context.Context, client pb.ParserServiceClient, model string, opts ...OpenOption) (*Session, error) {
	open := &pb.Open{Model: model}
	for _, opt := range opts {
		opt(open)
	}
	ctx, cancel := context.WithCancel(ctx)
	stream, err := client.Parse(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	// An io.EOF from Send means the stream already ended; Header and Recv below say why.
	if err := stream.Send(&pb.ParseRequest{Open: open}); err != nil && !errors.Is(err, io.EOF) {
		cancel()
		return nil, err
	}
	header, err := stream.Header()
	if err == nil && header == nil {
		// The stream ended without headers: the server refused the Open. gRPC-Go reports the
		// status from Recv, not from Header.
		_, err = stream.Recv()
		if errors.Is(err, io.EOF) {
			err = status.Error(codes.Internal, "parsetier: stream ended before the server accepted Open")
		}
	}
	if err != nil {
		cancel()
		return nil, err
	}
	return &Session{stream: stream, cancel: cancel}, nil
}

// Send sends decode steps, each a slice of the token ids one forward pass produced, in one
// message. Several steps per message give the same result as one message each (batching only
// saves messages); no steps at all is a keep-alive against the server's idle timeout. It does
// not take a context: the session's context, given to Open, governs every send.
//
// As with gRPC-Go streams, io.EOF means the server has ended the stream; Recv returns why.
func (s *Session) Send(steps ...[]uint32) error {
	msg := &pb.ParseRequest{Steps: make([]*pb.Step, len(steps))}
	for i, ids := range steps {
		msg.Steps[i] = &pb.Step{TokenIds: ids}
	}
	return s.stream.Send(msg)
}

// Finish ends the output and closes the sending side: reason is Stop, Length or Abort
// (Stop when zero), matchedStop what stopped generation. The server answers with the
// message that carries the Final result.
func (s *Session) Finish(reason pb.FinishReason, matchedStop MatchedStop) error {
	err := s.stream.Send(&pb.ParseRequest{Finish: Finish{Reason: reason, Matched: matchedStop}.message()})
	if err != nil {
		return err
	}
	return s.stream.CloseSend()
}

// Recv returns the server's next message: its deltas (and events, if asked for with
// WithOutput), plus Final on the last one. After the last message it returns io.EOF; any
// other error is the gRPC status that ended the session (see docs/service.md), for example
// codes.InvalidArgument for a token id outside the model's vocabulary.
func (s *Session) Recv() (*pb.ParseResponse, error) {
	msg, err := s.stream.Recv()
	if err != nil {
		return nil, err
	}
	if msg.GetFinal() != nil {
		s.final = msg.GetFinal()
	}
	return msg, nil
}

// Final is the session's outcome (finish reason, usage, the assembled message) once Recv has
// returned it, else nil.
func (s *Session) Final() *pb.Final { return s.final }

// Close releases the session. It cancels the stream, so a session closed before its final
// message ends with codes.Canceled on the server; after the final message it only frees
// resources. It is safe to call more than once.
func (s *Session) Close() { s.cancel() }

// ParseStream runs a whole session in one call: it opens it, sends each step in its own
// message (as a live decode loop would) while receiving concurrently, finishes, and returns
// the Final result and every delta in order. It exists for replaying recorded outputs and
// for tests; a serving stack that generates tokens live uses a Session.
func ParseStream(ctx context.Context, client pb.ParserServiceClient, model string, steps [][]uint32,
	finish Finish, opts ...OpenOption) (*pb.Final, []*pb.Delta, error) {
	s, err := Open(ctx, client, model, opts...)
	if err != nil {
		return nil, nil, err
	}
	defer s.Close()
	sent := make(chan error, 1) // buffered: the sender never outlives an early return
	go func() {
		for _, step := range steps {
			if err := s.Send(step); err != nil {
				sent <- err
				return
			}
		}
		sent <- s.Finish(finish.Reason, finish.Matched)
	}()
	var deltas []*pb.Delta
	for {
		msg, err := s.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, nil, err // the deferred Close unblocks the sender
		}
		deltas = append(deltas, msg.GetDeltas()...)
	}
	if err := <-sent; err != nil && !errors.Is(err, io.EOF) {
		return nil, nil, err
	}
	if s.Final() == nil {
		return nil, nil, status.Error(codes.Internal, "parsetier: stream ended without a final message")
	}
	return s.Final(), deltas, nil
}

// ParseOnce parses a whole output with the unary RPC: the same result as a session fed every
// token at once. The response holds only Final unless WithOutput asks for deltas or events.
func ParseOnce(ctx context.Context, client pb.ParserServiceClient, model string, tokenIDs []uint32,
	finish Finish, opts ...OpenOption) (*pb.ParseOnceResponse, error) {
	open := &pb.Open{Model: model}
	for _, opt := range opts {
		opt(open)
	}
	return client.ParseOnce(ctx, &pb.ParseOnceRequest{Open: open, TokenIds: tokenIDs, Finish: finish.message()})
}
