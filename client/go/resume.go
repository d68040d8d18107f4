package parsetier

import (
	"context"
	"math/rand/v2"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/parsetier/parsetier/client/go/parsetierpb"
)

// ResumePolicy says how sessions resume after a broken stream (docs/service.md, "Resume").
// Attempts is the retry budget: reconnects in a row that may fail before the last error ends the
// session, renewed by progress. Backoff doubles from InitialBackoff up to MaxBackoff, jittered.
type ResumePolicy struct {
	Attempts       int
	InitialBackoff time.Duration
	MaxBackoff     time.Duration
}

// DefaultResumePolicy is what NewClient and FromConn use: 20 attempts, 50 ms doubling to 1 s.
func DefaultResumePolicy() ResumePolicy {
	return ResumePolicy{Attempts: 20, InitialBackoff: 50 * time.Millisecond, MaxBackoff: time.Second}
}

func (p ResumePolicy) backoff(attempt int) time.Duration {
	d := p.MaxBackoff
	if attempt < 30 && p.InitialBackoff<<attempt < d {
		d = p.InitialBackoff << attempt
	}
	return d/2 + rand.N(d/2+1)
}

// WithResume sets how the client's sessions resume after a broken stream.
func WithResume(policy ResumePolicy) ClientOption {
	return func(c *clientConfig) { c.resume = &policy }
}

// WithoutResume turns resume off: a broken stream ends the session with its status, as a
// plain gRPC stream does, and the session keeps no history.
func WithoutResume() ClientOption {
	return func(c *clientConfig) { c.resume = nil; c.noResume = true }
}

// The trailing metadata keys of the proto's retry rule (the comment on ParserService).
const (
	faultTrailer   = "parsetier-fault"
	handoffTrailer = "parsetier-handoff"
)

// retryable is the proto's retry rule, from code and trailer only, for a stream of a session
// whose own context has not ended.
func retryable(ctx context.Context, err error, trailer metadata.MD) bool {
	if ctx.Err() != nil || len(trailer.Get(faultTrailer)) > 0 {
		return false
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.Canceled, codes.Internal, codes.Unknown:
		return true
	}
	return len(trailer.Get(handoffTrailer)) > 0
}

// history is a session's answered steps (ResumePoint.history): consecutive plain id steps merged
// into one run, a copy the history owns; text and logprob steps kept whole.
type history []*pb.Step

func plainStep(step *pb.Step) bool {
	return len(step.GetTokenIds()) > 0 && step.GetText() == "" && step.GetTextTokens() == 0 && step.GetLogprobs() == nil
}

func (h *history) addIDs(ids []uint32) {
	switch n := len(*h); {
	case len(ids) == 0:
	case n > 0 && plainStep((*h)[n-1]):
		(*h)[n-1].TokenIds = append((*h)[n-1].TokenIds, ids...)
	default:
		*h = append(*h, &pb.Step{TokenIds: slices.Clone(ids)})
	}
}

func (h *history) add(steps []*pb.Step) {
	for _, step := range steps {
		if plainStep(step) {
			h.addIDs(step.TokenIds)
		} else {
			*h = append(*h, proto.Clone(step).(*pb.Step))
		}
	}
}

// point is the resume point after a reply with sequence and digest; later ids do not change it.
func (h history) point(sequence uint64, digest uint32) *pb.ResumePoint {
	steps := slices.Clone(h)
	if n := len(steps); n > 0 && plainStep(steps[n-1]) {
		steps[n-1] = &pb.Step{TokenIds: slices.Clip(steps[n-1].TokenIds)}
	}
	return &pb.ResumePoint{Sequence: sequence, History: steps, OutputDigest: digest}
}

// ledger is all a Parse session keeps to resume (the page's pseudo-code): the Open, the answered
// history, the messages after the Open not answered yet (pending[i] is message first+i of the
// current stream; they are also its write queue: it has had those before next), and the
// sequence and digest of the last reply.
type ledger struct {
	open     *pb.Open
	answered history
	pending  []*pb.ParseRequest
	first    uint64
	next     uint64
	sequence uint64
	digest   uint32
}

func newLedger(open *pb.Open) *ledger { return &ledger{open: open, first: 2, next: 2} }

// send queues msg, copying its ids: the caller may reuse its slices once Send returns.
func (l *ledger) send(msg *pb.ParseRequest) {
	for i, step := range msg.GetSteps() {
		if plainStep(step) {
			msg.Steps[i] = &pb.Step{TokenIds: slices.Clone(step.GetTokenIds())}
		}
	}
	l.pending = append(l.pending, msg)
}

// unwritten is the next message the current stream has not had, or nil.
func (l *ledger) unwritten() *pb.ParseRequest {
	if l.next-l.first >= uint64(len(l.pending)) {
		return nil
	}
	l.next++
	return l.pending[l.next-1-l.first]
}

// received records a reply: it must follow the last, and answers the messages it covers.
func (l *ledger) received(reply *pb.ParseResponse) error {
	if reply.GetSequence() != l.sequence+1 {
		return status.Errorf(codes.Internal, "parsetier: message %d after %d: a gap or a repeat",
			reply.GetSequence(), l.sequence)
	}
	l.sequence, l.digest = reply.GetSequence(), reply.GetOutputDigest()
	for ; len(l.pending) > 0 && l.first <= reply.GetClientMessages(); l.first++ {
		l.answered.add(l.pending[0].GetSteps())
		l.pending[0] = nil
		l.pending = l.pending[1:]
	}
	return nil
}

// reopen is the Open of a new stream, resuming from what was received; restart makes that
// stream current (the pending messages follow its Open, from 2).
func (l *ledger) reopen() *pb.ParseRequest {
	open := proto.Clone(l.open).(*pb.Open)
	open.Resume = l.answered.point(l.sequence, l.digest)
	return &pb.ParseRequest{Open: open}
}

func (l *ledger) restart() { l.first, l.next = 2, 2 }

var (
	// errRefusedOpen moves a batch stream whose server refused an open (draining or overloaded).
	errRefusedOpen = status.Error(codes.Unavailable, "parsetier: a server refused to open a session (draining or overloaded)")
	// errEndedEarly is a ParseBatch stream that ended with OK before the reply to a step.
	errEndedEarly = status.Error(codes.Internal, "parsetier: ParseBatch stream ended before its reply")
)

// waitToRetry waits the policy's backoff before the next attempt at a broken batch stream, or
// returns what ends it: err itself when the retry rule or the budget says so, the context's
// error when the context ends first.
func waitToRetry(ctx context.Context, policy *ResumePolicy, err error, trailer metadata.MD, attempt int) error {
	if !retryable(ctx, err, trailer) || attempt >= policy.Attempts {
		return err
	}
	select {
	case <-time.After(policy.backoff(attempt)):
		return nil
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	}
}
