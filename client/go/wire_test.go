package parsetier_test

import (
	"bytes"
	"encoding/json"
	"slices"
	"sort"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

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
	for _, data := range sseData(all) {
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

// TestWireError: a session opened WithWire that ends with a status carries the error in its
// dialect: Session.Wire yields it just before the error, WireError reads it from the error of
// Open, Recv and ParseOnce, and status.Code still sees the server's code.
func TestWireError(t *testing.T) {
	client := connect(t)
	ctx := testContext(t)
	wire := &pb.WireOptions{Dialect: pb.WireDialect_WIRE_DIALECT_OPENAI_CHAT, ResponseId: "chatcmpl-e", Stream: true}
	session, err := client.Open(ctx, "qwen3", parsetier.WithOutput(pb.OutputKind_OUTPUT_KIND_FINAL_ONLY),
		parsetier.WithWire(wire))
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for _, step := range onePerStep(qwen3Output[:6]) {
			_ = session.Send(step)
		}
		_ = session.Send([]uint32{10_000_000})
	}()
	var pieces [][]byte
	var last error
	for piece, err := range session.Wire() {
		if err != nil {
			last = err
			break
		}
		pieces = append(pieces, piece)
	}
	if status.Code(last) != codes.InvalidArgument || len(pieces) < 2 {
		t.Fatalf("%d pieces, error %v", len(pieces), last)
	}
	failed := pieces[len(pieces)-1]
	if !bytes.Equal(failed, parsetier.WireError(last)) || !bytes.HasPrefix(failed, []byte(`data: {"error":`)) ||
		!bytes.HasSuffix(failed, []byte("data: [DONE]\n\n")) || !bytes.Contains(failed, []byte("is not in the vocabulary")) {
		t.Fatalf("error bytes %q", failed)
	}

	wire.Stream = false
	_, err = client.Open(ctx, "no-such-model", parsetier.WithWire(wire))
	var body struct {
		Error struct{ Type, Message string } `json:"error"`
	}
	if status.Code(err) != codes.NotFound || parsetier.HTTPStatus(err) != 404 ||
		json.Unmarshal(parsetier.WireError(err), &body) != nil ||
		body.Error.Type != "not_found_error" || body.Error.Message != status.Convert(err).Message() {
		t.Fatalf("open: %v, %q", err, parsetier.WireError(err))
	}
	_, err = client.ParseOnce(ctx, "qwen3", []uint32{10_000_000}, stopAtImEnd, parsetier.WithWire(wire))
	if status.Code(err) != codes.InvalidArgument || json.Unmarshal(parsetier.WireError(err), &body) != nil ||
		body.Error.Type != "invalid_request_error" {
		t.Fatalf("ParseOnce: %v, %q", err, parsetier.WireError(err))
	}
	if _, err = client.ParseOnce(ctx, "qwen3", []uint32{10_000_000}, stopAtImEnd); parsetier.WireError(err) != nil {
		t.Fatalf("no wire asked, yet %q", parsetier.WireError(err))
	}
}

// TestWireJoin: two choices of one chat request over a ParseBatch stream, their outputs fed to
// WireJoin with choice 1 ahead of choice 0: the joined stream starts every choice in index
// order, ends with one usage chunk counting both and one [DONE]; joined bodies hold both choices.
func TestWireJoin(t *testing.T) {
	client := connect(t)
	ctx := testContext(t)
	for _, stream := range []bool{true, false} {
		batch, err := client.Batch(ctx)
		if err != nil {
			t.Fatal(err)
		}
		join := parsetier.NewWireJoin(2, stream)
		wire := &pb.WireOptions{
			Dialect: pb.WireDialect_WIRE_DIALECT_OPENAI_CHAT, ResponseId: "chatcmpl-n", Stream: stream, IncludeUsage: true,
		}
		keys := []string{"c0", "c1"}
		for i, key := range keys {
			batch.Open(key, "qwen3", parsetier.WithOutput(pb.OutputKind_OUTPUT_KIND_FINAL_ONLY), parsetier.WithWire(wire),
				parsetier.WithRequestID("go-join"), parsetier.WithChoice(uint32(i)), parsetier.WithToolsJSON(weatherTools))
		}
		var out []byte
		usage := map[string]*pb.Usage{}
		feed := func(outputs []*pb.SessionOutput) {
			sort.Slice(outputs, func(a, b int) bool { return outputs[a].GetKey() > outputs[b].GetKey() }) // c1 first
			for _, output := range outputs {
				piece, err := join.AddOutput(slices.Index(keys, output.GetKey()), output)
				if err != nil {
					t.Fatal(err)
				}
				out = append(out, piece...)
				if output.GetFinal() != nil {
					usage[output.GetKey()] = output.GetFinal().GetUsage()
				}
			}
		}
		for _, step := range onePerStep(qwen3Output) {
			batch.Feed("c0", step)
			batch.Feed("c1", step)
			outputs, err := batch.Step()
			if err != nil {
				t.Fatal(err)
			}
			feed(outputs)
		}
		batch.Finish("c0", stopAtImEnd)
		outputs, err := batch.Step()
		if err != nil {
			t.Fatal(err)
		}
		feed(outputs)
		last := stopAtImEnd
		last.OtherChoicesUsage = usage["c0"]
		batch.Finish("c1", last)
		if outputs, err = batch.Step(); err != nil {
			t.Fatal(err)
		}
		feed(outputs)
		_ = batch.Close()
		if !join.Ended() {
			t.Fatal("the join did not end")
		}
		total := usage["c0"].GetCompletionTokens() + usage["c1"].GetCompletionTokens()
		if stream {
			checkJoinedStream(t, out, total)
			continue
		}
		var body struct {
			Choices []struct{ Index int } `json:"choices"`
			Usage   struct {
				CompletionTokens uint32 `json:"completion_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal(out, &body); err != nil || len(body.Choices) != 2 || body.Choices[0].Index != 0 ||
			body.Choices[1].Index != 1 || body.Usage.CompletionTokens != total {
			t.Fatalf("joined body %s: %v", out, err)
		}
	}
}

func checkJoinedStream(t *testing.T, out []byte, total uint32) {
	t.Helper()
	var seen []int
	usages := 0
	events := strings.Split(strings.TrimSpace(string(out)), "\n\n")
	if events[len(events)-1] != "data: [DONE]" || strings.Count(string(out), "[DONE]") != 1 {
		t.Fatalf("the joined stream does not end with one [DONE]: %q", out[max(0, len(out)-200):])
	}
	for _, event := range events[:len(events)-1] {
		var chunk struct {
			Choices []struct{ Index int } `json:"choices"`
			Usage   *struct {
				CompletionTokens uint32 `json:"completion_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal([]byte(strings.TrimPrefix(event, "data: ")), &chunk); err != nil {
			t.Fatal(err)
		}
		if chunk.Usage != nil {
			usages++
			if chunk.Usage.CompletionTokens != total {
				t.Fatalf("usage %d, want %d", chunk.Usage.CompletionTokens, total)
			}
		}
		for _, choice := range chunk.Choices {
			if !slices.Contains(seen, choice.Index) {
				seen = append(seen, choice.Index)
			}
		}
	}
	if !slices.Equal(seen, []int{0, 1}) || usages != 1 {
		t.Fatalf("choices first seen in order %v, %d usage chunks", seen, usages)
	}
}

// One choice's bytes pass through unchanged, whatever the dialect: a gateway joins every
// request's sessions with one WireJoin, n = 1 included.
func TestWireJoinOneChoicePassesThrough(t *testing.T) {
	body := []byte(`{"id":"msg_1","type":"message","content":[{"type":"text","text":"<&>"}]}`)
	join := parsetier.NewWireJoin(1, false)
	out, err := join.AddResponse(0, &pb.ParseResponse{Final: &pb.Final{Wire: body}})
	if err != nil || !bytes.Equal(out, body) || !join.Ended() {
		t.Fatalf("joined %q, %v; want the body unchanged", out, err)
	}
	events := parsetier.NewWireJoin(1, true)
	first, _ := events.AddResponse(0, &pb.ParseResponse{Wire: []byte("event: a\n\n")})
	last, _ := events.AddResponse(0, &pb.ParseResponse{Wire: []byte("event: b\n\n"), Final: &pb.Final{Wire: []byte("event: c\n\n")}})
	if string(first)+string(last) != "event: a\n\nevent: b\n\nevent: c\n\n" || !events.Ended() {
		t.Fatalf("streamed %q %q", first, last)
	}
}

// sseData is the JSON of each event of a streamed OpenAI body, in order, the closing [DONE] left out.
func sseData(stream []byte) []string {
	var out []string
	for _, event := range strings.Split(strings.TrimSpace(string(stream)), "\n\n") {
		if data := strings.TrimPrefix(event, "data: "); data != "[DONE]" {
			out = append(out, data)
		}
	}
	return out
}
