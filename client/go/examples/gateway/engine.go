package main

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"slices"

	parsetier "github.com/parsetier/parsetier/client/go"
)

// engine is a scripted stand-in for a token-in/token-out engine: it answers a prompt with the
// output recorded for it, so the gateway runs without a model. Its script is a JSON object from a
// prompt's key, the SHA-256 (hex) of its token ids as little-endian uint32s, to the outputs to
// emit: an array of token-id arrays, choice i of a request emitting the (i mod count)-th. The
// outputs are the real tokenizer's ids of the text a model would write, its end-of-turn id
// included. The file is read at each request, so a script may grow while the gateway runs (a
// conversation's next turn has a prompt of its own).
//
// It generates as an engine does from the Render's sampling parameters: it emits stepTokens ids
// per decode step, and stops at the first of the request's stop ids (Sampling.StopTokenIds: the
// model's end of turn, then the request's own), which it does not emit, or after max_tokens ids.
type engine struct {
	script     string
	stepTokens int
}

// output is one choice's generation: its decode steps and how it ended.
type output struct {
	steps  [][]uint32
	finish parsetier.Finish
}

// promptKey is a prompt's key in the script.
func promptKey(ids []uint32) string {
	data := make([]byte, 4*len(ids))
	for i, id := range ids {
		binary.LittleEndian.PutUint32(data[4*i:], id)
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// generate is the rendered request's outputs, one per choice.
func (e *engine) generate(r *parsetier.Rendered) ([]output, error) {
	var script map[string][][]uint32
	data, err := os.ReadFile(e.script)
	if err == nil {
		err = json.Unmarshal(data, &script)
	}
	if err != nil {
		return nil, fmt.Errorf("the scripted engine's script: %w", err)
	}
	key := promptKey(r.PromptTokenIDs)
	recorded := script[key]
	if len(recorded) == 0 {
		return nil, fmt.Errorf("the scripted engine has no output for the prompt %s (%d ids)", key, len(r.PromptTokenIDs))
	}
	outputs := make([]output, r.N())
	for i := range outputs {
		outputs[i] = e.decode(recorded[i%len(recorded)], r)
	}
	return outputs, nil
}

// decode is ids emitted as the sampling parameters end them.
func (e *engine) decode(ids []uint32, r *parsetier.Rendered) output {
	limit := len(ids)
	if r.Sampling.MaxTokens != nil {
		limit = min(limit, int(r.Sampling.GetMaxTokens()))
	}
	out := output{finish: parsetier.Finish{Reason: parsetier.Stop}}
	emitted := ids
	for at, id := range ids {
		if at < limit && slices.Contains(r.Sampling.GetStopTokenIds(), id) { // the stop id is within max_tokens
			emitted = ids[:at]
			out.finish.Matched = parsetier.StopToken(id)
			break
		}
	}
	if len(emitted) > limit {
		emitted = emitted[:limit]
		out.finish.Reason = parsetier.Length
	}
	for at := 0; at < len(emitted); at += e.stepTokens {
		out.steps = append(out.steps, emitted[at:min(at+e.stepTokens, len(emitted))])
	}
	return out
}
