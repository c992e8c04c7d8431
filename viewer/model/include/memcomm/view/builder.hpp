// Builds a Timeline from events in any order: the one ingest seam that every input (memcomm
// traces, PyTorch snapshots, the live stream, synthetic data, test fixtures) goes through.
#pragma once

#include <memcomm/view/timeline.hpp>

#include <map>
#include <string_view>
#include <tuple>

namespace memcomm::view {

class TimelineBuilder {
 public:
  // Ranges. Phases and NVTX ranges may nest; kernels/memcpy/memset on one stream should not
  // (overlaps go to extra rows rather than being lost).
  void phase(std::uint32_t rank, std::string_view name, TimeNs start, TimeNs end);
  void nvtx(std::uint32_t rank, std::string_view name, TimeNs start, TimeNs end);
  void kernel(std::uint32_t rank, std::uint32_t stream, std::string_view name, TimeNs start, TimeNs end);
  void memcpy(std::uint32_t rank, std::uint32_t stream, std::string_view name, TimeNs start, TimeNs end);
  void memset(std::uint32_t rank, std::uint32_t stream, TimeNs start, TimeNs end);
  // A collective; matched across ranks by (comm, seq). `world` is the group size when known.
  void collective(std::uint32_t rank, std::string_view op, std::uint64_t bytes, std::uint32_t comm,
                  std::uint64_t seq, TimeNs start, TimeNs end, std::uint32_t world = 0);
  // Counter sample ("allocated", "reserved", "active", "largest_free", "fragmentation", "loss", ...).
  void counter(std::uint32_t rank, std::string_view name, TimeNs t, double value, std::string_view unit = "");
  // Allocator event; when a rank has allocator events but no "allocated"/"reserved" samples, the
  // curves are derived from the events.
  void alloc_event(std::uint32_t rank, const AllocEvent& e);
  // Fast path for bulk ingest (readers, synthetic data): a pre-interned name, any span lane kind
  // (collectives go through collective()).
  std::uint32_t intern(std::string_view s) { return strings_.intern(s); }
  void span(std::uint32_t rank, LaneKind kind, std::uint32_t stream, std::uint32_t name, TimeNs start, TimeNs end,
            std::uint32_t payload = 0);
  void dropped(std::uint32_t rank, std::uint64_t n);
  void host(std::uint32_t rank, std::string_view host);
  // Exact sizes from a counting pass spare the copies of geometric growth (Note [Viewer memory budget]).
  void reserve(std::uint32_t rank, LaneKind kind, std::uint32_t stream, std::size_t n);
  void reserve_alloc(std::uint32_t rank, std::size_t n);

  // Bulk-ingest seams (Note [Fast ingest] in ingest_trace.hpp): the arrays that finish() turns
  // into lanes, for readers that append in a tight loop without a call per event. References stay
  // valid until finish() (they live in map nodes). The caller counts what it appends with add_events().
  std::vector<Span>& lane_spans(std::uint32_t rank, LaneKind kind, std::uint32_t stream);
  std::vector<AllocEvent>& alloc_events(std::uint32_t r) { return rank(r).alloc; }
  CounterSeries& counter_series(std::uint32_t rank, std::string_view name, std::string_view unit = "");
  void add_events(std::uint64_t n) { events_ += n; }
  // Grows every array of `rank` to `factor` times its current size: a loader that has read one
  // chunk of a rank and knows from the chunk headers how many events the rank has left sizes the
  // final arrays once, instead of paying geometric growth (copies and page faults of 2x).
  void reserve_scaled(std::uint32_t rank, double factor);

  std::uint64_t event_count() const { return events_; }
  // Sorts, splits rows, matches collectives, builds LOD levels and shrinks containers.
  Timeline finish(std::string source);

 private:
  struct RankParts {
    std::vector<Span> phases, nvtx;                                         // name in Span::name
    std::map<std::tuple<std::uint8_t, std::uint32_t>, std::vector<Span>> streams;  // (kind, stream)
    std::vector<Collective> collectives;
    std::map<std::string, CounterSeries> counters;
    std::vector<AllocEvent> alloc;
    std::uint64_t dropped = 0;
    std::string host;
  };
  RankParts& rank(std::uint32_t r) {
    if (last_ == nullptr || last_rank_ != r) {
      last_ = &ranks_[r];
      last_rank_ = r;
      last_stream_ = nullptr;
    }
    return *last_;
  }

  StringTable strings_;
  std::map<std::uint32_t, RankParts> ranks_;
  std::uint64_t events_ = 0;
  RankParts* last_ = nullptr;              // cache for runs of events on one rank/stream
  std::uint32_t last_rank_ = 0;
  std::vector<Span>* last_stream_ = nullptr;
  std::tuple<std::uint8_t, std::uint32_t> last_stream_key_{};
};

// Maps [p, p + bytes) (whole 2 MiB runs inside it) in one call rather than a fault per page
// (Note [Prefaulting bulk arrays] in builder.cpp). For memory about to be written.
void prefault_pages(const void* p, std::size_t bytes);

// Cross-rank work done after building or merging: collective matching, stragglers, skew, busbw.
void match_collectives(Timeline& tl);
// Bus bandwidth factor of nccl-tests for an op over n ranks (all_reduce: 2(n-1)/n, ...).
double busbw_factor(std::string_view op, std::uint32_t n);

}  // namespace memcomm::view
