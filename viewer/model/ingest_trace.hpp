// memcomm traces (.mct) into the viewer model (Note [Reader seams] in loader.cpp).
//
// Note [Fast ingest]: a 10 M-event file must load at >= 20 M events/s (issue 6), and the
// profiler's TraceReader alone decodes at ~30-100 M events/s, so the per-event work here is a
// switch and a push_back into the final array, nothing more:
//   - each chunk is decompressed once (no counting pass), and each event is written once, into
//     a ChunkedArray that grows without copying and that the model takes over as it is (Note
//     [Chunked arrays] in chunked.hpp), so no size estimate is needed up front (an earlier version
//     walked the chunk headers to reserve per-rank totals; with chunks that measured slower, its
//     ~5% over-estimate being mapped and then freed);
//   - the arrays are reached through pointers cached per (kind, stream) and per metric, and trace
//     string ids map to model ids through a flat table: no map lookup, no virtual or builder call
//     per event; kernels and allocator events (most of a trace) are pushed from the batch loop
//     itself; collective op names, communicator sizes and the range stack of the last thread are
//     cached too, so no string is hashed per event;
//   - decompression of chunk k+1 can run on a second thread while chunk k is ingested (Note
//     [Decode ahead] in ingest_file.cpp; LoadOptions::decode_ahead, on with more than 2 cores);
//   - the arrays' pages are mapped a chunk at a time, not faulted one by one, and by a second
//     thread ahead of the ingest (Notes [Prefaulting bulk arrays] and [Prefaulting on the second
//     core] in prefault.cpp).
// Per-thread ranges and (comm, seq) collectives are paired here; custom (NVTX) ranges and the
// host's launch and sync calls go on one lane per thread, named by the trace's ThreadName
// records (StreamName names the stream lanes); rank clock offsets
// (MetaKey::ClockOffset) are applied unless the file is already merged, as TraceSet does.
//
// Note [Time range load]: with a range [lo, hi] (ns on the timeline), only events that overlap it
// are kept: spans that overlap it, instants inside it. A chunk whose events all lie outside the
// range is only scanned for range/collective pairing and metadata. Chunk headers carry no time
// bounds (trace_format.hpp), so chunks are still decompressed. The allocator state view then
// starts from the blocks allocated inside the range.
#pragma once

#include <memcomm/trace/event.hpp>
#include <memcomm/trace/mixed_runs.hpp>
#include <memcomm/view/builder.hpp>
#include <memcomm/view/loader.hpp>

#include <atomic>
#include <bitset>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <unordered_map>
#include <vector>

namespace memcomm::view {

// Turns profiler events of any number of ranks into the builder's arrays. Also the seam for live
// streams: a receiver hands decoded batches to add().
class TraceIngest {
 public:
  explicit TraceIngest(TimelineBuilder& b);
  // `strings` resolves the batch's StringIds; `apply_offsets` is false for merged files.
  template <class Strings>
  void add(const prof::Event* ev, std::size_t n, std::uint32_t rank, const Strings& strings, bool apply_offsets);
  // A rank's stream restarted (live reconnect): its string ids mean something new from here on.
  void reset_strings(std::uint32_t rank) {
    auto it = ranks_.find(rank);
    if (it == ranks_.end()) return;
    it->second.ids.clear();
    it->second.counters.clear();
  }
  // The rank's clock offset, known before its events (Note [Clock offsets found first] in
  // ingest_file.cpp): every event of the rank is shifted by it, and the first `records` ClockOffset
  // records of the rank, which it sums up, are not applied again where they stand in the file.
  void preset_offset(std::uint32_t rank, std::int64_t offset, std::uint32_t records) {
    RankState& rs = state(rank);
    rs.offset = bounded_time(offset);
    rs.offset_records_to_skip = records;
  }
  // What each rank's events said about the run that recorded them (Note [One run or several] in
  // trace/src/mixed_runs.cpp), with `source` as the file and `header_world` (0: none) as the world
  // size of a rank whose events do not name it.
  std::vector<prof::RunFacts> run_facts(const std::string& source, std::uint32_t header_world) const;
  // The world size of a file's header (0: none, a merged file), for the ranks whose events do not
  // name it: a collective whose communicator's size was not recorded spans the world, as
  // memcomm-trace report counts it (prof::collective_stats), not only the ranks loaded.
  void set_header_world(std::uint32_t world) { header_world_ = world; }
  // Keep only events overlapping [lo, hi] ns on the timeline (Note [Time range load]).
  void set_range(std::int64_t lo, std::int64_t hi) {
    lo_ = lo;
    hi_ = hi;
  }

