package parsetier

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/parsetier/parsetier/client/go/parsetierpb"
)

// The packed form of a ParseBatch message, at the wire boundary only. Most entries of an engine
// step are one step of token ids for a session already open; sent as a SessionInput each, they
// cost a message object apiece on both sides. ParseBatchRequest.packed carries them as parallel
// arrays instead, and the server answers their plain text deltas in ParseBatchResponse.packed.
// The Batch API and its resume ledger keep working in SessionInput form: wireRequest packs what
// goes out, and replies are turned back into SessionOutputs before anything else reads them.

// packable says whether entry is exactly one step of token ids for an open session: the entry
// a packed item stands for (no open, finish, cancel, text or logprobs).
func packable(entry *pb.SessionInput) bool {
	if entry.Open != nil || entry.Finish != nil || entry.Cancel || len(entry.Steps) != 1 {
		return false
	}
	step := entry.Steps[0]
	return step.Text == "" && step.TextTokens == 0 && step.Logprobs == nil
}

// wireRequest is the message that carries entries: the packable ones as packed items (which
// the server applies after the others), the rest as they are. token_counts is left out when
// every item has one id, the usual engine step.
func wireRequest(entries []*pb.SessionInput) *pb.ParseBatchRequest {
	items, ids, ones := 0, 0, true
	for _, e := range entries {
		if packable(e) {
			n := len(e.Steps[0].TokenIds)
			items, ids, ones = items+1, ids+n, ones && n == 1
		}
	}
	if items == 0 {
		return &pb.ParseBatchRequest{Sessions: entries}
	}
	packed := &pb.PackedSteps{Keys: make([]string, 0, items), TokenIds: make([]uint32, 0, ids)}
	if !ones {
		packed.TokenCounts = make([]uint32, 0, items)
	}
	msg := &pb.ParseBatchRequest{Packed: packed}
	if items < len(entries) {
		msg.Sessions = make([]*pb.SessionInput, 0, len(entries)-items)
	}
	for _, e := range entries {
		if !packable(e) {
			msg.Sessions = append(msg.Sessions, e)
			continue
		}
		step := e.Steps[0].TokenIds
		packed.Keys = append(packed.Keys, e.Key)
		packed.TokenIds = append(packed.TokenIds, step...)
		if !ones {
			packed.TokenCounts = append(packed.TokenCounts, uint32(len(step)))
		}
	}
	return msg
}

// unpackOutputs is reply.packed as the SessionOutputs it stands for, in its order (nil when the
// reply has none). The outputs and their deltas are allocated in two blocks, not one by one.
func unpackOutputs(packed *pb.PackedOutputs) ([]*pb.SessionOutput, error) {
	n := len(packed.GetKeys())
	if n == 0 {
		return nil, nil
	}
	if len(packed.Sequences) != n || len(packed.ClientMessages) != n || len(packed.Texts) != n ||
		len(packed.Reasoning) != n || len(packed.OutputDigests) != n {
		return nil, status.Errorf(codes.Internal,
			"parsetier: a packed reply's arrays differ in length (%d keys, %d sequences, %d client_messages, %d texts, %d reasoning, %d output_digests)",
			n, len(packed.Sequences), len(packed.ClientMessages), len(packed.Texts), len(packed.Reasoning), len(packed.OutputDigests))
	}
	outs := make([]pb.SessionOutput, n)
	deltas := make([]pb.Delta, n)
	deltaRefs := make([]*pb.Delta, n)
	refs := make([]*pb.SessionOutput, n)
	for i := range n {
		d := &deltas[i]
		if packed.Reasoning[i] {
			d.Reasoning = packed.Texts[i]
		} else {
			d.Content = packed.Texts[i]
		}
		deltaRefs[i] = d
		o := &outs[i]
		o.Key, o.Sequence, o.ClientMessages = packed.Keys[i], packed.Sequences[i], packed.ClientMessages[i]
		o.OutputDigest = packed.OutputDigests[i]
		o.Deltas = deltaRefs[i : i+1 : i+1]
		refs[i] = o
	}
	return refs, nil
}

// inEntryOrder is a reply's outputs in the order of the n entries it answers (entry(i) is the
// key of entry i and whether it went packed), as a message of SessionInputs alone would have had
// them. The reply lists, by the protocol, first the outputs of the entries sent as they are, in
// their order, then those of packed items that are more than one text delta, in the items'
// order; packed holds the rest, in the items' order. A session's output is in one place only,
// and a key has one entry per message.
func inEntryOrder(n int, entry func(int) (string, bool), sessions, packed []*pb.SessionOutput) ([]*pb.SessionOutput, error) {
	split := 0 // where the packed items' outputs begin in sessions
	anyPacked := false
	for i := range n {
		key, isPacked := entry(i)
		if isPacked {
			anyPacked = true
		} else if split < len(sessions) && sessions[split].Key == key {
			split++
		}
	}
	if !anyPacked && len(packed) == 0 {
		return sessions, nil
	}
	outs := make([]*pb.SessionOutput, 0, len(sessions)+len(packed))
	plain, rest, text := 0, split, 0
	for i := range n {
		key, isPacked := entry(i)
		switch {
		case !isPacked:
			if plain < split && sessions[plain].Key == key {
				outs = append(outs, sessions[plain])
				plain++
			}
		case rest < len(sessions) && sessions[rest].Key == key:
			outs = append(outs, sessions[rest])
			rest++
		case text < len(packed) && packed[text].Key == key:
			outs = append(outs, packed[text])
			text++
		}
	}
	if len(outs) != len(sessions)+len(packed) {
		return nil, status.Errorf(codes.Internal,
			"parsetier: a ParseBatch reply's outputs are not in the order of the message's entries (%d of %d placed)",
			len(outs), len(sessions)+len(packed))
	}
	return outs, nil
}
