// Command fleetcheck drives many resuming sessions through the Go client at once, for the fleet
// tests (tests/test_fleet_resume.py): it reads a plan as JSON on stdin, streams every session one
// step per message, prints "sent N" as the steps go out (so the test knows when to kill a
// backend), and ends with one JSON line holding each session's replies (base64 protobuf) and
// how often it resumed.
package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/keepalive"
	"google.golang.org/protobuf/proto"

	parsetier "github.com/parsetier/parsetier/client/go"
	pb "github.com/parsetier/parsetier/client/go/parsetierpb"
)

type plan struct {
	Target   string        `json:"target"`
	Tools    string        `json:"tools_json"`
	PauseMs  int           `json:"pause_ms"`
	Sessions []sessionPlan `json:"sessions"`
}

type sessionPlan struct {
	Model     string   `json:"model"`
	RequestID string   `json:"request_id"`
	PromptIDs []uint32 `json:"prompt_ids"`
	IDs       []uint32 `json:"ids"`
}

type result struct {
	Replies []string `json:"replies"`
	Resumes int      `json:"resumes"`
	Error   string   `json:"error,omitempty"`
}

func main() {
	var p plan
	if err := json.NewDecoder(os.Stdin).Decode(&p); err != nil {
		fmt.Fprintln(os.Stderr, "plan:", err)
		os.Exit(2)
	}
	// Pings every second: nginx may hold a stream's reset until the client's connection shows
	// activity (deploy/README.md, "Backend loss").
	client, err := parsetier.NewClient(p.Target, parsetier.WithInsecure(),
		parsetier.WithKeepalive(keepalive.ClientParameters{Time: time.Second, Timeout: 5 * time.Second, PermitWithoutStream: true}))
	if err != nil {
		fmt.Fprintln(os.Stderr, "client:", err)
		os.Exit(2)
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	out := bufio.NewWriter(os.Stdout)
	var outMu sync.Mutex
	var sent atomic.Int64
	results := make([]result, len(p.Sessions))
	var wg sync.WaitGroup
	for i, s := range p.Sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = run(ctx, client, p, s, func() {
				if n := sent.Add(1); n%200 == 0 {
					outMu.Lock()
					fmt.Fprintf(out, "sent %d\n", n)
					out.Flush()
					outMu.Unlock()
				}
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

func run(ctx context.Context, client *parsetier.Client, p plan, s sessionPlan, onSent func()) result {
	session, err := client.Open(ctx, s.Model, parsetier.WithToolsJSON(p.Tools), parsetier.WithRequestID(s.RequestID),
		parsetier.WithPromptTokenIDs(s.PromptIDs), parsetier.WithOutput(pb.OutputKind_OUTPUT_KIND_DELTAS_AND_EVENTS))
	if err != nil {
		return result{Error: "open: " + err.Error()}
	}
	defer session.Close()
	go func() {
		for _, id := range s.IDs {
			if err := session.Send([]uint32{id}); err != nil {
				return
			}
			onSent()
			time.Sleep(time.Duration(p.PauseMs) * time.Millisecond)
		}
		_ = session.Finish(parsetier.Stop, parsetier.NoStop)
	}()
	var r result
	for msg, err := range session.Messages() {
		if err != nil {
			r.Error = err.Error()
			break
		}
		raw, _ := proto.Marshal(msg)
		r.Replies = append(r.Replies, base64.StdEncoding.EncodeToString(raw))
	}
	r.Resumes = session.Resumes()
	return r
}
