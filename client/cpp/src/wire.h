// The error in a failed call's wire dialect (Open.wire, a Render's dialect), which the server
// sends in the trailing metadata parsetier-wire-bin (docs/service.md, "Errors in the dialect").
#pragma once

#include <string>

#include <grpcpp/grpcpp.h>

namespace parsetier::internal {

// The bytes of the trailer, once the call has ended; empty when the server sent none.
inline std::string WireTrailer(const grpc::ClientContext& context) {
  const auto& trailers = context.GetServerTrailingMetadata();
  auto wire = trailers.find("parsetier-wire-bin");
  return wire == trailers.end() ? "" : std::string(wire->second.data(), wire->second.size());
}

}  // namespace parsetier::internal
