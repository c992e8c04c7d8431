// HTA-exact figures (Note [HTA's figures] in hta.hpp): per rank, the GPU rows HTA counts, rounded
// to microseconds as HTA rounds them, optionally cut by its ProfilerStep filter, then HTA's interval
// merge, temporal breakdown and overlap sweep.
#include "memcomm/trace/hta.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "memcomm/trace/analysis.hpp"
#include "hta_clock.hpp"

namespace memcomm::prof {
namespace {

enum class RowKind : uint8_t { Other, Compute, Comm };

struct Row {
  int64_t ts, end;  // us, as HTA rounds them (end < ts happens)
  RowKind kind;
};

// HTA's kernel kinds by name (hta/utils/utils.py), with re.match's anchoring, as plain string tests:
// std::regex's ".*" recurses once per character and overflowed the stack on a 30,000-character name.
//   NCCL_KERNEL_RE "^nccl.*Kernel"; NCCL_COMPUTE_KERNEL_RE "(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)"
//   (the alternation reads: contains Memcpy, or starts with Memset, or contains Sync) and
//   MEMORY_KERNEL_RE's "^dma", which get_kernel_type tests first.
class KernelKinds {
 public:
  RowKind of(const RankTrace& r, StringId name) {
    auto it = cache_.find(name);
    if (it != cache_.end()) return it->second;
    const RowKind k = kind(r.name(name));
    cache_.emplace(name, k);
    return k;
  }

