// Command gateway is an OpenAI- and Anthropic-compatible HTTP front end for a token-in/token-out
// engine, built on two parsetier calls: one before generation and one stream after.
//
//	HTTP body ──Render──► prompt ids, sampling ──► engine ──► output ids ──Parse(Render's Open)──► HTTP bytes
//
// For each request it forwards the body, as it arrived, to Render with the route's dialect; gives
// the prompt's token ids and the sampling parameters to the engine; opens one Parse session per
// choice with the Open that Render returned, unchanged (its wire options answer in the request's
// own dialect); feeds the session the engine's output ids step by step; and writes the session's
// wire bytes to the caller as they come. It reads no field of any request and writes no field of
// any response: the prompt, tools, tool choice, thinking switch, stop ids, stream flag, response
// id, role chunks, call ids, finish reasons, usage, SSE framing and error bodies all come from
// the server. A request the server refuses gets the error body Render returned in its dialect,
// with the code's HTTP status.
//
//	gateway -parsetier 127.0.0.1:50051 -listen 127.0.0.1:8080 -model qwen3 -script script.json
//
// Routes: /v1/chat/completions, /v1/completions, /v1/responses, /v1/messages. It prints
// "listening on http://ADDR" once it accepts connections.
//
// The engine here is a scripted stand-in (engine.go), so the example runs without a model: a table
// from a prompt (the SHA-256 of its token ids) to the output ids to emit, which it emits a few ids
// per decode step and ends as an engine does, on a stop id or at max_tokens. A real gateway calls
// its engine at the same place with the same two inputs.
//
// A chat or completions request with n > 1 is n sessions, one per choice (Rendered.Choice(i)),
// whose bytes parsetier.WireJoin joins: streamed, a choice's events after the first events of the
// choices before it, and the closing bytes (usage, data: [DONE]) of the last choice to finish
// only, whose Finish carries the other choices' usage (choices.go) so that they count every
// choice; not streamed, one body holding every choice in index order.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	parsetier "github.com/parsetier/parsetier/client/go"
	pb "github.com/parsetier/parsetier/client/go/parsetierpb"
)

// routes is the one thing the gateway knows of each API: which dialect its path speaks.
var routes = map[string]pb.WireDialect{
	"/v1/chat/completions": parsetier.OpenAIChat,
	"/v1/completions":      parsetier.OpenAICompletions,
	"/v1/responses":        parsetier.OpenAIResponses,
	"/v1/messages":         parsetier.AnthropicMessages,
}

const (
	maxBodyBytes = 32 << 20 // the largest request body read
	maxChoices   = 16       // n: each choice is a session of its own
)

type gateway struct {
	client *parsetier.Client
	model  string // the parsetier model (RenderRequest.model)
	engine *engine
	next   atomic.Int64
}

func (g *gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	dialect, ok := routes[r.URL.Path]
	if !ok || r.Method != http.MethodPost {
		http.NotFound(w, r)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		http.Error(w, err.Error(), http.StatusRequestEntityTooLarge)
		return
	}
	id := "gw-" + strconv.FormatInt(g.next.Add(1), 10)
	// One call before generation: the body as it came, in its dialect.
	rendered, err := g.client.Render(r.Context(), g.model, dialect, body,
		parsetier.RenderRequestID(id), parsetier.RenderCreated(time.Now().Unix()))
	if err != nil {
		writeError(w, err)
		return
	}
	if rendered.N() > maxChoices {
		http.Error(w, fmt.Sprintf("n is %d; this gateway serves at most %d choices", rendered.N(), maxChoices),
			http.StatusBadRequest)
		return
	}
	outputs, err := g.engine.generate(rendered)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	// One stream after: a Parse session per choice, opened with Render's Open.
	if err := g.forward(r.Context(), w, rendered, outputs); err != nil {
		log.Printf("%s: %v", id, err)
	}
}

// writeError answers a refused request with the error body the server wrote in the request's
// dialect (its HTTP status from the code), or a plain 502 when the server could not be reached.
func writeError(w http.ResponseWriter, err error) {
	body := parsetier.WireError(err)
	if body == nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(parsetier.HTTPStatus(err))
	_, _ = w.Write(body)
}

