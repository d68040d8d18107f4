package parsetier

import pb "github.com/parsetier/parsetier/client/go/parsetierpb"

// Finish reasons a client may send. ToolCalls is output-only (the server turns Stop into it
// when tool calls were made), so it is not offered here.
const (
	Stop   = pb.FinishReason_FINISH_REASON_STOP
	Length = pb.FinishReason_FINISH_REASON_LENGTH
	Abort  = pb.FinishReason_FINISH_REASON_ABORT
)

// MatchedStop is what stopped generation: a stop token (StopToken), a stop string
// (StopString), or nothing (NoStop, the zero value). It is a value type rather than a
// *uint32 because token id 0 is a real token and "nothing matched" must stay expressible.
type MatchedStop struct {
	kind  stopKind
	token uint32
	text  string
}

type stopKind uint8

const (
	noStop stopKind = iota
	stopToken
	stopString
)

// NoStop says no stop token or string matched (a length limit, an abort, or an end the
// caller cannot name).
var NoStop = MatchedStop{kind: noStop}

// StopToken says generation stopped on the stop token id (e.g. Qwen3's <|im_end|>, 151645),
// whether or not that token was also sent as part of the last step.
func StopToken(id uint32) MatchedStop { return MatchedStop{kind: stopToken, token: id} }

// StopString says generation stopped because the stop string s matched.
func StopString(s string) MatchedStop { return MatchedStop{kind: stopString, text: s} }

// Finish is how an output ended. The zero value is a Stop with nothing matched, the server's
// default.
type Finish struct {
	Reason  pb.FinishReason
	Matched MatchedStop
	// OtherChoicesUsage: with Open.wire and n > 1, the sum of the other choices' Final.Usage,
	// for the last choice to finish, whose closing bytes then show the whole request's usage.
	OtherChoicesUsage *pb.Usage
}

func (f Finish) message() *pb.Finish {
	m := &pb.Finish{Reason: f.Reason, OtherChoicesUsage: f.OtherChoicesUsage}
	switch f.Matched.kind {
	case stopToken:
		m.MatchedStop = &pb.Finish_StopTokenId{StopTokenId: f.Matched.token}
	case stopString:
		m.MatchedStop = &pb.Finish_StopString{StopString: f.Matched.text}
	}
	return m
}

// OpenOption sets a field of the session's Open message. It is a plain function so that a
// caller can set any Open field the helpers below do not cover.
type OpenOption func(*pb.Open)

func openMessage(model string, opts []OpenOption) *pb.Open {
	open := &pb.Open{Model: model}
	for _, opt := range opts {
		opt(open)
	}
	return open
}

// WithToolsJSON offers tools as the OpenAI request's "tools" array, verbatim JSON text, which
// suits stacks that forward a chat-completions request without decoding it.
func WithToolsJSON(tools string) OpenOption { return func(o *pb.Open) { o.ToolsJson = tools } }

// WithToolChoice sets OpenAI's tool_choice: "auto", "none", "required", or the name of the one
// function the model must call.
func WithToolChoice(choice string) OpenOption {
	return func(o *pb.Open) {
		if mode, ok := toolChoiceModes[choice]; ok {
			o.ToolChoice = &pb.ToolChoice{Choice: &pb.ToolChoice_Mode{Mode: mode}}
		} else {
			o.ToolChoice = &pb.ToolChoice{Choice: &pb.ToolChoice_FunctionName{FunctionName: choice}}
		}
	}
}

var toolChoiceModes = map[string]pb.ToolChoiceMode{
	"auto":     pb.ToolChoiceMode_TOOL_CHOICE_MODE_AUTO,
	"none":     pb.ToolChoiceMode_TOOL_CHOICE_MODE_NONE,
	"required": pb.ToolChoiceMode_TOOL_CHOICE_MODE_REQUIRED,
}

// WithThinking tells the parser whether the prompt was rendered with the chat template's
// thinking switch on, which decides whether the output starts inside reasoning.
func WithThinking(on bool) OpenOption { return func(o *pb.Open) { o.Thinking = &on } }

// WithPromptTokenIDs passes the prompt's token ids (its tail is enough), from which the parser
// sees whether the prompt already opened or closed reasoning.
func WithPromptTokenIDs(ids []uint32) OpenOption {
	return func(o *pb.Open) { o.PromptTokenIds = ids }
}

// WithRequestID tags the session with the caller's request id; it only appears in server logs.
func WithRequestID(id string) OpenOption { return func(o *pb.Open) { o.RequestId = id } }

// WithOutput chooses what the server sends while the session runs (deltas by default; events,
// both, or nothing until the final result).
func WithOutput(kind pb.OutputKind) OpenOption { return func(o *pb.Open) { o.Output = kind } }

// WithCompleteToolCalls delivers each tool call as one delta once it is complete and its
// arguments are validated, instead of streaming argument fragments.
func WithCompleteToolCalls() OpenOption { return func(o *pb.Open) { o.CompleteToolCalls = true } }

// WithParallelToolCalls says whether the model may make several tool calls in one response
// (OpenAI's parallel_tool_calls; unset means true).
func WithParallelToolCalls(on bool) OpenOption {
	return func(o *pb.Open) { o.ParallelToolCalls = &on }
}

// WithWire has the server render the session's output as a public API's bytes (Open.wire): the
// dialect (OpenAI chat or completions, Anthropic Messages, OpenAI Responses) and the
// request-level values its bodies show. Every reply then carries them in GetWire() and the final
// result in Final.GetWire(); Session.Wire iterates them in order, ready to forward unchanged.
func WithWire(wire *pb.WireOptions) OpenOption { return func(o *pb.Open) { o.Wire = wire } }