 private:
  static bool starts(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
  static bool contains(std::string_view s, std::string_view p, size_t from = 0) {
    return s.find(p, from) != std::string_view::npos;
  }
  static RowKind kind(std::string_view name) {
    if (starts(name, "nccl") && contains(name, "Kernel", 4)) return RowKind::Comm;
    if (contains(name, "Memcpy") || starts(name, "Memset") || contains(name, "Sync") || starts(name, "dma"))
      return RowKind::Other;
    return RowKind::Compute;
  }
  std::unordered_map<StringId, RowKind> cache_;
};

bool is_step_name(std::string_view name) { return name.find("ProfilerStep") != std::string_view::npos; }

// HTA filters by step when the set holds more than one distinct ProfilerStep name.
bool set_has_steps_to_filter(const TraceSet& set) {
  std::set<std::string_view> names;
  for (const RankTrace& r : set.ranks)
    for (const Event& e : r.events)
      if (e.kind == EventKind::RangeBegin && is_step_name(r.name(e.as<RangeEvent>().name)))
        names.insert(r.name(e.as<RangeEvent>().name));
  return names.size() > 1;
}

// The cut on CPU-row timestamps: ts < limit, or ts <= limit with include_last_step.
struct StepCut {
  bool any = false;  // false: the rank has no ProfilerStep range, so HTA keeps no CPU row
  int64_t limit = 0;
  bool inclusive = false;
  bool keeps(int64_t ts_us) const { return any && (inclusive ? ts_us <= limit : ts_us < limit); }
};

StepCut step_cut(const RankTrace& r, const HtaClock& clock, bool include_last_step) {
  StepCut cut;
  cut.inclusive = include_last_step;
  for (const RangeSpan& s : pair_ranges(r)) {
    if (!s.closed || !is_step_name(r.name(s.name))) continue;
    const int64_t v = include_last_step ? clock.end_us(s.begin, s.end) : clock.ts_us(s.begin);
    cut.limit = cut.any ? std::max(cut.limit, v) : v;
    cut.any = true;
  }
  return cut;
}

std::unordered_set<uint32_t> kept_launches(const RankTrace& r, const HtaClock& clock, const StepCut& cut) {
  std::unordered_set<uint32_t> corr;
  for (const Event& e : r.events) {
    if (family_of(e.kind) != EventFamily::Compute || !e.as<ComputeEvent>().on_host(e.kind)) continue;
    const auto c = e.as<ComputeEvent>();
    if (c.corr != 0 && cut.keeps(clock.ts_us(c.ts))) corr.insert(c.corr);
  }
  return corr;
}

bool is_device_span(const Event& e) {
  return family_of(e.kind) == EventFamily::Compute && !e.as<ComputeEvent>().on_host(e.kind);
}

// Device Sync spans HTA's GPU filter takes without a correlation id.
bool is_device_wide_sync(std::string_view name) { return name == "Event Sync" || name == "Context Sync"; }

// The GPU rows of one rank. `launches` is null when nothing is filtered.
std::vector<Row> gpu_rows(const RankTrace& r, const HtaClock& clock, bool with_sync, const StepCut* cut,
                          const std::unordered_set<uint32_t>* launches) {
  KernelKinds kinds;
  std::vector<Row> rows;
  for (const Event& e : r.events) {
    if (!is_device_span(e) || (e.kind == EventKind::Sync && !with_sync)) continue;
    const auto c = e.as<ComputeEvent>();
    if (e.kind == EventKind::Sync && c.sub == kDeviceWideSync) continue;  // HTA's rows have a stream (not -1)
    const bool named = e.kind == EventKind::Kernel || e.kind == EventKind::Sync;
    const int64_t ts = clock.ts_us(c.ts);
    if (launches) {
      const bool kept = c.corr != 0 ? launches->count(c.corr) > 0
                        : named && is_device_wide_sync(r.name(c.arg)) ? true
                                                                       : cut->keeps(ts);
      if (!kept) continue;
    }
    rows.push_back({ts, clock.end_us(c.ts, c.end()), named ? kinds.of(r, c.arg) : RowKind::Other});
  }
  return rows;
}

// hta/utils/utils.py merge_kernel_intervals(), groups in ts order; a group may end before it starts.
std::vector<Interval> hta_merge(std::vector<Interval> v) {
  std::stable_sort(v.begin(), v.end(), [](const Interval& a, const Interval& b) { return a.begin < b.begin; });
  std::vector<Interval> groups;
  int64_t max_end = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i == 0 || v[i].begin > max_end) groups.push_back(v[i]);
    else groups.back().end = std::max(groups.back().end, v[i].end);
    max_end = i == 0 ? v[i].end : std::max(max_end, v[i].end);
  }
  return groups;
}

int64_t total(const std::vector<Interval>& groups) {
  int64_t n = 0;
  for (const Interval& g : groups) n += g.end - g.begin;
  return n;
}

std::vector<Interval> of_kind(const std::vector<Row>& rows, RowKind k) {
  std::vector<Interval> v;
  for (const Row& r : rows)
    if (r.kind == k) v.push_back({r.ts, r.end});
  return hta_merge(std::move(v));
}

// hta/analyzers/communication_analysis.py: +1/-1 at communication group bounds, +2/-2 at compute's;
// the time the running sum is 3. Only the sum after the last change at a time holds for a while.
int64_t overlap_sweep(const std::vector<Interval>& comm, const std::vector<Interval>& comp) {
  std::vector<std::pair<int64_t, int>> status;
  for (const Interval& g : comm) status.push_back({g.begin, 1}), status.push_back({g.end, -1});
  for (const Interval& g : comp) status.push_back({g.begin, 2}), status.push_back({g.end, -2});
  std::sort(status.begin(), status.end());
  int64_t overlap = 0;
  int running = 0;
  for (size_t i = 0; i < status.size(); ++i) {
    running += status[i].second;
    if (running == 3 && i + 1 < status.size()) overlap += status[i + 1].first - status[i].first;
  }
  return overlap;
}

// numpy's round(x, 2): half to even on x * 100.
double round2(double x) { return std::nearbyint(x * 100.0) / 100.0; }
double rounded_pct(int64_t part, int64_t whole) {
  return whole != 0 ? round2(100.0 * (double(part) / double(whole))) : std::numeric_limits<double>::quiet_NaN();
}

HtaFigures figures(const std::vector<Row>& rows) {
  HtaFigures f;
  f.gpu_rows = rows.size();
  if (rows.empty()) return f;
  std::vector<Interval> all;
  for (const Row& r : rows) all.push_back({r.ts, r.end});
  const std::vector<Interval> groups = hta_merge(std::move(all));
  const std::vector<Interval> comp = of_kind(rows, RowKind::Compute), comm = of_kind(rows, RowKind::Comm);
  f.valid = true;
  f.kernel_time_us = groups.back().end - groups.front().begin;
  f.idle_time_us = f.kernel_time_us - total(groups);
  f.compute_time_us = total(comp);
  f.non_compute_time_us = f.kernel_time_us - f.compute_time_us - f.idle_time_us;
  // NaN (JSON null, "-") over no kernel time, as HTA's. Also below it: kernels under a microsecond,
  // cut to HTA's whole microseconds, can leave the last group ending before the first begins (a
  // kernel time of -1 us), where HTA's own assertion fails and the shares would read -100% and 200%.
  if (f.kernel_time_us > 0) {
    f.idle_pct = rounded_pct(f.idle_time_us, f.kernel_time_us);
    f.compute_pct = rounded_pct(f.compute_time_us, f.kernel_time_us);
    // Rows cut that way can also make idle exceed what compute leaves (a negative non-compute time,
    // HTA's other assertion): no share then, rather than a negative one.
    f.non_compute_pct = f.non_compute_time_us >= 0 ? rounded_pct(f.non_compute_time_us, f.kernel_time_us)
                                                   : std::numeric_limits<double>::quiet_NaN();
  } else {
    f.idle_pct = f.compute_pct = f.non_compute_pct = std::numeric_limits<double>::quiet_NaN();
  }
  f.comm_time_us = total(comm);
  f.overlap_time_us = overlap_sweep(comm, comp);
  if (!comm.empty() && f.comm_time_us != 0)
    f.comm_comp_overlap_pct = rounded_pct(f.overlap_time_us, f.comm_time_us);
  return f;
}

HtaFigures hta_figures(const RankTrace& r, const HtaClock& clock, bool step_filter, bool include_last_step) {
  if (!step_filter) return figures(gpu_rows(r, clock, true, nullptr, nullptr));
  const StepCut cut = step_cut(r, clock, include_last_step);
  const std::unordered_set<uint32_t> launches = kept_launches(r, clock, cut);
  return figures(gpu_rows(r, clock, true, &cut, &launches));
}

}  // namespace

std::vector<HtaRank> hta_analyze(const TraceSet& set, const HtaOptions& opt) {
  const bool step_filter = set_has_steps_to_filter(set);
  std::vector<HtaRank> out;
  for (const RankTrace& r : set.ranks) {
    const HtaClock clock = HtaClock::of(set, r);
    HtaRank h;
    h.rank = r.rank;
    h.step_filter = step_filter;
    h.hta = hta_figures(r, clock, step_filter, opt.include_last_step);
    h.whole_trace = figures(gpu_rows(r, clock, false, nullptr, nullptr));
    out.push_back(std::move(h));
  }
  return out;
}

}  // namespace memcomm::prof
