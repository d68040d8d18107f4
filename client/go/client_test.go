package parsetier_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	parsetier "github.com/parsetier/parsetier/client/go"
	pb "github.com/parsetier/parsetier/client/go/parsetierpb"
)

// Plaintext is a choice the caller makes, as in grpc-go: no credentials option, no client.
func TestNewClientNeedsCredentials(t *testing.T) {
	client, err := parsetier.NewClient("127.0.0.1:1")
	if !errors.Is(err, parsetier.ErrNoCredentials) || client != nil {
		t.Fatalf("NewClient without credentials: %v, %v; want ErrNoCredentials", client, err)
	}
	client, err = parsetier.NewClient("127.0.0.1:1", parsetier.WithTLS(nil))
	if err != nil {
		t.Fatalf("NewClient WithTLS: %v", err)
	}
	client.Close()
}

// The server runs gRPC core's default ping policy (a ping at most every 5 minutes without
// data, none without calls); the client's default must stay inside it or the server closes
// busy connections with GOAWAY too_many_pings.
func TestDefaultKeepaliveWithinServerPolicy(t *testing.T) {
	params := parsetier.DefaultKeepalive()
	if params.Time < 5*time.Minute || params.PermitWithoutStream {
		t.Errorf("DefaultKeepalive %+v pings more often than the server permits", params)
	}
	if params.Timeout <= 0 || params.Timeout > time.Minute {
		t.Errorf("DefaultKeepalive timeout %v", params.Timeout)
	}
}

