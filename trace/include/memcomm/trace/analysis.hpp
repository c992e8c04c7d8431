// Trace analysis shared by memcomm-trace report, the viewer and the tuner.
//
// Note [Breakdown definitions]
// Following HTA (Holistic Trace Analysis), time on a rank's "device" timeline splits into:
//   compute   = union of compute spans
//   comm      = union of communication spans, minus compute (communication nothing hides)
//   memcpy    = union of memcpy/memset spans, minus compute and comm
//   idle      = window - union of all spans
// so compute + comm + memcpy + idle = window. Overlap is HTA's communication-computation overlap:
//   overlap % = |comm ∩ compute| / |comm| x 100,   exposed comm = |comm| - |comm ∩ compute|.
// What a "span" is depends on the run:
//   GPU run (the rank has device events: Kernel, Memcpy or Memset; a trace whose copies were recorded
//     and kernels not is a device idle but for copies, not a CPU run): compute = kernels that are not
//     communication kernels;
//     comm = communication kernels (ComputeEvent::sub == 1, e.g. ncclDevKernel_*), or collective
//     start..end when there are none; memcpy = Memcpy + Memset.
//   CPU run: compute = host phases Forward, Backward, Optimizer and Eval (leaf phases; Step and
//     MicroStep contain everything and DataWait is waiting) less the Comm phases, whichever thread
//     records them, as a run records its phases on its training thread (a DDP backward's wait for its
//     buckets: Note [The wait at backward's end] in python/memcomm/_profiler/hooks.py),
//     or, when the run marks none of them (a torch.profiler trace of a CPU script), its host ranges
//     (the operators; not the Python frames they ran under, nor the record_function annotations
//     around them, Phase::Annotation: one around the loop made all of it compute), less the time
//     each thread spent inside a communication call (a Gloo op, or the c10d:: operator that issued
//     one, which may wait for it);
//     comm = collective start..end (the Gloo work, which runs beside backward when DDP overlaps; not
//     a Gloo send or recv, which is no collective and counts as neither); memcpy = Memcpy + Memset.
// The window is from the first Step begin to the last Step end when steps exist, else from the
// first to the last span.
//
// Note [Collective bandwidth]
// nccl-tests definitions: algbw = bytes / time; busbw = algbw x factor with n ranks in the
// communicator: all_reduce 2(n-1)/n; all_gather, reduce_scatter, all_to_all (n-1)/n; broadcast,
// reduce, send/recv 1. `bytes` is nccl-tests' "size" (for all_gather the gathered total). The time
// of a collective matched across ranks is from the LAST rank's start to the last end (before the
// last arrival nothing can move); with one rank's view only, its own end - start.
// Skew = latest start - earliest start; the straggler is the rank that started last (the first of
// them in rank order on a tie). The communicator size n is CommInfo's; without it, the ranks that
// recorded the collective, or the trace's world size when larger. The summary's mean busbw is
// weighted by bytes, over matched collectives with a time: sum(busbw x bytes) / sum(bytes), so a
// run's many small latency-bound collectives do not outvote the few large ones that move its data.
//
// Note [One analysis engine]
// memcomm-trace report and the viewer show the same figures because they compute them with the
// same functions: analyze() below is built from comm_overlap(), collective_timing() and
// BusbwMean, and the viewer's step table, collective matching and summary (viewer/model
// analysis.cpp, builder.cpp) call those directly on the events they already hold (live, only for
// the steps and collective groups that are new), reading its ops' names with coll_op_from_name().
// Steps are numbered by their Step range's id (RangeEvent::id, what the recorder was given: the
// trainer counts from 1) in both. What the viewer keeps of its own is the lookup: which spans fall
// in a step, found on its sorted rows, and the step's peak from its "allocated" curve, which
// follows the same rule as memory_series() below (Note [Memory curves from block events] in
// allocator_fold.hpp) and the same window (the value in force at the step's begin and every point up
// to its end). Its kernel spans carry ComputeEvent::sub's communication-kernel flag (view::kCommKernel),
// so GPU runs split into communication and compute as here. Where the viewer's model lacks what the
// rule reads, the figures can still differ: it knows no world size, so a collective of a
// communicator without CommInfo counts the ranks that recorded it; it keys a collective by its
// communicator's CommInfo hash as known when the collective ends (memcomm's recorders and the Kineto
// reader date each CommInfo before its communicator's first collective ends), where the report reads a
// rank's CommInfo events first; and it shows only collectives that ended.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "memcomm/trace/intervals.hpp"
#include "memcomm/trace/trace_set.hpp"

