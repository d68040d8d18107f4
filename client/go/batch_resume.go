package parsetier

import (
	"sort"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/parsetier/parsetier/client/go/parsetierpb"
)

// Resume for the batch API: the batch ledger of docs/service.md ("Resume"). It mirrors the
// server as of the last reply (the live sessions, each with its Open, answered history, sequence
// and digest) and keeps the caller's steps not answered yet, as sent. A replay re-opens every
// live session in one message, then re-sends those steps whole: each gets the reply it would
// have had, so Recv returns one reply per step sent, exactly once.

type batchSession struct {
	open     *pb.Open
	answered history
	sequence uint64
	digest   uint32
}

// sentEntry is one entry of a caller's step as sent: the usual one (one step of token ids) as
// ids, a view into one copy per step; any other as a copy.
type sentEntry struct {
	key   string
	ids   []uint32
	entry *pb.SessionInput // nil: ids
}

func (e *sentEntry) input() *pb.SessionInput {
	if e.entry != nil {
		return e.entry
	}
	return &pb.SessionInput{Key: e.key, Steps: []*pb.Step{{TokenIds: e.ids}}}
}

// sentStep is a caller's step whose reply the caller has not received.
type sentStep struct {
	entries  []sentEntry
	keys     []string // the reply's keys, in the entries' order
	outputs  map[string]*pb.SessionOutput
	answered bool // the server answered it (its outputs are in)
	held     int  // its opens refused with Unavailable, re-sent and not answered yet
}

// reopened is one entry of a re-open message: a live session, or a refused open of step.
type reopened struct {
	key     string
	session *batchSession // nil: refused
	refused *sentEntry
	step    *sentStep
}

// wireMessage is a message on the current stream not answered yet: a step, or a re-open.
type wireMessage struct {
	step   *sentStep
	reopen []reopened
}

// codeUnavailable is the SessionStatus code of a refused open (draining or overloaded).
const codeUnavailable = int32(codes.Unavailable)

type batchLedger struct {
	live     map[string]*batchSession
	steps    []*sentStep // not delivered yet, oldest first
	wire     []wireMessage
	refused  []reopened // opens refused with Unavailable, re-sent by the next re-open
	resumes  int        // moves to a new stream (counted at its first reply)
	moving   bool
	mustMove bool // a reply refused an open with Unavailable: move the stream now
}

func newBatchLedger() *batchLedger { return &batchLedger{live: map[string]*batchSession{}} }

// sentStep records the caller's next step, going out on the current stream as entries.
func (l *batchLedger) sentStep(entries []*pb.SessionInput) {
	step := &sentStep{entries: make([]sentEntry, len(entries)), outputs: make(map[string]*pb.SessionOutput, len(entries))}
	n := 0
	for _, e := range entries {
		if packable(e) {
			n += len(e.Steps[0].TokenIds)
		}
	}
	ids := make([]uint32, 0, n) // one copy of the step's ids: the caller may reuse its slices
	for i, e := range entries {
		se := &step.entries[i]
		se.key = e.GetKey()
		if packable(e) {
			start := len(ids)
			ids = append(ids, e.Steps[0].TokenIds...)
			se.ids = ids[start:len(ids):len(ids)]
		} else {
			se.entry = proto.Clone(e).(*pb.SessionInput)
		}
	}
	l.steps = append(l.steps, step)
	l.wire = append(l.wire, wireMessage{step: step})
}

// receivedReply takes the reply to the current stream's oldest unanswered message: its sessions
// and packed outputs (as SessionOutputs).
func (l *batchLedger) receivedReply(sessions, packed []*pb.SessionOutput) error {
	if len(l.wire) == 0 {
		return status.Error(codes.Internal, "parsetier: a ParseBatch reply to no message")
	}
	msg := l.wire[0]
	l.wire = l.wire[1:]
	moved := l.moving
	l.moving = false
	var err error
	if msg.step != nil {
		err = l.answeredStep(msg.step, sessions, packed)
	} else {
		err = l.answeredReopen(msg.reopen, sessions)
	}
	if moved && !l.mustMove {
		l.resumes++
	}
	return err
}

// take pops key's output off the front of outs (a reply lists them in the entries' order).
func take(outs *[]*pb.SessionOutput, key string) *pb.SessionOutput {
	if len(*outs) == 0 || (*outs)[0].GetKey() != key {
		return nil
	}
	out := (*outs)[0]
	*outs = (*outs)[1:]
	return out
}

func (l *batchLedger) answeredStep(step *sentStep, sessions, packed []*pb.SessionOutput) error {
	entry := func(i int) (string, bool) { return step.entries[i].key, step.entries[i].entry == nil }
	outs, err := inEntryOrder(len(step.entries), entry, sessions, packed)
	if err != nil {
		return err
	}
	step.answered = true
	for i := range step.entries {
		e := &step.entries[i]
		out := take(&outs, e.key)
		if l.live[e.key] == nil && e.entry.GetOpen() != nil && out.GetStatus().GetCode() == codeUnavailable {
			l.mustMove = true // refused as draining or overloaded: another server opens it
			l.refused = append(l.refused, reopened{key: e.key, refused: e, step: step})
			step.held++
		} else if err := l.apply(e, out); err != nil {
			return err
		} else {
			step.add(e.key, out)
		}
	}
	return nil
}

