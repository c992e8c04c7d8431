// Turns parsed traceEvents elements and top-level members into memcomm events
// (Note [Kineto events as memcomm events] in kineto.hpp).
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "collectives.hpp"
#include "host_ranges.hpp"
#include "interner.hpp"
#include "json_splitter.hpp"
#include "memcomm/trace/comm_kernels.hpp"
#include "memcomm/trace/kineto.hpp"
#include "raw_event.hpp"
#include "size_pairing.hpp"
#include "tracks.hpp"

namespace memcomm::prof::kineto {

// Note [One origin for every torch.profiler trace]
// Kineto timestamps are Unix-epoch microseconds, or microseconds after baseTimeNanoseconds in
// newer traces. Unix nanoseconds (~1.7e18) lie beyond the +-2^60 ns the trace layer keeps
// (kMaxAbsTimestamp), so every Kineto trace is put on one fixed origin, kKinetoEpochNs
// (2020-09-13 12:26:40 UTC), recorded as StartTime. A fixed origin needs no coordination: ranks
// written by different processes, with different baseTimeNanoseconds, land on one timeline as
// their wall clocks put them, which is how HTA and Perfetto align them too.
inline constexpr int64_t kKinetoEpochNs = int64_t(1600000000) * 1000000000;
// Timestamps are not Unix-epoch ones when a trace without baseTimeNanoseconds starts before this
// (1990): older Kineto stamped events in microseconds since boot, and hand-written or converted
// traces count from 0. Moved onto the origin they would fall ~1.6e18 ns before it, past the bound,
// and every event would collapse onto one clamped time (a pytorch/kineto docs trace read -1 us of
// kernel time); such a trace keeps its own timestamps and records no StartTime.
inline constexpr int64_t kUnixTimeFloorNs = int64_t(631152000) * 1000000000;

class Converter final : public SplitHandler {
 public:
  Converter(std::string name, const KinetoOptions& opt);
  ~Converter();
  void member(std::string_view key, std::string_view raw_value) override;
  void event(std::string_view raw, size_t readable_after) override;
  // The two halves of event(), for parsing on other threads (Note [Parsing beside the converter]).
  void convert(const RawEvent& e);
  void malformed(const std::string& error);
  KinetoTrace finish(const SplitResult& split);

 private:
  enum class Kind : uint8_t {
    Range, Annotation, PythonFrame, GpuAnnotation, Launch, Kernel, Memcpy, Memset, DeviceSync, Instant, Known, Generic,
    Window
  };
  Kind kind_of(std::string_view cat);
  void skip(const std::string& reason) { ++info_.skipped[reason]; }
  [[noreturn]] void throw_no_torch_event() const;  // Note [JSON of another tool]
  bool times(const RawEvent& e, bool need_dur, int64_t& begin, int64_t& end);
  void on_complete(const RawEvent& e, Kind kind);
  void on_instant(const RawEvent& e, Kind kind);
  void on_memory(const RawEvent& e, int64_t ts, bool oom);
  void on_metadata(const RawEvent& e);
  void on_counter(const RawEvent& e);
  // `annotation`: a user_annotation (record_function), Phase::Annotation unless its name says another phase.
  void add_range(const RawEvent& e, int64_t begin, int64_t end, uint16_t thread, bool gpu, bool annotation = false);
  void add_device_span(const RawEvent& e, Kind kind, int64_t begin, int64_t end);
  bool is_comm_kernel(StringId name);
  void emit_metadata(int64_t ts, bool epoch);
  void take_top_level();
  void name_collectives_from_host();

  std::string name_;
  KinetoInfo info_;
  EventParser parser_;
  RawEvent raw_;
  std::string error_;
  Interner strings_;
  Tracks tracks_;
  std::vector<Event> events_;
  std::vector<HostSpan> spans_;
  // The shapes of nccl: annotations that recorded them, by their index in spans_: (elements, type).
  std::unordered_map<size_t, std::pair<int64_t, StringId>> annotation_sizes_;
  std::vector<CommKernel> comm_kernels_;
  CommKernelRule comm_rule_;
  std::unordered_map<StringId, bool> comm_names_;
  struct Category {
    std::string name;
    Kind kind;
    uint64_t count;
  };
  std::vector<Category> categories_;  // the few a trace has, searched linearly
  int64_t min_ts_ = INT64_MAX;
  uint32_t rank_ = 0, world_size_ = 0;
  TopLevel top_;
  SizePairing unaddressed_;  // Note [Memory events without addresses]
};

}  // namespace memcomm::prof::kineto
