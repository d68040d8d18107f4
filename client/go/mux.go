package parsetier

import (
	"context"
	"io"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/parsetier/parsetier/client/go/parsetierpb"
)

// WithMultiplex makes the client's sessions ride one shared ParseBatch stream instead of a
// Parse stream each: Open returns the same *Session (Send, Finish, Recv, Messages, Deltas,
// Wire, Final, Close, Resumes), and each session's replies are exactly its own Parse stream's,
// but the sends of all sessions go out coalesced, one message per flush, which the server
// reads and answers as one (issue 40: a Parse stream costs the server its RPC machinery per
// message, a packed batch item a microsecond or two).
//
// The shared stream is a Batch (with its resume) driven by two goroutines: one flushes what the
// sessions queued, flushInterval after the first of it (0: as soon as it runs), with at most
// muxInFlight messages unanswered; the other receives the replies and routes them. A session
// has one entry per message: its next Send waits for the flush that carries its last, so the
// other sessions' sends coalesce meanwhile (and a stalled stream stalls its senders:
// back-pressure). A session's error stays in that session; its
// context's end (a deadline, a cancel) or an early Close drops it on the server. Resume works
// as for Batch: a broken stream moves every live session, and Resumes counts the moves.
func WithMultiplex(flushInterval time.Duration) ClientOption {
	return func(c *clientConfig) {
		c.multiplex = true
		c.flushInterval = flushInterval
	}
}

// muxer is a client's shared stream: the sessions' queued entries, and the goroutine that sends
// them and routes the replies.
type muxer struct {
	client   *Client
	interval time.Duration
	ctx      context.Context
	stop     context.CancelFunc
	wake     chan struct{} // one token: there is something to flush

	mu       sync.Mutex // guards everything below
	started  bool
	batch    *sharedBatch    // nil until the next flush makes one
	openings [][]*muxSession // per message in flight: the sessions whose open it carries
	routed   int             // replies routed (the message each answers, in order)
	entries  map[string]*pb.SessionInput
	order    []*pb.SessionInput
	sending  map[string]bool // keys whose queued entry has steps or a finish
	opening  []*muxSession   // sessions whose open is queued
	flushed  chan struct{}   // closed at the next flush
	sessions map[string]*muxSession
	nextKey  uint64
	taken    int // messages sent on the stream
}

// sharedBatch is the shared stream's Batch and its room for messages in flight.
type sharedBatch struct {
	b     *Batch
	slots chan struct{}
	dead  chan struct{} // closed when the stream has failed
}

// muxInFlight bounds the messages sent and not answered: past it, flushes wait.
const muxInFlight = 64

func newMuxer(c *Client, interval time.Duration) *muxer {
	ctx, stop := context.WithCancel(context.Background())
	return &muxer{
		client: c, interval: interval, ctx: ctx, stop: stop, wake: make(chan struct{}, 1),
		entries: map[string]*pb.SessionInput{}, sending: map[string]bool{}, flushed: make(chan struct{}),
		sessions: map[string]*muxSession{},
	}
}

// muxSession is a session's side of the shared stream: its key, its replies as they come, and
// the count of messages it has sent (client_messages in its replies, as on its own stream).
type muxSession struct {
	m        *muxer
	key      string
	admitted chan error // the reply to the message that carried its open came: nil, or its error

	mu       sync.Mutex
	cond     *sync.Cond
	outs     []*pb.SessionOutput
	err      error // what ended it (io.EOF after its final reply)
	done     bool  // nothing more comes: outs drained, then err
	resumes  int
	messages uint64
	counts   []stepCount // per entry not answered: the stream's message that carries it, the count
}

type stepCount struct {
	step  int
	count uint64
}

