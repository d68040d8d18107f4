package parsetier_test

// The batch API's packed wire form (ParseBatchRequest.packed, ParseBatchResponse.packed)
// against the live server: wireCount watches the messages on the wire, so the tests know the
// packed path is the one that ran, and the outputs are compared with Parse streams'.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	parsetier "github.com/parsetier/parsetier/client/go"
	pb "github.com/parsetier/parsetier/client/go/parsetierpb"
)

// wireCount counts what the ParseBatch streams of a client carried.
type wireCount struct {
	mu sync.Mutex
	wireTally
}

type wireTally struct {
	packedSent   int // packed items sent
	entriesSent  int // SessionInputs sent
	countedSent  int // messages whose packed items carried token_counts
	packedRecv   int // packed outputs received
	sessionsRecv int // SessionOutputs received
	partsRecv    int // messages that were a part of a reply
}

type countedStream struct {
	grpc.ClientStream
	w *wireCount
}

func (s countedStream) SendMsg(m any) error {
	if r, ok := m.(*pb.ParseBatchRequest); ok {
		s.w.mu.Lock()
		s.w.packedSent += len(r.GetPacked().GetKeys())
		s.w.entriesSent += len(r.GetSessions())
		if len(r.GetPacked().GetTokenCounts()) > 0 {
			s.w.countedSent++
		}
		s.w.mu.Unlock()
	}
	return s.ClientStream.SendMsg(m)
}

func (s countedStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if r, ok := m.(*pb.ParseBatchResponse); ok && err == nil {
		s.w.mu.Lock()
		s.w.packedRecv += len(r.GetPacked().GetKeys())
		s.w.sessionsRecv += len(r.GetSessions())
		if r.GetPart() != nil {
			s.w.partsRecv++
		}
		s.w.mu.Unlock()
	}
	return err
}

func (w *wireCount) snapshot() wireTally {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.wireTally
}

// client is a client of target whose streams w counts.
func (w *wireCount) client(t *testing.T, target string, opts ...parsetier.ClientOption) *parsetier.Client {
	t.Helper()
	count := func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string,
		streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		stream, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil {
			return nil, err
		}
		return countedStream{stream, w}, nil
	}
	opts = append(opts, parsetier.WithInsecure(), parsetier.WithDialOptions(grpc.WithChainStreamInterceptor(count)))
	client, err := parsetier.NewClient(target, opts...)
	if err != nil {
		t.Fatalf("NewClient(%q): %v", target, err)
	}
	t.Cleanup(func() { client.Close() })
	return client
}

// parseMessages is a Parse stream's deltas and final result for msgs, each a message of steps.
func parseMessages(ctx context.Context, client *parsetier.Client, msgs [][][]uint32, finish parsetier.Finish,
	opts ...parsetier.OpenOption) ([]*pb.Delta, *pb.Final, error) {
	s, err := client.Open(ctx, "qwen3", opts...)
	if err != nil {
		return nil, nil, err
	}
	defer s.Close()
	sent := make(chan error, 1)
	go func() {
		for _, msg := range msgs {
			if err := s.Send(msg...); err != nil {
				sent <- err
				return
			}
		}
		sent <- s.Finish(finish.Reason, finish.Matched)
	}()
	var deltas []*pb.Delta
	for delta, err := range s.Deltas() {
		if err != nil {
			return nil, nil, err
		}
		deltas = append(deltas, delta)
	}
	if err := <-sent; err != nil && !errors.Is(err, io.EOF) {
		return nil, nil, err
	}
	return deltas, s.Final(), nil
}

func sameDeltas(t *testing.T, who string, got, want []*pb.Delta) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d deltas, the Parse stream %d", who, len(got), len(want))
	}
	for j := range got {
		if !proto.Equal(got[j], want[j]) {
			t.Errorf("%s delta %d: %v, the Parse stream %v", who, j, got[j], want[j])
		}
	}
}

// One step mixes every kind of entry: opens (with their first tokens), one token id (packed,
// no token_counts needed), three ids in one step and empty keep-alive steps (packed, with
// token_counts), two steps in one entry (sent as they are), finishes, a cancel and a step of a
// session never opened (a packed item's error). Every session's deltas and final equal a Parse
// stream's fed the same messages, and each step's outputs come in the order of its entries —
// with resume on (the resume ledger puts them in order) and off (Recv does).
func TestBatchPackedAndUnpackedEntriesInOneStep(t *testing.T) {
	t.Run("Resume", func(t *testing.T) { mixedSteps(t) })
	t.Run("WithoutResume", func(t *testing.T) { mixedSteps(t, parsetier.WithoutResume()) })
}

