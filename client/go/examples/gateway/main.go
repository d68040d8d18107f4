// Command gateway is a small HTTP front end that answers OpenAI and Anthropic clients with the
// bytes parsetier renders (Open.wire): the handler opens one Parse session per request (per
// choice, for OpenAI's n > 1), feeds it the token ids its engine generates, and writes each
// reply's wire bytes to the caller as they come, then the final result's. It maps nothing itself:
// role chunks, call ids, finish reasons, usage, logprobs and the SSE framing all come from the
// server.
//
//	gateway -parsetier 127.0.0.1:50051 -listen 127.0.0.1:8080 -model qwen3 -steps steps.json -tools tools.json
//
// The "engine" here replays recorded decode steps (-steps: a JSON array of token-id arrays), so
// the example runs without a GPU; a real gateway feeds its engine's steps in the same loop.
// -steps may be given several times: choice i of a request replays the (i mod count)-th file.
// Routes: /v1/chat/completions, /v1/completions, /v1/messages, /v1/responses. It prints
// "listening on http://ADDR" once it accepts connections.
//
// A chat or completions request with n > 1 is n sessions, one per choice (the same Open but its
// choice_index). Streamed, every session's bytes are forwarded as they come, and the closing
// bytes (the usage chunk, data: [DONE]) of the last choice to finish only; that choice's Finish
// waits for the other choices' final results and carries their usage (Finish.other_choices_usage),
// so the one usage chunk counts every choice, as OpenAI reports it. Not streamed, each session
// renders a body holding its own choice: the gateway joins their choices, in index order, into
// the last one's body, whose usage counts every choice the same way.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	pb "github.com/parsetier/parsetier/client/go/parsetierpb"
)

// route is one public API: its wire dialect and the prefix of its response ids.
type route struct {
	dialect pb.WireDialect
	prefix  string
}

var routes = map[string]route{
	"/v1/chat/completions": {pb.WireDialect_WIRE_DIALECT_OPENAI_CHAT, "chatcmpl-"},
	"/v1/completions":      {pb.WireDialect_WIRE_DIALECT_OPENAI_COMPLETIONS, "cmpl-"},
	"/v1/messages":         {pb.WireDialect_WIRE_DIALECT_ANTHROPIC_MESSAGES, "msg_"},
	"/v1/responses":        {pb.WireDialect_WIRE_DIALECT_OPENAI_RESPONSES, "resp_"},
}

