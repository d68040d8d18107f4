// Joining a reply the server sent in parts (ParseResponse.part, ParseBatchResponse.part): a reply
// larger than the server's --max-reply-bytes arrives as several messages carrying only `part`, the
// next bytes of the whole reply's serialized form, `more` on all but the last (docs/service.md).
#pragma once

#include <string>

#include <grpcpp/grpcpp.h>

namespace parsetier::internal {

// Takes the next message received. Returns true when `message` holds a whole reply: it was one,
// or it was the last part and now holds the joined reply; false while more parts are due (the
// bytes so far are kept in `buffer`). A reply amid another's parts, or parts that do not parse,
// set `error` (INTERNAL).
template <typename Reply>
bool JoinParts(Reply& message, std::string& buffer, bool& in_parts, grpc::Status& error) {
  if (!message.has_part()) {
    if (in_parts) {
      error = grpc::Status(grpc::StatusCode::INTERNAL, "parsetier: a reply arrived inside the parts of another");
    }
    return true;
  }
  in_parts = true;
  buffer += message.part().data();
  if (message.part().more()) return false;
  in_parts = false;
  std::string whole;
  whole.swap(buffer);
  if (!message.ParseFromString(whole)) {
    error = grpc::Status(grpc::StatusCode::INTERNAL, "parsetier: the parts of a reply do not parse");
  }
  return true;
}

}  // namespace parsetier::internal
