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
	"runtime/pprof"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	parsetier "github.com/parsetier/parsetier/client/go"
	"github.com/parsetier/parsetier/client/go/internal/tokenfile"
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
	batch := flag.Bool("batch", false, "one ParseBatch stream carrying -concurrency sessions instead of a stream each")
	noResume := flag.Bool("no-resume", false, "resume off (WithoutResume): no ledger is kept")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile (runtime/pprof) of the run to this file")
	multiplex := flag.Bool("multiplex", false, "sessions multiplexed onto one shared ParseBatch stream (WithMultiplex(0))")
	flag.Parse()

	ids, err := tokenfile.Read(*idsPath)
	if err != nil {
		log.Fatal(err)
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			log.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			log.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	opts := []parsetier.ClientOption{parsetier.WithInsecure()}
	if *noResume {
		opts = append(opts, parsetier.WithoutResume())
	}
	if *multiplex {
		opts = append(opts, parsetier.WithMultiplex(0))
	}
	client, err := parsetier.NewClient(*server, opts...)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	if *batch {
		start := time.Now()
		n, err := runBatch(client, *model, *toolsJSON, ids, *sessions, *concurrency, *perMessage, uint32(*stopToken))
		if err != nil {
			log.Fatal(err)
		}
		out, _ := json.Marshal(map[string]any{"tokens": n, "sessions": *sessions, "seconds": time.Since(start).Seconds()})
		fmt.Println(string(out))
		return
	}

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

// runBatch runs sessions over one ParseBatch stream, concurrency of them live at once (a serving
// loop's batch): every message carries each live session's next perMessage one-token steps, or
// its Finish, and a finished session's slot takes the next one. It returns the completion tokens.
func runBatch(client *parsetier.Client, model, toolsJSON string, ids []uint32, sessions, concurrency, perMessage int,
	stopToken uint32) (int, error) {
	b, err := client.Batch(context.Background())
	if err != nil {
		return 0, err
	}
	defer b.Close()
	type slot struct {
		key       string
		next      int
		finishing bool
	}
	slots := make([]*slot, concurrency)
	tokens, started := 0, 0
	for {
		live := false
		for i, s := range slots {
			if s == nil && started < sessions {
				s = &slot{key: "s" + strconv.Itoa(started)}
				slots[i] = s
				started++
				b.Open(s.key, model, parsetier.WithToolsJSON(toolsJSON))
			}
			if s == nil {
				continue
			}
			live = true
			if s.next < len(ids) {
				end := min(len(ids), s.next+perMessage)
				steps := make([][]uint32, 0, end-s.next)
				for j := s.next; j < end; j++ {
					steps = append(steps, ids[j:j+1])
				}
				b.Feed(s.key, steps...)
				s.next = end
			} else {
				b.Finish(s.key, parsetier.Finish{Reason: parsetier.Stop, Matched: parsetier.StopToken(stopToken)})
				s.finishing = true
			}
		}
		if !live {
			return tokens, b.Close()
		}
		outputs, err := b.Step()
		if err != nil {
			return 0, err
		}
		finals := map[string]int{}
		for _, out := range outputs {
			if err := parsetier.SessionErr(out); err != nil {
				return 0, fmt.Errorf("session %s: %w", out.GetKey(), err)
			}
			if out.GetFinal() != nil {
				finals[out.GetKey()] = int(out.GetFinal().GetUsage().GetCompletionTokens())
			}
		}
		for i, s := range slots {
			if s != nil && s.finishing {
				tokens += finals[s.key]
				slots[i] = nil
			}
		}
	}
}
