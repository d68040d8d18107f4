package parsetier

import (
	"sort"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/parsetier/parsetier/client/go/parsetierpb"
)

// Resume for the batch API: what a ParseBatch stream's sessions need to move, together, to a
// new stream. The server resumes each session of a ParseBatch stream on its own
// (docs/service.md, "Resume"): its entry with Open carries its resume point, and its later
// entries are re-sent under the same key, one per message, as before. batchLedger keeps what
// that takes for every live session (its history, token ids only, and its resume point) plus
// the steps whose replies the caller has not received yet. After a break, replay gives the
// messages that open a new stream: every live session re-opened with its point and its history
// re-sent, entry j of every session in message j. The new stream's replies are sorted back into
// the caller's steps, so Recv returns one reply per step sent, each with the outputs an
// uninterrupted stream gives, in the same order, exactly once. An entry sent to a session before
// the session's end (its final, or its own status) was received, and unanswered at a break, is
// re-sent as the entry of no session it then is: the server answers it with the status it gave.

// batchSession is one session as the caller opened it.
type batchSession struct {
	key       string
	hist      history          // message 0 is the Open
	first     *pb.ParseRequest // the steps and finish the open entry carried, or nil
	point     pb.ResumePoint   // client_messages and sequence of the last output received
	openedAt  int              // the step that opened it
	tail      []batchTailEntry // its messages in steps not delivered yet, oldest first
	sending   bool             // entries may still follow (no finish or cancel sent yet)
	cancelled bool             // a cancel entry follows the history
	endedAt   int              // the entry whose output ended it (its final or its status), or -1
}

type batchTailEntry struct{ index, step int }

func newBatchSession(entry *pb.SessionInput, step int) *batchSession {
	s := &batchSession{key: entry.GetKey(), hist: newHistory(entry.GetOpen()), openedAt: step,
		tail: []batchTailEntry{{0, step}}, sending: entry.GetFinish() == nil, endedAt: -1}
	if len(entry.GetSteps()) > 0 || entry.GetFinish() != nil {
		// A copy: the caller may reuse its token slices once the step is sent.
		s.first = proto.Clone(&pb.ParseRequest{Steps: entry.GetSteps(), Finish: entry.GetFinish()}).(*pb.ParseRequest)
	}
	return s
}

func (s *batchSession) messages() int {
	if s.cancelled {
		return s.hist.len() + 1
	}
	return s.hist.len()
}

func (s *batchSession) trim(delivered int) {
	for len(s.tail) > 0 && s.tail[0].step <= delivered {
		s.tail = s.tail[1:]
	}
}

func (s *batchSession) add(entry *pb.SessionInput, step, delivered int) {
	s.trim(delivered) // only undelivered steps need their entries' steps
	index := s.messages()
	if entry.GetCancel() {
		s.cancelled, s.sending = true, false
	} else {
		// A second Open travels whole (the server ends the session for it). A message kept whole
		// is a copy: the caller may reuse its token slices once the step is sent.
		msg := &pb.ParseRequest{Open: entry.GetOpen(), Steps: entry.GetSteps(), Finish: entry.GetFinish()}
		if !plainIDs(msg) {
			msg = proto.Clone(msg).(*pb.ParseRequest)
		}
		s.hist.record(msg)
		if entry.GetFinish() != nil {
			s.sending = false
		}
	}
	s.tail = append(s.tail, batchTailEntry{index, step})
}

// entry is entry index as it is re-sent on a new stream (the Open with the resume point).
func (s *batchSession) entry(index int) *pb.SessionInput {
	if index == s.hist.len() {
		return &pb.SessionInput{Key: s.key, Cancel: true}
	}
	if index == 0 {
		point := &pb.ResumePoint{ClientMessages: s.point.ClientMessages, Sequence: s.point.Sequence}
		e := &pb.SessionInput{Key: s.key, Open: s.hist.message(0, point).GetOpen()}
		if s.first != nil {
			e.Steps, e.Finish = s.first.GetSteps(), s.first.GetFinish()
		}
		return e
	}
	m := s.hist.message(index, nil)
	return &pb.SessionInput{Key: s.key, Open: m.GetOpen(), Steps: m.GetSteps(), Finish: m.GetFinish()}
}

