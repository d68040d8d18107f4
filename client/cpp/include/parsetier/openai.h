// OpenAI-shaped JSON for resolved logprobs, for a serving stack that forwards them in its own
// chat-completions or completions responses (the Python client's chat_logprobs /
// completion_logprobs, the Go client's ToChat / ToCompletion).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "parsetier/v1/parsetier.pb.h"

namespace parsetier {

// OpenAI chat's choices[].logprobs object:
//   {"content":[{"token":..,"logprob":..,"bytes":[..],"top_logprobs":[{"token","logprob","bytes"}]}]}
// Pass one delta's logprobs for a streaming chunk, or Logprobs(deltas) for the whole response.
std::string ChatLogprobsJson(const std::vector<v1::TokenLogprob>& logprobs);
std::string ChatLogprobsJson(const google::protobuf::RepeatedPtrField<v1::TokenLogprob>& logprobs);

// OpenAI completions' choices[].logprobs object:
//   {"tokens":[..],"token_logprobs":[..],"top_logprobs":[{token: logprob}],"text_offset":[..]}
// `text_offset` is added to every offset (the echoed prompt's length in code points when
// echoing, else 0). Alternatives with the same token text keep the last one's logprob, as a JSON
// object can hold each key once.
std::string CompletionLogprobsJson(const std::vector<v1::TokenLogprob>& logprobs, uint32_t text_offset = 0);
std::string CompletionLogprobsJson(const google::protobuf::RepeatedPtrField<v1::TokenLogprob>& logprobs,
                                   uint32_t text_offset = 0);

// Numbers are the shortest text that reads back as the same float; -infinity (a token the
// sampler had masked out) is written as -9999.0, as OpenAI's API does, since JSON has no
// infinity. Strings are UTF-8, with quotes, backslashes and control characters escaped.

}  // namespace parsetier
