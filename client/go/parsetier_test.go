package parsetier_test

// These tests talk to a real parsetier server, which TestMain (server_test.go) provides.

import (
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	parsetier "github.com/parsetier/parsetier/client/go"
	pb "github.com/parsetier/parsetier/client/go/parsetierpb"
)

// qwen3Output is the real Qwen3 tokenizer's encoding (add_special_tokens=False) of
//
//	<think>\nNeed weather.\n</think>\n\nChecking both cities.\n
//	<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n
//	<tool_call>\n{"name": "get_weather", "arguments": {"city": "Tokyo"}}\n</tool_call>
//
// (one string, no breaks besides the \n shown). 151667/151668 are <think>/</think>,
// 151657/151658 <tool_call>/</tool_call>.
var qwen3Output = []uint32{
	151667, 198, 23657, 9104, 624, 151668, 271, 40129, 2176, 9720, 624, 151657, 198, 4913, 606,
	788, 330, 455, 69364, 497, 330, 16370, 788, 5212, 8926, 788, 330, 59604, 95642, 151658, 198,
	151657, 198, 4913, 606, 788, 330, 455, 69364, 497, 330, 16370, 788, 5212, 8926, 788, 330,
	52854, 16032, 95642, 151658,
}

const (
	imEnd        = 151645 // <|im_end|>, Qwen3's stop token
	weatherTools = `[{"type": "function", "function": {"name": "get_weather",
		"parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]`
)

var (
	stopAtImEnd = parsetier.Finish{Reason: parsetier.Stop, Matched: parsetier.StopToken(imEnd)}
	wantMessage = &pb.AssistantMessage{
		Reasoning: "Need weather.",
		Content:   "Checking both cities.",
		ToolCalls: []*pb.ToolCall{
			{Name: "get_weather", Arguments: `{"city": "Paris"}`},
			{Name: "get_weather", Arguments: `{"city": "Tokyo"}`},
		},
	}
	wantUsage = &pb.Usage{CompletionTokens: uint32(len(qwen3Output)), ReasoningTokens: 5}
)