// open registers a session and queues its Open; it returns once the server accepted it.
func (m *muxer) open(ctx context.Context, open *pb.Open) (*muxSession, error) {
	s := &muxSession{m: m, admitted: make(chan error, 1)}
	s.cond = sync.NewCond(&s.mu)
	m.mu.Lock()
	if !m.started {
		m.started = true
		go m.run()
	}
	m.nextKey++
	s.key = strconv.FormatUint(m.nextKey, 36)
	m.sessions[s.key] = s
	if m.client.resume != nil {
		open.Resumable = true
	}
	m.entry(s.key).Open = open
	m.opening = append(m.opening, s)
	m.count(s)
	m.mu.Unlock()
	m.signal()
	select {
	case err := <-s.admitted:
		if err != nil {
			return nil, err
		}
	case <-ctx.Done():
		m.drop(s, status.FromContextError(ctx.Err()).Err())
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	go func() { // the session's context ends it: dropped on the server, its error here
		<-ctx.Done()
		m.drop(s, status.FromContextError(ctx.Err()).Err())
	}()
	return s, nil
}

func (m *muxer) entry(key string) *pb.SessionInput {
	e, ok := m.entries[key]
	if !ok {
		e = &pb.SessionInput{Key: key}
		m.entries[key] = e
		m.order = append(m.order, e)
	}
	return e
}

// count notes that s's next message goes in the next message of the stream. The caller holds m.mu.
func (m *muxer) count(s *muxSession) {
	s.mu.Lock()
	s.messages++
	s.counts = append(s.counts, stepCount{m.taken + 1, s.messages})
	s.mu.Unlock()
}

func (m *muxer) signal() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// put queues one message of session s: its steps and, when finish is set, its Finish. It waits
// while s has a message queued already (one entry per session per message).
func (m *muxer) put(s *muxSession, steps []*pb.Step, finish *pb.Finish) error {
	m.mu.Lock()
	for m.sending[s.key] {
		flushed := m.flushed
		m.mu.Unlock()
		m.signal()
		select {
		case <-flushed:
		case <-m.ctx.Done():
			return status.Error(codes.Canceled, "parsetier: the client was closed")
		}
		m.mu.Lock()
	}
	if m.sessions[s.key] != s {
		m.mu.Unlock()
		return io.EOF // the session has ended: Recv says why
	}
	e := m.entry(s.key)
	e.Steps = append(e.Steps, steps...)
	if finish != nil {
		e.Finish = finish
	}
	m.sending[s.key] = true
	m.count(s)
	m.mu.Unlock()
	m.signal()
	return nil
}

// drop ends session s with err unless it has ended: a Cancel entry goes to the server.
func (m *muxer) drop(s *muxSession, err error) {
	m.mu.Lock()
	live := m.sessions[s.key] == s
	if live {
		delete(m.sessions, s.key)
		e := m.entry(s.key)
		e.Open, e.Steps, e.Finish, e.Cancel = nil, nil, nil, true
	}
	m.mu.Unlock()
	if live {
		m.signal()
		s.end(err)
		select {
		case s.admitted <- err:
		default:
		}
	}
}

// muxMaxBatch bounds the entries of one message (the server's default limit of items per
// message is 2,048); what is left goes in the next.
const muxMaxBatch = 1024

// take is the next message's entries on stream shared and the sessions whose open it carries;
// nothing when shared is no longer the stream (its failure ended its sessions).
func (m *muxer) take(shared *sharedBatch) ([]*pb.SessionInput, []*muxSession) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.batch != shared {
		return nil, nil
	}
	order := m.order
	if len(order) > muxMaxBatch {
		order, m.order = order[:muxMaxBatch], order[muxMaxBatch:]
	} else {
		m.order = nil
	}
	var opening []*muxSession
	keep := m.opening[:0:0]
	for _, s := range m.opening {
		if _, left := m.entries[s.key]; left && m.isLeft(s.key) {
			keep = append(keep, s)
		} else {
			opening = append(opening, s)
		}
	}
	for _, e := range order {
		delete(m.entries, e.GetKey())
		delete(m.sending, e.GetKey())
	}
	m.opening = keep
	close(m.flushed)
	m.flushed = make(chan struct{})
	if len(order) > 0 {
		m.taken++
		m.openings = append(m.openings, opening)
	}
	return order, opening
}

// run is the flushing goroutine: it sends what the sessions queued, one message per flush.
func (m *muxer) run() {
	for {
		select {
		case <-m.wake:
		case <-m.ctx.Done():
			m.mu.Lock()
			if m.batch != nil {
				m.batch.b.cancel()
			}
			m.mu.Unlock()
			return
		}
		if m.interval > 0 {
			select {
			case <-time.After(m.interval):
			case <-m.ctx.Done():
			}
		}
		shared, err := m.stream()
		if err != nil {
			m.failAll(nil, err)
			continue
		}
		select {
		case shared.slots <- struct{}{}: // room for one more message in flight
		case <-shared.dead:
			m.signal() // a new stream takes what is queued
			continue
		case <-m.ctx.Done():
			continue
		}
		order, _ := m.take(shared)
		if len(order) == 0 {
			<-shared.slots
			continue
		}
		if err := shared.b.sharedSend(order); err != nil {
			m.failAll(shared, err)
		}
	}
}

// stream is the shared stream, made (with its receiving goroutine) when there is none.
func (m *muxer) stream() (*sharedBatch, error) {
	m.mu.Lock()
	shared := m.batch
	m.mu.Unlock()
	if shared != nil {
		return shared, nil
	}
	b, err := m.client.Batch(m.ctx)
	if err != nil {
		return nil, err
	}
	shared = &sharedBatch{b: b, slots: make(chan struct{}, muxInFlight), dead: make(chan struct{})}
	m.mu.Lock()
	m.batch = shared
	m.mu.Unlock()
	go m.receive(shared)
	return shared, nil
}

