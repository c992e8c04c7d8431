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

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <fmt/format.h>

#include "memcomm/trace/trace_error.hpp"

namespace memcomm::prof::kineto {
namespace {


bool is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

// See Note [Corrupt, not cut short]: the longest unclosed event read as a file cut short.
constexpr size_t kLongestCutEvent = size_t(256) << 10;  // 37 times the longest event seen

// Where a scan of an object, array or string is: resumable when more input is appended.
struct ContainerScan {
  int depth = 0;
  bool in_string = false;
  size_t skip_to = 0;  // the byte after a backslash is not structural
  size_t raw_control = SIZE_MAX;  // where a raw control byte sat inside a string (Note [Corrupt, not cut short])
  bool step(const char* data, size_t p);
  bool block(const char* data, size_t i, size_t& end);
};

class Splitter {
 public:
  Splitter(JsonBlocks& blocks, SplitHandler& handler, const std::string& name)
      : blocks_(blocks), handler_(handler), name_(name) {}
  SplitResult run();

 private:
  bool more(size_t& keep);
  bool skip_space();
  bool scan_value(size_t start, size_t& end);
  bool scan_scalar(size_t start, size_t& end);
  bool read_events(bool bare = false);
  bool read_member(bool& saw_events);
  bool execution_trace_ = false;  // a top-level "nodes" member: ExecutionTraceObserver's JSON
  bool memory_snapshot_ = false;  // a top-level "segments" or "device_traces": a snapshot json.dump'ed
  std::string what_it_is_instead() const;
  [[noreturn]] void fail(size_t at, const std::string& what) const {
    throw TraceError(fmt::format("{}: {} (JSON byte {})", name_, what, base_ + at));
  }
  // Note [Corrupt, not cut short]
  // A file cut short ends inside an element, and the scan runs to the end of the input: that is a
  // truncation, and every event before it loads. A stray quote in the middle of a file does the same
  // to the scan (strings and structure swap places), and once read as a truncation half the trace
  // was dropped with exit 0. JSON forbids raw control bytes inside strings, and torch.profiler puts a
  // newline between events, so the first newline the scan meets "inside a string" says the file is
  // corrupt there: an error, not a truncation. A file with no newlines (HTA's and TraceLens's copies
  // are one line) has no such byte, so there the length decides: a cut leaves at most one event's
  // bytes after the last complete one, and no torch.profiler event is near kLongestCutEvent (the
  // longest among some 60 real traces was 6.9 KB), so an unclosed event that runs longer to the end
  // is corrupt too: a stray quote in the middle of a 62 MB one-line trace had dropped half of it.
  // The check is one more mask per 64 bytes: bench_kineto_load on a 379 MB trace, side by side with
  // the build before it, 0.84-0.95 s before and 0.89-0.94 s after (best of 3, two rounds each).
  [[noreturn]] void fail_corrupt(size_t at) const {
    fail(at, "broken JSON: a raw control byte inside a string (a stray or missing quote before it?)");
  }
  size_t readable_after(size_t end) const { return data_.size() - end + (buf_.empty() ? 0 : kParsePadding); }

  JsonBlocks& blocks_;
  SplitHandler& handler_;
  const std::string& name_;
  std::string_view data_;
  std::string buf_, spare_;
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
  // Two buffers in turn, so their memory is reused block after block.
  spare_.clear();
  spare_.reserve(data_.size() - drop + block.size() + kParsePadding);
  spare_.append(data_.substr(drop)).append(block);
  buf_.swap(spare_);
  data_ = std::string_view(buf_);
  buf_.append(kParsePadding, ' ');
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

bool is_structural(char c) { return c == '"' || c == '\\' || c == '{' || c == '}' || c == '[' || c == ']'; }

// Note [Scanning 64 bytes at a time]
// The element scanner classifies 64 bytes at once, as simdjson's stage 1 does: bit masks of quotes,
// brackets and backslashes (SSE2, part of x86-64; a byte loop elsewhere), the in-string mask as the
// prefix XOR of the quotes, and the brackets outside strings. The nesting depth moves by the
// popcounts, and the bits are walked one by one only in a block whose closing brackets could bring
// the depth to zero. A block with a backslash, or one that starts inside an escape, takes the byte
// loop (rare in torch.profiler output).
struct BlockMasks {
  uint64_t quote = 0, backslash = 0, open = 0, close = 0, control = 0;  // control: bytes below 0x20
};

BlockMasks classify(const char* p) {
  BlockMasks m;
#if defined(__SSE2__)
  for (int k = 0; k < 4; ++k) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * k));
    auto bits = [&](char c) { return uint64_t(uint32_t(_mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8(c))))) << (16 * k); };
    m.quote |= bits('"');
    m.backslash |= bits('\\');
    m.open |= bits('{') | bits('[');
    m.close |= bits('}') | bits(']');
    const __m128i high = _mm_and_si128(v, _mm_set1_epi8(char(0xE0)));
    m.control |= uint64_t(uint32_t(_mm_movemask_epi8(_mm_cmpeq_epi8(high, _mm_setzero_si128())))) << (16 * k);
  }
