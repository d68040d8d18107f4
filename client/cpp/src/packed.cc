// The packed wire form of ParseBatch messages: see packed.h.
#include "packed.h"

#include <utility>

namespace parsetier::internal {

bool Packable(const v1::SessionInput& entry) {
  if (entry.has_open() || entry.has_finish() || entry.cancel() || entry.steps_size() != 1) return false;
  const v1::Step& step = entry.steps(0);
  return step.text().empty() && step.text_tokens() == 0 && !step.has_logprobs();
}

v1::ParseBatchRequest WireRequest(v1::ParseBatchRequest& entries, std::vector<SentEntry>& sent) {
  int items = 0;
  int ids = 0;
  bool ones = true;
  for (const v1::SessionInput& entry : entries.sessions()) {
    if (!Packable(entry)) continue;
    const int count = entry.steps(0).token_ids_size();
    ++items;
    ids += count;
    ones = ones && count == 1;
  }
  v1::ParseBatchRequest wire;
  if (items == 0) {
    wire.Swap(&entries);
    return wire;
  }
  v1::PackedSteps& packed = *wire.mutable_packed();
  packed.mutable_keys()->Reserve(items);
  packed.mutable_token_ids()->Reserve(ids);
  if (!ones) packed.mutable_token_counts()->Reserve(items);
  wire.mutable_sessions()->Reserve(entries.sessions_size() - items);
  sent.reserve(entries.sessions_size());
  for (v1::SessionInput& entry : *entries.mutable_sessions()) {
    const bool pack = Packable(entry);
    sent.push_back({entry.key(), pack});
    if (!pack) {
      *wire.add_sessions() = std::move(entry);
      continue;
    }
    const auto& step = entry.steps(0).token_ids();
    packed.add_keys(std::move(*entry.mutable_key()));
    packed.mutable_token_ids()->Add(step.begin(), step.end());
    if (!ones) packed.add_token_counts(static_cast<uint32_t>(step.size()));
  }
  entries.Clear();
  return wire;
}

namespace {

grpc::Status Unfit(const std::string& why) {
  return grpc::Status(grpc::StatusCode::INTERNAL, "parsetier: a ParseBatch reply " + why);
}

// Packed output `i` as the SessionOutput it stands for (its text moved out of `packed`).
v1::SessionOutput Unpacked(v1::PackedOutputs& packed, int i) {
  v1::SessionOutput output;
  output.set_key(std::move(*packed.mutable_keys(i)));
  output.set_sequence(packed.sequences(i));
  output.set_client_messages(packed.client_messages(i));
  output.set_output_digest(packed.output_digests(i));
  v1::Delta& delta = *output.add_deltas();
  std::string& text = *packed.mutable_texts(i);
  if (packed.reasoning(i)) {
    delta.set_reasoning(std::move(text));
  } else {
    delta.set_content(std::move(text));
  }
  return output;
}

}  // namespace

// The reply lists, by the protocol, first the outputs of the entries sent as they are, in their
// order, then those of packed items that are more than one text delta, in the items' order;
// `packed` holds the rest, in the items' order. A session's output is in one place only and a
// key has one entry per message, so a walk over the entries with three cursors places them all.
std::vector<v1::SessionOutput> EntryOutputs(v1::ParseBatchResponse& reply, const std::vector<SentEntry>& sent,
                                            grpc::Status& error) {
  auto& sessions = *reply.mutable_sessions();
  v1::PackedOutputs& packed = *reply.mutable_packed();
  const int texts = packed.keys_size();
  if (packed.sequences_size() != texts || packed.client_messages_size() != texts || packed.texts_size() != texts ||
      packed.reasoning_size() != texts || packed.output_digests_size() != texts) {
    error = Unfit("has packed arrays of different lengths (" + std::to_string(texts) + " keys, " +
                  std::to_string(packed.sequences_size()) + " sequences, " +
                  std::to_string(packed.client_messages_size()) + " client_messages, " +
                  std::to_string(packed.texts_size()) + " texts, " + std::to_string(packed.reasoning_size()) +
                  " reasoning, " + std::to_string(packed.output_digests_size()) + " output_digests)");
    return {};
  }
  std::vector<v1::SessionOutput> outputs;
  outputs.reserve(sessions.size() + texts);
  if (sent.empty()) {  // nothing went packed
    if (texts > 0) {
      error = Unfit("has packed outputs for a message without packed items");
      return {};
    }
    for (v1::SessionOutput& output : sessions) outputs.push_back(std::move(output));
    return outputs;
  }
  int split = 0;  // where the packed items' outputs begin in `sessions`
  for (const SentEntry& entry : sent) {
    if (!entry.packed && split < sessions.size() && sessions[split].key() == entry.key) ++split;
  }
  int plain = 0;
  int rest = split;
  int text = 0;
  for (const SentEntry& entry : sent) {
    if (!entry.packed) {
      if (plain < split && sessions[plain].key() == entry.key) outputs.push_back(std::move(sessions[plain++]));
    } else if (rest < sessions.size() && sessions[rest].key() == entry.key) {
      outputs.push_back(std::move(sessions[rest++]));
    } else if (text < texts && packed.keys(text) == entry.key) {
      outputs.push_back(Unpacked(packed, text++));
    }
  }
  if (outputs.size() != static_cast<size_t>(sessions.size() + texts)) {
    error = Unfit("has outputs out of the order of the message's entries (" + std::to_string(outputs.size()) +
                  " of " + std::to_string(sessions.size() + texts) + " placed)");
    return {};
  }
  return outputs;
}

}  // namespace parsetier::internal
