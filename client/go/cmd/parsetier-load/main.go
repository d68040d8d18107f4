// Command parsetier-load drives a parsetier server with many concurrent sessions of one
// recorded output and reports what it achieved, so that a deployment (or a client) can be
// measured under a known load.
//
//	parsetier-load -server 127.0.0.1:50051 -ids output.txt -sessions 200 -concurrency 8 -steps-per-message 1
//
// The ids file holds the output's token ids separated by white space (the prompt is not
// needed). Every session streams the whole output, each token its own decode step, batched
// -steps-per-message steps to a message, while receiving on another goroutine, then finishes
// with -stop-token. It prints one JSON line: tokens, sessions and wall-clock seconds.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	parsetier "github.com/parsetier/parsetier/client/go"
)

func main() {
	server := flag.String("server", "127.0.0.1:50051", "host:port (plaintext)")
	model := flag.String("model", "qwen3", "model name")
	idsPath := flag.String("ids", "", "file of the output's token ids")
	toolsJSON := flag.String("tools-json", "", "tools offered, as OpenAI JSON")
	sessions := flag.Int("sessions", 100, "sessions in total")
	concurrency := flag.Int("concurrency", 8, "sessions open at once")
	perMessage := flag.Int("steps-per-message", 1, "one-token steps per client message")
	stopToken := flag.Uint("stop-token", 151645, "the stop token id Finish names")
	flag.Parse()

	ids, err := readIDs(*idsPath)
	if err != nil {
		log.Fatal(err)
	}
	client, err := parsetier.NewClient(*server, parsetier.WithInsecure())
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	var next, tokens atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, *concurrency)
	start := time.Now()
	for range *concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(*sessions) {
				n, err := runSession(client, *model, *toolsJSON, ids, *perMessage, uint32(*stopToken))
				if err != nil {
					errs <- err
					return
				}
				tokens.Add(int64(n))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	close(errs)
	if err := <-errs; err != nil {
		log.Fatal(err)
	}
	out, _ := json.Marshal(map[string]any{"tokens": tokens.Load(), "sessions": *sessions, "seconds": elapsed})
	fmt.Println(string(out))
}

// runSession streams ids through one session and returns the completion tokens it counted.
func runSession(client *parsetier.Client, model, toolsJSON string, ids []uint32, perMessage int,
	stopToken uint32) (int, error) {
	session, err := client.Open(context.Background(), model, parsetier.WithToolsJSON(toolsJSON))
	if err != nil {
		return 0, err
	}
	defer session.Close()
	sent := make(chan error, 1)
	go func() {
		steps := make([][]uint32, 0, perMessage)
		for i := range ids {
			steps = append(steps, ids[i:i+1])
			if len(steps) == perMessage || i == len(ids)-1 {
				if err := session.Send(steps...); err != nil {
					sent <- err
					return
				}
				steps = steps[:0]
			}
		}
		sent <- session.Finish(parsetier.Stop, parsetier.StopToken(stopToken))
	}()
	for _, err := range session.Deltas() {
		if err != nil {
			return 0, err
		}
	}
	if err := <-sent; err != nil {
		return 0, err
	}
	return int(session.Final().GetUsage().GetCompletionTokens()), nil
}

func readIDs(path string) ([]uint32, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var ids []uint32
	for _, field := range strings.Fields(string(data)) {
		id, err := strconv.ParseUint(field, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		ids = append(ids, uint32(id))
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("%s: no token ids", path)
	}
	return ids, nil
}