#else
  for (int k = 0; k < 64; ++k) {
    const uint64_t bit = uint64_t(1) << k;
    m.quote |= p[k] == '"' ? bit : 0;
    m.backslash |= p[k] == '\\' ? bit : 0;
    m.open |= (p[k] == '{' || p[k] == '[') ? bit : 0;
    m.close |= (p[k] == '}' || p[k] == ']') ? bit : 0;
    m.control |= static_cast<unsigned char>(p[k]) < 0x20 ? bit : 0;
  }
#endif
  return m;
}

// Bit counting without a library call (the splitter is built for the baseline instruction set).
int popcount(uint64_t x) {
  x = x - ((x >> 1) & 0x5555555555555555ull);
  x = (x & 0x3333333333333333ull) + ((x >> 2) & 0x3333333333333333ull);
  x = (x + (x >> 4)) & 0x0F0F0F0F0F0F0F0Full;
  return int((x * 0x0101010101010101ull) >> 56);
}

uint64_t prefix_xor(uint64_t x) {
  for (int shift = 1; shift < 64; shift *= 2) x ^= x << shift;
  return x;
}

// One structural byte of a container scan; true when it closed the outermost bracket.
bool ContainerScan::step(const char* data, size_t p) {
  const char c = data[p];
  if (p < skip_to) return false;
  if (in_string) {
    if (c == '\\') skip_to = p + 2;
    else if (c == '"') in_string = false;
    return false;
  }
  if (c == '"') {
    in_string = true;
  } else if (c == '{' || c == '[') {
    ++depth;
  } else if (c == '}' || c == ']') {
    return --depth == 0;
  }
  return false;
}

// See Note [Scanning 64 bytes at a time]: true with `end` when the block at i closed the value.
bool ContainerScan::block(const char* data, size_t i, size_t& end) {
  const BlockMasks m = classify(data + i);
  if (m.backslash || skip_to > i) {
    for (size_t p = i; p < i + 64; ++p) {
      if (in_string && static_cast<unsigned char>(data[p]) < 0x20) return raw_control = p, false;
      if (is_structural(data[p]) && step(data, p)) return end = p + 1, true;
    }
    return false;
  }
  const uint64_t strings = prefix_xor(m.quote) ^ (in_string ? ~uint64_t(0) : 0);
  if (m.control & strings & ~m.quote) return raw_control = i + size_t(__builtin_ctzll(m.control & strings & ~m.quote)), false;
  const uint64_t open = m.open & ~strings, close = m.close & ~strings;
  in_string = (strings >> 63) & 1;
  const int closes = popcount(close);
  if (closes < depth) {
    depth += popcount(open) - closes;
    return false;
  }
  for (uint64_t bits = open | close; bits; bits &= bits - 1) {
    const int k = __builtin_ctzll(bits);
    if (open >> k & 1) ++depth;
    else if (--depth == 0) return end = i + size_t(k) + 1, true;
  }
  return false;
}

