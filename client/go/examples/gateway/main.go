// Command gateway is a small HTTP front end that answers OpenAI and Anthropic clients with the
// bytes parsetier renders (Open.wire): the handler opens one Parse session per request, feeds it
// the token ids its engine generates, and writes each reply's wire bytes to the caller as they
// come, then the final result's. It maps nothing itself: role chunks, call ids, finish reasons,
// usage, logprobs and the SSE framing all come from the server.
//
//	gateway -parsetier 127.0.0.1:50051 -listen 127.0.0.1:8080 -model qwen3 -steps steps.json -tools tools.json
//
// The "engine" here replays recorded decode steps (-steps: a JSON array of token-id arrays), so
// the example runs without a GPU; a real gateway feeds its engine's steps in the same loop.
// Routes: /v1/chat/completions, /v1/completions, /v1/messages, /v1/responses. It prints
// "listening on http://ADDR" once it accepts connections.
package main

import (
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
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

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
	StreamOptions struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

type gateway struct {
	stub  pb.ParserServiceClient
	model string     // the parsetier model (Open.model)
	tools string     // the tools the engine's prompt offered, as OpenAI's JSON array
	steps [][]uint32 // the replayed engine output
	next  atomic.Int64
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
	if err := g.forward(r.Context(), w, open, req.Stream); err != nil {
		log.Printf("%s: %v", id, err)
	}
}

// forward runs one session and writes its bytes to w as they come.
func (g *gateway) forward(ctx context.Context, w http.ResponseWriter, open *pb.Open, stream bool) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	session, err := g.stub.Parse(ctx)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return err
	}
	go func() { // the engine: one message per decode step, then the finish
		if session.Send(&pb.ParseRequest{Open: open}) != nil {
			return
		}
		for _, step := range g.steps {
			if session.Send(&pb.ParseRequest{Steps: []*pb.Step{{TokenIds: step}}}) != nil {
				return
			}
		}
		if session.Send(&pb.ParseRequest{Finish: &pb.Finish{Reason: pb.FinishReason_FINISH_REASON_STOP}}) == nil {
			_ = session.CloseSend()
		}
	}()
	contentType := "application/json"
	if stream {
		contentType = "text/event-stream"
	}
	flusher, _ := w.(http.Flusher)
	started := false
	for {
		reply, err := session.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			if !started {
				http.Error(w, err.Error(), http.StatusBadGateway)
			}
			return err
		}
		for _, chunk := range [][]byte{reply.GetWire(), reply.GetFinal().GetWire()} {
			if len(chunk) == 0 {
				continue
			}
			if !started {
				started = true
				w.Header().Set("Content-Type", contentType)
				w.WriteHeader(http.StatusOK)
			}
			if _, err := w.Write(chunk); err != nil {
				return err
			}
			if flusher != nil {
				flusher.Flush()
			}
		}
	}
}

func main() {
	target := flag.String("parsetier", "127.0.0.1:50051", "parsetier server address")
	listen := flag.String("listen", "127.0.0.1:8080", "address to serve HTTP on (port 0: any free port)")
	model := flag.String("model", "qwen3", "parsetier model name")
	stepsFile := flag.String("steps", "", "JSON file: the engine output to replay, an array of token-id arrays")
	toolsFile := flag.String("tools", "", "JSON file: the tools the prompt offered (OpenAI's array)")
	flag.Parse()

	g := &gateway{model: *model}
	if *stepsFile != "" {
		data, err := os.ReadFile(*stepsFile)
		if err == nil {
			err = json.Unmarshal(data, &g.steps)
		}
		if err != nil {
			log.Fatalf("-steps: %v", err)
		}
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
