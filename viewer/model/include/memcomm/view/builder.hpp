// Builds a Timeline from events in any order: the one ingest seam that every input (memcomm
// traces, PyTorch snapshots, the live stream, synthetic data, test fixtures) goes through.
#pragma once

#include <memcomm/trace/analysis.hpp>
#include <memcomm/trace/allocator_fold.hpp>
#include <memcomm/view/timeline.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <utility>

namespace memcomm::view {

// What one TimelineBuilder::append_to() changed, for the indexes kept beside the Timeline.
struct AppendResult {
  static constexpr std::size_t npos = SIZE_MAX;
  std::uint64_t events = 0;             // events published by this call
  bool ranks_added = false;             // new rank slots (slots may have shifted): rebuild per-slot state
  std::vector<std::size_t> alloc_from;  // per slot: first allocator event that changed (npos: none)
  TimeNs first_time = INT64_MAX;        // earliest time of anything published: earlier data is as it was
};

// What matches one collective across ranks: its communicator's key (Collective::comm_key, the
// CommInfo hash the report matches on) and its sequence number.
using CollectiveKey = std::pair<std::uint64_t, std::uint64_t>;
inline CollectiveKey collective_key(const Collective& c) { return {c.comm_key, c.seq}; }
struct CollectiveKeyHash {
  std::size_t operator()(const CollectiveKey& k) const noexcept {
    return std::hash<std::uint64_t>{}(k.first * 0x9E3779B97F4A7C15ull ^ k.second);
  }
};

// A collective by rank slot and index in that rank's collectives.
struct CollectiveRef {
  std::uint32_t slot;
  std::uint32_t index;
};

class TimelineBuilder {
 public:
  // Ranges. Phases and NVTX ranges may nest; kernels/memcpy/memset on one stream should not
  // (overlaps go to extra rows rather than being lost). NVTX ranges go on one lane per thread
  // (`span`'s stream; nvtx() is thread 0's).
  void phase(std::uint32_t rank, std::string_view name, TimeNs start, TimeNs end);
  void nvtx(std::uint32_t rank, std::string_view name, TimeNs start, TimeNs end);
  // Names the lane of (kind, stream): a thread's NVTX lane, a stream's kernel lane (its memcpy and
  // memset lanes get the name plus " memcpy"/" memset"). Before or after its spans; the last name wins.
  void lane_name(std::uint32_t rank, LaneKind kind, std::uint32_t stream, std::string_view name);
  void kernel(std::uint32_t rank, std::uint32_t stream, std::string_view name, TimeNs start, TimeNs end);
  void memcpy(std::uint32_t rank, std::uint32_t stream, std::string_view name, TimeNs start, TimeNs end);
  void memset(std::uint32_t rank, std::uint32_t stream, TimeNs start, TimeNs end);
  // A collective; matched across ranks by (comm, seq). `world` is the group size when known.
  void collective(std::uint32_t rank, std::string_view op, std::uint64_t bytes, std::uint32_t comm,
                  std::uint64_t seq, TimeNs start, TimeNs end, std::uint32_t world = 0);
  // Counter sample ("allocated", "reserved", "active", "largest_free", "fragmentation", "loss", ...).
  void counter(std::uint32_t rank, std::string_view name, TimeNs t, double value, std::string_view unit = "");
  // Allocator event. A rank's block events (not OOMs alone) give its allocated/active/reserved
  // curves, exactly, over any samples of those when their fold is complete (Note [Memory curves
  // from block events] in memcomm/trace/allocator_fold.hpp).
  void alloc_event(std::uint32_t rank, const AllocEvent& e);
  // Fast path for bulk ingest (readers, synthetic data): a pre-interned name, any span lane kind
  // (collectives go through collective()).
  std::uint32_t intern(std::string_view s) { return strings_.intern(s); }
  void span(std::uint32_t rank, LaneKind kind, std::uint32_t stream, std::uint32_t name, TimeNs start, TimeNs end,
            std::uint32_t payload = 0);
  void dropped(std::uint32_t rank, std::uint64_t n);
  // The rank's step ranges carry the ids their source recorded (RankData::step_ids).
  void step_ids_recorded(std::uint32_t rank);
  void host(std::uint32_t rank, std::string_view host);
  // Note [Memory curves from block events] (allocator_fold.hpp): the device the rank's sampled
  // curves follow (the producer chooses it with prof::better_curve_device), and block events missing
  // before the start, so that the fold of the rest is incomplete: a time range cut them, or the
  // trace began mid-run (torch.profiler's). Another device than before (a GPU after the host) drops
  // the memory samples given so far: pending ones here (the producer's CounterSeries references to
  // them die), published ones at the next append_to().
  void memory_sample_device(std::uint32_t r, std::uint8_t device);
  void blocks_cut(std::uint32_t r) { rank(r).blocks_cut = true; }
  // Room for n more events of a lane (growth copies nothing: Note [Chunked arrays]).
  void reserve(std::uint32_t rank, LaneKind kind, std::uint32_t stream, std::size_t n);
  void reserve_alloc(std::uint32_t rank, std::size_t n);

