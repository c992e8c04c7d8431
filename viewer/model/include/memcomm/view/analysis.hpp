// Numbers the step table, the summary pane and range selection show, computed from the model with
// the profiler's analysis functions, so they equal memcomm-trace report's (Note [One analysis
// engine] in memcomm/trace/analysis.hpp; tests/viewer/test_report_parity.cpp holds them to it).
#pragma once

#include <memcomm/view/timeline.hpp>

#include <cstdint>
#include <map>

#include <vector>

namespace memcomm::view {

struct StepRow {
  std::uint32_t rank = 0;
  std::uint64_t step = 0;         // the Step range's id, as memcomm-trace report numbers it (from 1 when none was recorded)
  TimeNs start = 0, end = 0;      // ns
  TimeNs comm = 0;                // union of collective time inside the step, ns (prof's comm_total_ns)
  TimeNs exposed_comm = 0;        // communication not overlapped by compute, ns
  double overlap_pct = 0;         // (comm - exposed) / comm * 100
  TimeNs data_wait = 0;           // data-wait phases inside the step, ns
  double peak_allocated = 0;      // bytes, from the "allocated" counter (exact from block events: Note [Memory curves from block events])
  bool memory_recorded = false;   // the rank has that counter: else the peak is unknown, not 0
};

// One row per "step" phase per rank, with the profiler's definitions (Note [Breakdown
// definitions] in memcomm/trace/analysis.hpp): compute = the kernels that are not communication
// kernels, or, on CPU runs with no kernels, the forward/backward/optimizer/eval phases, or, where
// the run marks none (a torch.profiler trace of a CPU script), each thread's operators less its comm
// phases; communication = the communication kernels where the rank has them, else the collectives.
// With `previous` (the table before events from `changed_from` on were appended, same rank
// slots), the rows of steps that ended before changed_from are kept and only later steps are
// computed: live publishes cost O(new steps), not O(all steps).
std::vector<StepRow> step_table(const Timeline& tl, const std::vector<StepRow>& previous = {},
                                TimeNs changed_from = INT64_MIN);
// The same for one rank slot, appended to `rows`, with `kind_of` = phase_kinds(tl): step_table()
// is step_rows() over the slots in order, so slots can be computed on different threads
// (build_indexes() in indexes.hpp) and concatenated.
std::vector<prof::Phase> phase_kinds(const Timeline& tl);  // prof::phase_from_name by string id
void step_rows(const Timeline& tl, std::size_t slot, const std::vector<prof::Phase>& kind_of, std::vector<StepRow>& rows,
               const std::vector<StepRow>& previous = {}, TimeNs changed_from = INT64_MIN);

struct RangeStats {
  TimeNs t0 = 0, t1 = 0;
  std::uint64_t spans = 0;            // spans intersecting the range, all lanes
  std::uint64_t collectives = 0;      // collectives intersecting the range
  std::uint64_t collective_bytes = 0;
  TimeNs busy[6] = {0, 0, 0, 0, 0, 0};  // per LaneKind, union per lane, summed over lanes, ns
  double mem_min = 0, mem_max = 0;    // "allocated" over the range, all ranks
  bool mem_valid = false;
};

// Stats for a selected range. O(spans in range) - run on selection change, not per frame.
RangeStats range_stats(const Timeline& tl, TimeNs t0, TimeNs t1);

struct Summary {
  std::uint64_t spans = 0, samples = 0, alloc_events = 0, dropped = 0;
  std::uint64_t collectives = 0;   // matched groups, each once, as memcomm-trace report counts them
  std::uint64_t disagreeing = 0;   // of them, those the ranks disagree on (no bandwidth, skew or straggler)
  TimeNs duration = 0;
  double peak_allocated = 0, peak_reserved = 0;  // bytes, max over ranks
  bool memory_recorded = false;                  // some rank records memory (else the peaks are unknown)
  double mean_busbw = 0;                         // GB/s, bytes-weighted over matched collectives (prof::BusbwMean)
  bool busbw_known = false;                      // some collective has a size and a time (else "unknown", not 0)
  TimeNs max_skew = 0;                           // ns over matched collectives
  std::map<int, std::uint64_t> stragglers;       // times each rank was last to arrive (ranks never last: absent)
  std::uint64_t ooms = 0;
};
Summary summarize(const Timeline& tl);

}  // namespace memcomm::view
