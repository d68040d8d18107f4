// Command batchcheck drives ParseBatch streams through the Go client's batch API for the batch
// resume tests (tests/test_batch_resume.py): it reads a plan as JSON on stdin, runs one serving
// loop per stream (all its sessions open in the first step, then one token per session per step,
// each finishing after its last token), prints "sent N" as steps go out (so the test knows when
// to kill a backend), and ends with one JSON line holding every stream's replies, step by step
// (each session's output as base64 protobuf), and how often each stream resumed.
//
// With "edge" in the plan it runs one stream of given steps instead (the pipelined edge cases):
// the first "stepped" steps one by one, then the steps up to "ahead" sent without waiting; it
// prints "ahead" and waits for a line on stdin (the test stops the server meanwhile), sends the
// rest but the last, receives the replies to the steps sent ahead, prints "answered" and waits
// for a line again (the test kills the server), receives the other replies and sends the last
// step, which finishes what is still open.
package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/protobuf/proto"

	parsetier "github.com/parsetier/parsetier/client/go"
	pb "github.com/parsetier/parsetier/client/go/parsetierpb"
)

type plan struct {
	Target  string         `json:"target"`
	Tools   string         `json:"tools_json"`
	PauseMs int            `json:"pause_ms"`
	Resume  bool           `json:"resume"`
	Streams [][]sessionRun `json:"streams"`
	Edge    *edgePlan      `json:"edge"`
}

type edgePlan struct {
	Model     string     `json:"model"`
	PromptIDs []uint32   `json:"prompt_ids"`
	Steps     [][]action `json:"steps"`
	Stepped   int        `json:"stepped"`
	Ahead     int        `json:"ahead"`
}

// action is one call of the batch API: Op is "open", "feed", "finish" or "cancel".
type action struct {
	Op        string   `json:"op"`
	Key       string   `json:"key"`
	IDs       []uint32 `json:"ids"`
	RequestID string   `json:"request_id"`
}

type sessionRun struct {
	Key       string   `json:"key"`
	Model     string   `json:"model"`
	PromptIDs []uint32 `json:"prompt_ids"`
	IDs       []uint32 `json:"ids"`
}

type result struct {
	Replies []map[string]string `json:"replies"`
	Resumes int                 `json:"resumes"`
	Error   string              `json:"error,omitempty"`
}

func main() {
	var p plan
	decoder := json.NewDecoder(os.Stdin)
	if err := decoder.Decode(&p); err != nil {
		fmt.Fprintln(os.Stderr, "plan:", err)
		os.Exit(2)
	}
	opts := []parsetier.ClientOption{parsetier.WithInsecure()}
	target := p.Target
	if list, ok := strings.CutPrefix(target, "ipv4:"); ok {
		// Several backends, tried in order (pick_first), as the Python tests' "ipv4:a,b" target.
		r := manual.NewBuilderWithScheme("batchcheck")
		var addrs []resolver.Address
		for _, addr := range strings.Split(list, ",") {
			addrs = append(addrs, resolver.Address{Addr: addr})
		}
		r.InitialState(resolver.State{Addresses: addrs})
		opts = append(opts, parsetier.WithDialOptions(grpc.WithResolvers(r)))
		target = r.Scheme() + ":///backends"
	}
	if !p.Resume {
		opts = append(opts, parsetier.WithoutResume())
	}
	client, err := parsetier.NewClient(target, opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "client:", err)
		os.Exit(2)
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	out := bufio.NewWriter(os.Stdout)
	if p.Edge != nil {
		lines := bufio.NewReader(io.MultiReader(decoder.Buffered(), os.Stdin))
		at := func(point string) {
			fmt.Fprintln(out, point)
			out.Flush()
			for { // a line with something on it (the plan's own newline is none)
				line, err := lines.ReadString('\n')
				if err != nil || strings.TrimSpace(line) != "" {
					break
				}
			}
		}
		line, _ := json.Marshal(map[string][]result{"results": {runEdge(ctx, client, p, at)}})
		fmt.Fprintf(out, "%s\n", line)
		out.Flush()
		return
	}
	var outMu sync.Mutex
	var sent atomic.Int64
	results := make([]result, len(p.Streams))
	var wg sync.WaitGroup
	for i, sessions := range p.Streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = run(ctx, client, p, sessions, func() {
				n := sent.Add(1)
				outMu.Lock()
				fmt.Fprintf(out, "sent %d\n", n)
				out.Flush()
				outMu.Unlock()
			})
		}()
	}
	wg.Wait()
	outMu.Lock()
	defer outMu.Unlock()
	line, _ := json.Marshal(map[string][]result{"results": results})
	fmt.Fprintf(out, "%s\n", line)
	out.Flush()
}

