package parsetier_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"strings"

	parsetier "github.com/parsetier/parsetier/client/go"
)

// The model's output in these examples: Qwen3 token ids for
// "<think>\nNeed weather.\n</think>\n\nChecking both cities.\n<tool_call>...".
var recordedOutput = qwen3Output

// A decode loop streams each step as the model produces it and ranges over the deltas on
// another goroutine, since the server answers only the steps that produced output.
func ExampleClient_Open() {
	// PARSETIER_SERVER is host:port, e.g. "127.0.0.1:50051"; plaintext suits a loopback hop.
	client, err := parsetier.NewClient(os.Getenv("PARSETIER_SERVER"), parsetier.WithInsecure())
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	session, err := client.Open(context.Background(), "qwen3", parsetier.WithToolsJSON(
		`[{"type": "function", "function": {"name": "get_weather"}}]`))
	if err != nil {
		log.Fatal(err) // e.g. codes.NotFound for an unknown model
	}
	defer session.Close()

	go func() {
		for _, id := range recordedOutput { // one decode step per token
			if session.Send([]uint32{id}) != nil {
				return // io.EOF: the server ended the stream; the iterator reports why
			}
		}
		_ = session.Finish(parsetier.Stop, parsetier.StopToken(151645))
	}()

	var reasoning, content strings.Builder
	for delta, err := range session.Deltas() {
		if err != nil {
			log.Fatal(err)
		}
		reasoning.WriteString(delta.GetReasoning())
		content.WriteString(delta.GetContent())
	}
	final := session.Final()
	fmt.Printf("reasoning %q\ncontent %q\n", reasoning.String(), content.String())
	fmt.Println(final.GetFinishReason(), len(final.GetMessage().GetToolCalls()), "calls")
	// Output:
	// reasoning "Need weather."
	// content "Checking both cities."
	// FINISH_REASON_TOOL_CALLS 2 calls
}

// Parsing a whole recorded output at once, with the unary RPC.
func ExampleClient_ParseOnce() {
	client, err := parsetier.NewClient(os.Getenv("PARSETIER_SERVER"), parsetier.WithInsecure())
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	stop := parsetier.Finish{Reason: parsetier.Stop, Matched: parsetier.StopToken(151645)}
	once, err := client.ParseOnce(context.Background(), "qwen3", recordedOutput, stop,
		parsetier.WithToolsJSON(`[{"type": "function", "function": {"name": "get_weather"}}]`))
	if err != nil {
		log.Fatal(err)
	}
	for _, call := range once.GetFinal().GetMessage().GetToolCalls() {
		fmt.Println(call.GetName(), call.GetArguments())
	}
	fmt.Println(once.GetFinal().GetUsage().GetCompletionTokens(), "tokens")
	// Output:
	// get_weather {"city": "Paris"}
	// get_weather {"city": "Tokyo"}
	// 51 tokens
}

// Replaying a recorded output as a stream in one call.
func ExampleClient_ParseStream() {
	client, err := parsetier.NewClient(os.Getenv("PARSETIER_SERVER"), parsetier.WithInsecure())
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	steps := make([][]uint32, len(recordedOutput))
	for i, id := range recordedOutput {
		steps[i] = []uint32{id}
	}
	stop := parsetier.Finish{Reason: parsetier.Stop, Matched: parsetier.StopToken(151645)}
	final, deltas, err := client.ParseStream(context.Background(), "qwen3", steps, stop)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(deltas) > 1, final.GetMessage().GetContent())
	// Output:
	// true Checking both cities.
}

// One call before generation, one stream after: the request body as it arrived is rendered into
// the prompt's ids and the output session's Open, and the engine's output is parsed with that
// Open unchanged into the bytes the caller's API expects (here a chat completion body).
func ExampleClient_Render() {
	client, err := parsetier.NewClient(os.Getenv("PARSETIER_SERVER"), parsetier.WithInsecure())
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	ctx := context.Background()

	body := []byte(`{"model": "my-model", "messages": [{"role": "user", "content": "Weather in Paris and Tokyo?"}],
		"tools": [{"type": "function", "function": {"name": "get_weather"}}]}`)
	rendered, err := client.Render(ctx, "qwen3", parsetier.OpenAIChat, body)
	if err != nil {
		log.Fatal(err) // codes.InvalidArgument naming the JSON path; parsetier.WireError(err) in the dialect
	}
	// The engine generates from rendered.PromptTokenIDs with rendered.Sampling; here it "produced"
	// recordedOutput, ending on <|im_end|>.
	fmt.Println(len(rendered.PromptTokenIDs) > 0, rendered.Sampling.GetStopTokenIds()[0])

	stop := parsetier.Finish{Reason: parsetier.Stop, Matched: parsetier.StopToken(151645)}
	once, err := client.ParseOnce(ctx, rendered.Open.GetModel(), recordedOutput, stop, parsetier.WithOpen(rendered.Open))
	if err != nil {
		log.Fatal(err)
	}
	var completion struct {
		Model   string `json:"model"`
		Choices []struct {
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(once.GetFinal().GetWire(), &completion); err != nil {
		log.Fatal(err)
	}
	fmt.Println(completion.Model, completion.Choices[0].FinishReason)
	// Output:
	// true 151645
	// my-model tool_calls
}
