// One traceEvents element, parsed: the fields the converter reads, as views into the parser's
// buffers (valid until the next parse).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace memcomm::prof::kineto {

// A pid or tid: Kineto writes numbers for real processes, threads, devices and streams, and
// strings for its own pseudo-tracks ("Spans", "PyTorch Profiler").
struct TrackId {
  bool is_string = false;
  int64_t number = 0;
  std::string_view text;
};

inline constexpr int64_t kNoArg = INT64_MIN;

// A JSON number's text, converted by us_to_ns.
struct Number {
  bool present = false;
  std::string_view text;
};

// A Gloo op's span ("gloo:all_reduce"; Note [Phases a torch.profiler trace names] in converter.cpp).
inline bool gloo_op(std::string_view name) { return name.size() > 5 && name.substr(0, 5) == "gloo:"; }
// PyTorch's host annotation around an NCCL collective's launch ("nccl:all_to_all"; Note
// [Collectives named by their host annotation] in converter.cpp).
inline bool nccl_annotation(std::string_view name) { return name.size() > 5 && name.substr(0, 5) == "nccl:"; }

// Every text field is a view; EventParser::own_strings copies each of them (a new one goes there too).
struct RawEvent {
  std::string_view ph, cat, name;
  Number ts, dur;
  TrackId pid, tid;
  // args the converter reads (kNoArg / "" when absent)
  int64_t correlation = kNoArg, device = kNoArg, stream = kNoArg, bytes = kNoArg;
  int64_t device_type = kNoArg, device_id = kNoArg, mem_bytes = kNoArg, total_allocated = kNoArg,
          total_reserved = kNoArg;
  uint64_t addr = 0;
  bool has_addr = false;            // the 2021 schema's [memory] events have no Addr
  int64_t in_nelems = kNoArg, out_nelems = kNoArg, group_size = kNoArg;
  std::string_view arg_name;        // M events: args.name
  std::string_view collective, dtype, pg_name, pg_ranks;
  // A gloo: span's or nccl: annotation's "Input Dims" (record_shapes=True) as the elements of its
  // tensors, and the first of its "Input type"s (Note [Phases a torch.profiler trace names] in
  // converter.cpp)
  int64_t input_elements = kNoArg;
  std::string_view input_type;
  // ph "C": the numeric args (a vector, so events that are not counters stay small)
  std::vector<std::pair<std::string_view, double>> counters;

  // Back to "nothing read", keeping the counters' capacity.
  void reset() {
    auto keep = std::move(counters);
    keep.clear();
    *this = RawEvent{};
    counters = std::move(keep);
  }
};

// The top-level members the converter reads (each set when its member was met and valid).
struct TopLevel {
  int64_t rank = -1, world_size = -1, base_time_ns = 0, schema_version = 0;
  bool rank_unreadable = false;  // distributedInfo has a rank that is not an integer
  bool world_size_unreadable = false;  // ... a world_size that is not an integer
  std::string display_time_unit, host;
  std::string producer;  // otherData.producer: "memcomm-trace" in memcomm's own Chrome export
  struct Device {
    int64_t id;
    std::string name;
    uint64_t total_memory;
  };
  std::vector<Device> devices;
};

// Note [One simdjson translation unit]
// raw_event.cpp is the only file that includes simdjson.h. On x86-64 it is compiled for AVX2
// (MEMCOMM_KINETO_AVX2, the default) so that simdjson's On Demand API, which is fixed at compile
// time to the instruction set the flags allow, runs its Haswell kernel: it decodes only the fields
// the converter asks for and skips the rest, twice the speed of the DOM parser on these events.
// Keeping simdjson's inline functions in one translation unit means no copy compiled for AVX2 can
// stand in for a baseline copy elsewhere. kineto_parser_supported() checks the CPU before any of it
// runs (kineto_reader.cpp, compiled for the baseline).

// The start of EventParser::parse's error for an element that is not JSON at all (a syntax error, as
// opposed to valid JSON of another shape): the file is corrupt (Converter::malformed).
inline constexpr std::string_view kBrokenJson = "broken JSON: ";
// Parses one element. False (with `error` set) when it is not a JSON object or is malformed.
class EventParser {
 public:
  EventParser();
  ~EventParser();
  bool parse(std::string_view raw, size_t readable_after, RawEvent& out, std::string& error);
  // Copies every text `e` refers to into `arena` and points `e` there. `arena` must have room
  // (capacity) for the element's raw size: no unescaped text is longer than its JSON.
  static void own_strings(RawEvent& e, std::string& arena);
  // Reads a top-level member into `top`; false when its value is not valid JSON.
  bool parse_member(std::string_view key, std::string_view raw, TopLevel& top);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Note [Microseconds to nanoseconds]
// Kineto writes microseconds: integers in older traces, decimals with up to three digits (ns) in
// newer ones, as large as 1712195495505582.988 (19 significant digits, past what a double holds
// and past simdjson's fast number path). So the number's text is converted, not its double: whole
// microseconds and the first three fraction digits exactly, a fourth rounding half up. A number
// with an exponent goes through strtod. HTA reads the same text into pandas' float64; `memcomm-trace
// report --hta` redoes that rounding where it matters (Note [HTA's float64 microseconds]).
// False when the number is not finite or the result leaves +-2^62 ns.
bool us_to_ns(const Number& us, int64_t& ns, bool& sub_us);
bool us_text_to_ns(std::string_view text, int64_t& ns, bool& sub_us);

}  // namespace memcomm::prof::kineto
