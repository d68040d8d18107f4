package parsetier_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	parsetier "github.com/parsetier/parsetier/client/go"
	pb "github.com/parsetier/parsetier/client/go/parsetierpb"
)

func muxClient(t *testing.T) *parsetier.Client {
	t.Helper()
	client, err := parsetier.NewClient(os.Getenv("PARSETIER_SERVER"), parsetier.WithInsecure(), parsetier.WithMultiplex(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	return client
}

// sessionReplies runs n sessions at once, each from its own goroutine, one token per message,
// and returns each one's replies (and its wire bytes, opened with wire when not nil).
func sessionReplies(t *testing.T, client *parsetier.Client, n int, wire *pb.WireOptions) [][]*pb.ParseResponse {
	t.Helper()
	replies := make([][]*pb.ParseResponse, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			opts := []parsetier.OpenOption{parsetier.WithToolsJSON(weatherTools), parsetier.WithRequestID(fmt.Sprintf("mux-%d", i))}
			if wire != nil {
				opts = append(opts, parsetier.WithWire(wire))
			}
			session, err := client.Open(testContext(t), "qwen3", opts...)
			if err != nil {
				errs <- err
				return
			}
			defer session.Close()
			sent := sendAll(session, qwen3Output)
			for msg, err := range session.Messages() {
				if err != nil {
					errs <- err
					return
				}
				replies[i] = append(replies[i], msg)
			}
			if err := <-sent; err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return replies
}

// Each multiplexed session's replies are its own Parse stream's, client_messages included.
func TestMultiplexedSessionsGetTheirParseStreamsReplies(t *testing.T) {
	want := sessionReplies(t, connect(t), 8, nil)
	got := sessionReplies(t, muxClient(t), 8, nil)
	for i := range want {
		if len(got[i]) != len(want[i]) {
			t.Fatalf("session %d: %d replies, want %d", i, len(got[i]), len(want[i]))
		}
		for j := range want[i] {
			if !proto.Equal(got[i][j], want[i][j]) {
				t.Fatalf("session %d reply %d\n got %v\nwant %v", i, j, got[i][j], want[i][j])
			}
		}
		checkFinal(t, got[i][len(got[i])-1].GetFinal())
	}
}

// The wire bytes to forward are the Parse stream's, byte for byte.
func TestMultiplexedSessionWire(t *testing.T) {
	wire := &pb.WireOptions{
		Dialect: pb.WireDialect_WIRE_DIALECT_OPENAI_CHAT, ResponseId: "chatcmpl-mux", Model: "served",
		Stream: true, IncludeUsage: true, Created: 1_700_000_000,
	}
	join := func(replies []*pb.ParseResponse) []byte {
		var out []byte
		for _, msg := range replies {
			out = append(append(out, msg.GetWire()...), msg.GetFinal().GetWire()...)
		}
		return out
	}
	want := join(sessionReplies(t, connect(t), 1, wire)[0])
	got := join(sessionReplies(t, muxClient(t), 1, wire)[0])
	if len(want) == 0 || !bytes.Equal(got, want) {
		t.Fatalf("wire bytes differ:\n got %q\nwant %q", got, want)
	}
}

// A session's error, an unknown model and an early Close stay in their sessions.
func TestMultiplexedSessionErrorsStayInTheirSession(t *testing.T) {
	client := muxClient(t)
	ctx := testContext(t)
	if _, err := client.Open(ctx, "no-such-model"); status.Code(err) != codes.NotFound {
		t.Fatalf("Open of an unknown model: %v, want NotFound", err)
	}
	good, err := client.Open(ctx, "qwen3", parsetier.WithToolsJSON(weatherTools))
	if err != nil {
		t.Fatal(err)
	}
	bad, err := client.Open(ctx, "qwen3")
	if err != nil {
		t.Fatal(err)
	}
	dropped, err := client.Open(ctx, "qwen3")
	if err != nil {
		t.Fatal(err)
	}
	if err := bad.Send([]uint32{10_000_000}); err != nil {
		t.Fatal(err)
	}
	if err := dropped.Send([]uint32{9707}); err != nil {
		t.Fatal(err)
	}
	if err := dropped.Close(); !errors.Is(err, parsetier.ErrClosedEarly) {
		t.Fatalf("Close before the end: %v", err)
	}
	sent := sendAll(good, qwen3Output)
	for _, err := range bad.Messages() {
		if err != nil && status.Code(err) != codes.InvalidArgument {
			t.Fatalf("bad id: %v, want InvalidArgument", err)
		}
	}
	var deltas []*pb.Delta
	for delta, err := range good.Deltas() {
		if err != nil {
			t.Fatal(err)
		}
		deltas = append(deltas, delta)
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	checkFinal(t, good.Final())
	if _, err := good.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("Recv after the final reply: %v", err)
	}
	if len(deltas) < 10 {
		t.Fatalf("%d deltas", len(deltas))
	}
}
