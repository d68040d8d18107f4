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
// sessions queued, flushInterval after the first of it (0: once the server has answered the
// message before, or half a millisecond after it went out if it has not), with at most
// muxInFlight messages unanswered; the other receives the replies and routes them. A session
// has one entry per message: the messages it sends meanwhile wait in its backlog, one going
// into each following message, and Send waits while 64 are waiting (a stalled stream stalls its
// senders: back-pressure). A session's error stays in that session; its context's end (a
// deadline, a cancel) or an early Close drops it on the server. Resume works as for Batch: a
// broken stream moves every live session, and Resumes counts the moves.
func WithMultiplex(flushInterval time.Duration) ClientOption {
	return func(c *clientConfig) {
		c.multiplex = true
		c.flushInterval = flushInterval
	}
}

// muxer is a client's shared stream: the sessions with an entry queued for the next message,
// and the goroutines that send them and route the replies.
type muxer struct {
	client   *Client
	interval time.Duration
	ctx      context.Context
	stop     context.CancelFunc
	wake     chan struct{} // one token: there is something to flush
	answered chan struct{} // one token: a reply was routed

	mu       sync.Mutex // guards everything below, and every session's queued entry and counts
	started  bool
	batch    *sharedBatch    // nil until the next flush makes one
	openings [][]*muxSession // per message in flight: the sessions whose open it carries
	routed   int             // replies routed (the message each answers, in order)
	queue    []*muxSession   // the sessions with an entry queued, in the order queued
	flushed  chan struct{}   // closed at the next flush
	sessions map[string]*muxSession
	nextKey  uint64
	taken    int // messages sent on the stream
	routing  []routed
}

// routed is one output of a reply and the session it goes to (route's scratch space).
type routed struct {
	s   *muxSession
	out *pb.SessionOutput
}

// sharedBatch is the shared stream's Batch and its room for messages in flight.
type sharedBatch struct {
	b     *Batch
	slots chan struct{}
	dead  chan struct{} // closed when the stream has failed
}

// muxInFlight bounds the messages sent and not answered: past it, flushes wait. With interval
// 0, a flush also waits while a message is unanswered, for at most muxIdleWait (see idle).
const (
	muxInFlight = 64
	muxIdleWait = 500 * time.Microsecond
)

func newMuxer(c *Client, interval time.Duration) *muxer {
	ctx, stop := context.WithCancel(context.Background())
	return &muxer{
		client: c, interval: interval, ctx: ctx, stop: stop, wake: make(chan struct{}, 1), answered: make(chan struct{}, 1),
		flushed: make(chan struct{}), sessions: map[string]*muxSession{},
	}
}

// muxSession is a session's side of the shared stream: its key, its entry in the next message,
// its replies as they come, and the count of messages it has sent (client_messages in its
// replies, as on its own stream).
type muxSession struct {
	m        *muxer
	key      string
	admitted chan error // the reply to the message that carried its open came: nil, or its error

	// Guarded by m.mu: the entry queued for the next message, and the counts.
	live     bool // in m.sessions
	queued   bool // in m.queue
	counted  bool // the queued entry is a message of the session's own (a Cancel is not)
	open     *pb.Open
	steps    []*pb.Step
	finish   *pb.Finish
	cancel   bool
	count    uint64   // the queued entry's count of the session's messages
	backlog  []muxMsg // its messages after the queued one, oldest first
	waiting  bool     // a Send waits for room in the backlog (room wakes it)
	room     chan struct{}
	messages uint64
	counts   []stepCount // per entry not answered: the stream's message that carries it, the count

	mu      sync.Mutex
	cond    *sync.Cond
	outs    []muxReply // replies not read yet: outs[head:]
	head    int
	err     error // what ended it (io.EOF after its final reply)
	done    bool  // nothing more comes: outs drained, then err
	resumes int
}

// muxMsg is a message of a session waiting behind its entry in the next message.
type muxMsg struct {
	steps  []*pb.Step
	finish *pb.Finish
	count  uint64
}

// muxBacklog bounds a session's messages waiting behind its queued entry: past it, Send waits,
// and goes on once half of them have gone out (a session does not sleep and wake per message).
const muxBacklog = 64

type stepCount struct {
	step  int
	count uint64
}