func mixedSteps(t *testing.T, opts ...parsetier.ClientOption) {
	w := &wireCount{}
	client := w.client(t, os.Getenv("PARSETIER_SERVER"), opts...)
	ctx := testContext(t)
	open := []parsetier.OpenOption{parsetier.WithToolsJSON(weatherTools), parsetier.WithRequestID("go-mix")}
	type plan struct {
		key   string
		start int
		msgs  [][][]uint32
	}
	ids := qwen3Output
	var plans []plan
	for i := range 12 {
		var msgs [][][]uint32
		switch i % 4 {
		case 0: // one id per step
			for _, id := range ids {
				msgs = append(msgs, [][]uint32{{id}})
			}
		case 1: // three ids in one step
			for k := 0; k < len(ids); k += 3 {
				msgs = append(msgs, [][]uint32{ids[k:min(k+3, len(ids))]})
			}
		case 2: // two steps in one entry
			for k := 0; k+1 < len(ids); k += 2 {
				msgs = append(msgs, [][]uint32{ids[k : k+1], ids[k+1 : k+2]})
			}
			msgs = append(msgs, [][]uint32{ids[len(ids)-1:]})
		case 3: // a keep-alive (an empty step) before every fifth id
			for k, id := range ids {
				if k%5 == 0 {
					msgs = append(msgs, [][]uint32{{}})
				}
				msgs = append(msgs, [][]uint32{{id}})
			}
		}
		plans = append(plans, plan{fmt.Sprintf("mix-%d", i), i * 2, msgs})
	}
	batch := openBatch(t, ctx, client)
	deltas := map[string][]*pb.Delta{}
	finals := map[string]*pb.Final{}
	last := 0
	for _, p := range plans {
		last = max(last, p.start+len(p.msgs))
	}
	for step := 0; step <= last; step++ {
		var order []string // the keys in the order their entries were queued
		queue := func(key string) {
			if !slices.Contains(order, key) {
				order = append(order, key)
			}
		}
		for n, p := range plans {
			if n == 5 && step == 7 {
				batch.Feed("ghost", []uint32{hello}) // no such session: its error, between the others
				queue("ghost")
			}
			if n == 3 && step < 12 {
				if step == 0 {
					batch.Open("dropped", "qwen3")
				}
				if step < 11 {
					batch.Feed("dropped", []uint32{hello})
				} else {
					batch.Cancel("dropped")
				}
				queue("dropped")
			}
			m := step - p.start
			if m < 0 || m > len(p.msgs) {
				continue
			}
			if m == 0 {
				batch.Open(p.key, "qwen3", open...)
			}
			if m < len(p.msgs) {
				batch.Feed(p.key, p.msgs[m]...)
			} else {
				batch.Finish(p.key, stopAtImEnd)
			}
			queue(p.key)
		}
		outputs, err := batch.Step()
		if err != nil {
			t.Fatalf("Step %d: %v", step, err)
		}
		at := -1
		for _, out := range outputs {
			key := out.GetKey()
			i := slices.Index(order, key)
			if i <= at {
				t.Fatalf("step %d: output of %q out of the entries' order %v", step, key, order)
			}
			at = i
			err := parsetier.SessionErr(out)
			switch {
			case key == "ghost":
				if status.Code(err) != codes.FailedPrecondition {
					t.Errorf("a step of no session: %v, want FailedPrecondition", err)
				}
			case key == "dropped" && err != nil:
				if status.Code(err) != codes.Canceled || step != 11 {
					t.Errorf("step %d: the cancelled session: %v", step, err)
				}
			case err != nil:
				t.Fatalf("step %d: session %s: %v", step, key, err)
			}
			deltas[key] = append(deltas[key], out.GetDeltas()...)
			if out.GetFinal() != nil {
				finals[key] = out.GetFinal()
			}
		}
	}
	if err := batch.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for _, p := range plans {
		want, final, err := parseMessages(ctx, client, p.msgs, stopAtImEnd, open...)
		if err != nil {
			t.Fatalf("Parse stream of %s: %v", p.key, err)
		}
		checkFinal(t, finals[p.key])
		if !proto.Equal(finals[p.key], final) {
			t.Errorf("%s final\n got %v\nwant %v", p.key, finals[p.key], final)
		}
		sameDeltas(t, p.key, deltas[p.key], want)
	}
	wire := w.snapshot()
	if wire.packedSent == 0 || wire.countedSent == 0 || wire.entriesSent == 0 {
		t.Errorf("the steps were not mixed: %d packed items (%d messages with token_counts), %d entries",
			wire.packedSent, wire.countedSent, wire.entriesSent)
	}
	if wire.packedRecv == 0 || wire.sessionsRecv == 0 {
		t.Errorf("the replies were not mixed: %d packed outputs, %d session outputs", wire.packedRecv, wire.sessionsRecv)
	}
}

