// Note [Streaming the trace]
// A torch.profiler trace is one JSON object whose "traceEvents" array holds nearly all of its
// bytes. Rather than build a DOM of the whole file (several times its size in memory), the
// splitter finds the boundaries of each array element with a small bracket-and-string scanner and
// hands each one to simdjson on its own: memory stays at one window of input, a file cut short
// yields every complete event before the cut, and metadata may come before or after the events
// (Kineto writes some of each). Only the scanner's bracket matching is checked here; simdjson
// validates each element fully.
//
// The window is the whole mapped file for plain JSON (no copy), or a buffer that keeps the unread
// tail of the last block and appends the next one for gzip input. Positions are kept relative to
// the window and shifted when it is compacted.
#include "json_splitter.hpp"

#include <fmt/format.h>

#include "memcomm/trace/trace_error.hpp"

namespace memcomm::prof::kineto {
namespace {

constexpr size_t kPadding = 64;  // spaces kept after the streamed window (simdjson's padding)

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

class Splitter {
 public:
  Splitter(JsonBlocks& blocks, SplitHandler& handler, const std::string& name)
      : blocks_(blocks), handler_(handler), name_(name) {}
  SplitResult run();

 private:
  bool more(size_t& keep);
  bool skip_space();
  bool scan_value(size_t start, size_t& end);
  bool scan_string(size_t& i);
  bool read_events();
  [[noreturn]] void fail(size_t at, const std::string& what) const {
    throw TraceError(fmt::format("{}: {} (JSON byte {})", name_, what, base_ + at));
  }
  size_t readable_after(size_t end) const { return data_.size() - end + (buf_.empty() ? 0 : kPadding); }

  JsonBlocks& blocks_;
  SplitHandler& handler_;
  const std::string& name_;
  std::string_view data_;
  std::string buf_;
  bool ended_ = false;
  size_t pos_ = 0;
  uint64_t base_ = 0;     // input offset of data_[0]
  SplitResult result_;
};

// Adds the next block to the window; `keep` (a window index) and pos_ follow the bytes they
// pointed at. False at the end of the input.
bool Splitter::more(size_t& keep) {
  if (ended_) return false;
  std::string_view block;
  if (!blocks_.next(block)) {
    ended_ = true;
    return false;
  }
  if (data_.empty() && blocks_.contiguous()) {
    data_ = block;
    return true;
  }
  const size_t drop = std::min(keep, pos_);
  std::string next;
  next.reserve(data_.size() - drop + block.size() + kPadding);
  next.append(data_.substr(drop)).append(block);
  buf_ = std::move(next);
  data_ = std::string_view(buf_);
  buf_.append(kPadding, ' ');
  base_ += drop;
  keep -= drop;
  pos_ -= drop;
  return true;
}

bool Splitter::skip_space() {
  while (true) {
    while (pos_ < data_.size() && is_space(data_[pos_])) ++pos_;
    if (pos_ < data_.size()) return true;
    size_t keep = pos_;
    if (!more(keep)) return false;
  }
}

// From the opening quote at i, moves i just past the closing quote. False when the input ends.
bool Splitter::scan_string(size_t& i) {
  ++i;
  while (true) {
    const size_t n = data_.size();
    while (i < n && data_[i] != '"' && data_[i] != '\\') ++i;
    if (i + 1 < n && data_[i] == '\\') {
      i += 2;
      continue;
    }
    if (i < n && data_[i] == '"') {
      ++i;
      return true;
    }
    return false;  // needs more input
  }
}

bool Splitter::scan_value(size_t start, size_t& end) {
  size_t i = start;
  int depth = 0;
  while (true) {
    const size_t n = data_.size();
    while (i < n) {
      const char c = data_[i];
      if (c == '"') {
        const size_t from = i;
        if (!scan_string(i)) {
          i = from;  // rescan this string once more input arrives
          break;
        }
        if (depth == 0) {
          end = i;
          return true;
        }
        continue;
      }
      if (c == '{' || c == '[') {
        if (++depth > kMaxJsonDepth) fail(i, fmt::format("JSON nested deeper than {} levels", kMaxJsonDepth));
      } else if (c == '}' || c == ']') {
        if (depth == 0) {
          end = i;
          return i > start;
        }
        if (--depth == 0) {
          end = i + 1;
          return true;
        }
      } else if (depth == 0 && (c == ',' || is_space(c))) {
        end = i;
        return i > start;
      }
      ++i;
    }
    const size_t rel = i - start;
    size_t keep = start;
    if (!more(keep)) return false;
    start = keep;
    i = start + rel;
  }
}

bool Splitter::read_events() {
  ++pos_;  // '['
  bool first = true;
  while (true) {
    if (!skip_space()) return false;
    if (data_[pos_] == ']') {
      ++pos_;
      return true;
    }
    if (!first) {
      if (data_[pos_] != ',') fail(pos_, "expected ',' or ']' between traceEvents elements");
      ++pos_;
      if (!skip_space()) return false;
    }
    first = false;
    size_t end = 0;
    if (!scan_value(pos_, end)) return false;
    handler_.event(data_.substr(pos_, end - pos_), readable_after(end));
    ++result_.events;
    pos_ = end;
    result_.truncated_at = base_ + end;
  }
}

SplitResult Splitter::run() {
  if (!skip_space()) fail(0, "empty file: not a torch.profiler trace");
  if (data_[pos_] != '{') fail(pos_, "not a torch.profiler trace (the file is not a JSON object)");
  ++pos_;
  bool saw_events = false, first = true;
  while (true) {
    if (!skip_space()) break;
    if (data_[pos_] == '}') {
      result_.json_bytes = base_ + pos_ + 1;
      if (!saw_events) fail(pos_, "not a torch.profiler trace (no traceEvents array)");
      return result_;
    }
    if (!first) {
      if (data_[pos_] != ',') fail(pos_, "expected ',' or '}' between members of the top-level object");
      ++pos_;
      if (!skip_space()) break;
    }
    first = false;
    if (data_[pos_] != '"') fail(pos_, "expected a member name in the top-level object");
    size_t key_end = pos_;
    if (!scan_string(key_end)) break;
    const std::string key(data_.substr(pos_ + 1, key_end - pos_ - 2));
    pos_ = key_end;
    if (!skip_space()) break;
    if (data_[pos_] != ':') fail(pos_, "expected ':' after a member name");
    ++pos_;
    if (!skip_space()) break;
    if (key == "traceEvents") {
      if (data_[pos_] != '[') fail(pos_, "not a torch.profiler trace (traceEvents is not an array)");
      saw_events = true;
      if (!read_events()) break;
      result_.truncated_at = base_ + pos_;
      continue;
    }
    size_t end = 0;
    if (!scan_value(pos_, end)) break;
    handler_.member(key, data_.substr(pos_, end - pos_));
    pos_ = end;
  }
  // The input ended inside the object.
  if (!saw_events) fail(pos_, "the file ends before any traceEvents: not a complete torch.profiler trace");
  result_.truncated = true;
  result_.json_bytes = base_ + data_.size();
  return result_;
}

}  // namespace

SplitResult split_trace(JsonBlocks& blocks, SplitHandler& handler, const std::string& name) {
  return Splitter(blocks, handler, name).run();
}

}  // namespace memcomm::prof::kineto
