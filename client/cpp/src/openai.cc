// OpenAI-shaped JSON for resolved logprobs: a few fixed shapes, written directly (no JSON library
// is among the client's dependencies).
#include "parsetier/openai.h"

#include <charconv>
#include <cmath>
#include <utility>

namespace parsetier {

namespace {

void AppendString(std::string& out, const std::string& text) {
  static const char kHex[] = "0123456789abcdef";
  out += '"';
  for (char c : text) {
    unsigned char byte = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (byte < 0x20) {
      out += "\\u00";
      out += kHex[byte >> 4];
      out += kHex[byte & 0xf];
    } else {
      out += c;
    }
  }
  out += '"';
}

void AppendNumber(std::string& out, float value) {
  if (std::isinf(value) && value < 0) {
    out += "-9999.0";
    return;
  }
  char buffer[32];
  auto result = std::to_chars(buffer, buffer + sizeof buffer, value);
  out.append(buffer, result.ptr);
}

void AppendBytes(std::string& out, const std::string& bytes) {
  out += '[';
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (i) out += ',';
    out += std::to_string(static_cast<unsigned char>(bytes[i]));
  }
  out += ']';
}

template <typename Alternative>
void AppendChatEntry(std::string& out, const Alternative& entry) {
  out += "{\"token\":";
  AppendString(out, entry.token());
  out += ",\"logprob\":";
  AppendNumber(out, entry.logprob());
  out += ",\"bytes\":";
  AppendBytes(out, entry.bytes());
}

template <typename Logprobs>
std::string Chat(const Logprobs& logprobs) {
  std::string out = "{\"content\":[";
  bool first = true;
  for (const v1::TokenLogprob& lp : logprobs) {
    if (!first) out += ',';
    first = false;
    AppendChatEntry(out, lp);
    out += ",\"top_logprobs\":[";
    for (int j = 0; j < lp.top_logprobs_size(); ++j) {
      if (j) out += ',';
      AppendChatEntry(out, lp.top_logprobs(j));
      out += '}';
    }
    out += "]}";
  }
  out += "]}";
  return out;
}

template <typename Logprobs>
std::string Completion(const Logprobs& logprobs, uint32_t text_offset) {
  std::string tokens, values, tops, offsets;
  bool first = true;
  for (const v1::TokenLogprob& lp : logprobs) {
    if (!first) {
      tokens += ',';
      values += ',';
      tops += ',';
      offsets += ',';
    }
    first = false;
    AppendString(tokens, lp.token());
    AppendNumber(values, lp.logprob());
    std::vector<std::pair<std::string, float>> top;  // each token once, in first-seen order
    for (const v1::TopLogprob& alternative : lp.top_logprobs()) {
      auto same = top.begin();
      while (same != top.end() && same->first != alternative.token()) ++same;
      if (same == top.end()) {
        top.emplace_back(alternative.token(), alternative.logprob());
      } else {
        same->second = alternative.logprob();
      }
    }
    tops += '{';
    for (size_t j = 0; j < top.size(); ++j) {
      if (j) tops += ',';
      AppendString(tops, top[j].first);
      tops += ':';
      AppendNumber(tops, top[j].second);
    }
    tops += '}';
    offsets += std::to_string(uint64_t{text_offset} + lp.text_offset());
  }
  return "{\"tokens\":[" + tokens + "],\"token_logprobs\":[" + values + "],\"top_logprobs\":[" + tops +
         "],\"text_offset\":[" + offsets + "]}";
}

}  // namespace

std::string ChatLogprobsJson(const std::vector<v1::TokenLogprob>& logprobs) { return Chat(logprobs); }
std::string ChatLogprobsJson(const google::protobuf::RepeatedPtrField<v1::TokenLogprob>& logprobs) {
  return Chat(logprobs);
}
std::string CompletionLogprobsJson(const std::vector<v1::TokenLogprob>& logprobs, uint32_t text_offset) {
  return Completion(logprobs, text_offset);
}
std::string CompletionLogprobsJson(const google::protobuf::RepeatedPtrField<v1::TokenLogprob>& logprobs,
                                   uint32_t text_offset) {
  return Completion(logprobs, text_offset);
}

}  // namespace parsetier