// cutter is a loopback TCP proxy to a server whose connections can be cut (a lost connection,
// as a crashed proxy or a network fault gives); it accepts new ones afterwards.
type cutter struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
	cuts  int
}

func newCutter(t *testing.T, target string) *cutter {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("Listen: %v", err)
	}
	c := &cutter{ln: ln}
	t.Cleanup(func() { ln.Close(); c.cut() })
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			c.mu.Lock()
			c.conns = append(c.conns, in, out)
			c.mu.Unlock()
			pipe := func(dst, src net.Conn) {
				_, _ = io.Copy(dst, src)
				dst.Close()
				src.Close()
			}
			go pipe(in, out)
			go pipe(out, in)
		}
	}()
	return c
}

func (c *cutter) cut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, conn := range c.conns {
		conn.Close()
	}
	c.conns = nil
	c.cuts++
}

// A batch whose connection is cut twice, with steps in flight, resumes on a new stream: its
// history is re-sent (packed too) and every session's deltas and final equal a Parse stream's.
// Steps and replies are packed after each cut too.
func TestBatchResumesPackedSessions(t *testing.T) {
	w := &wireCount{}
	proxy := newCutter(t, os.Getenv("PARSETIER_SERVER"))
	client := w.client(t, proxy.ln.Addr().String())
	ctx := testContext(t)
	opts := []parsetier.OpenOption{parsetier.WithToolsJSON(weatherTools), parsetier.WithRequestID("go-resume")}
	const sessions = 16
	key := func(i int) string { return fmt.Sprintf("resume-%d", i) }
	batch := openBatch(t, ctx, client)
	for i := range sessions {
		batch.Open(key(i), "qwen3", opts...)
	}
	deltas := map[string][]*pb.Delta{}
	finals := map[string]*pb.Final{}
	receive := func() {
		outputs, err := batch.Recv()
		if err != nil {
			t.Fatalf("Recv: %v", err)
		}
		gather(t, outputs, deltas, finals)
	}
	var atCut []wireTally
	for step := 0; step <= len(qwen3Output); step++ {
		queueStep(batch, sessions, key, step)
		if err := batch.Send(); err != nil {
			t.Fatalf("Send %d: %v", step, err)
		}
		if step == 4 || step == 8 { // two steps in flight at each cut; text deltas follow each
			atCut = append(atCut, w.snapshot())
			proxy.cut()
		}
		if batch.InFlight == 2 {
			receive()
		}
	}
	for batch.InFlight > 0 {
		receive()
	}
	if err := batch.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if got := batch.Resumes(); got != 2 {
		t.Errorf("%d resumes, want 2", got)
	}
	want, final, err := parseMessages(ctx, connect(t), onePerStepMessages(qwen3Output), stopAtImEnd, opts...)
	if err != nil {
		t.Fatalf("Parse stream: %v", err)
	}
	for i := range sessions {
		checkFinal(t, finals[key(i)])
		if !proto.Equal(finals[key(i)], final) {
			t.Errorf("session %d final\n got %v\nwant %v", i, finals[key(i)], final)
		}
		sameDeltas(t, key(i), deltas[key(i)], want)
	}
	counts := append(atCut, w.snapshot())
	for n := 1; n < len(counts); n++ {
		if counts[n].packedRecv == counts[n-1].packedRecv || counts[n].packedSent == counts[n-1].packedSent {
			t.Errorf("no packed items or outputs after cut %d: %+v then %+v", n, counts[n-1], counts[n])
		}
	}
}

func onePerStepMessages(ids []uint32) [][][]uint32 {
	msgs := make([][][]uint32, len(ids))
	for i, id := range ids {
		msgs[i] = [][]uint32{{id}}
	}
	return msgs
}