 private:
  using Resolve = std::string_view (*)(const void*, prof::StringId);
  struct RangeOpen {
    std::int64_t ts;
    prof::Phase phase;
    std::uint32_t name;  // builder string id
    std::uint64_t id;
    bool named;          // the range has a name of its own (an operator), not its phase's
  };
  struct RankState {
    std::int64_t offset = 0;
    std::uint32_t offset_records_to_skip = 0;  // preset_offset(): records already applied
    std::map<std::uint16_t, std::vector<RangeOpen>> open;            // per thread, LIFO
    std::vector<RangeOpen>* open_last = nullptr;                     // open[open_thread], cached
    std::uint16_t open_thread = 0;
    std::unordered_map<std::uint64_t, prof::CollectiveEvent> colls;  // (comm, seq) -> start/enqueue
    std::uint16_t comm_size[256] = {};               // by communicator index (0: unknown)
    std::uint64_t comm_hash[256] = {};               // by communicator index: CommInfo's hash (comm_known)
    std::bitset<256> comm_known;
    std::vector<std::uint32_t> ids;                  // trace string id -> builder id (kNoId: not yet)
    SpanRow* lanes[3][256] = {};           // [kernel/memcpy/memset][stream], cached
    SpanRow* phases = nullptr;             // cached lane arrays
    SpanRow* nvtx_last = nullptr;          // the NVTX lane of thread nvtx_thread
    std::uint16_t nvtx_thread = 0;
    bool step_ids = false;                 // the builder was told (step_ids_recorded)
    AllocEvents* alloc = nullptr;
    CounterSeries* metrics[static_cast<int>(prof::MemMetric::Count)] = {};
    int mem_device = -1;  // device whose allocated/active/reserved samples are drawn (better_curve_device)
    std::unordered_map<prof::StringId, CounterSeries*> counters;  // user counters by name id
    // For run_facts(): the world size named, the StartTime record (its timeline time and value:
    // prof::wall_minus_timeline reads it once the file's Tag has said whether it is a torch.profiler
    // trace), and the first and last event times (batch ends: events are nearly sorted, and a run's
    // span needs no better for Note [One run or several]).
    std::uint32_t world_size = 0;
    std::optional<std::pair<std::int64_t, std::int64_t>> start_time;
    bool kineto = false;  // a torch.profiler trace (MetaKey::Tag kKinetoSourceTag)
    std::int64_t first = INT64_MAX, last = INT64_MIN;
  };
  static constexpr std::uint32_t kNoId = 0xFFFF'FFFFu;

  RankState& state(std::uint32_t rank);
  std::uint32_t name(RankState& rs, prof::StringId id, Resolve resolve, const void* ctx);
  std::uint32_t sized_name(prof::EventKind kind, std::uint8_t sub, std::uint32_t arg);
  std::uint32_t coll_op(prof::CollOp op);
  std::vector<RangeOpen>& open_stack(RankState& rs, std::uint16_t thread);
  void add_batch(const prof::Event* ev, std::size_t n, std::uint32_t rank, Resolve resolve, const void* ctx,
                 bool apply_offsets);
  // Returns the model events it added (0 or 1).
  std::uint64_t add_one(const prof::Event& e, RankState& rs, std::uint32_t rank, Resolve resolve, const void* ctx);
  std::uint64_t add_compute_span(const prof::Event& e, RankState& rs, std::uint32_t rank, Resolve resolve, const void* ctx);
  SpanRow& nvtx_lane(RankState& rs, std::uint32_t rank, std::uint16_t thread);
  std::uint64_t close_range(const prof::Event& e, RankState& rs, std::uint32_t rank);
  static std::uint32_t phase_payload(const RangeOpen& begin, std::uint16_t thread);
  std::uint64_t add_host_span(const prof::Event& e, RankState& rs, std::uint32_t rank, Resolve resolve, const void* ctx);
  void add_meta(const prof::Event& e, RankState& rs, std::uint32_t rank, Resolve resolve, const void* ctx);
  std::uint64_t add_collective(const prof::Event& e, RankState& rs, std::uint32_t rank);
  std::uint64_t add_block_event(const prof::Event& e, RankState& rs, std::uint32_t rank);
  std::uint64_t add_mem_sample(const prof::Event& e, RankState& rs, std::uint32_t rank);
  // Whether a span [s, t] or an instant t lies in the loaded range (Note [Time range load]).
  bool keeps_span(std::int64_t s, std::int64_t t) const { return t >= lo_ && s <= hi_; }
  bool keeps_at(std::int64_t t) const { return t >= lo_ && t <= hi_; }

  TimelineBuilder& b_;
  std::map<std::uint32_t, RankState> ranks_;
  std::uint32_t phase_ids_[static_cast<int>(prof::Phase::Count)] = {};
  std::unordered_map<std::uint64_t, std::uint32_t> sized_names_;  // (kind, sub, arg) -> "memcpy HtoD 4096 B"
  std::uint64_t sized_last_key_ = UINT64_MAX;                      // sized_names_'s last answer: copies repeat
  std::uint32_t sized_last_ = 0;
  std::uint32_t coll_ops_[256];                                    // builder id of coll_op_name(op), kNoId: not yet
  std::uint32_t header_world_ = 0;
  std::int64_t lo_ = INT64_MIN, hi_ = INT64_MAX;
};

template <class Strings>
void TraceIngest::add(const prof::Event* ev, std::size_t n, std::uint32_t rank, const Strings& strings, bool apply_offsets) {
  const auto resolve = [](const void* ctx, prof::StringId id) -> std::string_view {
    return (*static_cast<const Strings*>(ctx))(id);
  };
  add_batch(ev, n, rank, resolve, &strings, apply_offsets);
}

bool ingest_trace(const std::string& path, Timeline& out, std::string& error, std::atomic<double>* progress,
                  const LoadOptions& options = {});
// Applies options' time range (seconds from t0, the file's first event) to `ingest`.
void set_range_from(TraceIngest& ingest, std::int64_t t0, const LoadOptions& options);

}  // namespace memcomm::view
