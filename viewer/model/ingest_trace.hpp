// memcomm traces (.mct) into the viewer model (Note [Reader seams] in loader.cpp).
//
// Note [Fast ingest]: a 10 M-event file must load at >= 20 M events/s (issue 6), and the
// profiler's TraceReader alone decodes at ~30-100 M events/s, so the per-event work here is a
// switch and a push_back into the final array, nothing more:
//   - each chunk is decompressed once (no counting pass); the loader walks the chunk headers
//     first (no decompression) for per-rank event totals, and after a rank's first chunk grows
//     every array of that rank to its expected final size (TimelineBuilder::reserve_scaled), so
//     the arrays are written once, with no copies of geometric growth;
//   - the arrays are reached through pointers cached per (kind, stream) and per metric, and trace
//     string ids map to model ids through a flat table: no map lookup, no virtual or builder call
//     per event;
//   - decompression of chunk k+1 can run on a second thread while chunk k is ingested (Note
//     [Decode ahead] in ingest_trace.cpp; LoadOptions::decode_ahead, on with more than 2 cores);
//   - the arrays' pages are mapped in one call, not faulted one by one (Note [Prefaulting bulk
//     arrays] in builder.cpp).
// Per-thread ranges and (comm, seq) collectives are paired here; rank clock offsets
// (MetaKey::ClockOffset) are applied unless the file is already merged, as TraceSet does.
//
// Note [Time range load]: with a range [lo, hi] (ns on the timeline), only events that overlap it
// are kept: spans that overlap it, instants inside it. A chunk whose events all lie outside the
// range is only scanned for range/collective pairing and metadata. Chunk headers carry no time
// bounds (trace_format.hpp), so chunks are still decompressed. The allocator state view then
// starts from the blocks allocated inside the range.
#pragma once

#include <memcomm/profiler/event.hpp>
#include <memcomm/view/builder.hpp>
#include <memcomm/view/loader.hpp>

#include <atomic>
#include <map>
#include <string>
#include <string_view>
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
  };
  struct RankState {
    std::int64_t offset = 0;
    std::map<std::uint16_t, std::vector<RangeOpen>> open;            // per thread, LIFO
    std::unordered_map<std::uint64_t, prof::CollectiveEvent> colls;  // (comm, seq) -> start/enqueue
    std::map<std::uint8_t, std::uint16_t> comm_size;
    std::vector<std::uint32_t> ids;                  // trace string id -> builder id (kNoId: not yet)
    std::vector<Span>* lanes[3][256] = {};           // [kernel/memcpy/memset][stream], cached
    std::vector<Span>* phases = nullptr;             // cached lane arrays
    std::vector<Span>* nvtx = nullptr;
    std::vector<AllocEvent>* alloc = nullptr;
    CounterSeries* metrics[static_cast<int>(prof::MemMetric::Count)] = {};
    std::unordered_map<prof::StringId, CounterSeries*> counters;  // user counters by name id
  };
  static constexpr std::uint32_t kNoId = 0xFFFF'FFFFu;

  RankState& state(std::uint32_t rank);
  std::uint32_t name(RankState& rs, prof::StringId id, Resolve resolve, const void* ctx);
  std::uint32_t sized_name(prof::EventKind kind, std::uint8_t sub, std::uint32_t arg);
  void add_batch(const prof::Event* ev, std::size_t n, std::uint32_t rank, Resolve resolve, const void* ctx,
                 bool apply_offsets);
  void add_one(const prof::Event& e, RankState& rs, std::uint32_t rank, Resolve resolve, const void* ctx);

  TimelineBuilder& b_;
  std::map<std::uint32_t, RankState> ranks_;
  std::uint32_t phase_ids_[static_cast<int>(prof::Phase::Count)] = {};
  std::unordered_map<std::uint64_t, std::uint32_t> sized_names_;  // (kind, sub, arg) -> "memcpy HtoD 4096 B"
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

}  // namespace memcomm::view
