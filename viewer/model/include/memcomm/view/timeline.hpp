// The viewer's data model: everything loaded from traces and snapshots, merged onto one timeline,
// in the packed, sorted form the views query each frame. No UI here (Tracy's "server" side).
//
// Note [Viewer memory budget]: the target is <= 40 B per event with 10 M events loaded. Spans are
// 24 B (start, end, name id, payload); counter samples 16 B; allocator events 32 B. The per-event
// arrays are ChunkedArrays (Note [Chunked arrays] in chunked.hpp: appends never copy what is
// stored), trimmed after a load, and the acceleration structures (counter LOD levels, allocator
// checkpoints) add a bounded fraction on top (see counter_lod.hpp and allocator_state.hpp). The
// allocation lifetimes (40 B per user block, about 20 B per event since a block has an alloc and a
// free) and their index (8 B per block) come on top, and a snapshot's interned frames: measured in
// bench/results/viewer-cpu.md ("Allocation timeline and frames").
#pragma once

#include <memcomm/view/allocation_index.hpp>
#include <memcomm/view/allocator_state.hpp>
#include <memcomm/view/chunked.hpp>
#include <memcomm/view/counter_lod.hpp>
#include <memcomm/view/rank_allocations.hpp>
#include <memcomm/trace/mixed_runs.hpp>

#include <cstdint>
#include <memory>
#include <set>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace memcomm::view {

using TimeNs = std::int64_t;

// Note [Bounded timestamps]: times come from outside (files, sockets, snapshots). Ingest clamps
// every time the model keeps to +-kTimeLimit (2^61 ns, 73 years), so sums and differences of two
// times (durations, the summary's span) can never overflow.
inline constexpr TimeNs kTimeLimit = TimeNs{1} << 61;
inline TimeNs bounded_time(TimeNs t) { return t < -kTimeLimit ? -kTimeLimit : t > kTimeLimit ? kTimeLimit : t; }

// One range on a lane: a phase, a kernel/memcpy/memset, an NVTX range or a collective.
struct Span {
  TimeNs start;           // ns on the merged timeline
  TimeNs end;             // ns, >= start
  std::uint32_t name;     // id in Timeline::strings
  std::uint32_t payload;  // collective lanes: index into RankData::collectives; phases: step number,
                          // and for a comm phase the host thread that blocked in it (the step
                          // table's CPU fallback subtracts it from that thread's operators);
                          // kernel lanes: kCommKernel for a communication (NCCL) kernel, else 0;
                          // host thread lanes: kHostCall for a launch or sync call, kCommCall for a
                          // communication call, kAnnotation for an annotation, else 0
};
// Span::payload of a communication kernel (prof::ComputeEvent::sub == 1): the step table counts it
// as communication, not compute (Note [Breakdown definitions] in memcomm/trace/analysis.hpp).
inline constexpr std::uint32_t kCommKernel = 1;
// Span::payload of a CUDA launch or sync call on a host thread's lane: no operator, so no compute
// where a CPU run's operators are its compute (Note [Breakdown definitions]).
inline constexpr std::uint32_t kHostCall = 2;
// Span::payload of a communication call on a host thread's lane (a torch.profiler trace's gloo: and
// c10d:: operators, Phase::Comm): the thread computes nothing inside it (Note [Breakdown definitions]).
inline constexpr std::uint32_t kCommCall = 3;
// Span::payload of an annotation on a host thread's lane (prof::Phase::Annotation: torch.profiler's
// record_function ranges): a label around operators, no compute of its own (Note [Breakdown definitions]).
inline constexpr std::uint32_t kAnnotation = 4;
static_assert(sizeof(Span) == 24, "Span is the per-event unit of the memory budget; keep it packed");
// A lane row: spans sorted by start and non-overlapping.
using SpanRow = ChunkedArray<Span>;

// What a lane shows; decides its colour and its tooltip.
enum class LaneKind : std::uint8_t { Phase, Kernel, Memcpy, Memset, Collective, Nvtx };

const char* lane_kind_name(LaneKind kind);

// A horizontal track. Spans that nest (phases, NVTX) are split into rows by depth so that each row
// holds non-overlapping spans sorted by start, hence also by end: the binary searches in
// span_query.hpp rely on that.
struct Lane {
  std::string name;                   // "phases", "stream 7", "collectives"
  LaneKind kind = LaneKind::Kernel;   // what the spans are
  std::uint32_t stream = 0;           // CUDA stream (kernel/memcpy/memset lanes), thread (NVTX lanes)
  bool comm_kernels = false;          // kernel lanes: some spans are communication kernels (kCommKernel)
  std::vector<SpanRow> rows;          // rows[depth], each sorted and non-overlapping
  std::size_t span_count() const;
};

// A collective on one rank, with what matching across ranks found.
struct Collective {
  std::uint64_t bytes = 0;            // message size on this rank
  std::uint32_t op = 0;               // string id: "all_reduce", ...
  std::uint32_t comm = 0;             // communicator index in its rank's trace
  std::uint64_t comm_key = 0;         // its CommInfo hash when known, else the index: the matching key with seq,
                                      // as prof::CollectiveOnRank's (ranks may meet their groups in other orders)
  std::uint64_t seq = 0;              // per-communicator sequence number
  TimeNs start = 0, end = 0;          // ns
  std::uint32_t group_size = 1;       // communicator size: CommInfo's, else the matched instances
  std::int32_t next_rank = -1;        // slot in Timeline::ranks of the matched instance on the next rank (-1: none)
  std::uint32_t next_index = 0;       // its index in that rank's collectives
  bool straggler = false;             // this rank arrived last in its matched group
  bool first_in_group = true;         // the group's first instance (the summary counts each group once)
  bool ranks_disagree = false;        // the group's instances name other ops or sizes (prof::instances_disagree):
                                      // left out of the summary (Note [Collectives the ranks disagree on])
  TimeNs skew = 0;                    // last arrival minus first arrival across the group, ns
  TimeNs time = 0;                    // the group's time: last arrival to last end (one rank: its own), ns
  double algbw = 0, busbw = 0;        // GB/s over `time`, the group's (Note [Collective bandwidth], profiler analysis.hpp)
};

