package parsetier

import (
	"context"
	"math/rand/v2"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
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

// serverFaults are how a parsetier server's own INTERNAL statuses begin (a bug it logged).
var serverFaults = []string{"internal server error", "internal error:"}

func serverFault(message string) bool {
	for _, prefix := range serverFaults {
		if strings.HasPrefix(message, prefix) {
			return true
		}
	}
	return false
}

// retryable says whether a session survives err by resuming elsewhere: the server or the
// connection went away (Unavailable: refused, unreachable, draining, handed off), the stream
// was cut by a stopping server or reset by a proxy with CANCEL (Canceled, unless the
// session's own context ended), or reset on the way (Internal, e.g. "stream terminated by
// RST_STREAM", but not the server's own INTERNAL), or a proxy answered instead of a server
// (Unknown from an unexpected HTTP status: nginx's "no backend" page is a 204 that gRPC-Go
// cannot read as a status). Every other status is the request's own.
func retryable(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	st := status.Convert(err)
	switch st.Code() {
	case codes.Unavailable, codes.Canceled:
		return true
	case codes.Internal:
		return !serverFault(st.Message())
	case codes.Unknown:
		return strings.Contains(st.Message(), "unexpected HTTP status code")
	}
	return false
}

// history holds a session's client messages as the server counts them, the Open's first:
// token ids in one slice, messages that are more than a run of ids (the Finish) whole. A
// message of several steps is re-sent as one step of all its ids, which the server parses
// identically (it joins them anyway).
type history struct {
	open  *pb.Open
	ids   []uint32
	ends  []int // message k (k >= 1) holds ids[ends[k-1]:ends[k]]; ends[0] = 0 is the Open
	whole map[int]*pb.ParseRequest
}

func newHistory(open *pb.Open) history {
	return history{open: open, ends: []int{0}, whole: map[int]*pb.ParseRequest{}}
}

func (h *history) len() int { return len(h.ends) }

// plainIDs says whether msg is nothing but runs of token ids (kept as ids; others are kept whole).
func plainIDs(msg *pb.ParseRequest) bool {
	plain := msg.GetFinish() == nil && msg.GetOpen() == nil
	for _, step := range msg.GetSteps() {
		plain = plain && len(step.GetTokenIds()) > 0 && step.GetLogprobs() == nil // logprobs are kept whole
	}
	return plain
}

func (h *history) record(msg *pb.ParseRequest) {
	if plainIDs(msg) {
		for _, step := range msg.GetSteps() {
			h.ids = append(h.ids, step.GetTokenIds()...)
		}
	} else {
		h.whole[h.len()] = msg
	}
	h.ends = append(h.ends, len(h.ids))
}

// message is client message index as it is to be sent (again); the Open carries point when
// the session resumes.
func (h *history) message(index int, point *pb.ResumePoint) *pb.ParseRequest {
	if index == 0 {
		open := h.open
		if point != nil {
			open = proto.Clone(h.open).(*pb.Open)
			open.Resume = point
		}
		return &pb.ParseRequest{Open: open}
	}
	if msg, ok := h.whole[index]; ok {
		return msg
	}
	ids := h.ids[h.ends[index-1]:h.ends[index]:h.ends[index]]
	if len(ids) == 0 {
		return &pb.ParseRequest{}
	}
	return &pb.ParseRequest{Steps: []*pb.Step{{TokenIds: ids}}}
}