bool Splitter::scan_value(size_t start, size_t& end) {
  const char first = data_[start];
  if (first != '{' && first != '[' && first != '"') return scan_scalar(start, end);
  ContainerScan scan;
  size_t i = start;
  while (true) {
    const size_t n = data_.size();
    while (i < n) {
      if (first != '"' && i + 64 <= n) {
        if (scan.block(data_.data(), i, end)) return true;
        if (scan.raw_control != SIZE_MAX) fail_corrupt(scan.raw_control);
        i += 64;
      } else {
        if (scan.in_string && i > start && static_cast<unsigned char>(data_[i]) < 0x20) fail_corrupt(i);
        if (is_structural(data_[i]) && scan.step(data_.data(), i)) return end = i + 1, true;
        if (first == '"' && i > start && !scan.in_string) return end = i + 1, true;
        ++i;
      }
      if (scan.depth > kMaxJsonDepth) fail(i, fmt::format("JSON nested deeper than {} levels", kMaxJsonDepth));
    }
    const size_t rel = i - start, skip_rel = scan.skip_to > start ? scan.skip_to - start : 0;
    size_t keep = start;
    if (!more(keep)) return false;
    start = keep;
    i = start + rel;
    scan.skip_to = start + skip_rel;
  }
}

// A number, true, false or null: ends at a delimiter.
bool Splitter::scan_scalar(size_t start, size_t& end) {
  size_t i = start;
  while (true) {
    const size_t n = data_.size();
    for (; i < n; ++i) {
      const char c = data_[i];
      if (c == ',' || c == '}' || c == ']' || is_space(c)) {
        end = i;
        return i > start;
      }
    }
    const size_t rel = i - start;
    size_t keep = start;
    if (!more(keep)) return false;
    start = keep;
    i = start + rel;
  }
}

// The traceEvents array's elements; `bare`: the array is the whole file (Note [A trace that is only
// its events]), so its first element must be an event object.
bool Splitter::read_events(bool bare) {
  const size_t open = pos_;
  ++pos_;  // '['
  bool first = true;
  while (true) {
    if (!skip_space()) return false;
    if (data_[pos_] == ']') {
      if (bare && first) fail(open, "not a torch.profiler trace (an empty array)");
      ++pos_;
      return true;
    }
    if (bare && first && data_[pos_] != '{') fail(pos_, "not a torch.profiler trace (an array whose elements are not events)");
    if (!first) {
      if (data_[pos_] != ',') fail(pos_, "expected ',' or ']' between traceEvents elements");
      ++pos_;
      if (!skip_space()) return false;
    }
    first = false;
    size_t end = 0;
    if (!scan_value(pos_, end)) {  // Note [Corrupt, not cut short]
      if (data_.size() - pos_ > kLongestCutEvent)
        fail(pos_, fmt::format("broken JSON: a traceEvents element runs {:.1f} MiB to the end of the input without "
                               "closing (a stray or missing quote?), longer than any event a cut could leave",
                               double(data_.size() - pos_) / double(1 << 20)));
      return false;
    }
    handler_.event(data_.substr(pos_, end - pos_), readable_after(end));
    ++result_.events;
    pos_ = end;
    result_.truncated_at = base_ + end;
  }
}

// One "name": value member of the top-level object; false when the input ends inside it.
bool Splitter::read_member(bool& saw_events) {
  if (data_[pos_] != '"') fail(pos_, "expected a member name in the top-level object");
  size_t key_end = 0;
  if (!scan_value(pos_, key_end)) return false;
  const std::string key(data_.substr(pos_ + 1, key_end - pos_ - 2));
  pos_ = key_end;
  if (!skip_space()) return false;
  if (data_[pos_] != ':') fail(pos_, "expected ':' after a member name");
  ++pos_;
  if (!skip_space()) return false;
  if (key == "traceEvents") {
    if (data_[pos_] != '[') fail(pos_, "not a torch.profiler trace (traceEvents is not an array)");
    saw_events = true;
    if (!read_events()) return false;
    result_.truncated_at = base_ + pos_;
    return true;
  }
  size_t end = 0;
  if (!scan_value(pos_, end)) return false;
  handler_.member(key, data_.substr(pos_, end - pos_));
  execution_trace_ |= key == "nodes";
  memory_snapshot_ |= key == "segments" || key == "device_traces";
  pos_ = end;
  return true;
}

