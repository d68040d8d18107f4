// WireJoin: the sessions of a request's n > 1 choices joined into one response. A body join
// keeps the server's bytes and rebuilds only the `choices` array, so it needs no JSON library:
// a scan that finds a top-level member's value and an array's elements (strings skipped with
// their escapes) is enough.
#include "parsetier/wire_join.h"

#include <algorithm>
#include <cctype>
#include <optional>
#include <stdexcept>
#include <utility>

namespace parsetier {

namespace {

using Span = std::pair<size_t, size_t>;  // [first, second) of a value in the text

size_t Space(const std::string& text, size_t at) {
  while (at < text.size() && std::isspace(static_cast<unsigned char>(text[at]))) ++at;
  return at;
}

// The end of the value that starts at `at` (a string, object, array or scalar).
std::optional<size_t> ValueEnd(const std::string& text, size_t at) {
  size_t depth = 0;
  size_t i = at;
  for (; i < text.size(); ++i) {
    char c = text[i];
    if (c == '"') {
      for (++i; i < text.size() && text[i] != '"'; i += text[i] == '\\' ? 2 : 1) {
      }
      if (i >= text.size()) return std::nullopt;
      if (depth == 0) return i + 1;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if ((c == '}' || c == ']') && depth > 0) {
      if (--depth == 0) return i + 1;
    } else if (depth == 0 && (c == ',' || c == '}' || c == ']' || std::isspace(static_cast<unsigned char>(c)))) {
      if (i == at) return std::nullopt;
      return i;
    }
  }
  if (depth != 0 || i == at) return std::nullopt;
  return i;
}

// The span of the value of `key` in the object `text`, at its top level.
std::optional<Span> Member(const std::string& text, const std::string& key) {
  size_t at = Space(text, 0);
  if (at >= text.size() || text[at] != '{') return std::nullopt;
  at = Space(text, at + 1);
  while (at < text.size() && text[at] == '"') {
    std::optional<size_t> name_end = ValueEnd(text, at);
    if (!name_end) return std::nullopt;
    bool found = text.compare(at + 1, *name_end - at - 2, key) == 0;
    at = Space(text, *name_end);
    if (at >= text.size() || text[at] != ':') return std::nullopt;
    size_t start = Space(text, at + 1);
    std::optional<size_t> end = ValueEnd(text, start);
    if (!end) return std::nullopt;
    if (found) return Span{start, *end};
    at = Space(text, *end);
    if (at >= text.size() || text[at] != ',') return std::nullopt;
    at = Space(text, at + 1);
  }
  return std::nullopt;
}

// The spans of the elements of the array at `array` in `text`.
std::optional<std::vector<Span>> Elements(const std::string& text, Span array) {
  if (text[array.first] != '[') return std::nullopt;
  std::vector<Span> out;
  size_t at = Space(text, array.first + 1);
  while (at < array.second - 1) {
    std::optional<size_t> end = ValueEnd(text, at);
    if (!end) return std::nullopt;
    out.emplace_back(at, *end);
    at = Space(text, *end);
    if (at < text.size() && text[at] == ',') at = Space(text, at + 1);
  }
  return out;
}

Error BadBody(size_t choice, const char* what) {
  return Error(grpc::StatusCode::INTERNAL, "parsetier: choice " + std::to_string(choice) + "'s body " + what);
}

}  // namespace

WireJoin::WireJoin(size_t n, bool stream) : n_(n), stream_(stream), held_(n) {
  if (n == 0) throw std::invalid_argument("parsetier: a WireJoin needs at least one choice");
}

std::string WireJoin::Add(size_t choice, const v1::ParseResponse& reply) {
  return AddBytes(choice, reply.wire(), reply.has_final() ? &reply.final() : nullptr, "");
}

std::string WireJoin::Add(size_t choice, const v1::SessionOutput& output) {
  return AddBytes(choice, output.wire(), output.has_final() ? &output.final() : nullptr,
                  output.has_status() ? output.status().wire() : "");
}

std::string WireJoin::Fail(const Error& error) {
  if (ended_) return "";
  ended_ = true;
  return error.wire();
}

std::string WireJoin::AddBytes(size_t choice, const std::string& wire, const v1::Final* final,
                               const std::string& failed) {
  if (choice >= n_) {
    throw std::out_of_range("parsetier: choice " + std::to_string(choice) + " is not in 0.." + std::to_string(n_ - 1));
  }
  if (ended_) return "";
  held_[choice] += wire;
  if (final != nullptr) {
    if (!finals_.emplace(choice, final->wire()).second) {
      throw Error(grpc::StatusCode::INTERNAL, "parsetier: choice " + std::to_string(choice) + " finished twice");
    }
    last_ = choice;
  }
  std::string out = stream_ ? Release() : "";
  if (!failed.empty()) {
    ended_ = true;
    return out + failed;
  }
  if (finals_.size() == n_) {
    ended_ = true;
    out += stream_ ? finals_[last_] : JoinedBody();
  }
  return out;
}

// The held events that may go out: those of every choice whose predecessors started.
std::string WireJoin::Release() {
  std::string out;
  while (started_ < n_ && !held_[started_].empty()) {
    out += held_[started_];
    held_[started_].clear();
    ++started_;
  }
  for (size_t choice = 0; choice < started_; ++choice) {
    out += held_[choice];
    held_[choice].clear();
  }
  return out;
}

// The last body with every body's `choices` entries, in index order, as its `choices`.
std::string WireJoin::JoinedBody() const {
  if (n_ == 1) return finals_.at(0);  // one choice's body is the response's, in any dialect
  std::vector<std::pair<uint64_t, std::string>> entries;
  for (const auto& [choice, body] : finals_) {
    std::optional<Span> array = Member(body, "choices");
    std::optional<std::vector<Span>> elements = array ? Elements(body, *array) : std::nullopt;
    if (!elements) throw BadBody(choice, "has no choices array");
    for (const Span& element : *elements) {
      std::string entry = body.substr(element.first, element.second - element.first);
      std::optional<Span> index = Member(entry, "index");
      std::string digits = index ? entry.substr(index->first, index->second - index->first) : "";
      if (digits.empty() || !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
        throw BadBody(choice, "has a choices entry without an index");
      }
      entries.emplace_back(std::stoull(digits), std::move(entry));
    }
  }
  // stable: a choice's own entries keep their order
  std::stable_sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  const std::string& last = finals_.at(last_);
  Span array = *Member(last, "choices");  // checked above
  std::string out = last.substr(0, array.first) + "[";
  for (size_t i = 0; i < entries.size(); ++i) {
    if (i) out += ',';
    out += entries[i].second;
  }
  return out + "]" + last.substr(array.second);
}

}  // namespace parsetier