// request is what the handler reads of a caller's body: the rest is the engine's business.
type request struct {
	Model         string `json:"model"`
	Stream        bool   `json:"stream"`
	N             int    `json:"n"` // OpenAI's choices per request (chat and completions)
	StreamOptions struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

// maxChoices bounds n: each choice is a session of its own.
const maxChoices = 16

type gateway struct {
	stub    pb.ParserServiceClient
	model   string       // the parsetier model (Open.model)
	tools   string       // the tools the engine's prompt offered, as OpenAI's JSON array
	outputs [][][]uint32 // the replayed engine outputs (choice i replays outputs[i % len])
	next    atomic.Int64
}

func (g *gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rt, ok := routes[r.URL.Path]
	if !ok || r.Method != http.MethodPost {
		http.NotFound(w, r)
		return
	}
	var req request
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	n := 1
	if rt.dialect == pb.WireDialect_WIRE_DIALECT_OPENAI_CHAT || rt.dialect == pb.WireDialect_WIRE_DIALECT_OPENAI_COMPLETIONS {
		n = max(req.N, 1)
	}
	if n > maxChoices {
		http.Error(w, fmt.Sprintf("n is %d; this gateway serves at most %d choices", n, maxChoices), http.StatusBadRequest)
		return
	}
	id := rt.prefix + strconv.FormatInt(g.next.Add(1), 10)
	open := &pb.Open{
		Model:     g.model,
		RequestId: id,
		ToolsJson: g.tools,
		Output:    pb.OutputKind_OUTPUT_KIND_FINAL_ONLY, // only the bytes are wanted
		Wire: &pb.WireOptions{
			Dialect:      rt.dialect,
			ResponseId:   id,
			Model:        req.Model,
			Created:      time.Now().Unix(),
			Stream:       req.Stream,
			IncludeUsage: req.StreamOptions.IncludeUsage,
		},
	}
	if rt.dialect == pb.WireDialect_WIRE_DIALECT_OPENAI_COMPLETIONS {
		open.Completion = &pb.CompletionOptions{}
		open.ToolsJson = ""
	}
	opens := make([]*pb.Open, n) // one session per choice: the same Open but its choice_index
	for i := range opens {
		opens[i] = proto.CloneOf(open)
		opens[i].ChoiceIndex = uint32(i)
	}
	if err := g.forward(r.Context(), w, opens, req.Stream); err != nil {
		log.Printf("%s: %v", id, err)
	}
}

// forward runs one session per choice and writes their bytes to w as they come (see the package
// comment for n > 1).
func (g *gateway) forward(ctx context.Context, w http.ResponseWriter, opens []*pb.Open, stream bool) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	out := newOutput(w, len(opens), stream)
	c := newChoices(len(opens))
	bodies := make([][]byte, len(opens)) // not streamed: each choice's body
	errs := make(chan error, len(opens))
	var first error
	sessions := 0
	for i, open := range opens {
		session, err := g.stub.Parse(ctx)
		if err != nil {
			cancel() // the choices started end with it
			first = err
			break
		}
		sessions++
		go g.engine(ctx, session, open, g.outputs[i%len(g.outputs)], c, i)
		go func() {
			final, err := receive(session, out, c, i, stream)
			bodies[i] = final
			if err != nil {
				cancel() // one choice failed: the response cannot be whole
			}
			errs <- err
		}()
	}
	for range sessions {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	if first == nil && !stream {
		body, err := joinBodies(bodies, c.lastChoice())
		if err == nil {
			err = out.write(0, body)
		}
		first = err
	}
	if first != nil && !out.started {
		http.Error(w, first.Error(), http.StatusBadGateway)
	}
	return first
}

// engine plays one choice's engine: one message per decode step, then the finish (for the last
// choice to finish, once the others' usage is known).
func (g *gateway) engine(ctx context.Context, session pb.ParserService_ParseClient, open *pb.Open, steps [][]uint32, c *choices, i int) {
	if session.Send(&pb.ParseRequest{Open: open}) != nil {
		return
	}
	for _, step := range steps {
		if session.Send(&pb.ParseRequest{Steps: []*pb.Step{{TokenIds: step}}}) != nil {
			return
		}
	}
	finish, err := c.finish(ctx, i)
	if err == nil && session.Send(&pb.ParseRequest{Finish: finish}) == nil {
		_ = session.CloseSend()
	}
}

// receive forwards one choice's replies: their wire bytes as they come and, streamed, the closing
// bytes of the last choice only. Not streamed, it returns the choice's body instead.
func receive(session pb.ParserService_ParseClient, out *output, c *choices, i int, stream bool) ([]byte, error) {
	var body []byte
	for {
		reply, err := session.Recv()
		if errors.Is(err, io.EOF) {
			return body, nil
		}
		if err != nil {
			return nil, err
		}
		if err := out.write(i, reply.GetWire()); err != nil {
			return nil, err
		}
		final := reply.GetFinal()
		if final == nil {
			continue
		}
		switch last := c.ended(i, final.GetUsage()); {
		case !stream:
			body = final.GetWire()
		case last:
			if err := out.write(i, final.GetWire()); err != nil {
				return nil, err
			}
		}
	}
}

// choices coordinates the sessions of one request: which choice finishes last, and the usage of
// the others, which that choice's Finish carries.
type choices struct {
	mu     sync.Mutex
	n      int
	done   int       // choices whose engine output has ended
	last   int       // the choice that ended last (its Finish carries the others' usage); -1 before
	finals int       // choices whose final result has come
	usage  *pb.Usage // the sum of those results' usage
	others chan struct{}
}

func newChoices(n int) *choices {
	c := &choices{n: n, last: -1, usage: &pb.Usage{}, others: make(chan struct{})}
	if n == 1 {
		close(c.others)
	}
	return c
}

// finish is choice i's Finish, once its engine output has ended. The last choice to end waits
// for the others' final results and sends their usage.
func (c *choices) finish(ctx context.Context, i int) (*pb.Finish, error) {
	finish := &pb.Finish{Reason: pb.FinishReason_FINISH_REASON_STOP}
	c.mu.Lock()
	c.done++
	last := c.done == c.n
	if last {
		c.last = i
	}
	c.mu.Unlock()
	if !last || c.n == 1 {
		return finish, nil
	}
	select {
	case <-c.others:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	c.mu.Lock()
	finish.OtherChoicesUsage = proto.CloneOf(c.usage)
	c.mu.Unlock()
	return finish, nil
}

// lastChoice is the choice that ended last (-1 before every choice has ended).
func (c *choices) lastChoice() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last
}

// ended records choice i's final usage and says whether it is the last choice (whose closing
// bytes are the response's).
func (c *choices) ended(i int, usage *pb.Usage) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.last == i {
		return true
	}
	c.usage.CompletionTokens += usage.GetCompletionTokens()
	c.usage.ReasoningTokens += usage.GetReasoningTokens()
	c.finals++
	if c.finals == c.n-1 {
		close(c.others)
	}
	return false
}

