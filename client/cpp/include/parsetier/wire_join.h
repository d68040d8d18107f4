// The n > 1 choices of one OpenAI chat or completions request are n sessions whose wire bytes
// (OpenOptions::wire) make one response: WireJoin orders and joins them (docs/service.md,
// "Several choices"), so that no gateway writes it by hand.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "parsetier/client.h"

namespace parsetier {

// The wire bytes of n sessions, the choices 0 .. n-1 of one OpenAI chat or completions request
// (choice i opened with choice_index i), joined into the one response its caller reads; with
// n = 1, any dialect's bytes pass through unchanged, so one code path serves every request. Feed
// each session's replies as they come (Add: a Parse reply or a Batch output) and forward what it
// returns.
//
// Streamed: a choice's events are held until every choice before it has sent its first (the
// openai SDK's accumulator appends a choice index it has not seen, so an index that comes early
// breaks it); every choice's Final.wire is held and only the last to finish has its own go out,
// once all have finished (send that choice's Finish WithOtherChoicesUsage, the others' finals,
// and its usage chunk counts every choice). A body (stream false): each choice's Final.wire is a
// whole body; once all have one, the joined body is the last one's with every choice's
// `choices` entries in index order (its usage is the request's, with other_choices_usage). A
// choice that ends with a status ends the response: its error bytes go out at once, held events
// are dropped, and nothing more comes (cancel the other choices' sessions).
//
// Not safe for concurrent use: feed it from one thread (or under the caller's lock).
class WireJoin {
 public:
  // Joins n choices (at least one: std::invalid_argument otherwise), streamed or as bodies.
  WireJoin(size_t n, bool stream);

  // The response is complete (every choice finished) or failed: nothing more comes.
  bool ended() const { return ended_; }

  // The bytes to forward now for one of choice `choice`'s Parse replies, or Batch outputs (whose
  // status, when it ended the session, carries the error in the dialect). Throws
  // std::out_of_range for a choice outside 0 .. n-1, and Error (INTERNAL) for a choice that
  // finishes twice or a body that is not a JSON object with a `choices` array.
  std::string Add(size_t choice, const v1::ParseResponse& reply);
  std::string Add(size_t choice, const v1::SessionOutput& output);

  // A choice's Parse session failed with `error` (what Session::Next threw): the bytes that end
  // the response (error.wire(), the error in the dialect; empty if the server sent none), then
  // nothing more.
  std::string Fail(const Error& error);

 private:
  std::string AddBytes(size_t choice, const std::string& wire, const v1::Final* final,
                       const std::string& failed);
  std::string Release();
  std::string JoinedBody() const;

  size_t n_;
  bool stream_;
  bool ended_ = false;
  size_t started_ = 0;  // choices 0 .. started_-1 have sent their first events
  size_t last_ = 0;     // the choice that finished last
  std::vector<std::string> held_;
  std::map<size_t, std::string> finals_;
};

}  // namespace parsetier