// stepOf is the step entry index was sent in, or 0 when that step's reply was delivered.
func (s *batchSession) stepOf(index, delivered int) int {
	s.trim(delivered)
	for _, t := range s.tail {
		if t.index == index {
			return t.step
		}
	}
	return 0
}

// pendingStep is a step sent whose reply the caller has not received.
type pendingStep struct {
	keys    []string
	entries map[string]carriedEntry // what its entries were as first sent
	outputs map[string]*pb.SessionOutput
	until   int                // the reply on the current stream after which it is complete
	orphans []*pb.SessionInput // entries for keys without a live session, re-sent as they are
}

type carriedEntry struct {
	session *batchSession // nil: an entry of no session
	step    int           // the step it answers (0: delivered)
	index   int           // its index among the session's entries
	opens   bool          // the entry opens the session
}

// codeUnavailable is the SessionStatus code of a refused open (draining or overloaded).
const codeUnavailable = int32(codes.Unavailable)

type batchLedger struct {
	live     map[string]*batchSession
	retiring []*batchSession // reopened keys' earlier sessions whose end has not been received
	steps    []*pendingStep
	step     int // steps sent so far
	carried  []map[string]carriedEntry
	sent     int // messages sent on the current stream
	received int
	resumes  int // moves to a new stream (counted at its first reply)
	moving   bool
	mustMove bool // a reply refused an open with Unavailable: move the stream now
}

func newBatchLedger() *batchLedger { return &batchLedger{live: map[string]*batchSession{}} }

func (l *batchLedger) delivered() int { return l.step - len(l.steps) }

// sentStep records the caller's next step, going out on the current stream as msg.
func (l *batchLedger) sentStep(msg *pb.ParseBatchRequest) {
	delivered := l.delivered()
	l.step++
	l.sent++
	rec := &pendingStep{outputs: map[string]*pb.SessionOutput{}, until: l.sent}
	carried := make(map[string]carriedEntry, len(msg.GetSessions()))
	rec.entries = carried
	for _, entry := range msg.GetSessions() {
		key := entry.GetKey()
		rec.keys = append(rec.keys, key)
		s := l.live[key]
		opens := entry.GetOpen() != nil && !entry.GetCancel() && (s == nil || !s.sending)
		index := 0
		switch {
		case opens:
			if s != nil {
				l.retiring = append(l.retiring, s)
			}
			s = newBatchSession(entry, l.step)
			l.live[key] = s
		case s != nil:
			index = s.messages()
			s.add(entry, l.step, delivered)
		case !entry.GetCancel(): // a cancel of no live session answers nothing
			rec.orphans = append(rec.orphans, entry)
		}
		carried[key] = carriedEntry{s, l.step, index, opens}
	}
	l.steps = append(l.steps, rec)
	l.carried = append(l.carried, carried)
}

// receivedReply sorts a reply of the current stream into the steps it answers.
func (l *batchLedger) receivedReply(reply *pb.ParseBatchResponse) error {
	carried := l.carried[0]
	l.carried = l.carried[1:]
	l.received++
	if l.moving {
		l.moving = false
		l.resumes++
	}
	delivered := l.delivered()
	for _, out := range reply.GetSessions() {
		c := carried[out.GetKey()]
		if c.opens && out.GetStatus().GetCode() == codeUnavailable {
			l.mustMove = true // refused as draining or overloaded: another server opens it
			continue
		}
		// After a session's end, the server answers its key's entries as those of no session (or
		// of a new session, for an open, numbered from 1): they are not that session's output.
		if s := c.session; s != nil && s.endedAt < 0 {
			if out.GetSequence() != 0 {
				if out.GetSequence() != s.point.Sequence+1 {
					return status.Errorf(codes.Internal, "parsetier: session %q output %d after %d: a gap or a repeat",
						s.key, out.GetSequence(), s.point.Sequence)
				}
				s.point.ClientMessages, s.point.Sequence = out.GetClientMessages(), out.GetSequence()
			}
			if out.GetFinal() != nil || out.GetStatus() != nil {
				s.endedAt = c.index
				l.ended(s)
			}
		}
		if c.step > delivered {
			l.steps[c.step-delivered-1].outputs[out.GetKey()] = out
		}
	}
	return nil
}