namespace memcomm::prof {

// A closed range: a RangeBegin matched with its RangeEnd (LIFO per thread).
struct RangeSpan {
  Phase phase;
  StringId name;
  uint64_t id;
  uint16_t thread;
  uint16_t depth;     // nesting depth on its thread, from 0
  int64_t begin;
  int64_t end;        // the trace's end when the range was never closed
  bool closed;
};
std::vector<RangeSpan> pair_ranges(const RankTrace& r);

// One collective on one rank, assembled from its enqueue/start/end events.
struct CollectiveOnRank {
  uint64_t comm_key;  // CommInfo hash when known, else the comm index
  uint8_t comm;
  uint32_t seq;
  CollOp op;
  DType dtype;
  uint64_t bytes;
  uint16_t bucket;
  int64_t enqueue = -1, start = -1, end = -1;  // -1 when not recorded
};
std::vector<CollectiveOnRank> collectives_of(const RankTrace& r);

double busbw_factor(CollOp op, int nranks);
// The op whose coll_op_name() is `name` (exactly); false when none is.
bool coll_op_from_name(std::string_view name, CollOp& op);
// Whether a matched collective's instance (op, bytes) on one rank could not be the same collective
// as its first rank's (Note [Collectives the ranks disagree on] in analysis.cpp): another op, or
// another size of an op whose size is the same on every rank. Sizes of 0 (not recorded) never differ.
bool instances_disagree(CollOp first_op, uint64_t first_bytes, CollOp op, uint64_t bytes);

// One rank's part in a matched collective: when it started (its enqueue when no start was
// recorded; -1 when neither was) and ended (-1 when not recorded).
struct CollectiveArrival {
  uint32_t rank;
  int64_t start;
  int64_t end;
};
struct CollectiveTiming {
  int64_t first_start = 0, last_start = 0, last_end = 0;
  int64_t time_ns = 0;        // Note [Collective bandwidth]
  int64_t skew_ns = 0;        // last_start - first_start
  uint32_t straggler_rank = kUnknownRank;  // rank that started last (none with fewer than two ranks)
  double algbw_gbps = 0, busbw_gbps = 0;
};
// Note [Collective bandwidth] for one collective, from every rank's arrival (in rank order).
CollectiveTiming collective_timing(const std::vector<CollectiveArrival>& arrivals, CollOp op, uint64_t bytes, int nranks);

// The summary's mean busbw (Note [Collective bandwidth]): add each matched collective once.
struct BusbwMean {
  double weighted = 0, bytes = 0;
  void add(double busbw_gbps, uint64_t collective_bytes, int64_t time_ns) {
    if (time_ns <= 0) return;
    weighted += busbw_gbps * double(collective_bytes);
    bytes += double(collective_bytes);
  }
  double value() const { return bytes > 0 ? weighted / bytes : 0.0; }
  // Whether a collective with a size and a time was added: else the bandwidth is unknown, not 0
  // (traces whose collectives record no size, barriers only).
  bool known() const { return bytes > 0; }
};

struct CollectiveStats {
  uint64_t comm_key;
  uint32_t seq;
  CollOp op;
  DType dtype;
  uint64_t bytes;
  uint16_t bucket;
  int nranks;                 // communicator size (CommInfo), else the ranks that recorded it
  int ranks_seen;             // ranks whose traces hold this collective
  int64_t first_start, last_start, last_end;
  int64_t time_ns;            // Note [Collective bandwidth]
  double algbw_gbps;          // GB/s (1e9 bytes)
  double busbw_gbps;
  int64_t skew_ns;            // last_start - first_start
  uint32_t straggler_rank;    // rank that started last (kUnknownRank with one rank)
  // The ranks' records name different ops, or different sizes where known: matched by order, they
  // are not one collective (Note [Collectives the ranks disagree on], analysis.cpp).
  bool ranks_disagree;
  // Paired across ranks: seen by more than one (a file alone, or a rank's collective no other rank's
  // trace holds, is a row of one).
  bool matched() const { return ranks_seen > 1; }
};

struct Breakdown {
  int64_t window_ns = 0;
  int64_t compute_ns = 0, comm_ns = 0, memcpy_ns = 0, idle_ns = 0;  // sum to window_ns
  int64_t comm_total_ns = 0;    // |comm| including the part hidden under compute
  int64_t overlap_ns = 0;       // |comm ∩ compute|
  int64_t exposed_comm_ns = 0;  // comm_total - overlap
  double overlap_pct = 0;       // overlap / comm_total x 100 (0 when no comm)
};

struct StepRow {
  uint32_t rank;
  uint64_t step;              // RangeEvent::id of the Step range
  int64_t begin, end;
  int64_t data_wait_ns;       // DataWait phases inside the step
  uint32_t micro_steps;       // MicroStep phases begun inside the step: its accumulation (0: none marked)
  Breakdown breakdown;        // over the step's window
  uint64_t peak_allocated;    // bytes, max inside the step (0 when no memory events)
  uint64_t peak_reserved;
};

struct MemoryPoint {
  int64_t ts;
  uint64_t allocated, reserved, active;
  uint64_t largest_free;      // 0 when not sampled
  double fragmentation;       // 1 - largest_free / (reserved - allocated) when sampled, else
                              // (reserved - allocated) / reserved: the cached-but-unused share
};

struct RankSummary {
  uint32_t rank;
  bool gpu_mode;              // Note [Breakdown definitions]
  std::string host;
  uint64_t events = 0, drops = 0;
  int64_t begin_ns = 0, end_ns = 0;
  Breakdown breakdown;
  uint64_t steps = 0;
  uint64_t unfinished_steps = 0;  // steps whose end the trace lacks, not counted (Note [A step the trace cut off])
  int64_t mean_step_ns = 0;
  uint64_t peak_allocated = 0, peak_reserved = 0;
  bool memory_recorded = false;  // the rank's trace holds memory figures (else its peaks' 0 means unknown)
  bool reserved_recorded = false;  // ... and reserved bytes among them: readings or segments (a 2021
                                   // torch.profiler trace's [memory] events have none)
  double max_fragmentation = 0;
  uint64_t ooms = 0;
  uint64_t collectives = 0, comm_bytes = 0;
  // Its DataWait phases over the whole trace, inside steps or not: how many, the union of their
  // time, and the first one's length and end (the advisor's data rule reads them where a trace marks
  // no steps).
  uint64_t data_waits = 0;
  int64_t data_wait_ns = 0, first_data_wait_ns = 0, first_data_wait_end = 0;
};

struct AnalysisOptions {
  size_t max_memory_points = 4096;  // memory series is decimated (keeping peaks) to this many points
};

struct Analysis {
  std::vector<RankSummary> ranks;
  std::vector<StepRow> steps;                 // every rank's steps, by rank then step
  std::vector<CollectiveStats> collectives;   // by (comm, seq), paired across the ranks that hold each
  std::vector<std::vector<MemoryPoint>> memory;  // per rank (same order as `ranks`)
  // Totals over ranks (means) for one-line summaries.
  double mean_overlap_pct = 0;
  int64_t mean_exposed_comm_ns = 0;
  double mean_busbw_gbps = 0;       // bytes-weighted over collectives with a time
  bool busbw_known = false;         // BusbwMean::known(): some collective has a size and a time
  int64_t max_skew_ns = 0;
  uint64_t drops = 0;
  uint64_t disagreeing_collectives = 0;  // CollectiveStats::ranks_disagree
};

Analysis analyze(const TraceSet& set, const AnalysisOptions& opt = {});
// The analysis as JSON (what `memcomm-trace report --json` prints).
std::string analysis_to_json(const Analysis& a, int indent = 2);
// The analysis as aligned text tables.
std::string analysis_to_text(const Analysis& a, size_t max_rows = 40);

// Compute/comm/memcpy spans of one rank, as used by the breakdown (exposed for the viewer).
struct RankSpans {
  bool gpu_mode = false;
  std::vector<Interval> compute, comm, memcpy;  // merged
};
RankSpans spans_of(const RankTrace& r, const std::vector<RangeSpan>& ranges, const std::vector<CollectiveOnRank>& colls);
// The kernel launches (the runtime's and driver's *Launch* calls) of a rank that recorded no kernel:
// a trace whose kernels went unrecorded (torch.profiler without ProfilerActivity.CUDA, a CUPTI
// failure), whose breakdown can count no device compute (a CPU run, or a device idle but for its
// copies where those were recorded). 0 when the rank has a kernel.
uint64_t kernel_launches_without_kernels(const RankTrace& r);
Breakdown breakdown_over(const RankSpans& s, int64_t lo, int64_t hi);
// The communication part of a breakdown (Note [Breakdown definitions]): comm and compute merged
// and clipped to one window. Only compute that meets comm counts, so compute may be given as just
// the parts inside the comm intervals (what the viewer looks up).
struct CommOverlap {
  int64_t comm_total_ns = 0, overlap_ns = 0, exposed_comm_ns = 0;
  double overlap_pct = 0;
};
CommOverlap comm_overlap(const std::vector<Interval>& comm, const std::vector<Interval>& compute);
// CPU runs (Note [Breakdown definitions]): the host phases that are compute.
inline bool is_compute_phase(Phase p) {
  return p == Phase::Forward || p == Phase::Backward || p == Phase::Optimizer || p == Phase::Eval;
}
// CPU runs that mark none of those (Note [Breakdown definitions]): whether a thread's host ranges are
// operators that compute. Every thread's are but the lanes of Python frames (with_stack=True), which
// hold the Python calls the operators ran under.
bool runs_operators(uint16_t thread);
std::vector<MemoryPoint> memory_series(const RankTrace& r);

}  // namespace memcomm::prof