// connect dials PARSETIER_SERVER and proves the server answers before any test relies on it.
func connect(t *testing.T) *parsetier.Client {
	t.Helper()
	target := os.Getenv("PARSETIER_SERVER")
	client, err := parsetier.NewClient(target, parsetier.WithInsecure())
	if err != nil {
		t.Fatalf("NewClient(%q): %v", target, err)
	}
	t.Cleanup(func() { client.Close() })
	models, err := client.ListModels(testContext(t))
	if err != nil {
		t.Fatalf("the server at PARSETIER_SERVER=%s does not answer: %v", target, err)
	}
	for _, model := range models {
		if model.GetName() == "qwen3" && model.GetTokenizerAvailable() {
			return client
		}
	}
	t.Fatalf("server %s has no usable qwen3 model: %v", target, models)
	return nil
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// openBatch is a new ParseBatch stream of client's, closed when the test ends.
func openBatch(t *testing.T, ctx context.Context, client *parsetier.Client) *parsetier.Batch {
	t.Helper()
	batch, err := client.Batch(ctx)
	if err != nil {
		t.Fatalf("Batch: %v", err)
	}
	t.Cleanup(func() { batch.Close() })
	return batch
}

func onePerStep(ids []uint32) [][]uint32 {
	steps := make([][]uint32, len(ids))
	for i, id := range ids {
		steps[i] = []uint32{id}
	}
	return steps
}

// withoutIDs is the message with tool-call ids cleared: ids are random per session.
func withoutIDs(message *pb.AssistantMessage) *pb.AssistantMessage {
	out := proto.Clone(message).(*pb.AssistantMessage)
	for _, call := range out.GetToolCalls() {
		call.Id = ""
	}
	return out
}

// joinDeltas rebuilds the assistant message from deltas, as a chat-completions client would,
// and checks the fragment rules on the way: a call's id and name arrive once, on its first
// fragment, and calls start in index order.
func joinDeltas(t *testing.T, deltas []*pb.Delta) *pb.AssistantMessage {
	t.Helper()
	joined := &pb.AssistantMessage{}
	var reasoning, content strings.Builder
	for _, delta := range deltas {
		reasoning.WriteString(delta.GetReasoning())
		content.WriteString(delta.GetContent())
		for _, frag := range delta.GetToolCalls() {
			index := int(frag.GetIndex())
			switch {
			case index == len(joined.ToolCalls):
				if frag.GetId() == "" || frag.GetName() == "" {
					t.Fatalf("first fragment of call %d lacks its id or name: %v", index, frag)
				}
				joined.ToolCalls = append(joined.ToolCalls, &pb.ToolCall{Id: frag.GetId(), Name: frag.GetName()})
			case index > len(joined.ToolCalls):
				t.Fatalf("call %d started before call %d", index, len(joined.ToolCalls))
			case frag.GetId() != "" || frag.GetName() != "":
				t.Fatalf("call %d got its id or name again: %v", index, frag)
			}
			joined.ToolCalls[index].Arguments += frag.GetArguments()
		}
	}
	joined.Reasoning, joined.Content = reasoning.String(), content.String()
	return joined
}

func checkFinal(t *testing.T, final *pb.Final) {
	t.Helper()
	if final == nil {
		t.Fatal("no final result")
	}
	if got := final.GetFinishReason(); got != pb.FinishReason_FINISH_REASON_TOOL_CALLS {
		t.Errorf("finish reason %v, want TOOL_CALLS", got)
	}
	if !proto.Equal(final.GetUsage(), wantUsage) {
		t.Errorf("usage %v, want %v", final.GetUsage(), wantUsage)
	}
	if got := withoutIDs(final.GetMessage()); !proto.Equal(got, wantMessage) {
		t.Errorf("final message\n got %v\nwant %v", got, wantMessage)
	}
	for i, call := range final.GetMessage().GetToolCalls() {
		if !strings.HasPrefix(call.GetId(), "chatcmpl-tool-") {
			t.Errorf("call %d id %q, want chatcmpl-tool-…", i, call.GetId())
		}
	}
}

// runSession streams the output through a Session, steps batched perMessage to a message,
// receiving on another goroutine as a serving stack would, and returns every server message.
func runSession(t *testing.T, client *parsetier.Client, perMessage int) []*pb.ParseResponse {
	t.Helper()
	session, err := client.Open(testContext(t), "qwen3",
		parsetier.WithToolsJSON(weatherTools), parsetier.WithRequestID("go-client-test"))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer session.Close()

	type received struct {
		messages []*pb.ParseResponse
		err      error
	}
	done := make(chan received, 1)
	go func() {
		var r received
		for {
			msg, err := session.Recv()
			if err != nil {
				if !errors.Is(err, io.EOF) {
					r.err = err
				}
				done <- r
				return
			}
			r.messages = append(r.messages, msg)
		}
	}()

	steps := onePerStep(qwen3Output)
	for start := 0; start < len(steps); start += perMessage {
		if err := session.Send(steps[start:min(start+perMessage, len(steps))]...); err != nil {
			t.Fatalf("Send: %v", err)
		}
	}
	if err := session.Finish(parsetier.Stop, parsetier.StopToken(imEnd)); err != nil {
		t.Fatalf("Finish: %v", err)
	}
	r := <-done
	if r.err != nil {
		t.Fatalf("Recv: %v", r.err)
	}
	if err := session.Close(); err != nil {
		t.Errorf("Close after the final message: %v", err)
	}

	// Contract: sequence counts 1, 2, 3...; only the last message carries Final; client_messages
	// never decreases and, on the last message, counts every message sent (open, steps, finish).
	wantClientMessages := uint64(1 + (len(steps)+perMessage-1)/perMessage + 1)
	var lastClientMessages uint64
	for i, msg := range r.messages {
		if msg.GetSequence() != uint64(i+1) {
			t.Fatalf("message %d has sequence %d", i, msg.GetSequence())
		}
		if msg.GetClientMessages() < lastClientMessages {
			t.Fatalf("client_messages went back from %d to %d", lastClientMessages, msg.GetClientMessages())
		}
		lastClientMessages = msg.GetClientMessages()
		if (msg.GetFinal() != nil) != (i == len(r.messages)-1) {
			t.Fatalf("message %d of %d: final=%v", i+1, len(r.messages), msg.GetFinal() != nil)
		}
	}
	if lastClientMessages != wantClientMessages {
		t.Errorf("last client_messages %d, want %d", lastClientMessages, wantClientMessages)
	}
	if session.Final() != r.messages[len(r.messages)-1].GetFinal() {
		t.Error("Session.Final is not the last message's final")
	}
	return r.messages
}

func deltasOf(messages []*pb.ParseResponse) []*pb.Delta {
	var deltas []*pb.Delta
	for _, msg := range messages {
		deltas = append(deltas, msg.GetDeltas()...)
	}
	return deltas
}

// One token per message, as a decode loop sends them: reasoning, content and two parallel
// tool calls arrive as deltas, and the final message is exactly what they add up to.
func TestSessionOneTokenPerMessage(t *testing.T) {
	client := connect(t)
	messages := runSession(t, client, 1)
	final := messages[len(messages)-1].GetFinal()
	checkFinal(t, final)

	joined := joinDeltas(t, deltasOf(messages))
	if !proto.Equal(joined, final.GetMessage()) { // ids included: the deltas carry the final's ids
		t.Errorf("joined deltas\n got %v\nwant %v", joined, final.GetMessage())
	}
	// Streaming, not buffering: a one-token message yields at most one server message, and the
	// first tool call's arguments come in several fragments.
	if len(messages) > len(qwen3Output)+1 || len(messages) < 10 {
		t.Errorf("%d server messages for %d one-token client messages", len(messages), len(qwen3Output))
	}
	fragments := 0
	for _, delta := range deltasOf(messages) {
		for _, frag := range delta.GetToolCalls() {
			if frag.GetIndex() == 0 {
				fragments++
			}
		}
	}
	if fragments < 2 {
		t.Errorf("call 0 arrived in %d fragment(s), want streamed arguments", fragments)
	}
}

// Batching steps changes how many messages travel, never the result.
func TestSessionSeveralStepsPerMessage(t *testing.T) {
	client := connect(t)
	one := runSession(t, client, 1)
	oneJoined := withoutIDs(joinDeltas(t, deltasOf(one)))
	for _, perMessage := range []int{2, 5, len(qwen3Output)} {
		batched := runSession(t, client, perMessage)
		final := batched[len(batched)-1].GetFinal()
		checkFinal(t, final)
		if got := withoutIDs(joinDeltas(t, deltasOf(batched))); !proto.Equal(got, oneJoined) {
			t.Errorf("%d steps per message: joined deltas\n got %v\nwant %v", perMessage, got, oneJoined)
		}
		oneFinal := one[len(one)-1].GetFinal()
		if !proto.Equal(withoutIDs(final.GetMessage()), withoutIDs(oneFinal.GetMessage())) ||
			!proto.Equal(final.GetUsage(), oneFinal.GetUsage()) ||
			final.GetFinishReason() != oneFinal.GetFinishReason() {
			t.Errorf("%d steps per message: final %v, want %v", perMessage, final, oneFinal)
		}
	}
}

// The one-call stream and the unary call agree with each other and with the expected parse.
func TestParseStreamEqualsParseOnce(t *testing.T) {
	client := connect(t)
	ctx := testContext(t)
	final, deltas, err := client.ParseStream(ctx, "qwen3", onePerStep(qwen3Output), stopAtImEnd,
		parsetier.WithToolsJSON(weatherTools))
	if err != nil {
		t.Fatalf("ParseStream: %v", err)
	}
	checkFinal(t, final)
	if joined := joinDeltas(t, deltas); !proto.Equal(joined, final.GetMessage()) {
		t.Errorf("joined deltas\n got %v\nwant %v", joined, final.GetMessage())
	}

	once, err := client.ParseOnce(ctx, "qwen3", qwen3Output, stopAtImEnd,
		parsetier.WithToolsJSON(weatherTools))
	if err != nil {
		t.Fatalf("ParseOnce: %v", err)
	}
	checkFinal(t, once.GetFinal())
	if len(once.GetDeltas()) != 0 {
		t.Errorf("ParseOnce sent %d deltas without being asked", len(once.GetDeltas()))
	}
	if !proto.Equal(withoutIDs(once.GetFinal().GetMessage()), withoutIDs(final.GetMessage())) ||
		!proto.Equal(once.GetFinal().GetUsage(), final.GetUsage()) ||
		once.GetFinal().GetFinishReason() != final.GetFinishReason() {
		t.Errorf("ParseOnce final %v\nParseStream final %v", once.GetFinal(), final)
	}
}

func wantCode(t *testing.T, what string, err error, want codes.Code) {
	t.Helper()
	if got := status.Code(err); got != want {
		t.Errorf("%s: status %v (%v), want %v", what, got, err, want)
	}
}

// Errors arrive as the gRPC status codes docs/service.md lists, and where they are caused.
func TestErrors(t *testing.T) {
	client := connect(t)
	ctx := testContext(t)
	const outOfVocabulary = 10_000_000

	session, err := client.Open(ctx, "no-such-model")
	if err == nil {
		session.Close()
	}
	wantCode(t, "Open unknown model", err, codes.NotFound)
	_, _, err = client.ParseStream(ctx, "no-such-model", onePerStep(qwen3Output), stopAtImEnd)
	wantCode(t, "ParseStream unknown model", err, codes.NotFound)
	_, err = client.ParseOnce(ctx, "no-such-model", qwen3Output, stopAtImEnd)
	wantCode(t, "ParseOnce unknown model", err, codes.NotFound)

	session, err = client.Open(ctx, "qwen3")
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer session.Close()
	if err := session.Send(qwen3Output[:3], []uint32{outOfVocabulary}); err != nil && !errors.Is(err, io.EOF) {
		t.Fatalf("Send: %v", err)
	}
	for err = nil; err == nil; {
		_, err = session.Recv() // deltas of the valid ids may come first
	}
	wantCode(t, "Session Recv after an out-of-vocabulary id", err, codes.InvalidArgument)
	if !strings.Contains(status.Convert(err).Message(), "10000000") {
		t.Errorf("status message %q does not name the bad id", status.Convert(err).Message())
	}

	steps := append(onePerStep(qwen3Output[:5]), []uint32{outOfVocabulary})
	_, _, err = client.ParseStream(ctx, "qwen3", steps, stopAtImEnd)
	wantCode(t, "ParseStream out-of-vocabulary id", err, codes.InvalidArgument)
	_, err = client.ParseOnce(ctx, "qwen3", []uint32{outOfVocabulary}, stopAtImEnd)
	wantCode(t, "ParseOnce out-of-vocabulary id", err, codes.InvalidArgument)
}

// The options reach the server: tool_choice in its three shapes, output kinds, stop strings.
func TestOptions(t *testing.T) {
	client := connect(t)
	ctx := testContext(t)
	tools := parsetier.WithToolsJSON(weatherTools)
	stopString := parsetier.Finish{Matched: parsetier.StopString("Observation:")} // zero Reason: Stop

	none, err := client.ParseOnce(ctx, "qwen3", qwen3Output, stopString, tools,
		parsetier.WithToolChoice("none"), parsetier.WithOutput(pb.OutputKind_OUTPUT_KIND_DELTAS))
	if err != nil {
		t.Fatalf("ParseOnce tool_choice none: %v", err)
	}
	if calls := none.GetFinal().GetMessage().GetToolCalls(); len(calls) != 0 {
		t.Errorf("tool_choice none made calls: %v", calls)
	}
	if got := none.GetFinal().GetFinishReason(); got != pb.FinishReason_FINISH_REASON_STOP {
		t.Errorf("tool_choice none: finish reason %v, want STOP", got)
	}
	if len(none.GetDeltas()) == 0 {
		t.Error("WithOutput(DELTAS): ParseOnce returned no deltas")
	}
	if joined := joinDeltas(t, none.GetDeltas()); !proto.Equal(joined, none.GetFinal().GetMessage()) {
		t.Errorf("ParseOnce deltas join to %v, final is %v", joined, none.GetFinal().GetMessage())
	}

	named, err := client.ParseOnce(ctx, "qwen3", qwen3Output, stopAtImEnd, tools,
		parsetier.WithToolChoice("get_weather"))
	if err != nil {
		t.Fatalf("ParseOnce tool_choice get_weather: %v", err)
	}
	// A named function is forced, so STOP does not become TOOL_CALLS.
	if got := named.GetFinal().GetFinishReason(); got != pb.FinishReason_FINISH_REASON_STOP {
		t.Errorf("named tool_choice: finish reason %v, want STOP", got)
	}
	if got := withoutIDs(named.GetFinal().GetMessage()); !proto.Equal(got, wantMessage) {
		t.Errorf("named tool_choice: message %v, want %v", got, wantMessage)
	}

	session, err := client.Open(ctx, "qwen3", parsetier.WithToolChoice("required"))
	if err == nil {
		session.Close()
	}
	wantCode(t, "Open tool_choice required without tools", err, codes.InvalidArgument)
}