func (l *batchLedger) answeredReopen(items []reopened, outs []*pb.SessionOutput) error {
	for _, it := range items {
		out := take(&outs, it.key)
		switch {
		case out.GetStatus().GetCode() == codeUnavailable:
			l.mustMove = true // the session stays live, or its open refused: the next stream has it
			if it.session == nil {
				l.refused = append(l.refused, it)
			}
		case it.session == nil:
			it.step.held--
			if err := l.apply(it.refused, out); err != nil {
				return err
			}
			it.step.add(it.key, out)
		case out != nil: // a session that cannot resume here (an unknown model, a history that
			delete(l.live, it.key) // does not reproduce the output): the oldest step carries it
			l.steps[0].add(it.key, out)
		}
	}
	return nil
}

// apply does to the mirror what entry did on the server, which answered it with out (or nothing).
// A step of ids (e.entry nil) is read as it is: no SessionInput is made for it.
func (l *batchLedger) apply(e *sentEntry, out *pb.SessionOutput) error {
	key, entry := e.key, e.entry
	s := l.live[key]
	if s == nil {
		if entry.GetOpen() == nil || entry.GetCancel() || out.GetStatus() != nil {
			return nil // an entry of no session, or an open refused: the server keeps nothing
		}
		s = &batchSession{open: entry.GetOpen()}
		l.live[key] = s
	}
	if entry == nil {
		s.answered.addIDs(e.ids)
	} else {
		s.answered.add(entry.GetSteps())
	}
	if out.GetSequence() != 0 {
		if out.GetSequence() != s.sequence+1 {
			return status.Errorf(codes.Internal, "parsetier: session %q output %d after %d: a gap or a repeat",
				key, out.GetSequence(), s.sequence)
		}
		s.sequence, s.digest = out.GetSequence(), out.GetOutputDigest()
	}
	if out.GetFinal() != nil || out.GetStatus() != nil {
		delete(l.live, key)
	}
	return nil
}

func (s *sentStep) add(key string, out *pb.SessionOutput) {
	if out == nil {
		return
	}
	if _, ok := s.outputs[key]; !ok {
		s.keys = append(s.keys, key)
	}
	s.outputs[key] = out
}

// ready returns the oldest undelivered step's outputs once complete, in its entries' order.
func (l *batchLedger) ready() ([]*pb.SessionOutput, bool) {
	if len(l.steps) == 0 || !l.steps[0].answered || l.steps[0].held > 0 {
		return nil, false
	}
	step := l.steps[0]
	l.steps = l.steps[1:]
	outs := make([]*pb.SessionOutput, 0, len(step.outputs))
	for _, key := range step.keys {
		outs = append(outs, step.outputs[key])
	}
	return outs, true
}

// replay returns the messages that start a new stream: one re-opening every live session with
// its history (and the opens refused earlier), then the unanswered steps as they were sent.
func (l *batchLedger) replay() []*pb.ParseBatchRequest {
	l.moving, l.mustMove = true, false
	for _, msg := range l.wire { // a re-open not answered yet: its refused opens are still owed
		for _, it := range msg.reopen {
			if it.session == nil {
				l.refused = append(l.refused, it)
			}
		}
	}
	keys := make([]string, 0, len(l.live))
	for key := range l.live {
		keys = append(keys, key)
	}
	sort.Strings(keys) // a deterministic replay
	items := make([]reopened, 0, len(keys)+len(l.refused))
	first := &pb.ParseBatchRequest{}
	for _, key := range keys {
		s := l.live[key]
		open := proto.Clone(s.open).(*pb.Open)
		open.Resume = s.answered.point(s.sequence, s.digest)
		first.Sessions = append(first.Sessions, &pb.SessionInput{Key: key, Open: open})
		items = append(items, reopened{key: key, session: s})
	}
	for _, it := range l.refused {
		first.Sessions = append(first.Sessions, it.refused.input())
		items = append(items, it)
	}
	l.refused = nil
	l.wire = l.wire[:0]
	var msgs []*pb.ParseBatchRequest
	if len(items) > 0 {
		msgs = append(msgs, first)
		l.wire = append(l.wire, wireMessage{reopen: items})
	}
	for _, step := range l.steps {
		if step.answered {
			continue
		}
		msg := &pb.ParseBatchRequest{Sessions: make([]*pb.SessionInput, len(step.entries))}
		for i := range step.entries {
			msg.Sessions[i] = step.entries[i].input()
		}
		msgs = append(msgs, msg)
		l.wire = append(l.wire, wireMessage{step: step})
	}
	return msgs
}