func run(ctx context.Context, client *parsetier.Client, p plan, sessions []sessionRun, onSent func()) result {
	var r result
	batch, err := client.Batch(ctx)
	if err != nil {
		return result{Error: "batch: " + err.Error()}
	}
	steps := 0
	for _, s := range sessions {
		steps = max(steps, len(s.IDs))
	}
	for k := range steps {
		for _, s := range sessions {
			if k == 0 {
				batch.Open(s.Key, s.Model, parsetier.WithToolsJSON(p.Tools), parsetier.WithRequestID(s.Key),
					parsetier.WithPromptTokenIDs(s.PromptIDs), parsetier.WithOutput(pb.OutputKind_OUTPUT_KIND_DELTAS_AND_EVENTS))
			}
			if k < len(s.IDs) {
				batch.Feed(s.Key, []uint32{s.IDs[k]})
			}
			if k == len(s.IDs)-1 {
				batch.Finish(s.Key, parsetier.Finish{Reason: parsetier.Stop})
			}
		}
		outputs, err := batch.Step()
		if err != nil {
			r.Error = err.Error()
			break
		}
		r.Replies = append(r.Replies, encoded(outputs))
		onSent()
		time.Sleep(time.Duration(p.PauseMs) * time.Millisecond)
	}
	if err := batch.Close(); err != nil && r.Error == "" {
		r.Error = "close: " + err.Error()
	}
	r.Resumes = batch.Resumes()
	return r
}

// encoded is a reply as the result holds it: each session's output, base64 protobuf.
func encoded(outputs []*pb.SessionOutput) map[string]string {
	reply := map[string]string{}
	for _, o := range outputs {
		raw, _ := proto.MarshalOptions{Deterministic: true}.Marshal(o)
		reply[o.GetKey()] = base64.StdEncoding.EncodeToString(raw)
	}
	return reply
}

// runEdge runs the plan's edge steps on one stream, calling at("ahead") and at("answered").
func runEdge(ctx context.Context, client *parsetier.Client, p plan, at func(string)) result {
	e := p.Edge
	batch, err := client.Batch(ctx)
	if err != nil {
		return result{Error: "batch: " + err.Error()}
	}
	queue := func(step []action) {
		for _, a := range step {
			switch a.Op {
			case "open":
				batch.Open(a.Key, e.Model, parsetier.WithToolsJSON(p.Tools), parsetier.WithRequestID(a.RequestID),
					parsetier.WithPromptTokenIDs(e.PromptIDs), parsetier.WithOutput(pb.OutputKind_OUTPUT_KIND_DELTAS_AND_EVENTS))
			case "feed":
				batch.Feed(a.Key, a.IDs)
			case "finish":
				batch.Finish(a.Key, parsetier.Finish{Reason: parsetier.Stop})
			default:
				batch.Cancel(a.Key)
			}
		}
	}
	var r result
	receive := func() bool {
		outputs, err := batch.Recv()
		if err != nil {
			r.Error = err.Error()
			return false
		}
		r.Replies = append(r.Replies, encoded(outputs))
		return true
	}
	last := len(e.Steps) - 1
	for k, step := range e.Steps[:last] {
		queue(step)
		if err := batch.Send(); err != nil {
			return result{Error: err.Error()}
		}
		if k < e.Stepped && !receive() {
			return r
		}
		if k == e.Ahead-1 {
			at("ahead")
		}
	}
	for range e.Ahead - e.Stepped {
		if !receive() {
			return r
		}
	}
	at("answered")
	for batch.InFlight > 0 {
		if !receive() {
			return r
		}
	}
	queue(e.Steps[last])
	if err := batch.Send(); err != nil {
		r.Error = err.Error()
		return r
	}
	if !receive() {
		return r
	}
	if err := batch.Close(); err != nil {
		r.Error = "close: " + err.Error()
	}
	r.Resumes = batch.Resumes()
	return r
}
