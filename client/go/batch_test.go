package parsetier_test

import (
	"fmt"
	"os"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	parsetier "github.com/parsetier/parsetier/client/go"
	pb "github.com/parsetier/parsetier/client/go/parsetierpb"
)

// Many sessions over one ParseBatch stream, one token per session per step as an engine steps
// its batch: every session gets the expected parse, and the same deltas and final result as a
// Parse stream fed the same steps (the same request id gives the same tool call ids). Every
// step after the open goes packed, one id each (no token_counts), and the replies' text deltas
// come back packed.
func TestBatchManySessionsOneTokenPerStep(t *testing.T) {
	connect(t)
	w := &wireCount{}
	client := w.client(t, os.Getenv("PARSETIER_SERVER"))
	ctx := testContext(t)
	const sessions = 64
	batch := openBatch(t, ctx, client)
	key := func(i int) string { return fmt.Sprintf("req-%d", i) }
	for i := range sessions {
		batch.Open(key(i), "qwen3", parsetier.WithToolsJSON(weatherTools), parsetier.WithRequestID("go-batch"))
	}
	deltas := map[string][]*pb.Delta{}
	finals := map[string]*pb.Final{}
	for step := 0; step <= len(qwen3Output); step++ {
		queueStep(batch, sessions, key, step)
		outputs, err := batch.Step()
		if err != nil {
			t.Fatalf("Step %d: %v", step, err)
		}
		gather(t, outputs, deltas, finals)
	}
	if err := batch.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	final, streamed, err := client.ParseStream(ctx, "qwen3", onePerStep(qwen3Output), stopAtImEnd,
		parsetier.WithToolsJSON(weatherTools), parsetier.WithRequestID("go-batch"))
	if err != nil {
		t.Fatalf("ParseStream: %v", err)
	}
	wire := w.snapshot()
	if want := sessions * (len(qwen3Output) - 1); wire.packedSent != want || wire.countedSent != 0 {
		t.Errorf("%d packed items (%d messages with token_counts), want %d (none)", wire.packedSent, wire.countedSent, want)
	}
	if wire.packedRecv == 0 {
		t.Errorf("no packed outputs in the replies (%d session outputs)", wire.sessionsRecv)
	}
	for i := range sessions {
		checkFinal(t, finals[key(i)])
		if !proto.Equal(finals[key(i)], final) {
			t.Errorf("session %d final\n got %v\nwant %v", i, finals[key(i)], final)
		}
		sameDeltas(t, fmt.Sprintf("session %d", i), deltas[key(i)], streamed)
	}
}

// A session's error is in its output; the stream and the other sessions go on; a key is free
// again once its session ended.
func TestBatchSessionErrors(t *testing.T) {
	client := connect(t)
	batch := openBatch(t, testContext(t), client)
	batch.Open("good", "qwen3", parsetier.WithToolsJSON(weatherTools))
	batch.Open("unknown", "no-such-model")
	batch.Feed("unopened", []uint32{9707})
	batch.Open("bad", "qwen3")
	batch.Feed("bad", []uint32{9707, 10_000_000})
	batch.Open("dropped", "qwen3")
	outputs, err := batch.Step()
	if err != nil {
		t.Fatalf("Step: %v", err)
	}
	codesByKey := map[string]codes.Code{}
	for _, out := range outputs {
		codesByKey[out.GetKey()] = status.Code(parsetier.SessionErr(out))
	}
	want := map[string]codes.Code{
		"unknown": codes.NotFound, "unopened": codes.FailedPrecondition, "bad": codes.InvalidArgument,
	}
	for k, c := range want {
		if codesByKey[k] != c {
			t.Errorf("session %s: %v, want %v (outputs %v)", k, codesByKey[k], c, outputs)
		}
	}
	if _, ok := codesByKey["good"]; ok {
		t.Errorf("an Open alone produced output: %v", outputs)
	}

	batch.Cancel("dropped")
	batch.Open("bad", "qwen3") // its key is free again
	batch.Feed("good", qwen3Output)
	batch.Finish("good", stopAtImEnd)
	outputs, err = batch.Step()
	if err != nil {
		t.Fatalf("Step: %v", err)
	}
	for _, out := range outputs {
		switch out.GetKey() {
		case "good":
			checkFinal(t, out.GetFinal())
		case "dropped":
			if c := status.Code(parsetier.SessionErr(out)); c != codes.Canceled {
				t.Errorf("cancelled session: %v", c)
			}
		default:
			t.Errorf("unexpected output %v", out)
		}
	}
	batch.Cancel("bad")
	if _, err := batch.Step(); err != nil {
		t.Fatalf("Step: %v", err)
	}
	if err := batch.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// Only the stream's own limits end the stream, and Step reports them.
func TestBatchEmptyKeyEndsTheStream(t *testing.T) {
	client := connect(t)
	batch := openBatch(t, testContext(t), client)
	batch.Feed("", []uint32{9707})
	if _, err := batch.Step(); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("an empty key: %v, want InvalidArgument", err)
	}
}

// gather adds each output's deltas and final to its session's, failing on a session's error.
func gather(t *testing.T, outputs []*pb.SessionOutput, deltas map[string][]*pb.Delta, finals map[string]*pb.Final) {
	t.Helper()
	for _, out := range outputs {
		if err := parsetier.SessionErr(out); err != nil {
			t.Fatalf("session %s: %v", out.GetKey(), err)
		}
		deltas[out.GetKey()] = append(deltas[out.GetKey()], out.GetDeltas()...)
		if out.GetFinal() != nil {
			finals[out.GetKey()] = out.GetFinal()
		}
	}
}

// queueStep queues engine step step of every session: its next id of qwen3Output, or its Finish
// once the whole output went.
func queueStep(batch *parsetier.Batch, sessions int, key func(int) string, step int) {
	for i := range sessions {
		if step < len(qwen3Output) {
			batch.Feed(key(i), []uint32{qwen3Output[step]})
		} else {
			batch.Finish(key(i), stopAtImEnd)
		}
	}
}
