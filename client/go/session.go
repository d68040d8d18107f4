package parsetier

import (
	"context"
	"errors"
	"io"
	"iter"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/parsetier/parsetier/client/go/parsetierpb"
)

// ErrClosedEarly is what Session.Close returns when it had to cancel a session that had not
// ended yet, so that a deferred Close cannot hide an output that was never parsed to the end.
// It carries codes.Canceled, as the server records the session.
var ErrClosedEarly = status.Error(codes.Canceled, "parsetier: session closed before it ended")

// Session is one request session: one Parse stream, or, after a break, the streams it resumed
// on. As with any gRPC-Go stream, one goroutine may Send/Finish while another receives (Recv,
// Messages or Deltas), but neither side may be used from two goroutines at once; Close and
// Final may be called from anywhere. Receive on its own goroutine while sending: the server
// answers only the messages that produced output, so waiting for a reply after every Send can
// block forever, and a sender that never receives eventually stalls on flow control.
//
// With resume on (the client's default, see WithResume), the session keeps its answered token
// ids (one run) and the messages not answered yet, and survives a broken stream: a dead or
// draining server, a lost connection, a proxy's reset. Recv reconnects with backoff, resumes on whichever server the target reaches (see
// docs/service.md, "Resume"), and returns the next message as if nothing had happened; Send
// never reports such a break. Statuses that are the request's own (InvalidArgument,
// NotFound...) end the session as before, and so does the last error once the retry budget
// is spent.
type Session struct {
	client *Client
	ctx    context.Context
	cancel context.CancelFunc
	policy *ResumePolicy // nil: resume off

	sendMu sync.Mutex // held while writing to the current stream: one writer at a time

	mu         sync.Mutex // guards everything below
	stream     grpc.BidiStreamingClient[pb.ParseRequest, pb.ParseResponse]
	ledger     *ledger // nil: resume off
	finishing  bool
	closedSend grpc.BidiStreamingClient[pb.ParseRequest, pb.ParseResponse]
	resumes    int
	final      *pb.Final
	ended      bool // Recv has returned io.EOF or the status that ended the session

	mx *muxSession // multiplexed (WithMultiplex): the session's side of the shared stream
}

// Open starts a session for model. ctx bounds the whole session, not just this call. Open
// waits until the server has accepted the Open (it sends response headers then), so an
// unknown model (codes.NotFound) or bad options (codes.InvalidArgument) fail here instead of
// at some later Recv; with resume on, a server that refuses because it is draining
// (codes.Unavailable) is retried. Close the session when done with it.
func (c *Client) Open(ctx context.Context, model string, opts ...OpenOption) (*Session, error) {
	ctx, cancel := context.WithCancel(ctx)
	open := openMessage(model, opts)
	if c.mux != nil {
		mx, err := c.mux.open(ctx, open)
		if err != nil {
			cancel()
			return nil, err
		}
		return &Session{client: c, ctx: ctx, cancel: cancel, policy: c.resume, mx: mx}, nil
	}
	s := &Session{client: c, ctx: ctx, cancel: cancel, policy: c.resume}
	if s.policy != nil {
		open.Resumable = true
		s.ledger = newLedger(open)
	}
	stream, err := s.connect(&pb.ParseRequest{Open: open})
	if err != nil {
		cancel()
		return nil, err
	}
	s.stream = stream
	return s, nil
}

// connect opens a stream with first (the session's Open, with its resume point on a resumed
// stream) and waits for the server to accept it, retrying refusals within the resume budget.
func (s *Session) connect(first *pb.ParseRequest) (grpc.BidiStreamingClient[pb.ParseRequest, pb.ParseResponse], error) {
	for attempt := 0; ; attempt++ {
		stream, trailer, err := s.accepted(first)
		if err == nil {
			return stream, nil
		}
		if s.policy == nil || !retryable(s.ctx, err, trailer) || attempt >= s.policy.Attempts {
			return nil, err
		}
		select {
		case <-time.After(s.policy.backoff(attempt)):
		case <-s.ctx.Done():
			return nil, status.FromContextError(s.ctx.Err()).Err()
		}
	}
}

// accepted is connect's one attempt: the stream, or the error and trailer it ended with.
func (s *Session) accepted(first *pb.ParseRequest) (grpc.BidiStreamingClient[pb.ParseRequest, pb.ParseResponse], metadata.MD, error) {
	stream, err := s.client.stub.Parse(s.ctx)
	if err != nil {
		return nil, nil, err
	}
	// An io.EOF from Send means the stream already ended; Header and Recv below say why.
	if err := stream.Send(first); err != nil && !errors.Is(err, io.EOF) {
		return nil, nil, err
	}
	header, err := stream.Header()
	if err == nil && header == nil {
		// The stream ended without headers: the server refused the Open. gRPC-Go reports the
		// status from Recv, not from Header.
		_, err = stream.Recv()
		if errors.Is(err, io.EOF) {
			err = status.Error(codes.Internal, "parsetier: stream ended before the server accepted Open")
		}
	}
	if err != nil {
		trailer := stream.Trailer()
		return nil, trailer, withWire(err, trailer)
	}
	return stream, nil, nil
}

