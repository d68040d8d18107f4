package parsetier

import (
	"context"
	"errors"
	"io"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/parsetier/parsetier/client/go/parsetierpb"
)

// Batch is one ParseBatch stream: many request sessions, each named by a key the caller
// chooses, and one round trip per engine step. A serving loop queues what each request did
// during the step (Open, Feed, Finish, Cancel) and calls Step once: the queued entries go out as
// one message, and the server's one reply comes back with the output of every session that
// produced any. A session's output is exactly what a Parse stream fed the same steps produces.
//
// Session errors (an unknown model, a bad token id, a per-session limit) do not fail Step: they
// are in that session's output (SessionErr reads them) and the other sessions go on. Step and
// Recv return an error only when the stream itself ended (malformed framing, the stream's limits,
// the server going away), which ends every session on it.
//
// A Batch is driven by one goroutine. Send and Recv split Step for a loop that overlaps the
// round trip with its own work: replies come back in order, one per Send.
//
// With resume on (the client's default, see WithResume), a broken stream (a dead or draining
// server, a lost connection, a proxy's reset) does not end the sessions: Recv opens a new
// stream through the same connection, with the Parse sessions' backoff and retry budget,
// resumes every live session there and returns the next step's reply as if nothing had
// happened; Send never reports such a break. An open refused with codes.Unavailable (the server
// is draining or overloaded) moves the stream too. Statuses that are a session's own
// (InvalidArgument, NotFound...) are in its output as before, and the stream's own errors end
// it as before. With WithoutResume, a break ends the stream with its status.
type Batch struct {
	client  *Client
	ctx     context.Context
	stream  grpc.BidiStreamingClient[pb.ParseBatchRequest, pb.ParseBatchResponse]
	cancel  context.CancelFunc
	entries map[string]*pb.SessionInput
	order   []*pb.SessionInput
	sent    [][]*pb.SessionInput // resume off: the entries of each step in flight, oldest first
	// InFlight counts steps sent whose replies have not been received yet.
	InFlight int

	policy       *ResumePolicy // nil: resume off
	ledger       *batchLedger
	streamCancel context.CancelFunc
	streamErr    error         // the current stream could not be made: Recv retries
	replaying    chan struct{} // closed once the replay is written to the current stream
	failed       error         // what ended the batch (Recv returned it)

	mu sync.Mutex // the multiplexer's sending and receiving goroutines (batch_shared.go)
}

// Batch opens a ParseBatch stream. ctx bounds the whole stream; Close it when done.
func (c *Client) Batch(ctx context.Context) (*Batch, error) {
	ctx, cancel := context.WithCancel(ctx)
	b := &Batch{client: c, ctx: ctx, cancel: cancel, entries: map[string]*pb.SessionInput{}, policy: c.resume}
	if b.policy != nil {
		b.ledger = newBatchLedger()
	}
	if err := b.start(nil); err != nil {
		cancel()
		return nil, err
	}
	return b, nil
}

// start opens a new stream and writes msgs (a replay) to it from a goroutine of its own, so
// Recv can read the replies meanwhile; Send waits for it, so later steps follow the replay.
func (b *Batch) start(msgs []*pb.ParseBatchRequest) error {
	ctx, cancel := context.WithCancel(b.ctx)
	stream, err := b.client.stub.ParseBatch(ctx)
	if err != nil {
		cancel()
		b.streamErr = err
		return err
	}
	b.stream, b.streamCancel, b.streamErr = stream, cancel, nil
	done := make(chan struct{})
	b.replaying = done
	go func() {
		defer close(done)
		for _, msg := range msgs {
			if stream.Send(wireRequest(msg.GetSessions())) != nil {
				return // broken again: Recv sees it
			}
		}
	}()
	return nil
}

// Resumes is how many times the batch has moved its sessions to a new stream.
func (b *Batch) Resumes() int {
	if b.ledger == nil {
		return 0
	}
	return b.ledger.resumes
}

// entry is the queued entry for key: one per session per step, so an Open, its first steps
// and even a Finish of one session in one step travel together.
func (b *Batch) entry(key string) *pb.SessionInput {
	e, ok := b.entries[key]
	if !ok {
		e = &pb.SessionInput{Key: key}
		b.entries[key] = e
		b.order = append(b.order, e)
	}
	return e
}

// Open queues the opening of session key for model, with the same options as Client.Open.
func (b *Batch) Open(key, model string, opts ...OpenOption) {
	open := openMessage(model, opts)
	if b.policy != nil {
		open.Resumable = true
	}
	b.entry(key).Open = open
}

// Feed queues decode steps of session key, each a slice of the token ids one forward pass
// produced (the slices are sent as they are; do not change them before Send).
func (b *Batch) Feed(key string, steps ...[]uint32) {
	e := b.entry(key)
	for _, ids := range steps {
		e.Steps = append(e.Steps, &pb.Step{TokenIds: ids})
	}
}

// FeedText queues already-detokenized text of session key, standing for tokens output tokens.
func (b *Batch) FeedText(key, text string, tokens uint32) {
	e := b.entry(key)
	e.Steps = append(e.Steps, &pb.Step{Text: text, TextTokens: tokens})
}

// Finish queues the end of session key's output; its output in the reply carries Final.
func (b *Batch) Finish(key string, finish Finish) {
	b.entry(key).Finish = finish.message()
}

