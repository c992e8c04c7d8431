// Splits a torch.profiler trace's JSON into what the converter parses one piece at a time: the
// top-level members (metadata) and each element of "traceEvents" (Note [Streaming the trace]).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "json_blocks.hpp"

namespace memcomm::prof::kineto {

// The deepest nesting accepted inside one value; deeper input is refused with an error.
inline constexpr int kMaxJsonDepth = 256;
// Spaces left after the text handed to the parser: simdjson reads up to SIMDJSON_PADDING bytes past a
// value (raw_event.cpp checks that this covers it).
inline constexpr size_t kParsePadding = 64;

class SplitHandler {
 public:
  virtual ~SplitHandler() = default;
  // A top-level member other than traceEvents, its value's raw JSON text.
  virtual void member(std::string_view key, std::string_view raw_value) = 0;
  // One element of traceEvents, its raw JSON text; `readable_after` bytes after it may be read.
  virtual void event(std::string_view raw, size_t readable_after) = 0;
};

struct SplitResult {
  uint64_t json_bytes = 0;    // bytes consumed
  uint64_t events = 0;        // traceEvents elements handed over
  bool truncated = false;     // the input ended inside traceEvents (or after it, inside the object)
  uint64_t truncated_at = 0;  // byte offset just after the last complete element
};

// Walks the whole input. Throws TraceError naming `name` when it is not a torch.profiler trace
// (not a JSON object, or no traceEvents array), when brackets do not match, or when nesting is
// deeper than kMaxJsonDepth.
SplitResult split_trace(JsonBlocks& blocks, SplitHandler& handler, const std::string& name);

// Whether a file's first bytes are JSON in UTF-16 or UTF-32 (a byte order mark of those, or a NUL,
// which UTF-8 JSON never holds), which the splitter names as such.
bool wide_json(std::string_view head);

}  // namespace memcomm::prof::kineto