// Send sends decode steps, each a slice of the token ids one forward pass produced, in one
// message. Several steps per message give the same result as one message each (batching only
// saves messages); no steps at all is a keep-alive against the server's idle timeout. It does
// not take a context: the session's context, given to Open, governs every send.
//
// As with gRPC-Go streams, io.EOF means the server has ended the stream; Recv returns why.
// With resume on, a broken stream is not an error here: Recv resumes and re-sends.
func (s *Session) Send(steps ...[]uint32) error {
	msgSteps := make([]*pb.Step, len(steps))
	blocks := make([]pb.Step, len(steps)) // one allocation for the message's steps
	for i, ids := range steps {
		blocks[i].TokenIds = ids
		msgSteps[i] = &blocks[i]
	}
	if s.mx != nil {
		return s.client.mux.put(s.mx, msgSteps, nil)
	}
	return s.put(&pb.ParseRequest{Steps: msgSteps}, false)
}

// Finish ends the output and closes the sending side: reason is Stop, Length or Abort
// (Stop when zero), matchedStop what stopped generation. The server answers with the
// message that carries the Final result.
func (s *Session) Finish(reason pb.FinishReason, matchedStop MatchedStop) error {
	return s.put(&pb.ParseRequest{Finish: Finish{Reason: reason, Matched: matchedStop}.message()}, true)
}

// FinishWith is Finish with every field of finish: OtherChoicesUsage too, which the last of a
// request's n > 1 choices to finish sends (the others' usage summed) so that its wire bytes count
// every choice.
func (s *Session) FinishWith(finish Finish) error {
	return s.put(&pb.ParseRequest{Finish: finish.message()}, true)
}

func (s *Session) put(msg *pb.ParseRequest, finish bool) error {
	if s.mx != nil {
		return s.client.mux.put(s.mx, msg.GetSteps(), msg.GetFinish())
	}
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	if s.ledger == nil {
		if err := s.stream.Send(msg); err != nil || !finish {
			return err
		}
		return s.stream.CloseSend()
	}
	s.mu.Lock()
	s.ledger.send(msg)
	s.finishing = s.finishing || finish
	s.mu.Unlock()
	return s.pump()
}

// pump writes the pending messages the current stream has not had yet, then closes its sending
// side after Finish. The caller holds sendMu.
func (s *Session) pump() error {
	for {
		s.mu.Lock()
		stream, msg := s.stream, s.ledger.unwritten()
		if msg == nil {
			closeSend := s.finishing && s.closedSend != stream
			if closeSend {
				s.closedSend = stream
			}
			s.mu.Unlock()
			if closeSend {
				return s.sendError(stream.CloseSend())
			}
			return nil
		}
		s.mu.Unlock()
		if err := stream.Send(msg); err != nil {
			return s.sendError(err)
		}
	}
}

// sendError is what Send reports: nothing when the session will resume (Recv sees the break).
func (s *Session) sendError(err error) error {
	if err != nil && s.policy != nil {
		return nil
	}
	return err
}

