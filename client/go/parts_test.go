package parsetier_test

// TestReplyParts checks that replies larger than the server's --max-reply-bytes, which the
// server sends in parts, reach the caller whole. tests/test_go_client.py starts a server with a
// small --max-reply-bytes and runs this test alone (-run TestReplyParts), with
// PARSETIER_PARTS_SERVER naming it and PARSETIER_PARTS_LIMIT its limit; the plain run leaves it
// out by name.

import (
	"io"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	parsetier "github.com/parsetier/parsetier/client/go"
	pb "github.com/parsetier/parsetier/client/go/parsetierpb"
)

const hello = 9707 // "Hello" in Qwen3

func TestReplyParts(t *testing.T) {
	target := secureEnv(t, "PARSETIER_PARTS_SERVER")
	limit, err := strconv.Atoi(secureEnv(t, "PARSETIER_PARTS_LIMIT"))
	if err != nil {
		t.Fatalf("PARSETIER_PARTS_LIMIT: %v", err)
	}
	client, err := parsetier.NewClient(target, parsetier.WithInsecure())
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	defer client.Close()
	ctx := testContext(t)
	const ids = 100_000 // "Hello" each: 500 kB of content, in the deltas and again in the final
	step := make([]uint32, ids)
	for i := range step {
		step[i] = hello
	}
	want := strings.Repeat("Hello", ids)
	finish := parsetier.Finish{Reason: parsetier.Stop}

	t.Run("RawStreamIsInParts", func(t *testing.T) {
		stream, err := client.Stub().Parse(ctx)
		if err != nil {
			t.Fatalf("Parse: %v", err)
		}
		msg := &pb.ParseRequest{
			Open:   &pb.Open{Model: "qwen3"},
			Steps:  []*pb.Step{{TokenIds: step}},
			Finish: &pb.Finish{},
		}
		if err := stream.Send(msg); err != nil {
			t.Fatalf("Send: %v", err)
		}
		stream.CloseSend()
		parts := 0
		for {
			reply, err := stream.Recv()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("Recv: %v", err)
			}
			if reply.GetPart() == nil || proto.Size(reply) > limit {
				t.Fatalf("a message of %d bytes, part %v: want parts within %d", proto.Size(reply), reply.GetPart() != nil, limit)
			}
			parts++
		}
		if parts < 2 {
			t.Fatalf("%d parts: the reply should exceed the limit", parts)
		}
	})

	t.Run("SessionJoinsThem", func(t *testing.T) {
		final, deltas, err := client.ParseStream(ctx, "qwen3", [][]uint32{step}, finish)
		if err != nil {
			t.Fatalf("ParseStream: %v", err)
		}
		var got strings.Builder
		for _, d := range deltas {
			got.WriteString(d.GetContent())
		}
		if final.GetMessage().GetContent() != want || got.String() != want {
			t.Fatalf("final %d and deltas %d bytes, want %d", len(final.GetMessage().GetContent()), got.Len(), len(want))
		}
	})

	t.Run("BatchJoinsThem", func(t *testing.T) {
		batch := openBatch(t, ctx, client)
		batch.Open("big", "qwen3")
		batch.Feed("big", step)
		batch.Finish("big", finish)
		outputs, err := batch.Step()
		if err != nil {
			t.Fatalf("Step: %v", err)
		}
		if len(outputs) != 1 || outputs[0].GetFinal().GetMessage().GetContent() != want {
			t.Fatalf("outputs %d, want one session with the whole final", len(outputs))
		}
		if err := batch.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
	})

	t.Run("PackedBatchJoinsThem", func(t *testing.T) {
		w := &wireCount{}
		batch, err := w.client(t, target).Batch(ctx)
		if err != nil {
			t.Fatalf("Batch: %v", err)
		}
		defer batch.Close()
		const sessions, each = 16, 4000 // 20 kB of text each, 320 kB in all: packed, in parts
		key := func(i int) string { return "packed-" + strconv.Itoa(i) }
		for i := range sessions {
			batch.Open(key(i), "qwen3")
		}
		if _, err := batch.Step(); err != nil {
			t.Fatalf("Step: %v", err)
		}
		for i := range sessions {
			batch.Feed(key(i), step[:each]) // packed items, with token_counts
		}
		outputs, err := batch.Step()
		if err != nil {
			t.Fatalf("Step: %v", err)
		}
		if len(outputs) != sessions {
			t.Fatalf("%d outputs, want %d", len(outputs), sessions)
		}
		for i, out := range outputs {
			if out.GetKey() != key(i) || len(out.GetDeltas()) != 1 || out.GetDeltas()[0].GetContent() != want[:5*each] {
				t.Fatalf("output %d: key %s, %d deltas: want %s with one delta of %d bytes", i, out.GetKey(),
					len(out.GetDeltas()), key(i), 5*each)
			}
		}
		if err := batch.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if wire := w.snapshot(); wire.packedSent != sessions || wire.countedSent != 1 || wire.partsRecv < 2 {
			t.Fatalf("%+v: want %d packed items with token_counts, the reply in parts", wire, sessions)
		}
	})
}