// forward runs one session per choice, feeding each its engine output, and writes the joined
// wire bytes to w as they come.
func (g *gateway) forward(ctx context.Context, w http.ResponseWriter, rendered *parsetier.Rendered, outputs []output) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	n := len(outputs)
	stream := rendered.Open.GetWire().GetStream()
	out := &response{w: w, join: parsetier.NewWireJoin(n, stream), stream: stream}
	out.flusher, _ = w.(http.Flusher)
	c := newChoices(n)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		open := parsetier.WithOpen(rendered.Choice(i))
		session, err := g.client.Open(ctx, rendered.Open.GetModel(), open,
			parsetier.WithOutput(pb.OutputKind_OUTPUT_KIND_FINAL_ONLY)) // only the bytes are wanted
		if err != nil {
			cancel() // the choices started end with it
			out.fail(err)
			errs[i] = err
			break
		}
		defer session.Close()
		wg.Add(2)
		go func() { defer wg.Done(); feed(ctx, session, outputs[i], c, i) }()
		go func() {
			defer wg.Done()
			if errs[i] = receive(session, out, c, i); errs[i] != nil {
				cancel() // one choice failed: the response cannot be whole
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// feed plays the engine's side of one choice's session: its output ids a decode step at a time,
// then the Finish (for the last choice to finish, once the others' usage is known).
func feed(ctx context.Context, session *parsetier.Session, out output, c *choices, i int) {
	for _, step := range out.steps {
		if session.Send(step) != nil {
			return // the session ended; its receiver reports why
		}
	}
	if finish, err := c.finish(ctx, i, out.finish); err == nil {
		_ = session.FinishWith(finish)
	}
}

// receive forwards one choice's replies through the join until its session ends.
func receive(session *parsetier.Session, out *response, c *choices, i int) error {
	for reply, err := range session.Messages() {
		if err != nil {
			out.fail(err)
			return err
		}
		if final := reply.GetFinal(); final != nil {
			c.ended(i, final.GetUsage())
		}
		if err := out.add(i, reply); err != nil {
			return err
		}
	}
	return nil
}

// response writes the joined bytes of a request's sessions to its caller: one writer at a time,
// the status and content type before the first bytes, every write flushed.
type response struct {
	mu      sync.Mutex
	w       http.ResponseWriter
	flusher http.Flusher
	join    *parsetier.WireJoin
	stream  bool
	started bool
}

func (o *response) add(i int, reply *pb.ParseResponse) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	chunk, err := o.join.AddResponse(i, reply)
	if err != nil {
		if !o.started {
			http.Error(o.w, err.Error(), http.StatusBadGateway)
			o.started = true
		}
		return err
	}
	return o.write(http.StatusOK, chunk)
}

// fail ends the response with the error in its dialect: an error event once streaming, else the
// error body with its HTTP status.
func (o *response) fail(err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	chunk := o.join.Fail(err)
	if chunk == nil && !o.started {
		http.Error(o.w, err.Error(), http.StatusBadGateway) // no bytes: the server was not reached
		o.started = true
		return
	}
	_ = o.write(parsetier.HTTPStatus(err), chunk)
}

// write sends chunk, opening the response with code first. The caller holds mu.
func (o *response) write(code int, chunk []byte) error {
	if len(chunk) == 0 {
		return nil
	}
	if !o.started {
		o.started = true
		contentType := "application/json"
		if o.stream {
			contentType, code = "text/event-stream", http.StatusOK // an error event inside a stream
		}
		o.w.Header().Set("Content-Type", contentType)
		o.w.WriteHeader(code)
	}
	if _, err := o.w.Write(chunk); err != nil {
		return err
	}
	if o.flusher != nil {
		o.flusher.Flush()
	}
	return nil
}

func main() {
	target := flag.String("parsetier", "127.0.0.1:50051", "parsetier server address")
	listen := flag.String("listen", "127.0.0.1:8080", "address to serve HTTP on (port 0: any free port)")
	model := flag.String("model", "qwen3", "parsetier model name")
	script := flag.String("script", "", "JSON file: the scripted engine's outputs by prompt (see engine.go); read at each request")
	stepTokens := flag.Int("step-tokens", 3, "output ids per decode step of the scripted engine")
	flag.Parse()

	client, err := parsetier.NewClient(*target, parsetier.WithInsecure())
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	g := &gateway{client: client, model: *model, engine: &engine{script: *script, stepTokens: max(*stepTokens, 1)}}

	listener, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("listening on http://%s\n", listener.Addr())
	log.Fatal(http.Serve(listener, g))
}