func (l *batchLedger) ended(s *batchSession) {
	if l.live[s.key] == s {
		delete(l.live, s.key)
		return
	}
	for i, r := range l.retiring {
		if r == s {
			l.retiring = append(l.retiring[:i], l.retiring[i+1:]...)
			return
		}
	}
}

// ready returns the oldest undelivered step's outputs once complete, in its entries' order.
func (l *batchLedger) ready() ([]*pb.SessionOutput, bool) {
	if len(l.steps) == 0 || l.steps[0].until > l.received {
		return nil, false
	}
	step := l.steps[0]
	l.steps = l.steps[1:]
	outs := make([]*pb.SessionOutput, 0, len(step.outputs))
	for _, key := range step.keys {
		if out, ok := step.outputs[key]; ok {
			outs = append(outs, out)
		}
	}
	return outs, true
}

type laneItem struct {
	session *batchSession
	index   int // the session's entry, or the orphan's index in its step
	step    int
}

// replay returns the messages that start a new stream: every live session re-opened at its
// resume point with its history, and the unanswered entries of keys without one.
func (l *batchLedger) replay() []*pb.ParseBatchRequest {
	l.moving, l.mustMove = true, false
	delivered := l.delivered()
	type group struct {
		start int
		key   string
		items []laneItem
	}
	var groups []group
	for _, s := range append(append([]*batchSession{}, l.retiring...), l.liveInOrder()...) {
		items := make([]laneItem, s.messages())
		for i := range items {
			items[i] = laneItem{s, i, s.stepOf(i, delivered)}
		}
		groups = append(groups, group{s.openedAt, s.key, items})
	}
	for n, step := range l.steps {
		number := delivered + n + 1
		// Entries sent to a session after the one whose output ended it, and not answered yet:
		// the server answers them as entries of no session, so they are re-sent as such (a
		// cancel answers nothing: its index is past the history).
		for _, key := range step.keys {
			c := step.entries[key]
			if s := c.session; s != nil && s.endedAt >= 0 && c.index > s.endedAt && c.index < s.hist.len() {
				if _, answered := step.outputs[key]; !answered {
					groups = append(groups, group{number, key, []laneItem{{s, c.index, number}}})
				}
			}
		}
		for k, e := range step.orphans {
			groups = append(groups, group{number, e.GetKey(), []laneItem{{nil, k, number}}})
		}
	}
	sort.SliceStable(groups, func(i, j int) bool { return groups[i].start < groups[j].start })
	var keys []string
	lanes := map[string][]laneItem{}
	depth := 0
	for _, g := range groups {
		if _, ok := lanes[g.key]; !ok {
			keys = append(keys, g.key)
		}
		lanes[g.key] = append(lanes[g.key], g.items...)
		depth = max(depth, len(lanes[g.key]))
	}
	l.carried = l.carried[:0]
	lastOf := map[int]int{}
	msgs := make([]*pb.ParseBatchRequest, depth)
	for j := range depth {
		msg := &pb.ParseBatchRequest{}
		carried := map[string]carriedEntry{}
		for _, key := range keys {
			lane := lanes[key]
			if j >= len(lane) {
				continue
			}
			it := lane[j]
			if it.session != nil {
				msg.Sessions = append(msg.Sessions, it.session.entry(it.index))
			} else {
				msg.Sessions = append(msg.Sessions, l.steps[it.step-delivered-1].orphans[it.index])
			}
			carried[key] = carriedEntry{it.session, it.step, it.index, it.session != nil && it.index == 0}
			if it.step != 0 {
				lastOf[it.step] = j + 1
			}
		}
		msgs[j] = msg
		l.carried = append(l.carried, carried)
	}
	l.sent, l.received = depth, 0
	until := 0
	for n, step := range l.steps { // each completes after its last re-sent entry
		until = max(until, lastOf[delivered+n+1])
		step.until = until
	}
	return msgs
}

// liveInOrder is the live sessions in the order they were opened (a deterministic replay).
func (l *batchLedger) liveInOrder() []*batchSession {
	out := make([]*batchSession, 0, len(l.live))
	for _, s := range l.live {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].openedAt != out[j].openedAt {
			return out[i].openedAt < out[j].openedAt
		}
		return out[i].key < out[j].key
	})
	return out
}
