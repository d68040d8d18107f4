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
// Attempts is the retry budget: reconnects in a row that may fail (refused, unreachable)
// before the last error ends the session; it is renewed whenever a new stream is accepted.
// Backoff doubles from InitialBackoff up to MaxBackoff, with jitter, so a fleet's clients do
// not reconnect in lock step.
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

// The trailing metadata keys of the proto's retry rule (the comment on ParserService): the
// server's own fault, never retried, and a hand-off, always retried.
const (
	faultTrailer   = "parsetier-fault"
	handoffTrailer = "parsetier-handoff"
)

// retryable says whether a session survives err, which ended a stream with trailer, by resuming
// elsewhere: the proto's retry rule. Never the server's own fault (faultTrailer) nor after the
// session's own context ended; always a hand-off (handoffTrailer); else Unavailable, Canceled,
// Internal and Unknown, which a parsetier server never sends unmarked (a reset on the way, or a
// proxy's answer that is not gRPC: nginx's "no backend" page is a 204 that gRPC-Go reads as
// Unknown). Every other status is the request's own. No message text is read.
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

// history is a session's answered steps, as a resume point carries them (ResumePoint.history):
// consecutive steps of plain token ids merged into one run, text and logprob steps kept as
// they were sent. The run it is growing is its own copy, so callers may reuse their slices.
type history struct {
	steps []*pb.Step
	run   bool // the last step is a run of plain ids this history owns (later ids join it)
}

func plainStep(step *pb.Step) bool {
	return len(step.GetTokenIds()) > 0 && step.GetText() == "" && step.GetTextTokens() == 0 && step.GetLogprobs() == nil
}

func (h *history) addIDs(ids []uint32) {
	if len(ids) == 0 {
		return
	}
	if h.run {
		last := h.steps[len(h.steps)-1]
		last.TokenIds = append(last.TokenIds, ids...)
		return
	}
	h.steps = append(h.steps, &pb.Step{TokenIds: slices.Clone(ids)})
	h.run = true
}

func (h *history) add(steps []*pb.Step) {
	for _, step := range steps {
		if plainStep(step) {
			h.addIDs(step.GetTokenIds())
		} else {
			h.steps = append(h.steps, proto.Clone(step).(*pb.Step))
			h.run = false
		}
	}
}

// point is the resume point of a session whose last reply had sequence and digest. The run
// still growing is given as a step of its own, so the point does not change with later ids.
func (h *history) point(sequence uint64, digest uint32) *pb.ResumePoint {
	steps := slices.Clone(h.steps)
	if h.run {
		ids := steps[len(steps)-1].TokenIds
		steps[len(steps)-1] = &pb.Step{TokenIds: ids[:len(ids):len(ids)]}
	}
	return &pb.ResumePoint{Sequence: sequence, History: steps, OutputDigest: digest}
}

// ledger is all a Parse session keeps to resume (docs/service.md, "Resume"): its Open, its
// answered history, the messages sent after the Open whose replies have not arrived (in order;
// on any stream the Open is message 1, so pending[i] is message first+i), and the sequence and
// output digest of the last reply. The messages are also the session's queue for writing: the
// current stream has had those before next.
type ledger struct {
	open     *pb.Open
	answered history
	pending  []*pb.ParseRequest
	first    uint64 // the current stream's number of pending[0]
	next     uint64 // the current stream's number of the next message to write
	sequence uint64
	digest   uint32
}

func newLedger(open *pb.Open) *ledger { return &ledger{open: open, first: 2, next: 2} }

// send queues msg, a copy of its ids: the caller may reuse its slices once Send returns.
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
	i := l.next - l.first
	if i >= uint64(len(l.pending)) {
		return nil
	}
	l.next++
	return l.pending[i]
}

// received records a reply: the messages it covers are answered, and it must follow the last.
func (l *ledger) received(reply *pb.ParseResponse) error {
	if reply.GetSequence() != l.sequence+1 {
		return status.Errorf(codes.Internal, "parsetier: message %d after %d: a gap or a repeat",
			reply.GetSequence(), l.sequence)
	}
	l.sequence, l.digest = reply.GetSequence(), reply.GetOutputDigest()
	for len(l.pending) > 0 && l.first <= reply.GetClientMessages() {
		l.answered.add(l.pending[0].GetSteps())
		l.pending[0] = nil
		l.pending = l.pending[1:]
		l.first++
	}
	return nil
}

// reopen is the Open of a new stream, resuming from what was received.
func (l *ledger) reopen() *pb.ParseRequest {
	open := proto.Clone(l.open).(*pb.Open)
	open.Resume = l.answered.point(l.sequence, l.digest)
	return &pb.ParseRequest{Open: open}
}

// restart makes the new stream current: the pending messages follow its Open, from 2.
func (l *ledger) restart() { l.first, l.next = 2, 2 }
