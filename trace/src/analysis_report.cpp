// Text and JSON renderings of an Analysis (memcomm-trace report; the trainer's summary).
#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "memcomm/trace/analysis.hpp"

#include <memcomm/common/bytes.hpp>
#include <memcomm/common/duration.hpp>
#include <memcomm/common/json_output.hpp>

namespace memcomm::prof {

namespace {
nlohmann::json breakdown_json(const Breakdown& b) {
  return {{"window_ns", b.window_ns},       {"compute_ns", b.compute_ns},   {"comm_ns", b.comm_ns},
          {"memcpy_ns", b.memcpy_ns},       {"idle_ns", b.idle_ns},         {"comm_total_ns", b.comm_total_ns},
          {"overlap_ns", b.overlap_ns},     {"exposed_comm_ns", b.exposed_comm_ns},
          {"overlap_pct", b.overlap_pct}};
}

// A peak of a rank whose trace holds no memory figures is unknown, not 0 MiB.
std::string recorded_mib(const RankSummary* r, uint64_t b) { return r && !r->memory_recorded ? "-" : format_mib(b); }

const RankSummary* rank_of(const Analysis& a, uint32_t rank) {
  for (const RankSummary& r : a.ranks)
    if (r.rank == rank) return &r;
  return nullptr;
}
double pct(int64_t part, int64_t whole) { return whole > 0 ? 100.0 * double(part) / double(whole) : 0.0; }
}  // namespace

std::string analysis_to_json(const Analysis& a, int indent) {
  nlohmann::json j;
  j["ranks"] = nlohmann::json::array();
  for (const RankSummary& r : a.ranks) {
    j["ranks"].push_back({{"rank", r.rank},
                          {"mode", r.gpu_mode ? "gpu" : "cpu"},
                          {"host", r.host},
                          {"events", r.events},
                          {"drops", r.drops},
                          {"begin_ns", r.begin_ns},
                          {"end_ns", r.end_ns},
                          {"breakdown", breakdown_json(r.breakdown)},
                          {"steps", r.steps},
                          {"unfinished_steps", r.unfinished_steps},
                          {"mean_step_ns", r.mean_step_ns},
                          {"peak_allocated", r.peak_allocated},
                          {"peak_reserved", r.peak_reserved},
                          {"memory_recorded", r.memory_recorded},
                          {"reserved_recorded", r.reserved_recorded},
                          {"max_fragmentation", r.max_fragmentation},
                          {"ooms", r.ooms},
                          {"collectives", r.collectives},
                          {"comm_bytes", r.comm_bytes}});
  }
  j["steps"] = nlohmann::json::array();
  for (const StepRow& s : a.steps) {
    j["steps"].push_back({{"rank", s.rank},
                          {"step", s.step},
                          {"begin_ns", s.begin},
                          {"end_ns", s.end},
                          {"time_ns", s.end - s.begin},
                          {"data_wait_ns", s.data_wait_ns},
                          {"micro_steps", s.micro_steps},
                          {"breakdown", breakdown_json(s.breakdown)},
                          {"peak_allocated", s.peak_allocated},
                          {"peak_reserved", s.peak_reserved}});
  }
  j["collectives"] = nlohmann::json::array();
  for (const CollectiveStats& c : a.collectives) {
    j["collectives"].push_back({{"comm", c.comm_key},
                                {"seq", c.seq},
                                {"op", coll_op_name(c.op)},
                                {"dtype", dtype_name(c.dtype)},
                                {"bytes", c.bytes},
                                {"bucket", c.bucket == kNoBucket ? -1 : int(c.bucket)},
                                {"nranks", c.nranks},
                                {"ranks_seen", c.ranks_seen},
                                {"time_ns", c.time_ns},
                                {"algbw_gbps", number_or_null(c.algbw_gbps, c.bytes > 0)},
                                {"busbw_gbps", number_or_null(c.busbw_gbps, c.bytes > 0)},
                                {"skew_ns", c.skew_ns},
                                {"straggler_rank", c.straggler_rank == kUnknownRank ? -1 : int64_t(c.straggler_rank)},
                                {"ranks_disagree", c.ranks_disagree}});
  }
  j["memory"] = nlohmann::json::array();
  for (size_t i = 0; i < a.memory.size(); ++i) {
    nlohmann::json pts = nlohmann::json::array();
    for (const MemoryPoint& p : a.memory[i])
      pts.push_back({p.ts, p.allocated, p.reserved, p.active, p.largest_free, p.fragmentation});
    j["memory"].push_back({{"rank", a.ranks[i].rank},
                           {"columns", {"ts_ns", "allocated", "reserved", "active", "largest_free", "fragmentation"}},
                           {"points", pts}});
  }
  j["summary"] = {{"mean_overlap_pct", a.mean_overlap_pct},
                  {"mean_exposed_comm_ns", a.mean_exposed_comm_ns},
                  {"mean_busbw_gbps", number_or_null(a.mean_busbw_gbps, a.busbw_known)},
                  {"max_skew_ns", a.max_skew_ns},
                  {"drops", a.drops},
                  {"disagreeing_collectives", a.disagreeing_collectives}};
  return json_text(j, indent);
}

std::string analysis_to_text(const Analysis& a, size_t max_rows) {
  std::string out;
  out += "Temporal breakdown per rank (HTA's kinds of time, % of the steps' span or, without steps, the work's; "
         "--hta gives HTA's own figures)\n";
  out += fmt::format("{:>5} {:>4} {:>11} {:>8} {:>8} {:>8} {:>8} {:>9} {:>11} {:>9} {:>9} {:>7}\n", "rank", "mode",
                     "window_ms", "compute%", "comm%", "memcpy%", "idle%", "overlap%", "exposed_ms", "peak_MiB",
                     "resv_MiB", "drops");
  for (const RankSummary& r : a.ranks) {
    const Breakdown& b = r.breakdown;
    out += fmt::format("{:>5} {:>4} {:>11} {:>8.1f} {:>8.1f} {:>8.1f} {:>8.1f} {:>9.1f} {:>11} {:>9} {:>9} {:>7}\n",
                       r.rank == kUnknownRank ? -1 : int64_t(r.rank), r.gpu_mode ? "gpu" : "cpu", format_ms(b.window_ns, 3, ""),
                       pct(b.compute_ns, b.window_ns), pct(b.comm_ns, b.window_ns), pct(b.memcpy_ns, b.window_ns),
                       pct(b.idle_ns, b.window_ns), b.overlap_pct, format_ms(b.exposed_comm_ns, 3, ""),
                       recorded_mib(&r, r.peak_allocated), r.reserved_recorded ? format_mib(r.peak_reserved) : "-", r.drops);
  }
  if (!a.steps.empty()) {
    out += fmt::format("\nSteps ({} rows{})\n", a.steps.size(),
                       a.steps.size() > max_rows ? fmt::format(", first {} shown", max_rows) : "");
    out += fmt::format("{:>5} {:>7} {:>10} {:>12} {:>10} {:>12} {:>9} {:>9}\n", "rank", "step", "time_ms",
                       "data_wait_ms", "comm_ms", "exposed_ms", "overlap%", "peak_MiB");
    for (size_t i = 0; i < a.steps.size() && i < max_rows; ++i) {
      const StepRow& s = a.steps[i];
      out += fmt::format("{:>5} {:>7} {:>10} {:>12} {:>10} {:>12} {:>9.1f} {:>9}\n", s.rank, s.step, format_ms(s.end - s.begin, 3, ""),
                         format_ms(s.data_wait_ns, 3, ""), format_ms(s.breakdown.comm_total_ns, 3, ""), format_ms(s.breakdown.exposed_comm_ns, 3, ""),
                         s.breakdown.overlap_pct, recorded_mib(rank_of(a, s.rank), s.peak_allocated));
    }
  }
  for (const RankSummary& r : a.ranks)
    if (r.unfinished_steps)
      out += fmt::format("rank {}: {} step{} the trace ends during (the recording stopped), not counted\n",
                         r.rank == kUnknownRank ? -1 : int64_t(r.rank), r.unfinished_steps,
                         r.unfinished_steps > 1 ? "s" : "");
  if (!a.collectives.empty()) {
    const auto matched = std::count_if(a.collectives.begin(), a.collectives.end(),
                                       [](const CollectiveStats& c) { return c.matched(); });
    out += fmt::format("\nCollectives ({}, {} matched across ranks{})\n", a.collectives.size(), matched,
                       a.collectives.size() > max_rows ? fmt::format(", first {} shown", max_rows) : "");
    out += fmt::format("{:>6} {:>15} {:>6} {:>12} {:>6} {:>6} {:>10} {:>10} {:>10} {:>10} {:>9}\n", "seq", "op", "dtype",
                       "bytes", "bucket", "ranks", "time_us", "algbw", "busbw", "skew_us", "straggler");
    for (size_t i = 0; i < a.collectives.size() && i < max_rows; ++i) {
      const CollectiveStats& c = a.collectives[i];
      // No bytes (a trace that records no message size, a barrier): no size and no bandwidth to show.
      const auto sized = [&c](auto v, const char* spec) { return c.bytes ? fmt::format(fmt::runtime(spec), v) : std::string("-"); };
      out += fmt::format("{:>5}{:1} {:>15} {:>6} {:>12} {:>6} {:>3}/{:<2} {:>10.1f} {:>10} {:>10} {:>10.1f} {:>9}\n", c.seq,
                         c.ranks_disagree ? "!" : "",
                         coll_op_name(c.op), dtype_name(c.dtype), sized(c.bytes, "{}"),
                         c.bucket == kNoBucket ? std::string("-") : std::to_string(c.bucket), c.ranks_seen, c.nranks,
                         double(c.time_ns) / 1e3, sized(c.algbw_gbps, "{:.3f}"), sized(c.busbw_gbps, "{:.3f}"),
                         double(c.skew_ns) / 1e3,
                         c.straggler_rank == kUnknownRank ? std::string("-") : std::to_string(c.straggler_rank));
    }
    out += "(bandwidths in GB/s, nccl-tests definitions)\n";
    if (a.disagreeing_collectives > 0)  // Note [Collectives the ranks disagree on]
      out += fmt::format("warning: {} of {} matched collectives (marked !) name different ops or sizes on different "
                         "ranks: the ranks' collectives do not line up (Gloo sub-groups in torch.profiler traces share "
                         "one communicator; traces that begin at different steps), so their skews and stragglers are "
                         "not to be trusted and the summary leaves them out\n",
                         a.disagreeing_collectives, a.collectives.size());
  }
  // A bandwidth needs a size: collectives that record none give "unknown", not 0 GB/s.
  const std::string busbw = a.collectives.empty() ? std::string("none (no collectives)")
                            : a.busbw_known         ? fmt::format("{:.3f} GB/s", a.mean_busbw_gbps)
                                                    : std::string("unknown (no collective records its size)");
  out += fmt::format("\nSummary: overlap {:.1f}% (mean over ranks), exposed communication {} ms per rank, "
                     "bus bandwidth {}, max skew {:.1f} us, drops {}\n",
                     a.mean_overlap_pct, format_ms(a.mean_exposed_comm_ns, 3, ""), busbw, double(a.max_skew_ns) / 1e3,
                     a.drops);
  return out;
}

}  // namespace memcomm::prof
