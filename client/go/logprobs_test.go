package parsetier_test

import (
	"encoding/json"
	"strings"
	"testing"

	parsetier "github.com/parsetier/parsetier/client/go"
	pb "github.com/parsetier/parsetier/client/go/parsetierpb"
)

// emojiOutput is Qwen3's encoding of "Hi 你好 🎉👍🏽": 11162, 236, 231 are the bytes of " 🎉"
// split over three tokens (" \xf0\x9f", "\x8e", "\x89"), each of which decodes alone as U+FFFD.
var emojiOutput = []uint32{13048, 220, 108386, 11162, 236, 231, 144349, 145375}

func TestLogprobStepsResolveInBothOpenAIShapes(t *testing.T) {
	client := connect(t)
	ctx := testContext(t)
	session, err := client.Open(ctx, "qwen3", parsetier.WithReturnTokenIDs())
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
	for delta, err := range session.Deltas() {
		if err != nil {
			t.Fatal(err)
		}
		deltas = append(deltas, delta)
	}
	logprobs := parsetier.Logprobs(deltas)
	if len(logprobs) != len(emojiOutput) {
		t.Fatalf("%d logprobs for %d tokens", len(logprobs), len(emojiOutput))
	}
	chat := parsetier.ToChat(logprobs)
	var tokens []string
	var all []byte
	for _, c := range chat.Content {
		tokens = append(tokens, c.Token)
		for _, b := range c.Bytes {
			all = append(all, byte(b))
		}
	}
	if got := strings.Join(tokens, "|"); got != "Hi| |你好| ||🎉|👍|🏽" {
		t.Errorf("tokens %q", got)
	}
	if string(all) != "Hi 你好 🎉👍🏽" {
		t.Errorf("bytes join to %q", all)
	}
	if top := chat.Content[5].TopLogprobs; top[0].Token != "🎉" || top[1].Token != "\ufffdHi" {
		t.Errorf("alternatives after the carried bytes: %+v", top)
	}
	completion := parsetier.ToCompletion(logprobs, 0)
	text := strings.Join(completion.Tokens, "")
	for i, offset := range completion.TextOffset {
		if !strings.HasPrefix(text[parsetier.RuneOffset(text, offset):], completion.Tokens[i]) {
			t.Errorf("text_offset %d does not point at token %d %q", offset, i, completion.Tokens[i])
		}
	}
	if _, err := json.Marshal(completion); err != nil {
		t.Error(err)
	}
	var ids []uint32
	for _, d := range deltas {
		ids = append(ids, d.GetTokenIds()...)
	}
	if len(ids) != len(emojiOutput) {
		t.Errorf("return_token_ids gave %v", ids)
	}
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
