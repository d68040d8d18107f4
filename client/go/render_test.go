package parsetier_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	parsetier "github.com/parsetier/parsetier/client/go"
	pb "github.com/parsetier/parsetier/client/go/parsetierpb"
)

// Qwen3's generation prompt, the end of every chat prompt: <|im_start|>assistant\n.
var generationPrompt = []uint32{151644, 77091, 198}

func chatBody(t *testing.T, extra map[string]any) []byte {
	t.Helper()
	var tools []any
	if err := json.Unmarshal([]byte(weatherTools), &tools); err != nil {
		t.Fatal(err)
	}
	body := map[string]any{
		"model":      "served-name",
		"messages":   []any{map[string]any{"role": "user", "content": "Weather in Paris and Tokyo?"}},
		"tools":      tools,
		"max_tokens": 64,
	}
	for key, value := range extra {
		body[key] = value
	}
	data, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// Render and then Parse with the Open it returned, unchanged: the prompt ends in the model's
// generation prompt, the Open carries the request's tools and wire values, and the output parses
// into the calls the prompt offered.
func TestRenderThenParseWithItsOpen(t *testing.T) {
	client := connect(t)
	ctx := testContext(t)
	r, err := client.Render(ctx, "qwen3", parsetier.OpenAIChat, chatBody(t, nil),
		parsetier.RenderRequestID("go-render"), parsetier.RenderCreated(1700000000), parsetier.RenderPromptText())
	if err != nil {
		t.Fatalf("Render: %v", err)
	}
	if !slices.Equal(r.PromptTokenIDs[len(r.PromptTokenIDs)-3:], generationPrompt) {
		t.Errorf("the prompt ends %v, not in the generation prompt", r.PromptTokenIDs[len(r.PromptTokenIDs)-3:])
	}
	if !strings.Contains(r.PromptText, `"name": "get_weather"`) || !strings.HasSuffix(r.PromptText, "<|im_start|>assistant\n") {
		t.Errorf("the prompt text lacks the tools or the generation prompt: %q", r.PromptText)
	}
	open := r.Open
	if open.GetModel() != "qwen3" || open.GetRequestId() != "go-render" || !slices.Equal(open.GetPromptTokenIds(), r.PromptTokenIDs) {
		t.Errorf("Open: %v", open)
	}
	var tools []any
	if err := json.Unmarshal([]byte(open.GetToolsJson()), &tools); err != nil || len(tools) != 1 {
		t.Errorf("Open.ToolsJson %q: %v", open.GetToolsJson(), err)
	}
	wire := open.GetWire()
	if wire.GetDialect() != parsetier.OpenAIChat || wire.GetModel() != "served-name" || wire.GetCreated() != 1700000000 ||
		wire.GetPromptTokens() != uint32(len(r.PromptTokenIDs)) || !strings.HasPrefix(wire.GetResponseId(), "chatcmpl-") {
		t.Errorf("Open.Wire: %v", wire)
	}
	if r.Sampling.GetMaxTokens() != 64 || !slices.Contains(r.Sampling.GetStopTokenIds(), imEnd) || r.N() != 1 {
		t.Errorf("Sampling: %v", r.Sampling)
	}
	if r.Constraint != nil {
		t.Errorf("a constraint for a request that forces nothing: %v", r.Constraint)
	}

	final, _, err := client.ParseStream(ctx, open.GetModel(), onePerStep(qwen3Output), stopAtImEnd, parsetier.WithOpen(open))
	if err != nil {
		t.Fatalf("ParseStream with Render's Open: %v", err)
	}
	if !proto.Equal(final.GetMessage(), withCallIDs(wantMessage, final.GetMessage())) {
		t.Errorf("message %v, want %v", final.GetMessage(), wantMessage)
	}
	// Not streamed, the final result's wire bytes are the whole chat completion body.
	var body struct {
		ID      string `json:"id"`
		Model   string `json:"model"`
		Choices []struct {
			FinishReason string `json:"finish_reason"`
			Message      struct {
				ToolCalls []struct {
					Function struct{ Name, Arguments string } `json:"function"`
				} `json:"tool_calls"`
			} `json:"message"`
		} `json:"choices"`
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(final.GetWire(), &body); err != nil {
		t.Fatalf("Final.Wire %q: %v", final.GetWire(), err)
	}
	if body.ID != wire.GetResponseId() || body.Model != "served-name" || body.Usage.PromptTokens != len(r.PromptTokenIDs) ||
		len(body.Choices) != 1 || body.Choices[0].FinishReason != "tool_calls" || len(body.Choices[0].Message.ToolCalls) != 2 {
		t.Errorf("the chat completion body: %s", final.GetWire())
	}
}

// withCallIDs is want with got's tool call ids (they derive from the request id).
func withCallIDs(want, got *pb.AssistantMessage) *pb.AssistantMessage {
	want = proto.CloneOf(want)
	for i, call := range want.GetToolCalls() {
		if i < len(got.GetToolCalls()) {
			call.Id = got.GetToolCalls()[i].GetId()
		}
	}
	return want
}

// Every dialect renders; an Anthropic body's Open answers in Anthropic's bytes.
func TestRenderAnthropicMessages(t *testing.T) {
	client := connect(t)
	ctx := testContext(t)
	body := `{"model": "claude-ish", "max_tokens": 100, "system": "Be brief.",
		"tools": [{"name": "get_weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}],
		"messages": [{"role": "user", "content": [{"type": "text", "text": "Weather in Paris and Tokyo?"}]}]}`
	r, err := client.Render(ctx, "qwen3", parsetier.AnthropicMessages, []byte(body))
	if err != nil {
		t.Fatalf("Render: %v", err)
	}
	if r.Open.GetWire().GetDialect() != parsetier.AnthropicMessages || r.Sampling.GetMaxTokens() != 100 {
		t.Fatalf("Open %v, Sampling %v", r.Open, r.Sampling)
	}
	once, err := client.ParseOnce(ctx, r.Open.GetModel(), qwen3Output, stopAtImEnd, parsetier.WithOpen(r.Open))
	if err != nil {
		t.Fatalf("ParseOnce: %v", err)
	}
	var message struct {
		Type       string `json:"type"`
		StopReason string `json:"stop_reason"`
		Content    []struct {
			Type  string         `json:"type"`
			Input map[string]any `json:"input"`
		} `json:"content"`
	}
	if err := json.Unmarshal(once.GetFinal().GetWire(), &message); err != nil {
		t.Fatal(err)
	}
	kinds := []string{}
	for _, block := range message.Content {
		kinds = append(kinds, block.Type)
	}
	if message.Type != "message" || message.StopReason != "tool_use" ||
		!slices.Equal(kinds, []string{"thinking", "text", "tool_use", "tool_use"}) || message.Content[2].Input["city"] != "Paris" {
		t.Errorf("the Anthropic message: %s", once.GetFinal().GetWire())
	}
}

// n choices are n sessions: Choice(i) is the Open with its choice index. A forced tool comes with
// the constraint the engine decodes under.
func TestRenderChoicesAndConstraint(t *testing.T) {
	client := connect(t)
	r, err := client.Render(testContext(t), "qwen3", parsetier.OpenAIChat, chatBody(t, map[string]any{
		"n": 3, "tool_choice": "required",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if r.N() != 3 || r.Choice(2).GetChoiceIndex() != 2 || r.Open.GetChoiceIndex() != 0 {
		t.Errorf("N %d, Choice(2) %v", r.N(), r.Choice(2))
	}
	if r.Constraint == nil || r.Constraint.GetLarkGrammar() == "" {
		t.Errorf("a required tool without its constraint: %v", r.Constraint)
	}
}

// Bad bodies are the request's own errors, with the error in the request's dialect to forward.
func TestRenderErrors(t *testing.T) {
	client := connect(t)
	ctx := testContext(t)
	_, err := client.Render(ctx, "no-such-model", parsetier.OpenAIChat, chatBody(t, nil))
	if status.Code(err) != codes.NotFound || parsetier.HTTPStatus(err) != http.StatusNotFound {
		t.Errorf("unknown model: %v", err)
	}
	image := map[string]any{"role": "user", "content": []any{map[string]any{
		"type": "image_url", "image_url": map[string]any{"url": "data:image/png;base64,AAAA"}}}}
	_, err = client.Render(ctx, "qwen3", parsetier.OpenAIChat, chatBody(t, map[string]any{"messages": []any{image}}))
	if status.Code(err) != codes.InvalidArgument || parsetier.HTTPStatus(err) != http.StatusBadRequest {
		t.Fatalf("an image for a text model: %v", err)
	}
	var body struct {
		Error struct{ Message, Type, Code string } `json:"error"`
	}
	if err := json.Unmarshal(parsetier.WireError(err), &body); err != nil || body.Error.Type != "invalid_request_error" ||
		!strings.Contains(body.Error.Message, "messages[0].content[0]") {
		t.Errorf("the error body %q (%v)", parsetier.WireError(err), err)
	}
	_, err = client.Render(ctx, "qwen3", parsetier.OpenAIChat, []byte("{not json"))
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("malformed JSON: %v", err)
	}
}
