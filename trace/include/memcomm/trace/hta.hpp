// HTA-exact figures: HolisticTraceAnalysis 0.5.0's temporal breakdown and communication/computation
// overlap, per rank, as `memcomm-trace report --hta` prints them.
//
//   const std::vector<HtaRank> h = hta_analyze(set, {});   // one entry per rank of `set`
//   h[0].hta.idle_pct, h[0].hta.comm_comp_overlap_pct ...  // what HTA's TraceAnalysis gives
//   h[0].whole_trace ...                                   // memcomm's variant, no filtering
//
// Note [HTA's figures]
// HTA (hta/analyzers/breakdown_analysis.py, communication_analysis.py, common/trace.py) works on
// one row per trace event, in microseconds:
//   rounding    timestamps that are floats are rounded first: ts = ceil(ts), end = floor(ts + dur)
//               in float64, so an event under a microsecond can end before it starts (Note [HTA's float64
//               microseconds] in src/hta_clock.hpp).
//   GPU rows    rows with a stream (args.stream other than -1, an absent one reading as -1): Kernel,
//               Memcpy, Memset and device Sync spans (not the gpu_user_annotation ranges, nor an
//               "Event Sync" at stream -1: kDeviceWideSync). Kernel and Sync names come from the
//               string table; Memcpy and Memset spans are named "Memcpy ..."/"Memset ..." by Kineto.
//               Not reproduced: HTA also takes a host op that carries a stream argument (the Triton
//               launches of torch.compile traces, "triton_poi_fused_...") as a GPU row, with its
//               CPU-side time; memcomm's ranges keep no stream, so such a trace's figures differ by
//               those ops' share (0.1 point of idle on TraceLens' compile and B200 test traces, 1.24
//               points on its xDiT SD 3.5 inference trace: 2,076 launches; without them HTA's own
//               rows give memcomm's 39.88 % idle exactly).
//   kinds       COMMUNICATION: re.match("^nccl.*Kernel"); MEMORY: re.match("(^Memcpy)|(^Memset)|(^dma)");
//               COMPUTATION: neither, and not re.match("(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)")
//               -- re.match anchors at the start, so a name containing Memcpy or Sync, or starting
//               with Memset or dma (MTIA's dma_request), is not compute.
//   devices     an event of a category this reader does not know that carries a stream (MTIA's
//               mtia_ccp_events) is a GPU row, as for HTA every row with a stream is one.
//   union       merge_kernel_intervals(): rows sorted by ts, a new group where ts > the largest end
//               so far, each group [min ts, max end], the union the sum of (end - ts) over groups.
//   temporal    kernel_time = last group's end - first group's ts; idle = kernel_time - union(all);
//               compute = union(COMPUTATION); non_compute = kernel_time - compute - idle; each % is
//               round(100 * part / kernel_time, 2) (numpy: half to even).
//   overlap     100 * |union(COMPUTATION) ∩ union(COMMUNICATION)| / |union(COMMUNICATION)|, rounded
//               alike; none (NaN) without COMMUNICATION rows.
//   step filter when the whole set (all ranks) holds more than one distinct name containing
//               "ProfilerStep", each rank keeps only the CPU events with ts < the latest start of a
//               ProfilerStep range (include_last_profiler_step: ts <= the latest end, taken over the
//               ranges separately), on any thread -- a GPU-side "ProfilerStep#1" annotation counts
//               -- and only the GPU rows whose correlation id is that of a kept CPU event (a launch:
//               ComputeEvent Launch/Sync on the host). A GPU row without a correlation id is a CPU
//               row to HTA: it is kept by the ts rule (an "Event Sync"/"Context Sync" always is).
//               With 0 or 1 such names nothing is filtered and no correlation is needed.
// memcomm's own variant, `whole_trace`, applies the same formulas to every Kernel, Memcpy and Memset
// span (no step filter, no launch match, and sync waits count as idle): the GPU's whole recorded
// work, which HTA's default hides by dropping the last step. It equals whole_trace_reimpl in
// shared/traces/kineto/hta-reference.json.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "memcomm/trace/trace_set.hpp"

namespace memcomm::prof {

struct HtaOptions {
  bool include_last_step = false;  // HTA's include_last_profiler_step=True
};

// One rank's figures under one variant. `valid` is false when no GPU row is left (HTA has none to
// give: it fails on such a rank).
struct HtaFigures {
  bool valid = false;
  uint64_t gpu_rows = 0;           // rows counted, after the filter
  int64_t kernel_time_us = 0, idle_time_us = 0, compute_time_us = 0, non_compute_time_us = 0;
  double idle_pct = 0, compute_pct = 0, non_compute_pct = 0;  // rounded to 2 decimals as HTA; NaN at 0 us or less
  int64_t comm_time_us = 0;        // |union(COMMUNICATION)|
  int64_t overlap_time_us = 0;     // |union(COMPUTATION) ∩ union(COMMUNICATION)|
  std::optional<double> comm_comp_overlap_pct;  // none without COMMUNICATION rows
};

struct HtaRank {
  uint32_t rank = 0;
  bool step_filter = false;  // HTA filtered by ProfilerStep (Note [HTA's figures])
  HtaFigures hta;            // HTA's figures
  HtaFigures whole_trace;    // memcomm's whole-trace variant
};

// Note [HTA's figures] for every rank of `set`, in its order.
std::vector<HtaRank> hta_analyze(const TraceSet& set, const HtaOptions& opt);

// A table for `memcomm-trace report --hta`.
std::string hta_to_text(const std::vector<HtaRank>& h, const HtaOptions& opt);
// Adds "hta" and "hta_whole_trace" objects to each rank of `memcomm-trace report --json`'s output
// (matched by "rank"); percentages without a value are null.
std::string add_hta_json(const std::string& report_json, const std::vector<HtaRank>& h, const HtaOptions& opt,
                         int indent = 2);

}  // namespace memcomm::prof