  // Bulk-ingest seams (Note [Fast ingest] in ingest_trace.hpp): the arrays that finish() turns
  // into lanes, for readers that append in a tight loop without a call per event. References stay
  // valid until finish() (they live in map nodes). The caller counts what it appends with add_events().
  SpanRow& lane_spans(std::uint32_t rank, LaneKind kind, std::uint32_t stream);
  AllocEvents& alloc_events(std::uint32_t r) { return rank(r).alloc; }
  ChunkedArray<Collective>& collectives(std::uint32_t r) { return rank(r).collectives; }  // op interned; matched at append
  CounterSeries& counter_series(std::uint32_t rank, std::string_view name, std::string_view unit = "");
  void add_events(std::uint64_t n) { events_ += n; }

  std::uint64_t event_count() const { return events_; }
  // Sorts, splits rows, matches collectives, builds LOD levels and shrinks containers, and each
  // rank's allocation lifetimes from its block events (rank_allocations.hpp) unless the producer
  // gives its own (a snapshot's, with stacks: allocations_from_producer()).
  Timeline finish(std::string source);
  void allocations_from_producer() { producer_allocations_ = true; }
  // See Note [Incremental append]: publishes what was ingested since the last call into `tl` (built
  // by earlier calls of this builder only), touching only what the new events touch; appending in
  // pieces gives the model that finish() gives for all of it at once. Live mode's publish step.
  AppendResult append_to(Timeline& tl);
  // Rebuilds the allocation lifetimes and their index of each rank whose block events grew since
  // append_to() last published them (O(that rank's events)); true if any did. finish() builds them
  // for every rank; live mode calls this at its own pace (See Note [Live allocations] in
  // viewer/app/app_live.cpp).
  bool refresh_allocations(Timeline& tl);

