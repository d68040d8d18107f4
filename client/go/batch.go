package parsetier

import (
	"context"
	"errors"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
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
type Batch struct {
	stream  grpc.BidiStreamingClient[pb.ParseBatchRequest, pb.ParseBatchResponse]
	cancel  context.CancelFunc
	entries map[string]*pb.SessionInput
	order   []*pb.SessionInput
	// InFlight counts steps sent whose replies have not been received yet.
	InFlight int
}

// Batch opens a ParseBatch stream. ctx bounds the whole stream; Close it when done.
func (c *Client) Batch(ctx context.Context) (*Batch, error) {
	ctx, cancel := context.WithCancel(ctx)
	stream, err := c.stub.ParseBatch(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	return &Batch{stream: stream, cancel: cancel, entries: map[string]*pb.SessionInput{}}, nil
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
	b.entry(key).Open = openMessage(model, opts)
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

// Send sends the queued entries as one message (one engine step), and starts a new step.
func (b *Batch) Send() error {
	msg := &pb.ParseBatchRequest{Sessions: b.order}
	b.entries, b.order = map[string]*pb.SessionInput{}, nil
	if err := b.stream.Send(msg); err != nil {
		if errors.Is(err, io.EOF) { // the stream has ended: Recv says why
			_, err = b.stream.Recv()
		}
		return err
	}
	b.InFlight++
	return nil
}

// Recv returns the reply to the oldest step sent: the output of each session that produced
// deltas, events, a final result or ended with a status, in the order of that step's entries.
// An error is the status that ended the stream.
func (b *Batch) Recv() ([]*pb.SessionOutput, error) {
	reply, err := recvWhole(b.stream.Recv, func() *pb.ParseBatchResponse { return new(pb.ParseBatchResponse) })
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = status.Error(codes.Internal, "parsetier: ParseBatch stream ended before its reply")
		}
		return nil, err
	}
	b.InFlight--
	return reply.GetSessions(), nil
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