// joinBodies is the response body of n choices: the last choice's body (its usage counts every
// choice) with the choices of every body, in index order. One body goes out unchanged.
func joinBodies(bodies [][]byte, last int) ([]byte, error) {
	if len(bodies) == 1 {
		return bodies[0], nil
	}
	var joined []json.RawMessage
	for _, body := range bodies {
		var choices struct {
			Choices []json.RawMessage `json:"choices"`
		}
		if err := json.Unmarshal(body, &choices); err != nil {
			return nil, fmt.Errorf("a choice's body: %w", err)
		}
		joined = append(joined, choices.Choices...) // each session's body holds its choice
	}
	list, err := json.Marshal(joined)
	if err != nil {
		return nil, err
	}
	return replaceMember(bodies[last], "choices", list)
}

// replaceMember is the JSON object `object` with member `name`'s value replaced by `value`, its
// other members' bytes and order as they were.
func replaceMember(object []byte, name string, value []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(object))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, fmt.Errorf("a body that is no JSON object")
	}
	var out strings.Builder
	out.WriteByte('{')
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		var member json.RawMessage
		if err := dec.Decode(&member); err != nil {
			return nil, err
		}
		if out.Len() > 1 {
			out.WriteByte(',')
		}
		key, _ := json.Marshal(tok)
		out.Write(key)
		out.WriteByte(':')
		if tok == name {
			member = value
		}
		out.Write(member)
	}
	out.WriteByte('}')
	return []byte(out.String()), nil
}

// output writes the response: the status and content type before the first bytes, every write
// flushed, one writer at a time (the choices' sessions write concurrently). A choice's bytes wait
// until every choice before it has written its first: clients rebuild choices from their first
// chunks in index order (the openai SDK's stream accumulator appends a choice it has not seen).
type output struct {
	mu          sync.Mutex
	w           http.ResponseWriter
	flusher     http.Flusher
	contentType string
	started     bool
	opened      int      // choices 0 .. opened-1 have written their first bytes
	held        [][]byte // per choice: bytes waiting for an earlier choice's first
}

func newOutput(w http.ResponseWriter, choices int, stream bool) *output {
	o := &output{w: w, contentType: "application/json", held: make([][]byte, choices)}
	if stream {
		o.contentType = "text/event-stream"
	}
	o.flusher, _ = w.(http.Flusher)
	return o
}

// write sends choice i's bytes, or holds them while an earlier choice has written nothing.
func (o *output) write(i int, chunk []byte) error {
	if len(chunk) == 0 {
		return nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if i > o.opened {
		o.held[i] = append(o.held[i], chunk...)
		return nil
	}
	if i < o.opened {
		return o.send(chunk)
	}
	for { // choice i opens, and the choices after it that were held
		if err := o.send(chunk); err != nil {
			return err
		}
		o.opened++
		if o.opened == len(o.held) || len(o.held[o.opened]) == 0 {
			return nil
		}
		chunk, o.held[o.opened] = o.held[o.opened], nil
	}
}

func (o *output) send(chunk []byte) error {
	if !o.started {
		o.started = true
		o.w.Header().Set("Content-Type", o.contentType)
		o.w.WriteHeader(http.StatusOK)
	}
	if _, err := o.w.Write(chunk); err != nil {
		return err
	}
	if o.flusher != nil {
		o.flusher.Flush()
	}
	return nil
}

// stepsFiles is the repeatable -steps flag.
type stepsFiles []string

func (f *stepsFiles) String() string     { return strings.Join(*f, ",") }
func (f *stepsFiles) Set(s string) error { *f = append(*f, s); return nil }

func main() {
	target := flag.String("parsetier", "127.0.0.1:50051", "parsetier server address")
	listen := flag.String("listen", "127.0.0.1:8080", "address to serve HTTP on (port 0: any free port)")
	model := flag.String("model", "qwen3", "parsetier model name")
	var steps stepsFiles
	flag.Var(&steps, "steps", "JSON file: an engine output to replay, an array of token-id arrays (repeatable: choice i replays the (i mod count)-th)")
	toolsFile := flag.String("tools", "", "JSON file: the tools the prompt offered (OpenAI's array)")
	flag.Parse()

	g := &gateway{model: *model}
	for _, file := range steps {
		var output [][]uint32
		data, err := os.ReadFile(file)
		if err == nil {
			err = json.Unmarshal(data, &output)
		}
		if err != nil {
			log.Fatalf("-steps: %v", err)
		}
		g.outputs = append(g.outputs, output)
	}
	if len(g.outputs) == 0 {
		g.outputs = [][][]uint32{nil} // no output: every session is empty
	}
	if *toolsFile != "" {
		data, err := os.ReadFile(*toolsFile)
		if err != nil {
			log.Fatalf("-tools: %v", err)
		}
		g.tools = string(data)
	}
	conn, err := grpc.NewClient(*target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	g.stub = pb.NewParserServiceClient(conn)

	listener, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("listening on http://%s\n", listener.Addr())
	log.Fatal(http.Serve(listener, g))
}