 private:
  // What append_to() carries from one call to the next for the allocator-derived data.
  struct AllocDerive {
    std::map<std::uint64_t, std::pair<std::uint64_t, std::size_t>> open;  // unmarked SegmentAlloc: addr -> (size, index)
    AllocatorState state;           // after the events folded into the memory curves (state fold)
    bool fast = false;              // the last fold was the running sums below, not `state`
    prof::AllocatorFold fold;       // fast fold: device `device`'s events folded so far
    int device = -1;                // the device the curves describe (-1: not chosen yet)
    bool completes = false;         // that device's events carry FreeCompleted
    bool has_alloc = false;         // ... carry Alloc (allocated/active can come from them)
    bool has_segments = false;      // ... carry SegmentAlloc/SegmentMap (reserved can)
    bool from_events[3] = {};       // allocated/active/reserved published from the fold (samples as "sampled:")
    std::size_t since = 0;          // events since the last largest_free sample
    bool provisional = false;       // the last largest_free/fragmentation samples stand in for "now"
    bool blocks = false;            // the rank has block events: allocated/active/reserved come from them
    bool derived = false;           // allocated/active/reserved curves are derived (the fold has run)
    bool free_derived = false;      // largest_free/fragmentation too (the trace samples neither)
    bool labelled = false;          // some Alloc carries a category: per-category curves
    std::unordered_map<std::uint64_t, std::pair<std::uint8_t, std::uint64_t>> live;  // addr -> (category, size)
    double bytes[kMemCategoryCount] = {};
  };
  bool producer_allocations_ = false;  // finish() leaves RankData::allocations to the producer
  // Events ingested and not yet published, plus state that lives across appends.
  struct RankParts {
    // Chunked like the model's arrays (Note [Chunked arrays]), so that the first publish of a lane
    // moves the array in rather than copying it.
    SpanRow phases;                                               // name in Span::name
    std::map<std::uint32_t, SpanRow> nvtx;                        // by thread
    std::map<std::tuple<std::uint8_t, std::uint32_t>, SpanRow> streams;  // (kind, stream)
    ChunkedArray<Collective> collectives;
    std::map<std::string, CounterSeries> counters;
    AllocEvents alloc;
    std::uint64_t dropped = 0;
    bool step_ids = false;
    std::string host;
    std::map<std::tuple<std::uint8_t, std::uint32_t>, std::string> lane_names;  // (kind, stream) -> name
    bool names_changed = false;     // lane_names holds a name not yet given to its lane
    std::size_t lanes_named = 0;    // lanes of the rank when names were last given
    bool sampled_memory = false;    // memory samples seen (any of kDerivedMemory): largest_free/fragmentation not derived
    bool sampled_level[3] = {};     // allocated/active/reserved samples seen
    int sample_device = -1;         // device the level samples follow (memory_sample_device)
    bool samples_dropped = false;   // it changed: the published memory samples go at the next append
    bool blocks_cut = false;        // block events before the start are missing (time range, mid-run trace)
    bool allocations_stale = false;  // block events published since the rank's allocations were built
    AllocDerive derive;
  };
  void append_rank(RankData& rd, std::uint32_t slot, RankParts& p, AppendResult& r,
                   std::vector<std::pair<std::uint32_t, std::uint32_t>>& new_colls, bool& rematch);
  // The stages of append_rank() (timeline_append.cpp), in the order it runs them.
  void append_spans(RankData& rd, RankParts& p);
  static void name_lanes(RankData& rd, RankParts& p);
  void append_collectives(RankData& rd, RankParts& p, std::vector<std::pair<std::uint32_t, std::uint32_t>>& new_colls,
                          bool& rematch);
  static void note_memory_sources(RankData& rd, RankParts& p);
  static void drop_published_samples(RankData& rd, RankParts& p);
  void append_counters(RankData& rd, RankParts& p);
  void append_alloc_events(RankData& rd, std::uint32_t slot, RankParts& p, AppendResult& r);
  void derive_alloc(RankData& rd, RankParts& p, std::size_t from, AppendResult& r, std::uint32_t slot);
  void build_allocations(RankData& rd);  // RankData::allocations and alloc_index from its block events
  // The stages of derive_alloc() (alloc_derive.cpp).
  struct LabelScan {
    bool known = false;            // the fold saw every Alloc of the new events
    std::uint8_t categories = 0;   // ... and these are their categories, OR-ed
  };
  static void note_kind(AllocDerive& d, const AllocEvent& e);  // what device d.device's events carry
  static std::size_t mark_expandable(RankData& rd, AllocDerive& d, std::size_t from);
  static LabelScan derive_level_curves(RankData& rd, RankParts& p, std::size_t from, bool restart, bool& added);
  static void derive_category_curves(RankData& rd, AllocDerive& d, std::size_t from, LabelScan labels, bool& added);
  void bound(TimeNs a, TimeNs b) {
    lo_ = std::min(lo_, a);
    hi_ = std::max(hi_, b);
    fresh_lo_ = std::min(fresh_lo_, a);
  }
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
  SpanRow* last_stream_ = nullptr;
  std::tuple<std::uint8_t, std::uint32_t> last_stream_key_{};
  TimeNs lo_ = INT64_MAX, hi_ = INT64_MIN;  // bounds of everything published
  TimeNs fresh_lo_ = INT64_MAX;              // earliest time in the current append_to()
  // Collectives published so far by their key (collective_key), as (rank id, index): the groups a
  // new collective joins are re-matched, not all of them.
  std::unordered_map<CollectiveKey, std::vector<std::pair<std::uint32_t, std::uint32_t>>, CollectiveKeyHash> groups_;
  bool groups_valid_ = false;  // groups_ holds every published collective
};

// Cross-rank work done after building or merging: collective matching, stragglers, skew, busbw.
void match_collectives(Timeline& tl);
// The prof::CollOp of each op name (by string id), parsed once; and a buffer reused across groups.
struct CollOpCache {
  std::vector<std::int16_t> by_name;  // op string id -> CollOp, -1: not parsed yet
  std::vector<prof::CollectiveArrival> arrivals;
  prof::CollOp op(const Timeline& tl, std::uint32_t name);
};
// The same for one group of one collective_key; `refs` sorted by (slot, index).
void match_collective_group(Timeline& tl, const std::vector<CollectiveRef>& refs, CollOpCache& cache);

}  // namespace memcomm::view
