package parsetier

import (
	"errors"
	"io"

	"google.golang.org/grpc/metadata"

	pb "github.com/parsetier/parsetier/client/go/parsetierpb"
)

// A Batch is driven by one goroutine. The multiplexer (WithMultiplex) drives its own batch from
// two: one sends the flushed messages (sharedSend), one receives the replies (sharedRecv), so
// that a message goes out while the reply to the last one is still coming. Both take b.mu for
// the ledger and the stream fields, never across a network wait.

// sharedSend sends entries as one message (Send's work), safe alongside sharedRecv.
func (b *Batch) sharedSend(entries []*pb.SessionInput) error {
	b.mu.Lock()
	if b.failed != nil {
		err := b.failed
		b.mu.Unlock()
		return err
	}
	b.InFlight++
	stream := b.stream
	if b.ledger != nil {
		b.ledger.sentStep(entries) // a resume from now on re-sends them: this stream is the old one then
		replaying, streamErr := b.replaying, b.streamErr
		b.mu.Unlock()
		<-replaying
		if streamErr == nil {
			_ = stream.Send(wireRequest(entries)) // a break is sharedRecv's to resume
		}
		return nil
	}
	b.sent = append(b.sent, entries)
	b.mu.Unlock()
	if err := stream.Send(wireRequest(entries)); err != nil && !errors.Is(err, io.EOF) {
		return err // io.EOF: the stream has ended, sharedRecv says why
	}
	return nil
}

// sharedRecv is the reply to the oldest message sent (Recv's work), safe alongside sharedSend.
// It waits for one when none is in flight. An error ends the batch: later sends return it.
func (b *Batch) sharedRecv() ([]*pb.SessionOutput, error) {
	outs, err := b.sharedRecvOrResume()
	if err != nil {
		b.mu.Lock()
		b.failed = err
		b.mu.Unlock()
	}
	return outs, err
}

func (b *Batch) sharedRecvOrResume() ([]*pb.SessionOutput, error) {
	whole := func() *pb.ParseBatchResponse { return new(pb.ParseBatchResponse) }
	l := b.ledger
	if l == nil {
		b.mu.Lock()
		stream := b.stream
		b.mu.Unlock()
		reply, err := recvWhole(stream.Recv, whole)
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = errEndedEarly
			}
			return nil, err
		}
		b.mu.Lock()
		entries := b.sent[0]
		b.sent = b.sent[1:]
		b.InFlight--
		b.mu.Unlock()
		packed, err := unpackOutputs(reply.GetPacked())
		if err != nil {
			return nil, err
		}
		entry := func(i int) (string, bool) { return entries[i].GetKey(), packable(entries[i]) }
		return inEntryOrder(len(entries), entry, reply.GetSessions(), packed)
	}
	for attempt := 0; ; {
		b.mu.Lock()
		if outs, ok := l.ready(); ok {
			b.InFlight--
			b.mu.Unlock()
			return outs, nil
		}
		err, stream := b.streamErr, b.stream
		b.mu.Unlock()
		var trailer metadata.MD // the trailer of the stream's status, for the retry rule
		if err == nil {
			var reply *pb.ParseBatchResponse
			reply, err = recvWhole(stream.Recv, whole)
			if err != nil {
				trailer = stream.Trailer()
			}
			if err == nil {
				packed, err := unpackOutputs(reply.GetPacked())
				if err != nil {
					return nil, err
				}
				b.mu.Lock()
				err = l.receivedReply(reply.GetSessions(), packed)
				move := l.mustMove
				b.mu.Unlock()
				if err != nil {
					return nil, err
				}
				if !move {
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
		b.mu.Lock()
		if b.streamCancel != nil {
			b.streamCancel() // ends the broken stream, and a replay still writing to it
		}
		replaying := b.replaying
		b.mu.Unlock()
		<-replaying
		b.mu.Lock()
		_ = b.start(l.replay()) // an error is the next attempt's
		b.mu.Unlock()
	}
}