// Cancel queues dropping session key (its output in the reply carries codes.Canceled). What
// was queued for key in this step is discarded.
func (b *Batch) Cancel(key string) {
	e := b.entry(key)
	e.Open, e.Steps, e.Finish, e.Cancel = nil, nil, nil, true
}

// Send sends the queued entries as one message (one engine step), and starts a new step. The
// entries that are one step of token ids of an open session go in packed form
// (ParseBatchRequest.packed); Recv turns their packed outputs back into SessionOutputs.
func (b *Batch) Send() error {
	order := b.order
	b.entries, b.order = map[string]*pb.SessionInput{}, nil
	if b.ledger != nil {
		b.ledger.sentStep(order)
		b.InFlight++
		<-b.replaying
		if b.streamErr == nil {
			_ = b.stream.Send(wireRequest(order)) // a break is Recv's to resume
		}
		return nil
	}
	if err := b.stream.Send(wireRequest(order)); err != nil {
		if errors.Is(err, io.EOF) { // the stream has ended: Recv says why
			_, err = b.stream.Recv()
		}
		return err
	}
	b.sent = append(b.sent, order)
	b.InFlight++
	return nil
}

// Recv returns the reply to the oldest step sent: the output of each session that produced
// deltas, events, a final result or ended with a status, in the order of that step's entries.
// An error is the status that ended the stream.
func (b *Batch) Recv() ([]*pb.SessionOutput, error) {
	if b.ledger != nil {
		return b.recvResuming()
	}
	reply, err := recvWhole(b.stream.Recv, func() *pb.ParseBatchResponse { return new(pb.ParseBatchResponse) })
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = errEndedEarly
		}
		return nil, err
	}
	entries := b.sent[0]
	b.sent = b.sent[1:]
	b.InFlight--
	packed, err := unpackOutputs(reply.GetPacked())
	if err != nil {
		return nil, err
	}
	entry := func(i int) (string, bool) { return entries[i].GetKey(), packable(entries[i]) }
	return inEntryOrder(len(entries), entry, reply.GetSessions(), packed)
}

func (b *Batch) recvResuming() ([]*pb.SessionOutput, error) {
	if b.failed != nil {
		return nil, b.failed
	}
	outs, err := b.recvOrResume()
	if err != nil {
		b.failed = err
	}
	return outs, err
}

func (b *Batch) recvOrResume() ([]*pb.SessionOutput, error) {
	l := b.ledger
	for attempt := 0; ; {
		if outs, ok := l.ready(); ok {
			b.InFlight--
			return outs, nil
		}
		err := b.streamErr
		var trailer metadata.MD // the trailer of the stream's status, for the retry rule
		if err == nil {
			var reply *pb.ParseBatchResponse
			reply, err = recvWhole(b.stream.Recv, func() *pb.ParseBatchResponse { return new(pb.ParseBatchResponse) })
			if err != nil {
				trailer = b.stream.Trailer()
			}
			if err == nil {
				packed, err := unpackOutputs(reply.GetPacked())
				if err != nil {
					return nil, err
				}
				if err := l.receivedReply(reply.GetSessions(), packed); err != nil {
					return nil, err
				}
				if !l.mustMove {
					attempt = 0
					continue
				}
				err = errRefusedOpen
			} else if errors.Is(err, io.EOF) {
				return nil, errEndedEarly
			}
		}
		if err := waitToRetry(b.ctx, b.policy, err, trailer, attempt); err != nil {
			return nil, err
		}
		attempt++
		if b.streamCancel != nil {
			b.streamCancel() // ends the broken stream, and a replay still writing to it
		}
		<-b.replaying
		_ = b.start(l.replay()) // an error is the next attempt's
	}
}

// Step sends the queued entries and waits for their reply.
func (b *Batch) Step() ([]*pb.SessionOutput, error) {
	if err := b.Send(); err != nil {
		return nil, err
	}
	return b.Recv()
}

// Close ends the stream: it receives the replies still in flight, closes the sending side and
// returns the stream's status (nil for OK). Sessions still open are dropped by the server. It
// is safe to call more than once.
func (b *Batch) Close() error {
	defer b.cancel()
	if b.ledger != nil {
		if b.failed != nil {
			return b.failed
		}
		for b.InFlight > 0 && b.ctx.Err() == nil { // resumes if the stream breaks meanwhile
			if _, err := b.Recv(); err != nil {
				return err
			}
		}
		<-b.replaying
		if b.streamErr != nil {
			return nil // nothing is owed: no stream is left to close
		}
	}
	if err := b.stream.CloseSend(); err != nil {
		return err
	}
	for {
		_, err := b.stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			if status.Code(err) == codes.Canceled && b.InFlight == 0 {
				return nil // closed before: the deferred cancel of an earlier Close
			}
			if b.ledger != nil && b.InFlight == 0 && retryable(b.ctx, err, b.stream.Trailer()) {
				return nil // every reply has arrived: a break now loses nothing
			}
			return err
		}
		b.InFlight--
	}
}

// SessionErr is the status a session ended with in out (codes.Canceled after a Cancel), or nil
// when out carries output.
func SessionErr(out *pb.SessionOutput) error {
	st := out.GetStatus()
	if st == nil {
		return nil
	}
	return status.Error(codes.Code(st.GetCode()), st.GetMessage())
}
