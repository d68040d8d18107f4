// Command parsetier-paced drives a parsetier server at a fixed rate, one token per session per
// step, the way a serving engine does, and reports the round trip of every step from its write to
// the reply that answers it.
//
//	parsetier-paced -rpc parse -sessions 250 -rate 20 -seconds 20 -ids output.txt
//	parsetier-paced -rpc batch -sessions 1000 -rate 20 -channels 2 -server 127.0.0.1:50051
//
// -rpc parse: every session is its own Parse stream and writes one step every 1/rate seconds
// (start times spread over the period); at the end of the output it finishes and a new session
// takes its place. -rpc batch: the sessions are spread over one ParseBatch stream per channel,
// and each stream writes one message every 1/rate seconds with one step of each of its sessions
// (a session at the end of the output finishes, and opens again in the next message); the steps
// of open sessions travel packed (ParseBatchRequest.packed), as the Go batch API sends them.
// -channels connections are opened, each its own TCP connection (with several server workers on
// one port, each lands on one of them); sessions are spread over them.
//
// It prints one JSON line: steps written, replies matched, the round trip's p50/p99/p99.9 in ms
// (steps of the first -warmup seconds are not counted) and how late the pacer wrote (its p99 in
// ms: a load generator that cannot keep the rate shows it here, not as server latency).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/parsetier/parsetier/client/go/internal/tokenfile"
	pb "github.com/parsetier/parsetier/client/go/parsetierpb"
)

type recorder struct {
	mu      sync.Mutex
	rtt     []float64
	late    []float64
	sent    int
	matched int
	from    time.Time
}

func (r *recorder) wrote(at, planned time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sent++
	if at.After(r.from) {
		r.late = append(r.late, ms(at.Sub(planned)))
	}
}

func (r *recorder) answered(sentAt time.Time) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.matched++
	if sentAt.After(r.from) {
		r.rtt = append(r.rtt, ms(now.Sub(sentAt)))
	}
}

func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

func percentile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	return xs[min(len(xs)-1, int(q*float64(len(xs))))]
}

// inFlight maps a stream's client message number to its write time.
type inFlight struct {
	mu sync.Mutex
	at map[uint64]time.Time
}

func (f *inFlight) put(n uint64, t time.Time) {
	f.mu.Lock()
	f.at[n] = t
	f.mu.Unlock()
}

func (f *inFlight) take(n uint64) (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.at[n]
	delete(f.at, n)
	return t, ok
}

// readReplies reads a stream's replies on its own goroutine: each reply that answers (answers)
// records the round trip of the client message it answers, if that message is in flight. It
// stops at the first receive error, or after a reply that is the last, and sends that error (nil
// after the last reply) on the channel it returns.
func readReplies[R interface{ GetClientMessages() uint64 }](recv func() (R, error), flight *inFlight,
	rec *recorder, answers, last func(R) bool) <-chan error {
	done := make(chan error, 1)
	go func() {
		for {
			reply, err := recv()
			if err != nil {
				done <- err
				return
			}
			if answers(reply) {
				if at, ok := flight.take(reply.GetClientMessages()); ok {
					rec.answered(at)
				}
			}
			if last(reply) {
				done <- nil
				return
			}
		}
	}()
	return done
}