// Resumes is how many times the session has moved to a new stream.
func (s *Session) Resumes() int {
	if s.mx != nil {
		return s.mx.resumeCount()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.resumes
}

// Recv returns the server's next message: its deltas (and events, if asked for with
// WithOutput), plus Final on the last one. After the last message it returns io.EOF; any
// other error is the gRPC status that ended the session (see docs/service.md), for example
// codes.InvalidArgument for a token id outside the model's vocabulary. With resume on, a
// broken stream is resumed here, and the message returned is the next one all the same.
func (s *Session) Recv() (*pb.ParseResponse, error) {
	if s.mx != nil {
		msg, final, err := s.mx.recv()
		s.mu.Lock()
		if final != nil {
			s.final = final
		}
		s.ended = s.ended || err != nil
		s.mu.Unlock()
		return msg, err
	}
	for {
		s.mu.Lock()
		stream := s.stream
		s.mu.Unlock()
		msg, err := recvWhole(stream.Recv, func() *pb.ParseResponse { return new(pb.ParseResponse) })
		s.mu.Lock()
		if err == nil {
			if s.ledger != nil {
				if err := s.ledger.received(msg); err != nil {
					s.ended = true
					s.mu.Unlock()
					return nil, err
				}
			}
			if msg.GetFinal() != nil {
				s.final = msg.GetFinal()
			}
			s.mu.Unlock()
			return msg, nil
		}
		complete := s.final != nil
		if errors.Is(err, io.EOF) || (complete && s.policy != nil) || s.policy == nil || !retryable(s.ctx, err, stream.Trailer()) {
			s.ended = true
			s.mu.Unlock()
			if complete && s.policy != nil {
				return nil, io.EOF // the session is complete; only its stream's ending broke
			}
			return nil, withWire(err, stream.Trailer())
		}
		s.mu.Unlock()
		if err := s.resume(); err != nil {
			s.mu.Lock()
			s.ended = true
			s.mu.Unlock()
			return nil, err
		}
	}
}

// resume moves the session to a new stream: its Open with the resume point, then the pending
// messages re-sent as they were framed.
func (s *Session) resume() error {
	s.mu.Lock()
	first := s.ledger.reopen()
	s.mu.Unlock()
	stream, err := s.connect(first)
	if err != nil {
		return err
	}
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	s.mu.Lock()
	s.stream, s.closedSend = stream, nil
	s.ledger.restart() // messages queued meanwhile went to the broken stream
	s.resumes++
	s.mu.Unlock()
	return s.pump()
}

// Messages iterates over the server's messages as Recv returns them. It stops after the final
// message; a non-nil error is the status that ended the session, and the last thing yielded.
func (s *Session) Messages() iter.Seq2[*pb.ParseResponse, error] {
	return func(yield func(*pb.ParseResponse, error) bool) {
		for {
			msg, err := s.Recv()
			if errors.Is(err, io.EOF) {
				return
			}
			if err != nil {
				yield(nil, err)
				return
			}
			if !yield(msg, nil) {
				return
			}
		}
	}
}

// Deltas iterates over the session's deltas in order, across the server's messages, until the
// final message (then Final holds the outcome). A non-nil error is the status that ended the
// session, and the last thing yielded:
//
//	for delta, err := range session.Deltas() {
//		if err != nil { return err }
//		emit(delta)
//	}
func (s *Session) Deltas() iter.Seq2[*pb.Delta, error] {
	return func(yield func(*pb.Delta, error) bool) {
		for msg, err := range s.Messages() {
			if err != nil {
				yield(nil, err)
				return
			}
			for _, delta := range msg.GetDeltas() {
				if !yield(delta, nil) {
					return
				}
			}
		}
	}
}

// Wire iterates over the bytes a session opened WithWire renders, in the order to forward them:
// each reply's wire bytes, then the final result's (the closing events, or the whole body). A
// gateway writes each to its caller as it comes, with no mapping of its own. A non-nil error is
// the status that ended the session, and the last thing yielded; just before it come the
// error's bytes in the session's dialect (WireError), when the server sent them.
func (s *Session) Wire() iter.Seq2[[]byte, error] {
	return func(yield func([]byte, error) bool) {
		for msg, err := range s.Messages() {
			if err != nil {
				if failed := WireError(err); len(failed) > 0 && !yield(failed, nil) {
					return
				}
				yield(nil, err)
				return
			}
			if wire := msg.GetWire(); len(wire) > 0 && !yield(wire, nil) {
				return
			}
			if wire := msg.GetFinal().GetWire(); len(wire) > 0 && !yield(wire, nil) {
				return
			}
		}
	}
}

// Final is the session's outcome (finish reason, usage, the assembled message) once it has
// been received, else nil.
func (s *Session) Final() *pb.Final {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.final
}

// Close releases the session; it is safe to call more than once and from any goroutine. It
// returns nil once the session has ended: its final message was received, or Recv already
// returned the status that ended it. Otherwise it cancels the stream (the server records
// codes.Canceled) and returns ErrClosedEarly.
func (s *Session) Close() error {
	s.mu.Lock()
	ended := s.ended || s.final != nil
	s.ended = true
	s.mu.Unlock()
	s.cancel()
	if ended {
		return nil
	}
	return ErrClosedEarly
}

// ParseStream runs a whole session in one call: it opens it, sends each step in its own
// message (as a live decode loop would) while receiving concurrently, finishes, and returns
// the Final result and every delta in order. It exists for replaying recorded outputs and
// for tests; a serving stack that generates tokens live uses a Session.
func (c *Client) ParseStream(ctx context.Context, model string, steps [][]uint32, finish Finish,
	opts ...OpenOption) (*pb.Final, []*pb.Delta, error) {
	s, err := c.Open(ctx, model, opts...)
	if err != nil {
		return nil, nil, err
	}
	// Every path below has received to the end or failed, where Close only frees the stream.
	defer s.Close()
	sent := make(chan error, 1) // buffered: the sender never outlives an early return
	go func() {
		for _, step := range steps {
			if err := s.Send(step); err != nil {
				sent <- err
				return
			}
		}
		sent <- s.Finish(finish.Reason, finish.Matched)
	}()
	var deltas []*pb.Delta
	for delta, err := range s.Deltas() {
		if err != nil {
			return nil, nil, err // the deferred Close unblocks the sender
		}
		deltas = append(deltas, delta)
	}
	if err := <-sent; err != nil && !errors.Is(err, io.EOF) {
		return nil, nil, err
	}
	if s.Final() == nil {
		return nil, nil, status.Error(codes.Internal, "parsetier: stream ended without a final message")
	}
	return s.Final(), deltas, nil
}
