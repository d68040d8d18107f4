// Command resumedriver is the Go client's driver for the resume scenario corpus
// (tests/resume_scenarios/README.md): it reads one driver script (a JSON line) on stdin, runs its
// ops through the client's public API — the batch API, or one Parse session per key — prints
// {"paused": NAME} at each pause and waits for a line on stdin, and ends with one {"result": …}
// line. It knows no scenario: tests/test_resume_scenarios.py expands the corpus and judges.
// With the argument "multiplex", the client is WithMultiplex(0): the Parse sessions ride one
// shared ParseBatch stream, with the same session API.
package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
	"unicode"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	parsetier "github.com/parsetier/parsetier/client/go"
	pb "github.com/parsetier/parsetier/client/go/parsetierpb"
)

type script struct {
	API         string  `json:"api"`
	Target      string  `json:"target"`
	Resume      bool    `json:"resume"`
	Timeout     float64 `json:"timeout"`
	KeepaliveMs int     `json:"keepalive_ms"`
	Ops         []op    `json:"ops"`
}

type op struct {
	Send    []action        `json:"send"`
	Receive json.RawMessage `json:"receive"` // a count or "all"
	Pause   string          `json:"pause"`
}

type action struct {
	Op     string   `json:"op"`
	Key    string   `json:"key"`
	Open   openSpec `json:"open"`
	IDs    []uint32 `json:"ids"`
	Reason string   `json:"reason"`
}

type openSpec struct {
	Model          string   `json:"model"`
	RequestID      string   `json:"request_id"`
	ToolsJSON      string   `json:"tools_json"`
	PromptTokenIDs []uint32 `json:"prompt_token_ids"`
	Output         string   `json:"output"`
}

type failure struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

type batchResult struct {
	Replies []map[string]string `json:"replies"`
	Resumes int                 `json:"resumes"`
	Error   *failure            `json:"error"`
}

type sessionResult struct {
	Replies []string `json:"replies"`
	Resumes int      `json:"resumes"`
	Error   *failure `json:"error"`
}

var outputs = map[string]pb.OutputKind{
	"deltas": pb.OutputKind_OUTPUT_KIND_DELTAS,
	"events": pb.OutputKind_OUTPUT_KIND_EVENTS,
	"both":   pb.OutputKind_OUTPUT_KIND_DELTAS_AND_EVENTS,
	"final":  pb.OutputKind_OUTPUT_KIND_FINAL_ONLY,
}

var reasons = map[string]pb.FinishReason{
	"": pb.FinishReason_FINISH_REASON_STOP, "stop": pb.FinishReason_FINISH_REASON_STOP,
	"length": pb.FinishReason_FINISH_REASON_LENGTH, "abort": pb.FinishReason_FINISH_REASON_ABORT,
}

func (s openSpec) options() []parsetier.OpenOption {
	return []parsetier.OpenOption{parsetier.WithToolsJSON(s.ToolsJSON), parsetier.WithRequestID(s.RequestID),
		parsetier.WithPromptTokenIDs(s.PromptTokenIDs), parsetier.WithOutput(outputs[s.Output])}
}

// failed is err as the result holds it: the status's canonical name (UNAVAILABLE, ...).
func failed(err error) *failure {
	st := status.Convert(err)
	var name strings.Builder
	for i, c := range st.Code().String() { // Go's CamelCase names: FailedPrecondition
		if i > 0 && unicode.IsUpper(c) {
			name.WriteByte('_')
		}
		name.WriteRune(unicode.ToUpper(c))
	}
	code := strings.Replace(name.String(), "CANCELED", "CANCELLED", 1)
	return &failure{Code: code, Message: st.Message()}
}

func encode(m proto.Message) string {
	raw, _ := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	return base64.StdEncoding.EncodeToString(raw)
}

var (
	out   = bufio.NewWriter(os.Stdout)
	lines *bufio.Reader
)

func say(v any) {
	line, _ := json.Marshal(v)
	fmt.Fprintf(out, "%s\n", line)
	out.Flush()
}

func pause(name string) {
	say(map[string]string{"paused": name})
	_, _ = lines.ReadString('\n')
}

func main() {
	lines = bufio.NewReader(os.Stdin)
	line, err := lines.ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		fmt.Fprintln(os.Stderr, "script:", err)
		os.Exit(2)
	}
	var s script
	if err := json.Unmarshal([]byte(line), &s); err != nil {
		fmt.Fprintln(os.Stderr, "script:", err)
		os.Exit(2)
	}
	address, opts := target(s)
	if len(os.Args) > 1 && os.Args[1] == "multiplex" {
		opts = append(opts, parsetier.WithMultiplex(0))
	}
	client, err := parsetier.NewClient(address, opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "client:", err)
		os.Exit(2)
	}
	defer client.Close()
	if s.API == "batch" {
		say(map[string]any{"result": runBatch(client, s)})
	} else {
		say(map[string]any{"result": map[string]any{"sessions": runParse(client, s)}})
	}
}