// A session through a client with the default keepalive survives a quiet spell in which the
// server closes a client that pings every second with GOAWAY too_many_pings (shown through the
// Python and C++ clients in tests/test_keepalive.py and client/cpp; gRPC-Go raises any keepalive
// Time below 10 s to 10 s, so the same negative control here would take the better part of a
// minute). Resume is off, so a GOAWAY would end the session instead of moving it.
func TestDefaultKeepaliveQuietSessionSurvives(t *testing.T) {
	client, err := parsetier.NewClient(os.Getenv("PARSETIER_SERVER"), parsetier.WithInsecure(), parsetier.WithoutResume())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	session, err := client.Open(testContext(t), "qwen3")
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer session.Close()
	if err := session.Send([]uint32{9707}); err != nil { // "Hello": a reply at once
		t.Fatal(err)
	}
	if _, err := session.Recv(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(6 * time.Second)
	if err := session.Send([]uint32{9707}); err != nil {
		t.Fatal(err)
	}
	if err := session.Finish(parsetier.Stop, parsetier.NoStop); err != nil {
		t.Fatal(err)
	}
	for _, err := range session.Messages() {
		if err != nil {
			t.Fatalf("the quiet session ended with %v", err)
		}
	}
	if session.Final() == nil {
		t.Fatal("no final message")
	}
}

// sendAll sends the output one step per message and finishes, on its own goroutine.
func sendAll(session *parsetier.Session, ids []uint32) <-chan error {
	sent := make(chan error, 1)
	go func() {
		for _, step := range onePerStep(ids) {
			if err := session.Send(step); err != nil {
				sent <- err
				return
			}
		}
		sent <- session.Finish(parsetier.Stop, parsetier.StopToken(imEnd))
	}()
	return sent
}

// Ranging over Deltas yields every delta in order and stops after the final message.
func TestDeltasIterator(t *testing.T) {
	client := connect(t)
	session, err := client.Open(testContext(t), "qwen3", parsetier.WithToolsJSON(weatherTools))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	sent := sendAll(session, qwen3Output)
	var deltas []*pb.Delta
	for delta, err := range session.Deltas() {
		if err != nil {
			t.Fatalf("Deltas: %v", err)
		}
		deltas = append(deltas, delta)
	}
	if err := <-sent; err != nil {
		t.Fatalf("send: %v", err)
	}
	checkFinal(t, session.Final())
	if joined := joinDeltas(t, deltas); !proto.Equal(joined, session.Final().GetMessage()) {
		t.Errorf("joined deltas\n got %v\nwant %v", joined, session.Final().GetMessage())
	}
	if err := session.Close(); err != nil {
		t.Errorf("Close after the iterator ended: %v", err)
	}
}

// The status that ends a session is the iterator's last value, and breaking out early is fine.
func TestIteratorsEndWithTheStatus(t *testing.T) {
	client := connect(t)
	session, err := client.Open(testContext(t), "qwen3")
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	_ = session.Send(qwen3Output[:6], []uint32{10_000_000})
	var last error
	count := 0
	for msg, err := range session.Messages() {
		count++
		if err != nil {
			last = err
		} else if last != nil || msg == nil {
			t.Fatalf("a message after the error, or a nil message: %v", msg)
		}
	}
	wantCode(t, "Messages after an out-of-vocabulary id", last, codes.InvalidArgument)
	if count == 0 {
		t.Error("Messages yielded nothing")
	}
	if err := session.Close(); err != nil {
		t.Errorf("Close after the error was received: %v", err)
	}

	session, err = client.Open(testContext(t), "qwen3")
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	sent := sendAll(session, qwen3Output)
	for range session.Deltas() {
		break // the rest of the session is abandoned...
	}
	err = session.Close() // ...and Close says so
	if !errors.Is(err, parsetier.ErrClosedEarly) || status.Code(err) != codes.Canceled {
		t.Errorf("Close before the end: %v, want ErrClosedEarly (Canceled)", err)
	}
	<-sent // the sender sees the cancellation
	if err := session.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// A session's context bounds it: cancelling it ends Recv with codes.Canceled.
func TestContextCancelsSession(t *testing.T) {
	client := connect(t)
	ctx, cancel := context.WithCancel(testContext(t))
	session, err := client.Open(ctx, "qwen3")
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer session.Close()
	cancel()
	_, err = session.Recv()
	wantCode(t, "Recv after the context was cancelled", err, codes.Canceled)
}

// The constraint for a request's options arrives in both forms, and bad options get their codes.
func TestBuildConstraint(t *testing.T) {
	client := connect(t)
	ctx := testContext(t)
	resp, err := client.BuildConstraint(ctx, "qwen3", parsetier.WithToolsJSON(weatherTools),
		parsetier.WithToolChoice("required"), parsetier.WithThinking(false))
	if err != nil {
		t.Fatalf("BuildConstraint: %v", err)
	}
	var tag struct {
		Type   string `json:"type"`
		Format struct {
			AtLeastOne bool `json:"at_least_one"`
		} `json:"format"`
	}
	if err := json.Unmarshal([]byte(resp.GetStructuralTagJson()), &tag); err != nil {
		t.Fatalf("structural tag is not JSON: %v", err)
	}
	if tag.Type != "structural_tag" || !tag.Format.AtLeastOne {
		t.Errorf("structural tag %s: want a structural_tag with at_least_one (tool_choice required)", resp.GetStructuralTagJson())
	}
	if got := resp.GetTriggers(); len(got) != 1 || got[0] != "<tool_call>" {
		t.Errorf("triggers %q, want [<tool_call>]", got)
	}
	if resp.GetReasoning() != pb.ConstraintReasoning_CONSTRAINT_REASONING_NONE {
		t.Errorf("reasoning %v with thinking off, want NONE", resp.GetReasoning())
	}
	if !strings.Contains(resp.GetLarkGrammar(), "get_weather") {
		t.Errorf("Lark grammar does not name the tool:\n%s", resp.GetLarkGrammar())
	}

	_, err = client.BuildConstraint(ctx, "no-such-model")
	wantCode(t, "BuildConstraint unknown model", err, codes.NotFound)
	_, err = client.BuildConstraint(ctx, "qwen3", parsetier.WithToolsJSON(weatherTools), parsetier.WithToolChoice("send_mail"))
	wantCode(t, "BuildConstraint tool_choice naming no tool", err, codes.InvalidArgument)
	// xLAM's calls start in several states (bare, fenced or tagged lists), which the derivation
	// does not choose between (docs/constrained-decoding.md): FailedPrecondition.
	_, err = client.BuildConstraint(ctx, "xlam-2-qwen", parsetier.WithToolsJSON(weatherTools),
		parsetier.WithParallelToolCalls(false))
	wantCode(t, "BuildConstraint for a format it cannot derive", err, codes.FailedPrecondition)
}