func main() {
	server := flag.String("server", "127.0.0.1:50051", "host:port (plaintext)")
	model := flag.String("model", "qwen3", "model name")
	idsPath := flag.String("ids", "", "file of the output's token ids")
	toolsJSON := flag.String("tools-json", "", "tools offered, as OpenAI JSON")
	rpc := flag.String("rpc", "parse", "parse or batch")
	sessions := flag.Int("sessions", 250, "sessions live at once")
	rate := flag.Float64("rate", 20, "steps per second per session")
	seconds := flag.Float64("seconds", 20, "how long to run")
	warmup := flag.Float64("warmup", 2, "seconds at the start not counted")
	channels := flag.Int("channels", 1, "connections to open")
	stopToken := flag.Uint("stop-token", 151645, "the stop token id Finish names")
	flag.Parse()

	ids, err := tokenfile.Read(*idsPath)
	if err != nil {
		log.Fatal(err)
	}
	conns := make([]*grpc.ClientConn, *channels)
	for i := range conns {
		// Every ClientConn has connections of its own.
		conn, err := grpc.NewClient(*server, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
		if err != nil {
			log.Fatal(err)
		}
		defer conn.Close()
		conns[i] = conn
	}
	open := &pb.Open{Model: *model, ToolsJson: *toolsJSON}
	finish := &pb.Finish{Reason: pb.FinishReason_FINISH_REASON_STOP,
		MatchedStop: &pb.Finish_StopTokenId{StopTokenId: uint32(*stopToken)}}
	period := time.Duration(float64(time.Second) / *rate)
	start := time.Now()
	rec := &recorder{from: start.Add(time.Duration(*warmup * float64(time.Second)))}
	deadline := start.Add(time.Duration(*seconds * float64(time.Second)))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var wg sync.WaitGroup
	errs := make(chan error, *sessions+*channels)
	if *rpc == "parse" {
		for i := range *sessions {
			client := pb.NewParserServiceClient(conns[i%len(conns)])
			first := start.Add(period * time.Duration(i) / time.Duration(*sessions))
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := paceParse(ctx, client, open, finish, ids, first, period, deadline, rec); err != nil {
					errs <- err
				}
			}()
		}
	} else {
		for c := range conns {
			n := *sessions / len(conns)
			if c < *sessions%len(conns) {
				n++
			}
			client := pb.NewParserServiceClient(conns[c])
			first := start.Add(period * time.Duration(c) / time.Duration(len(conns)))
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := paceBatch(ctx, client, c, n, open, finish, ids, first, period, deadline, rec); err != nil {
					errs <- err
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		log.Fatal(err)
	}
	slices.Sort(rec.rtt)
	slices.Sort(rec.late)
	out, _ := json.Marshal(map[string]any{
		"sent": rec.sent, "matched": rec.matched, "counted": len(rec.rtt),
		"p50": percentile(rec.rtt, 0.5), "p99": percentile(rec.rtt, 0.99), "p999": percentile(rec.rtt, 0.999),
		"late_p99": percentile(rec.late, 0.99),
	})
	fmt.Println(string(out))
}

// paceParse runs Parse sessions one after another, one token step every period, until deadline.
func paceParse(ctx context.Context, client pb.ParserServiceClient, open *pb.Open, finish *pb.Finish,
	ids []uint32, first time.Time, period time.Duration, deadline time.Time, rec *recorder) error {
	time.Sleep(time.Until(first))
	tick := first
	for time.Now().Before(deadline) {
		stream, err := client.Parse(ctx)
		if err != nil {
			return err
		}
		if err := stream.Send(&pb.ParseRequest{Open: open}); err != nil {
			return err
		}
		if _, err := stream.Header(); err != nil {
			return err
		}
		flight := &inFlight{at: map[uint64]time.Time{}}
		done := readReplies(stream.Recv, flight, rec,
			func(*pb.ParseResponse) bool { return true },
			func(reply *pb.ParseResponse) bool { return reply.GetFinal() != nil })
		message := uint64(1)
		for _, id := range ids {
			tick = tick.Add(period)
			time.Sleep(time.Until(tick))
			message++
			now := time.Now()
			flight.put(message, now)
			if err := stream.Send(&pb.ParseRequest{Steps: []*pb.Step{{TokenIds: []uint32{id}}}}); err != nil {
				return err
			}
			rec.wrote(now, tick)
			if now.After(deadline) {
				break
			}
		}
		if err := stream.Send(&pb.ParseRequest{Finish: finish}); err != nil {
			return err
		}
		if err := stream.CloseSend(); err != nil {
			return err
		}
		if err := <-done; err != nil {
			return err
		}
	}
	return nil
}

// paceBatch runs one ParseBatch stream of n sessions, one message (a step of every session) every
// period, until deadline. Sessions start at different points of the output and start over.
func paceBatch(ctx context.Context, client pb.ParserServiceClient, index, n int, open *pb.Open,
	finish *pb.Finish, ids []uint32, first time.Time, period time.Duration, deadline time.Time,
	rec *recorder) error {
	stream, err := client.ParseBatch(ctx)
	if err != nil {
		return err
	}
	keys := make([]string, n)
	position := make([]int, n)
	opens := &pb.ParseBatchRequest{}
	for i := range keys {
		keys[i] = fmt.Sprintf("c%d-%d", index, i)
		position[i] = i % len(ids)
		opens.Sessions = append(opens.Sessions, &pb.SessionInput{Key: keys[i], Open: open})
	}
	if err := stream.Send(opens); err != nil {
		return err
	}
	if _, err := stream.Recv(); err != nil {
		return err
	}
	flight := &inFlight{at: map[uint64]time.Time{}}
	done := readReplies(stream.Recv, flight, rec,
		// the reply's last part is the one that completes it
		func(reply *pb.ParseBatchResponse) bool { return !reply.GetPart().GetMore() },
		func(*pb.ParseBatchResponse) bool { return false })
	time.Sleep(time.Until(first))
	tick := first
	message := uint64(1)
	for time.Now().Before(deadline) {
		// The steps of open sessions go packed (one id each: no token_counts); the finishes
		// and the opens with their first token go as entries.
		packed := &pb.PackedSteps{Keys: make([]string, 0, n), TokenIds: make([]uint32, 0, n)}
		request := &pb.ParseBatchRequest{Packed: packed}
		for i, key := range keys {
			switch p := position[i]; {
			case p == len(ids):
				request.Sessions = append(request.Sessions, &pb.SessionInput{Key: key, Finish: finish})
				position[i] = -1
			case p == -1:
				request.Sessions = append(request.Sessions,
					&pb.SessionInput{Key: key, Open: open, Steps: []*pb.Step{{TokenIds: ids[0:1]}}})
				position[i] = 1
			default:
				packed.Keys = append(packed.Keys, key)
				packed.TokenIds = append(packed.TokenIds, ids[p])
				position[i] = p + 1
			}
		}
		tick = tick.Add(period)
		time.Sleep(time.Until(tick))
		message++
		now := time.Now()
		flight.put(message, now)
		if err := stream.Send(request); err != nil {
			return err
		}
		rec.wrote(now, tick)
	}
	if err := stream.CloseSend(); err != nil {
		return err
	}
	if err := <-done; err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}
