package parsetier

import (
	pb "github.com/parsetier/parsetier/client/go/parsetierpb"
)

// Alternative is one top-k entry the generate side reports at a position: an id and its logprob.
type Alternative struct {
	TokenID uint32
	Logprob float32
}

// LogprobStep builds an id step carrying its logprobs: one logprob per id, and per id the same
// number of alternatives (top[i] for tokenIDs[i], best first; nil for none). The server resolves
// every id to its text and bytes and puts them on the delta the step produced (Delta.Logprobs).
// Send it with Session.SendSteps.
func LogprobStep(tokenIDs []uint32, logprobs []float32, top [][]Alternative) *pb.Step {
	lp := &pb.StepLogprobs{TokenLogprobs: logprobs}
	for _, position := range top {
		for _, alt := range position {
			lp.TopTokenIds = append(lp.TopTokenIds, alt.TokenID)
			lp.TopLogprobs = append(lp.TopLogprobs, alt.Logprob)
		}
	}
	return &pb.Step{TokenIds: tokenIDs, Logprobs: lp}
}

// SendSteps sends ready-made steps (LogprobStep's, or text steps) in one message.
func (s *Session) SendSteps(steps ...*pb.Step) error {
	return s.put(&pb.ParseRequest{Steps: steps}, false)
}

// Logprobs gathers the resolved logprobs of deltas, in order (the session's, or one chunk's).
// OpenAI's JSON shapes of them are the server's to write: open the session WithWire (OpenAI
// chat or completions) and forward its wire bytes, which carry them.
func Logprobs(deltas []*pb.Delta) []*pb.TokenLogprob {
	var out []*pb.TokenLogprob
	for _, d := range deltas {
		out = append(out, d.GetLogprobs()...)
	}
	return out
}

// RuneOffset is the byte index in text of a code-point offset (TokenLogprob.TextOffset), for
// slicing a Go string at a token.
func RuneOffset(text string, codePoints int) int {
	for i := range text {
		if codePoints == 0 {
			return i
		}
		codePoints--
	}
	if codePoints == 0 {
		return len(text)
	}
	return -1
}

// WithReturnTokenIDs puts each step's ids on the delta it produced (Delta.TokenIds).
func WithReturnTokenIDs() OpenOption { return func(o *pb.Open) { o.ReturnTokenIds = true } }

// WithCompletion makes the session a completion (plain text, no format): skipSpecial is vLLM's
// skip_special_tokens (true is its default).
func WithCompletion(skipSpecial bool) OpenOption {
	return func(o *pb.Open) { o.Completion = &pb.CompletionOptions{SkipSpecialTokens: &skipSpecial} }
}

// WithChoice marks the session as choice index of a request with several choices (n > 1): open
// one session per choice with the same request id.
func WithChoice(index uint32) OpenOption { return func(o *pb.Open) { o.ChoiceIndex = index } }

// WithStop lists the request's stop strings and stop token ids, so a completion session can
// drop them at Finish without retracting streamed text.
func WithStop(strings []string, tokenIDs []uint32) OpenOption {
	return func(o *pb.Open) { o.Stop, o.StopTokenIds = strings, tokenIDs }
}
