package parsetier

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	pb "github.com/parsetier/parsetier/client/go/parsetierpb"
)

// The dialects Render reads a request body in; each is also the dialect the session's wire bytes
// answer in (Open.Wire.Dialect).
const (
	OpenAIChat        = pb.WireDialect_WIRE_DIALECT_OPENAI_CHAT        // /v1/chat/completions
	OpenAICompletions = pb.WireDialect_WIRE_DIALECT_OPENAI_COMPLETIONS // /v1/completions
	OpenAIResponses   = pb.WireDialect_WIRE_DIALECT_OPENAI_RESPONSES   // /v1/responses
	AnthropicMessages = pb.WireDialect_WIRE_DIALECT_ANTHROPIC_MESSAGES // /v1/messages
)

// RenderOption sets a field of the RenderRequest (the request id, response id, created time, a
// request template, the prompt text); any field the helpers do not cover can be set directly.
type RenderOption func(*pb.RenderRequest)

// RenderRequestID is the caller's request id: it becomes Open.RequestId (tool call ids derive
// from it) and, without RenderResponseID, the seed of the response id.
func RenderRequestID(id string) RenderOption { return func(r *pb.RenderRequest) { r.RequestId = id } }

// RenderResponseID is the id the output bodies show (chatcmpl-…, msg_…, resp_…).
func RenderResponseID(id string) RenderOption {
	return func(r *pb.RenderRequest) { r.ResponseId = id }
}

// RenderCreated is the Unix time the output bodies show as created.
func RenderCreated(unix int64) RenderOption { return func(r *pb.RenderRequest) { r.Created = unix } }

// RenderChatTemplate renders with this Jinja template instead of the model's; the server refuses
// it (codes.PermissionDenied) unless it runs with --trust-request-templates.
func RenderChatTemplate(template string) RenderOption {
	return func(r *pb.RenderRequest) { r.ChatTemplate = template }
}

// RenderPromptText also returns the rendered prompt text (Rendered.PromptText), for debugging.
func RenderPromptText() RenderOption { return func(r *pb.RenderRequest) { r.ReturnPromptText = true } }

// Rendered is a rendered request: what the engine generates from and the output session's Open.
// Give PromptTokenIDs and Sampling to the engine (and Constraint, when set, to its sampler), then
// open the output session with the Open unchanged:
//
//	session, err := client.Open(ctx, r.Open.GetModel(), parsetier.WithOpen(r.Open))
//
// (r.Choice(i) for choice i of a request with n > 1; every choice is a session of its own).
type Rendered struct {
	// PromptTokenIDs is the prompt: the model's own chat template applied to the request and
	// tokenized with its real tokenizer.
	PromptTokenIDs []uint32
	// Open is the output session's Open: model, request id, tools, tool choice, thinking, the
	// prompt's tail, stop strings and ids, and Wire (the request's own dialect, stream, model,
	// response id, prompt token count). Its Output is unset (deltas): a gateway that forwards
	// only the wire bytes may set OUTPUT_KIND_FINAL_ONLY.
	Open *pb.Open
	// Sampling is what the engine samples with (max tokens, temperature, stop ids, n, ...).
	Sampling *pb.SamplingParams
	// Constraint is the decoding constraint when the request forces a tool or asks for a JSON
	// format (BuildConstraint's answer); nil otherwise.
	Constraint *pb.BuildConstraintResponse
	// PromptText is the prompt's text, when RenderPromptText asked for it.
	PromptText string
}

// N is how many choices the request asked for (n; 1 when unset).
func (r *Rendered) N() int { return max(int(r.Sampling.GetN()), 1) }

// Choice is the Open of choice i (0 .. N()-1): a copy of Open with its ChoiceIndex set.
func (r *Rendered) Choice(i int) *pb.Open {
	open := proto.CloneOf(r.Open)
	open.ChoiceIndex = uint32(i)
	return open
}

// Render turns an API request body (JSON, as the gateway received it) in dialect into the
// prompt's token ids, the sampling parameters and the Open of its output session, rendered for
// model with the model's own chat template (docs/render.md). A bad body is codes.InvalidArgument
// naming its JSON path; an unknown model codes.NotFound; a model without a template
// codes.FailedPrecondition. When the server sends the error in the request's dialect,
// WireError(err) is that error body, to forward with HTTPStatus(err).
func (c *Client) Render(ctx context.Context, model string, dialect pb.WireDialect, body []byte,
	opts ...RenderOption) (*Rendered, error) {
	request := &pb.RenderRequest{Model: model, Dialect: dialect, RequestJson: body}
	for _, opt := range opts {
		opt(request)
	}
	var trailer metadata.MD
	reply, err := c.stub.Render(ctx, request, grpc.Trailer(&trailer))
	if err != nil {
		return nil, withWire(err, trailer)
	}
	rendered := &Rendered{
		PromptTokenIDs: reply.GetPromptTokenIds(),
		Open:           reply.GetOpen(),
		Sampling:       reply.GetSampling(),
		Constraint:     reply.GetConstraint(),
		PromptText:     reply.GetPromptText(),
	}
	if rendered.Open == nil {
		rendered.Open = &pb.Open{}
	}
	if rendered.Sampling == nil {
		rendered.Sampling = &pb.SamplingParams{}
	}
	return rendered, nil
}

// WithOpen starts from a whole Open, such as Rendered.Open or Rendered.Choice(i): every field
// (the model too) is a copy of open's, and options after it change that copy. It suits Open,
// ParseStream, ParseOnce, Batch.Open and BuildConstraint alike.
func WithOpen(open *pb.Open) OpenOption {
	return func(o *pb.Open) {
		proto.Reset(o)
		proto.Merge(o, open)
	}
}
