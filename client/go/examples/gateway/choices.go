package main

import (
	"context"
	"sync"

	"google.golang.org/protobuf/proto"

	parsetier "github.com/parsetier/parsetier/client/go"
	pb "github.com/parsetier/parsetier/client/go/parsetierpb"
)

// choices coordinates the sessions of one request with n > 1 choices: the last choice to finish
// sends its Finish only once the other choices' final results have come, carrying their usage
// (Finish.OtherChoicesUsage), so that its closing bytes count every choice as the APIs report it.
type choices struct {
	mu     sync.Mutex
	n      int
	done   int       // choices whose engine output has ended
	last   int       // the choice that ended last; -1 before
	finals int       // the other choices' final results received
	usage  *pb.Usage // their usage, summed
	others chan struct{}
}

func newChoices(n int) *choices {
	c := &choices{n: n, last: -1, usage: &pb.Usage{}, others: make(chan struct{})}
	if n == 1 {
		close(c.others)
	}
	return c
}

// finish is choice i's Finish once its engine output has ended: the engine's, and for the last
// choice to end (of several) the others' usage, once their final results have come.
func (c *choices) finish(ctx context.Context, i int, finish parsetier.Finish) (parsetier.Finish, error) {
	c.mu.Lock()
	c.done++
	last := c.done == c.n
	if last {
		c.last = i
	}
	c.mu.Unlock()
	if !last || c.n == 1 {
		return finish, nil
	}
	select {
	case <-c.others:
	case <-ctx.Done():
		return finish, ctx.Err()
	}
	c.mu.Lock()
	finish.OtherChoicesUsage = proto.CloneOf(c.usage)
	c.mu.Unlock()
	return finish, nil
}

// ended records choice i's final usage, unless i is the last choice (its usage is its own).
func (c *choices) ended(i int, usage *pb.Usage) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.last == i || c.n == 1 {
		return
	}
	c.usage.CompletionTokens += usage.GetCompletionTokens()
	c.usage.ReasoningTokens += usage.GetReasoningTokens()
	c.finals++
	if c.finals == c.n-1 {
		close(c.others)
	}
}
