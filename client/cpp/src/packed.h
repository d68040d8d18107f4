// The packed form of a ParseBatch message (ParseBatchRequest.packed, ParseBatchResponse.packed),
// at the wire boundary only. Most entries of an engine step are one step of token ids for a
// session already open; sent as a SessionInput each, they cost a message object apiece on both
// sides, while packed items are parallel arrays the server answers in kind. Batch keeps queueing
// SessionInputs: WireRequest packs what goes out, and EntryOutputs turns a reply back into the
// SessionOutputs the entries would have had, in their order, before the caller sees it.
#pragma once

#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "parsetier/v1/parsetier.pb.h"

namespace parsetier::internal {

// What a reply's order needs of one entry of a message sent: its key and whether it went packed.
struct SentEntry {
  std::string key;
  bool packed;
};

// A message as it goes on the wire, and what its reply's order needs (`sent`, as WireRequest
// gives it).
struct WireMessage {
  v1::ParseBatchRequest request;
  std::vector<SentEntry> sent;
};

// Whether `entry` is exactly one step of token ids, the entry a packed item stands for: no open,
// finish, cancel, text, text_tokens or logprobs.
bool Packable(const v1::SessionInput& entry);

// The message that carries `entries` (emptied): the packable ones as packed items, which the
// server applies after the others, the rest as they are. token_counts is left out when every
// item has one id, the usual engine step. `sent` gets every entry's key, in order, when any went
// packed; it stays empty otherwise (the reply then needs no reordering).
v1::ParseBatchRequest WireRequest(v1::ParseBatchRequest& entries, std::vector<SentEntry>& sent);

// The outputs of `reply` (emptied) as a message of the same entries without packing would have
// had them: each packed output as the SessionOutput it stands for, all in the entries' order.
// A reply that does not fit the message (packed arrays of different lengths, outputs out of the
// entries' order) sets `error` to INTERNAL.
std::vector<v1::SessionOutput> EntryOutputs(v1::ParseBatchResponse& reply, const std::vector<SentEntry>& sent,
                                            grpc::Status& error);

}  // namespace parsetier::internal
