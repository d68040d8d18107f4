package parsetier_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"

	parsetier "github.com/parsetier/parsetier/client/go"
)

// A decode loop streams each step as the model produces it and receives on another goroutine,
// since the server answers only the steps that produced output.
func ExampleOpen() {
	client, err := parsetier.Dial("127.0.0.1:50051")
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	session, err := parsetier.Open(context.Background(), client, "qwen3",
		parsetier.WithToolsJSON(`[{"type": "function", "function": {"name": "get_weather"}}]`))
	if err != nil {
		log.Fatal(err) // e.g. codes.NotFound for an unknown model
	}
	defer session.Close()

	done := make(chan error, 1)
	go func() {
		for {
			msg, err := session.Recv()
			if err != nil {
				done <- err
				return
			}
			for _, d := range msg.GetDeltas() {
				fmt.Print(d.GetReasoning(), d.GetContent())
				for _, call := range d.GetToolCalls() {
					fmt.Print(call.GetIndex(), call.GetName(), call.GetArguments())
				}
			}
		}
	}()

	for _, step := range [][]uint32{{151667}, {198}, {23657, 9104}} { // the model's decode steps
		if err := session.Send(step); err != nil {
			break // io.EOF: the server ended the stream; Recv reports why
		}
	}
	_ = session.Finish(parsetier.Stop, parsetier.StopToken(151645))

	if err := <-done; !errors.Is(err, io.EOF) {
		log.Fatal(err)
	}
	final := session.Final()
	fmt.Println(final.GetFinishReason(), final.GetUsage(), final.GetMessage())
}

// Replaying a recorded output, or parsing a whole one at once.
func ExampleParseStream() {
	client, err := parsetier.Dial("127.0.0.1:50051")
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	ctx := context.Background()
	stop := parsetier.Finish{Reason: parsetier.Stop, Matched: parsetier.StopToken(151645)}

	final, deltas, err := parsetier.ParseStream(ctx, client, "qwen3", [][]uint32{{151667}, {198}}, stop)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(deltas), final.GetMessage())

	once, err := parsetier.ParseOnce(ctx, client, "qwen3", []uint32{151667, 198}, stop)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(once.GetFinal().GetMessage())
}