// Everything about one rank.
inline constexpr std::uint32_t kNoRecordedRank = UINT32_MAX;

struct RankData {
  std::uint32_t rank = 0;             // rank id in the run
  std::string host;                   // where it ran (metadata; may be empty)
  std::vector<Lane> lanes;            // phases first, then streams, then collectives
  ChunkedArray<Collective> collectives;  // sorted by start; spans of the collective lane point here
  std::vector<CounterSeries> counters;  // "allocated", "reserved", "active", "largest_free", user counters
  AllocEvents alloc_events;           // sorted by time; drives the allocator state view
  std::vector<TimeNs> ooms;           // OOM times, sorted
  // Allocation lifetimes (rank_allocations.hpp) and their index (allocation_index.hpp): the
  // allocation timeline and "who holds memory". Stacks only for snapshot ranks (null otherwise),
  // shared by the ranks of one file.
  prof::Allocations allocations;
  AllocationIndex alloc_index;
  std::shared_ptr<const SnapshotStacks> stacks;
  std::uint64_t dropped = 0;          // events the recorder dropped (reported in the status line)
  bool connected = false;             // live mode: the stream is still up (a closed rank stays, marked)
  bool stream_ended = false;          // live mode: closed by the rank on purpose (Note [The end of a stream])
  // Its step ranges carry the ids their source recorded (a .mct trace, a torch.profiler trace's
  // ProfilerStep#N), 0 included: the step table shows them as memcomm-trace report does. False for
  // sources that number no steps (synthetic and hand-built runs): numbered from 1 in start order.
  bool step_ids = false;
  // The id is a stand-in, not a rank the run named: a PyTorch snapshot's device, or a torch.profiler
  // trace without distributedInfo. Timeline::merge renumbers these first (Note [Rank ids across files]).
  bool stand_in_id = false;
  // The file it came from and the id it had there (kNoRecordedRank: not from a file), for saying where
  // the viewer shows it under another (shown_elsewhere).
  std::string source;
  std::uint32_t recorded_rank = kNoRecordedRank;
  // The device a PyTorch snapshot's rank stands for (-1: not a snapshot's): one process's devices are
  // no ranks of a run, so the viewer names them "device N", and device 255 "host memory" (Note [A host
  // snapshot's device]), whatever id they are shown under (rank_name).
  int snapshot_device = -1;
  const CounterSeries* counter(std::string_view name) const;
};

// How every pane names a rank: "rank N"; a snapshot's "device N" or "host memory", with the id it is
// shown under when another file took its number (unique, as ids are: a label ImGui may take as an id).
std::string rank_name(const RankData& rd);

// The rank has memory curves to draw: samples of allocated, reserved or active bytes (the memory pane
// draws them; without any it is a line saying so, Note [Pane heights]).
bool records_memory(const RankData& rd);

// Interned strings (kernel names, phase names, collective ops).
class StringTable {
 public:
  std::uint32_t intern(std::string_view s);
  const std::string& get(std::uint32_t id) const { return strings_[id]; }
  std::size_t size() const { return strings_.size(); }

 private:
  std::vector<std::string> strings_;
  std::unordered_map<std::string, std::uint32_t> ids_;
};

// The whole loaded data set.
struct Timeline {
  StringTable strings;
  std::vector<RankData> ranks;        // sorted by rank id
  TimeNs begin = 0, end = 0;          // bounds over everything loaded
  // Note [Times from the first event]: memcomm-trace counts a snapshot's times from its trace's first
  // event; the viewer counted from `begin`, which the blocks from before the trace (given just before
  // that event) put 2 ns earlier: "100 B at 2 ns" where the CLI said 0. Labels, tooltips, the time
  // axis and the holders' time count from `first_event` when a load sets it (a snapshot, from its
  // allocations' first event over every device); the view's bounds still hold everything.
  std::optional<TimeNs> first_event;
  TimeNs time_zero() const { return first_event ? *first_event : begin; }
  std::uint64_t event_count = 0;      // events ingested (spans + samples + allocator events)
  std::vector<std::string> sources;   // files (or "live", "synthetic") this came from
  std::vector<prof::RunFacts> runs;  // what each file's ranks say about their run (Note [One run or several])
  // What loading one file found odd (a snapshot whose clock stepped back), for the loader to tell
  // once with the file's name; merge() does not carry them.
  std::vector<std::string> load_warnings;

  // Moves the ranks of `other` in (string ids remapped), then re-matches collectives. A rank id both
  // hold is kept apart by renumbering (Note [Rank ids across files]).
  void merge(Timeline&& other);
  // Bytes held by the model (capacity, not size), for the B/event budget.
  std::size_t memory_bytes() const;
  bool empty() const { return ranks.empty(); }
  // No rank holds a span, a collective, a counter's sample, an allocator event or an OOM: a run's
  // metadata alone (a script that trained nothing) shows as empty as no rank at all.
  bool shows_nothing() const;

 private:
  void take_ranks(std::vector<RankData>&& incoming);
};

// Warnings for the ranks shown under an id not their own (Note [Rank ids across files]), each once:
// `told` holds (file, recorded id) of those said already.
std::vector<std::string> shown_elsewhere(const Timeline& tl, std::set<std::pair<std::string, std::uint32_t>>& told);

}  // namespace memcomm::view