// open registers a session and queues its Open; it returns once the server accepted it.
func (m *muxer) open(ctx context.Context, open *pb.Open) (*muxSession, error) {
	s := &muxSession{m: m, admitted: make(chan error, 1), live: true, room: make(chan struct{}, 1)}
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
	s.open = open
	s.messages++
	s.count = s.messages
	m.enqueue(s, true)
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

// enqueue puts s's entry in the next message (once). The caller holds m.mu.
func (m *muxer) enqueue(s *muxSession, counted bool) {
	s.counted = counted
	if !s.queued {
		s.queued = true
		m.queue = append(m.queue, s)
	}
}

func (m *muxer) signal() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// put queues one message of session s: its steps and, when finish is set, its Finish. One entry
// per session per message: a message sent while s has one queued waits in its backlog, and put
// waits while the backlog is full.
func (m *muxer) put(s *muxSession, steps []*pb.Step, finish *pb.Finish) error {
	m.mu.Lock()
	for s.live && s.queued && len(s.backlog) >= muxBacklog {
		s.waiting = true
		m.mu.Unlock()
		select {
		case <-s.room:
		case <-m.ctx.Done():
			return status.Error(codes.Canceled, "parsetier: the client was closed")
		}
		m.mu.Lock()
	}
	if !s.live {
		m.mu.Unlock()
		return io.EOF // the session has ended: Recv says why
	}
	s.messages++
	if s.queued {
		s.backlog = append(s.backlog, muxMsg{steps, finish, s.messages})
		m.mu.Unlock()
		return nil
	}
	s.steps, s.finish, s.count = steps, finish, s.messages
	m.enqueue(s, true)
	m.mu.Unlock()
	m.signal()
	return nil
}

// ended marks s ended on the stream: its backlog dropped, a Send waiting for room woken. The
// caller holds m.mu.
func (s *muxSession) ended() {
	s.live, s.backlog = false, nil
	if s.waiting {
		s.waiting = false
		select {
		case s.room <- struct{}{}:
		default:
		}
	}
}

// drop ends session s with err unless it has ended: a Cancel entry goes to the server.
func (m *muxer) drop(s *muxSession, err error) {
	m.mu.Lock()
	live := s.live
	if live {
		s.ended()
		delete(m.sessions, s.key)
		s.open, s.steps, s.finish, s.cancel = nil, nil, nil, true
		m.enqueue(s, false)
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

// take is the next message's entries on stream shared; nothing when shared is no longer the
// stream (its failure ended its sessions).
func (m *muxer) take(shared *sharedBatch) []*pb.SessionInput {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.batch != shared {
		return nil
	}
	close(m.flushed)
	m.flushed = make(chan struct{})
	all := m.queue
	queue := all[:min(len(all), muxMaxBatch)]
	if len(queue) == 0 {
		return nil
	}
	m.taken++
	entries := make([]*pb.SessionInput, len(queue))
	inputs := make([]pb.SessionInput, len(queue)) // one block for the message's entries
	var opening, next []*muxSession
	for i, s := range queue {
		e := &inputs[i]
		e.Key, e.Open, e.Steps, e.Finish, e.Cancel = s.key, s.open, s.steps, s.finish, s.cancel
		entries[i] = e
		if s.open != nil {
			opening = append(opening, s)
		}
		if s.counted {
			s.counts = append(s.counts, stepCount{m.taken, s.count})
		}
		s.queued, s.open, s.steps, s.finish, s.cancel = false, nil, nil, nil, false
		if len(s.backlog) > 0 {
			next = append(next, s)
		}
	}
	left := copy(all, all[len(queue):]) // what the cut left goes in the next message
	clear(all[left:])                   // the spare room holds no session
	m.queue = all[:left]
	for _, s := range next { // each one's next message goes in the next message
		msg := s.backlog[0]
		s.backlog[0] = muxMsg{}
		s.backlog = s.backlog[1:]
		if len(s.backlog) == 0 {
			s.backlog = nil
		}
		s.steps, s.finish, s.count = msg.steps, msg.finish, msg.count
		m.enqueue(s, true)
		if s.waiting && len(s.backlog) <= muxBacklog/2 {
			s.waiting = false
			select {
			case s.room <- struct{}{}:
			default:
			}
		}
	}
	if len(m.queue) > 0 {
		m.signal() // the next message has entries already
	}
	m.openings = append(m.openings, opening)
	return entries
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
		if m.interval == 0 {
			m.idle(shared)
		}
		select {
		case shared.slots <- struct{}{}: // room for one more message in flight
		case <-shared.dead:
			m.signal() // a new stream takes what is queued
			continue
		case <-m.ctx.Done():
			continue
		}
		order := m.take(shared)
		if len(order) == 0 {
			<-shared.slots
			continue
		}
		if err := shared.b.sharedSend(order); err != nil {
			m.failAll(shared, err)
		}
	}
}

// idle waits, with interval 0, until the stream has caught up (no message unanswered) or
// muxIdleWait has passed: the sends made while the server works on a message go in the next
// one together (about an engine step of every session), and a server that does not answer
// (stopped, or slow) still gets the sessions' messages, as their own Parse streams would.
func (m *muxer) idle(shared *sharedBatch) {
	if len(shared.slots) == 0 {
		return
	}
	timer := time.NewTimer(muxIdleWait)
	defer timer.Stop()
	for len(shared.slots) > 0 {
		select {
		case <-m.answered:
		case <-timer.C:
			return
		case <-shared.dead:
			return
		case <-m.ctx.Done():
			return
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
		select {
		case m.answered <- struct{}{}:
		default:
		}
	}
}

// route gives each output of the next reply to its session (with the session's count of
// messages the reply answers), then admits the sessions whose open that message carried.
func (m *muxer) route(outs []*pb.SessionOutput) {
	m.mu.Lock()
	m.routed++
	step := m.routed
	var opening []*muxSession
	if len(m.openings) > 0 {
		opening, m.openings = m.openings[0], m.openings[1:]
	}
	routing := m.routing[:0]
	for _, out := range outs {
		s := m.sessions[out.GetKey()]
		if s == nil {
			continue // dropped meanwhile
		}
		var count uint64
		n := 0
		for n < len(s.counts) && s.counts[n].step <= step {
			count = s.counts[n].count
			n++
		}
		s.counts = s.counts[n:]
		out.ClientMessages = count
		if out.GetFinal() != nil || out.GetStatus() != nil {
			s.ended()
			delete(m.sessions, out.GetKey())
		}
		routing = append(routing, routed{s, out})
	}
	m.routing = nil // route runs on the receiving goroutine only: the scratch space is its own
	m.mu.Unlock()
	var refused map[*muxSession]error
	replies := make([]pb.ParseResponse, len(routing)) // one block for the reply's sessions
	for i, r := range routing {
		out, next := r.out, muxReply{}
		if st := out.GetStatus(); st != nil {
			if refused == nil {
				refused = map[*muxSession]error{}
			}
			next.err = sessionError(st)
			refused[r.s] = next.err
		}
		if next.err == nil || len(out.GetDeltas()) > 0 || len(out.GetEvents()) > 0 || len(out.GetWire()) > 0 {
			reply := &replies[i] // what its Parse stream would have sent
			reply.Sequence, reply.ClientMessages, reply.Deltas = out.GetSequence(), out.GetClientMessages(), out.GetDeltas()
			reply.Events, reply.Final, reply.OutputDigest, reply.Wire = out.GetEvents(), out.GetFinal(), out.GetOutputDigest(), out.GetWire()
			next.reply = reply
		}
		r.s.deliver(next)
	}
	for _, s := range opening {
		select {
		case s.admitted <- refused[s]: // nil: the open was accepted
		default:
		}
	}
	clear(routing)
	m.mu.Lock()
	m.routing = routing[:0]
	m.mu.Unlock()
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
	for _, s := range m.queue {
		s.queued, s.open, s.steps, s.finish, s.cancel = false, nil, nil, nil, false
	}
	for _, s := range sessions {
		s.ended()
		s.counts = nil
	}
	m.queue = nil
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

// muxReply is one reply of a session: what its Parse stream would have sent, the status that
// ended it, or both (the status after the reply).
type muxReply struct {
	reply *pb.ParseResponse
	err   error
}

// deliver hands s its next reply.
func (s *muxSession) deliver(next muxReply) {
	s.mu.Lock()
	s.outs = append(s.outs, next)
	s.cond.Broadcast()
	s.mu.Unlock()
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
	for s.head == len(s.outs) && !s.done {
		s.cond.Wait()
	}
	if s.head == len(s.outs) {
		return nil, nil, s.err
	}
	next := s.outs[s.head]
	s.outs[s.head] = muxReply{}
	s.head++
	if s.head == len(s.outs) { // all read: the array takes the next replies from its start
		s.outs, s.head = s.outs[:0], 0
	}
	if next.err != nil {
		s.done, s.err = true, next.err
		if next.reply == nil {
			return nil, nil, s.err
		}
	}
	final := next.reply.GetFinal()
	if final != nil {
		s.done, s.err = true, io.EOF
	}
	return next.reply, final, nil
}

func (s *muxSession) resumeCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.resumes
}