// receive is the receiving goroutine of one shared stream: it routes each reply to its sessions
// until the stream ends (it does not move: resume off, or the budget spent).
func (m *muxer) receive(shared *sharedBatch) {
	for {
		shared.b.mu.Lock()
		resumes := shared.b.Resumes()
		shared.b.mu.Unlock()
		outs, err := shared.b.sharedRecv()
		if err != nil {
			m.failAll(shared, err)
			return
		}
		shared.b.mu.Lock()
		moved := shared.b.Resumes() > resumes
		shared.b.mu.Unlock()
		if moved {
			m.moved()
		}
		m.route(outs)
		<-shared.slots
	}
}

// route gives each output of the next reply to its session, then admits the sessions whose open
// that message carried.
func (m *muxer) route(outs []*pb.SessionOutput) {
	m.mu.Lock()
	m.routed++
	step := m.routed
	var opening []*muxSession
	if len(m.openings) > 0 {
		opening, m.openings = m.openings[0], m.openings[1:]
	}
	sessions := make([]*muxSession, len(outs))
	for i, out := range outs {
		s := m.sessions[out.GetKey()]
		sessions[i] = s
		if s != nil && (out.GetFinal() != nil || out.GetStatus() != nil) {
			delete(m.sessions, out.GetKey())
		}
	}
	m.mu.Unlock()
	refused := map[string]error{}
	for i, out := range outs {
		if s := sessions[i]; s != nil {
			if st := out.GetStatus(); st != nil {
				refused[s.key] = sessionError(st)
			}
			s.deliver(out, step)
		}
	}
	for _, s := range opening {
		select {
		case s.admitted <- refused[s.key]: // nil: the open was accepted
		default:
		}
	}
}

// moved counts a move of the shared stream in every live session.
func (m *muxer) moved() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range m.sessions {
		s.mu.Lock()
		s.resumes++
		s.mu.Unlock()
	}
}

// failAll ends every session on the stream shared with err (it does not move: resume off, or
// its budget spent; nil: no stream could be made); the next flush starts a new stream.
func (m *muxer) failAll(shared *sharedBatch, err error) {
	m.mu.Lock()
	if m.batch != shared {
		m.mu.Unlock()
		return // that stream's failure was handled already
	}
	if shared != nil {
		shared.b.cancel()
		close(shared.dead)
	}
	m.batch = nil
	sessions := m.sessions
	m.sessions = map[string]*muxSession{}
	m.entries, m.order, m.opening, m.sending = map[string]*pb.SessionInput{}, nil, nil, map[string]bool{}
	m.taken, m.routed, m.openings = 0, 0, nil
	close(m.flushed)
	m.flushed = make(chan struct{})
	m.mu.Unlock()
	for _, s := range sessions {
		s.end(err)
		select {
		case s.admitted <- err:
		default:
		}
	}
}

// deliver hands s an output of message step of the stream.
func (s *muxSession) deliver(out *pb.SessionOutput, step int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var count uint64
	for len(s.counts) > 0 && s.counts[0].step <= step {
		count = s.counts[0].count
		s.counts = s.counts[1:]
	}
	out.ClientMessages = count
	s.outs = append(s.outs, out)
	s.cond.Broadcast()
}

func (s *muxSession) end(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.done {
		s.done, s.err = true, err
		s.cond.Broadcast()
	}
}

// sessionError is a session's status as the error its Parse stream would have ended with (its
// wire bytes for WireError).
func sessionError(st *pb.SessionStatus) error {
	err := status.Error(codes.Code(st.GetCode()), st.GetMessage())
	if len(st.GetWire()) > 0 {
		return &wireError{error: err, wire: st.GetWire()}
	}
	return err
}

// recv is the session's next reply, as its Parse stream would have sent it.
func (s *muxSession) recv() (*pb.ParseResponse, *pb.Final, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.outs) == 0 && !s.done {
		s.cond.Wait()
	}
	if len(s.outs) == 0 {
		return nil, nil, s.err
	}
	out := s.outs[0]
	s.outs = s.outs[1:]
	if st := out.GetStatus(); st != nil {
		s.done, s.err = true, sessionError(st)
		if len(out.GetDeltas()) == 0 && len(out.GetEvents()) == 0 && len(out.GetWire()) == 0 {
			return nil, nil, s.err
		}
	}
	reply := &pb.ParseResponse{
		Sequence: out.GetSequence(), ClientMessages: out.GetClientMessages(), Deltas: out.GetDeltas(),
		Events: out.GetEvents(), Final: out.GetFinal(), OutputDigest: out.GetOutputDigest(), Wire: out.GetWire(),
	}
	if out.GetFinal() != nil {
		s.done, s.err = true, io.EOF
	}
	return reply, out.GetFinal(), nil
}

func (s *muxSession) resumeCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.resumes
}

// isLeft says whether key's entry stays queued after take cut the message at muxMaxBatch. The
// caller holds m.mu.
func (m *muxer) isLeft(key string) bool {
	for _, e := range m.order {
		if e.GetKey() == key {
			return true
		}
	}
	return false
}