// What a file that starts with neither '{' nor '[' is, where its first bytes tell.
std::string not_an_object(std::string_view head) {
  if (head.substr(0, 3) == "\xEF\xBB\xBF") return "a second UTF-8 byte order mark: not a torch.profiler trace";
  if (!head.empty() && static_cast<unsigned char>(head[0]) == 0x80)  // inside a gzip: only gzip's magic was read
    return "a pickle inside gzip (a compressed PyTorch memory snapshot?): not a torch.profiler trace; gunzip it "
           "first, the tools read snapshot pickles as they are";
  return "not a torch.profiler trace (the file is neither a JSON object nor an array)";
}

// An object with no traceEvents, named after what its members say it is.
std::string Splitter::what_it_is_instead() const {
  if (execution_trace_)
    return "a PyTorch execution trace (ExecutionTraceObserver's \"nodes\"), not a torch.profiler trace: read the "
           "torch.profiler trace recorded beside it";
  if (memory_snapshot_)
    return "a PyTorch memory snapshot written as JSON (\"segments\", \"device_traces\"); memcomm reads snapshots as "
           "torch writes them, pickled (torch.cuda.memory._dump_snapshot), as memory_viz does";
  return "not a torch.profiler trace (no traceEvents array)";
}

// Note [A trace that is only its events]: the Chrome trace format allows the events array alone
// as the whole file, and the earliest torch.profiler traces (torch 1.8 nightlies, December 2020) are
// written so. It reads as a traceEvents array with no other member.
SplitResult Splitter::run() {
  if (!skip_space())
    fail(0, blocks_.cut_short() ? "the compressed stream ends before any JSON (cut short?): not a complete torch.profiler trace"
                                : "empty file: not a torch.profiler trace");
  if (wide_json(data_.substr(pos_, 4)))
    fail(pos_, "JSON in UTF-16 or UTF-32: torch.profiler writes UTF-8; convert it (iconv -f UTF-16 -t UTF-8, "
               "or -f UTF-32) and read that");
  if (data_.substr(pos_, 3) == "\xEF\xBB\xBF") {  // a UTF-8 byte order mark (editors on Windows write one)
    pos_ += 3;
    if (!skip_space()) fail(pos_, "empty file: not a torch.profiler trace");
  }
  if (data_[pos_] == '[') {
    if (!read_events(true)) {
      result_.truncated = true;
      result_.json_bytes = base_ + data_.size();
      return result_;
    }
    result_.json_bytes = base_ + pos_;
    if (skip_space()) fail(pos_, "more data after the trace's JSON array (two files joined, or bytes appended?)");
    return result_;
  }
  if (data_[pos_] != '{') fail(pos_, not_an_object(data_.substr(pos_, 4)));
  ++pos_;
  bool saw_events = false, first = true;
  while (skip_space()) {
    if (data_[pos_] == '}') {
      result_.json_bytes = base_ + pos_ + 1;
      if (!saw_events)
        fail(pos_, what_it_is_instead());
      ++pos_;
      // Bytes past the object: a second document or something appended, which json.load (and so
      // HTA) refuses too; nothing of them is read.
      if (skip_space()) fail(pos_, "more data after the trace's JSON object (two files joined, or bytes appended?)");
      return result_;
    }
    if (!first) {
      if (data_[pos_] != ',') fail(pos_, "expected ',' or '}' between members of the top-level object");
      ++pos_;
      if (!skip_space()) break;
    }
    first = false;
    if (!read_member(saw_events)) break;
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

// PowerShell's `>` saves text as UTF-16 with a byte order mark; without one, a '{', '[' or white
// space beside a NUL (which UTF-8 JSON never holds) says it.
bool wide_json(std::string_view head) {
  if (head.substr(0, 2) == "\xFF\xFE" || head.substr(0, 2) == "\xFE\xFF") return true;
  const auto opens = [](char c) { return c == '{' || c == '[' || c == ' ' || c == '\n' || c == '\r' || c == '\t'; };
  return head.size() >= 2 && ((opens(head[0]) && head[1] == '\0') || (head[0] == '\0' && opens(head[1])) ||
                              (head.size() >= 4 && head.substr(0, 3) == std::string_view("\0\0\0", 3) && opens(head[3])));
}

}  // namespace memcomm::prof::kineto
