package parsetier_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	parsetier "github.com/parsetier/parsetier/client/go"
	pb "github.com/parsetier/parsetier/client/go/parsetierpb"
)

// TestSessionWire: a session opened WithWire yields, through Session.Wire, the OpenAI chat chunks
// the server rendered, reply by reply; joined they rebuild the final message, and a body
// (stream false) is one JSON document in the final result.
func TestSessionWire(t *testing.T) {
	client := connect(t)
	ctx := testContext(t)
	wire := &pb.WireOptions{
		Dialect: pb.WireDialect_WIRE_DIALECT_OPENAI_CHAT, ResponseId: "chatcmpl-go", Model: "served",
		Stream: true, IncludeUsage: true,
	}
	session, err := client.Open(ctx, "qwen3", parsetier.WithToolsJSON(weatherTools),
		parsetier.WithOutput(pb.OutputKind_OUTPUT_KIND_FINAL_ONLY), parsetier.WithWire(wire))
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for _, step := range onePerStep(qwen3Output) {
			if session.Send(step) != nil {
				return
			}
		}
		_ = session.Finish(parsetier.Stop, parsetier.StopToken(imEnd))
	}()
	var pieces [][]byte
	for piece, err := range session.Wire() {
		if err != nil {
			t.Fatal(err)
		}
		pieces = append(pieces, piece)
	}
	if len(pieces) < 10 {
		t.Fatalf("%d pieces: the bytes should come reply by reply", len(pieces))
	}
	all := bytes.Join(pieces, nil)
	if !bytes.HasSuffix(all, []byte("data: [DONE]\n\n")) {
		t.Fatalf("the stream does not end with [DONE]: %q", all[max(0, len(all)-80):])
	}
	var content, reasoning strings.Builder
	arguments := map[int]*strings.Builder{}
	finish := ""
	for _, event := range strings.Split(strings.TrimSpace(string(all)), "\n\n") {
		data := strings.TrimPrefix(event, "data: ")
		if data == "[DONE]" {
			continue
		}
		var chunk struct {
			Choices []struct {
				Delta struct {
					Content          string `json:"content"`
					ReasoningContent string `json:"reasoning_content"`
					ToolCalls        []struct {
						Index    int `json:"index"`
						Function struct {
							Arguments string `json:"arguments"`
						} `json:"function"`
					} `json:"tool_calls"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(data), &chunk); err != nil {
			t.Fatalf("not JSON: %q: %v", data, err)
		}
		for _, choice := range chunk.Choices {
			content.WriteString(choice.Delta.Content)
			reasoning.WriteString(choice.Delta.ReasoningContent)
			for _, call := range choice.Delta.ToolCalls {
				if arguments[call.Index] == nil {
					arguments[call.Index] = &strings.Builder{}
				}
				arguments[call.Index].WriteString(call.Function.Arguments)
			}
			if choice.FinishReason != nil {
				finish = *choice.FinishReason
			}
		}
	}
	if content.String() != wantMessage.Content || reasoning.String() != wantMessage.Reasoning {
		t.Fatalf("content %q, reasoning %q", content.String(), reasoning.String())
	}
	for i, call := range wantMessage.ToolCalls {
		if arguments[i] == nil || arguments[i].String() != call.Arguments {
			t.Fatalf("call %d arguments %v, want %q", i, arguments[i], call.Arguments)
		}
	}
	if finish != "tool_calls" {
		t.Fatalf("finish_reason %q", finish)
	}

	wire.Stream = false
	once, err := client.ParseOnce(ctx, "qwen3", qwen3Output, stopAtImEnd,
		parsetier.WithToolsJSON(weatherTools), parsetier.WithWire(wire))
	if err != nil {
		t.Fatal(err)
	}
	var body map[string]any
	if err := json.Unmarshal(once.GetFinal().GetWire(), &body); err != nil || body["object"] != "chat.completion" {
		t.Fatalf("body %q: %v", once.GetFinal().GetWire(), err)
	}
}
