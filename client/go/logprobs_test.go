package parsetier_test

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"

	parsetier "github.com/parsetier/parsetier/client/go"
	pb "github.com/parsetier/parsetier/client/go/parsetierpb"
)

// emojiOutput is Qwen3's encoding of "Hi 你好 🎉👍🏽": 11162, 236, 231 are the bytes of " 🎉"
// split over three tokens (" \xf0\x9f", "\x8e", "\x89"), each of which decodes alone as U+FFFD.
var emojiOutput = []uint32{13048, 220, 108386, 11162, 236, 231, 144349, 145375}

// openAILogprob is one entry of OpenAI chat's logprobs.content (and of its top_logprobs), as a
// client of the API reads it.
type openAILogprob struct {
	Token       string          `json:"token"`
	Logprob     float32         `json:"logprob"`
	Bytes       []int           `json:"bytes"`
	TopLogprobs []openAILogprob `json:"top_logprobs"`
}

// TestLogprobStepsResolve: logprob steps come back resolved on the deltas (typed, the proto's
// TokenLogprob), and a session opened WithWire carries the same numbers in OpenAI chat's JSON,
// written by the server: the client shapes none of it.
func TestLogprobStepsResolve(t *testing.T) {
	client := connect(t)
	ctx := testContext(t)
	chat := &pb.WireOptions{Dialect: pb.WireDialect_WIRE_DIALECT_OPENAI_CHAT, ResponseId: "chatcmpl-lp", Stream: true}
	session, err := client.Open(ctx, "qwen3", parsetier.WithReturnTokenIDs(), parsetier.WithWire(chat))
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range emojiOutput { // one token per step; the emoji is split over three steps
		top := [][]parsetier.Alternative{{{TokenID: id, Logprob: -0.25}, {TokenID: 13048, Logprob: -3}}}
		if err := session.SendSteps(parsetier.LogprobStep([]uint32{id}, []float32{-float32(i) / 4}, top)); err != nil {
			t.Fatal(err)
		}
	}
	if err := session.Finish(parsetier.Stop, parsetier.MatchedStop{}); err != nil {
		t.Fatal(err)
	}
	var deltas []*pb.Delta
	var wire []byte
	for reply, err := range session.Messages() {
		if err != nil {
			t.Fatal(err)
		}
		deltas = append(deltas, reply.GetDeltas()...)
		wire = append(append(wire, reply.GetWire()...), reply.GetFinal().GetWire()...)
	}
	logprobs := parsetier.Logprobs(deltas)
	if len(logprobs) != len(emojiOutput) {
		t.Fatalf("%d logprobs for %d tokens", len(logprobs), len(emojiOutput))
	}
	var tokens []string
	var all []byte
	for i, lp := range logprobs {
		tokens = append(tokens, lp.GetToken())
		all = append(all, lp.GetBytes()...)
		if lp.GetTokenId() != emojiOutput[i] || lp.GetLogprob() != -float32(i)/4 {
			t.Errorf("entry %d: id %d, logprob %v", i, lp.GetTokenId(), lp.GetLogprob())
		}
	}
	if got := strings.Join(tokens, "|"); got != "Hi| |你好| ||🎉|👍|🏽" {
		t.Errorf("tokens %q", got)
	}
	if string(all) != "Hi 你好 🎉👍🏽" {
		t.Errorf("bytes join to %q", all)
	}
	if top := logprobs[5].GetTopLogprobs(); top[0].GetToken() != "🎉" || top[1].GetToken() != "\ufffdHi" {
		t.Errorf("alternatives after the carried bytes: %+v", top)
	}
	var ids []uint32
	for _, d := range deltas {
		ids = append(ids, d.GetTokenIds()...)
	}
	if len(ids) != len(emojiOutput) {
		t.Errorf("return_token_ids gave %v", ids)
	}

	// The chunks' logprobs.content, joined, are the same entries in OpenAI chat's shape.
	var content []openAILogprob
	for _, data := range sseData(wire) {
		var chunk struct {
			Choices []struct {
				Logprobs *struct {
					Content []openAILogprob `json:"content"`
				} `json:"logprobs"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(data), &chunk); err != nil {
			t.Fatalf("not JSON: %q: %v", data, err)
		}
		for _, choice := range chunk.Choices {
			if choice.Logprobs != nil {
				content = append(content, choice.Logprobs.Content...)
			}
		}
	}
	if len(content) != len(logprobs) {
		t.Fatalf("%d entries in the chunks for %d logprobs", len(content), len(logprobs))
	}
	for i, entry := range content {
		lp := logprobs[i]
		if entry.Token != lp.GetToken() || entry.Logprob != lp.GetLogprob() || !bytes.Equal(intBytes(entry.Bytes), lp.GetBytes()) {
			t.Errorf("chunk entry %d %+v, want %v", i, entry, lp)
		}
		for j, top := range entry.TopLogprobs {
			want := lp.GetTopLogprobs()[j]
			if top.Token != want.GetToken() || top.Logprob != want.GetLogprob() || !bytes.Equal(intBytes(top.Bytes), want.GetBytes()) {
				t.Errorf("chunk entry %d alternative %d %+v, want %v", i, j, top, want)
			}
		}
	}
}

// TestCompletionLogprobsInTheWire: a completion session opened WithWire in OpenAI completions'
// dialect gets the four logprob lists in the body the server writes, a masked token's -inf as
// -9999.0 (JSON has no infinity), offsets in code points (RuneOffset slices the text there).
func TestCompletionLogprobsInTheWire(t *testing.T) {
	client := connect(t)
	ctx := testContext(t)
	wire := &pb.WireOptions{Dialect: pb.WireDialect_WIRE_DIALECT_OPENAI_COMPLETIONS, ResponseId: "cmpl-lp"}
	session, err := client.Open(ctx, "qwen3", parsetier.WithCompletion(true), parsetier.WithWire(wire),
		parsetier.WithOutput(pb.OutputKind_OUTPUT_KIND_FINAL_ONLY))
	if err != nil {
		t.Fatal(err)
	}
	masked := float32(math.Inf(-1))
	for i, id := range emojiOutput {
		logprob := []float32{-0.5}
		if i == 1 {
			logprob[0] = masked
		}
		top := [][]parsetier.Alternative{{{TokenID: id, Logprob: -0.5}, {TokenID: 13048, Logprob: masked}}}
		if err := session.SendSteps(parsetier.LogprobStep([]uint32{id}, logprob, top)); err != nil {
			t.Fatal(err)
		}
	}
	if err := session.Finish(parsetier.Length, parsetier.MatchedStop{}); err != nil {
		t.Fatal(err)
	}
	var body []byte
	for piece, err := range session.Wire() {
		if err != nil {
			t.Fatal(err)
		}
		body = append(body, piece...)
	}
	if bytes.Contains(body, []byte("Infinity")) || !bytes.Contains(body, []byte("-9999.0")) {
		t.Fatalf("-inf is not written -9999.0: %s", body)
	}
	var completion struct {
		Choices []struct {
			Text     string `json:"text"`
			Logprobs struct {
				Tokens        []string             `json:"tokens"`
				TokenLogprobs []float64            `json:"token_logprobs"`
				TopLogprobs   []map[string]float64 `json:"top_logprobs"`
				TextOffset    []int                `json:"text_offset"`
			} `json:"logprobs"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(body, &completion); err != nil || len(completion.Choices) != 1 {
		t.Fatalf("body %s: %v", body, err)
	}
	choice := completion.Choices[0]
	lp := choice.Logprobs
	if choice.Text != "Hi 你好 🎉👍🏽" || strings.Join(lp.Tokens, "") != choice.Text || len(lp.Tokens) != len(emojiOutput) {
		t.Fatalf("text %q, tokens %q", choice.Text, lp.Tokens)
	}
	if lp.TokenLogprobs[0] != -0.5 || lp.TokenLogprobs[1] != -9999.0 {
		t.Errorf("token_logprobs %v", lp.TokenLogprobs)
	}
	for i, offset := range lp.TextOffset {
		if at := parsetier.RuneOffset(choice.Text, offset); at < 0 || !strings.HasPrefix(choice.Text[at:], lp.Tokens[i]) {
			t.Errorf("text_offset %d does not point at token %d %q", offset, i, lp.Tokens[i])
		}
		if lp.TopLogprobs[i]["\ufffdHi"] != -9999.0 && lp.TopLogprobs[i]["Hi"] != -9999.0 {
			t.Errorf("top_logprobs %d: %v", i, lp.TopLogprobs[i])
		}
	}
}

func intBytes(values []int) []byte {
	out := make([]byte, len(values))
	for i, v := range values {
		out[i] = byte(v)
	}
	return out
}

// TestCompletionSessions runs WithCompletion, WithStop and WithChoice against the live server.
func TestCompletionSessions(t *testing.T) {
	client := connect(t)
	ctx := testContext(t)
	content := func(deltas []*pb.Delta) string {
		var b strings.Builder
		for _, d := range deltas {
			b.WriteString(d.GetContent())
		}
		return b.String()
	}
	hello := []uint32{9707, 220, 108386} // "Hello 你好"

	// EOS with neither a finish reason nor a stop id: its text was held back, and is dropped.
	final, deltas, err := client.ParseStream(ctx, "qwen3", [][]uint32{hello[:2], hello[2:], {imEnd}},
		parsetier.Finish{}, parsetier.WithCompletion(false))
	if err != nil {
		t.Fatal(err)
	}
	if got := content(deltas); got != "Hello 你好" || final.GetMessage().GetContent() != got {
		t.Errorf("completion text %q, final %q", got, final.GetMessage().GetContent())
	}

	// No format in a completion: <think> (an added, non-special token) is plain text.
	_, deltas, err = client.ParseStream(ctx, "qwen3", [][]uint32{{151667}, hello},
		parsetier.Finish{Reason: parsetier.Length}, parsetier.WithCompletion(true))
	if err != nil {
		t.Fatal(err)
	}
	if got := content(deltas); got != "<think>Hello 你好" {
		t.Errorf("completion with a marker: %q", got)
	}

	// A listed stop string is never streamed, and Finish cuts the text at it.
	steps := [][]uint32{{603}, {1378}, {11176}, {2326}} // "one", " two", " END", " three"
	_, deltas, err = client.ParseStream(ctx, "qwen3", steps,
		parsetier.Finish{Reason: parsetier.Stop, Matched: parsetier.StopString("END")},
		parsetier.WithCompletion(true), parsetier.WithStop([]string{"END"}, nil))
	if err != nil {
		t.Fatal(err)
	}
	if got := content(deltas); got != "one two " {
		t.Errorf("stop string: %q", got)
	}

	// n > 1: the choices of one request get different tool call ids, each the same on every run.
	callID := func(choice uint32) string {
		final, _, err := client.ParseStream(ctx, "qwen3", [][]uint32{qwen3Output}, parsetier.Finish{},
			parsetier.WithToolsJSON(weatherTools), parsetier.WithRequestID("go-choices"),
			parsetier.WithChoice(choice))
		if err != nil {
			t.Fatal(err)
		}
		return final.GetMessage().GetToolCalls()[0].GetId()
	}
	if first, second := callID(0), callID(1); first == second || callID(1) != second {
		t.Errorf("choice call ids %q, %q", first, second)
	}
}