// target is the client for the script's target: "ipv4:a,b" lists backends tried in order
// (pick_first), as gRPC's C core reads it.
func target(s script) (string, []parsetier.ClientOption) {
	opts := []parsetier.ClientOption{parsetier.WithInsecure()}
	if !s.Resume {
		opts = append(opts, parsetier.WithoutResume())
	}
	if s.KeepaliveMs > 0 {
		opts = append(opts, parsetier.WithKeepalive(keepalive.ClientParameters{
			Time: time.Duration(s.KeepaliveMs) * time.Millisecond, Timeout: 20 * time.Second, PermitWithoutStream: true}))
	}
	list, ok := strings.CutPrefix(s.Target, "ipv4:")
	if !ok {
		return s.Target, opts
	}
	r := manual.NewBuilderWithScheme("resumedriver")
	var addrs []resolver.Address
	for _, addr := range strings.Split(list, ",") {
		addrs = append(addrs, resolver.Address{Addr: addr})
	}
	r.InitialState(resolver.State{Addresses: addrs})
	return r.Scheme() + ":///backends", append(opts, parsetier.WithDialOptions(grpc.WithResolvers(r)))
}

func timeout(s script) time.Duration { return time.Duration(s.Timeout * float64(time.Second)) }

func runBatch(client *parsetier.Client, s script) batchResult {
	ctx, cancel := context.WithTimeout(context.Background(), 2*timeout(s))
	defer cancel()
	r := batchResult{Replies: []map[string]string{}}
	batch, err := client.Batch(ctx)
	if err != nil {
		r.Error = failed(err)
		return r
	}
	receive := func() bool {
		outs, err := batch.Recv()
		if err != nil {
			r.Error = failed(err)
			return false
		}
		reply := map[string]string{}
		for _, o := range outs {
			reply[o.GetKey()] = encode(o)
		}
		r.Replies = append(r.Replies, reply)
		return true
	}
	ok := true
	for _, o := range s.Ops {
		switch {
		case o.Send != nil:
			for _, a := range o.Send {
				switch a.Op {
				case "open":
					batch.Open(a.Key, a.Open.Model, a.Open.options()...)
				case "feed":
					batch.Feed(a.Key, a.IDs)
				case "finish":
					batch.Finish(a.Key, parsetier.Finish{Reason: reasons[a.Reason]})
				case "cancel":
					batch.Cancel(a.Key)
				}
			}
			if err := batch.Send(); err != nil {
				r.Error, ok = failed(err), false
			}
		case o.Receive != nil:
			n := batch.InFlight
			_ = json.Unmarshal(o.Receive, &n) // "all" leaves every reply in flight
			for range n {
				if ok = receive(); !ok {
					break
				}
			}
		case o.Pause != "":
			pause(o.Pause)
		}
		if !ok {
			break
		}
	}
	for ok && batch.InFlight > 0 {
		ok = receive()
	}
	if err := batch.Close(); err != nil && ok {
		r.Error = failed(err)
	}
	r.Resumes = batch.Resumes()
	return r
}

func runParse(client *parsetier.Client, s script) map[string]*sessionResult {
	ctx, cancel := context.WithTimeout(context.Background(), 2*timeout(s))
	defer cancel()
	results := map[string]*sessionResult{}
	sessions := map[string]*parsetier.Session{}
	var readers sync.WaitGroup
	for _, o := range s.Ops {
		for _, a := range o.Send {
			switch a.Op {
			case "open":
				r := &sessionResult{Replies: []string{}}
				results[a.Key] = r
				session, err := client.Open(ctx, a.Open.Model, a.Open.options()...)
				if err != nil {
					r.Error = failed(err)
					continue
				}
				sessions[a.Key] = session
				readers.Add(1)
				go func() {
					defer readers.Done()
					for msg, err := range session.Messages() {
						if err != nil {
							r.Error = failed(err)
							break
						}
						r.Replies = append(r.Replies, encode(msg))
					}
					r.Resumes = min(session.Resumes(), 1) // sessions that moved at least once
				}()
			case "feed":
				if session := sessions[a.Key]; session != nil {
					_ = session.Send(a.IDs) // a break is the reader's to report
				}
			case "finish":
				if session := sessions[a.Key]; session != nil {
					_ = session.Finish(reasons[a.Reason], parsetier.MatchedStop{})
				}
			}
		}
		if o.Pause != "" {
			pause(o.Pause)
		}
	}
	readers.Wait()
	for _, session := range sessions {
		session.Close()
	}
	return results
}
