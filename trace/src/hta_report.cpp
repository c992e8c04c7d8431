// Text and JSON renderings of the HTA figures (memcomm-trace report --hta).
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>

#include "memcomm/common/json_output.hpp"
#include "memcomm/trace/hta.hpp"

namespace memcomm::prof {
namespace {

const char* variant_name(const HtaOptions& opt) { return opt.include_last_step ? "include_last_step" : "default"; }

nlohmann::json figures_json(const HtaFigures& f) {
  auto value = [&](auto v) { return f.valid ? nlohmann::json(v) : nlohmann::json(nullptr); };
  return {{"idle_pct", value(f.idle_pct)},
          {"compute_pct", value(f.compute_pct)},
          {"non_compute_pct", value(f.non_compute_pct)},
          {"comm_comp_overlap_pct", f.comm_comp_overlap_pct ? nlohmann::json(*f.comm_comp_overlap_pct) : nullptr},
          {"kernel_time_us", value(f.kernel_time_us)},
          {"idle_time_us", value(f.idle_time_us)},
          {"compute_time_us", value(f.compute_time_us)},
          {"non_compute_time_us", value(f.non_compute_time_us)},
          {"comm_time_us", value(f.comm_time_us)},
          {"overlap_time_us", value(f.overlap_time_us)},
          {"gpu_rows", f.gpu_rows}};
}

std::string cell(const HtaFigures& f, double v) { return f.valid && !std::isnan(v) ? fmt::format("{:.2f}", v) : "-"; }

std::string row(const char* name, uint32_t rank, const HtaFigures& f) {
  return fmt::format("{:>5} {:<20} {:>8} {:>9} {:>13} {:>9} {:>15} {:>9}\n", rank == kUnknownRank ? -1 : int64_t(rank),
                     name, cell(f, f.idle_pct), cell(f, f.compute_pct), cell(f, f.non_compute_pct),
                     f.comm_comp_overlap_pct ? fmt::format("{:.2f}", *f.comm_comp_overlap_pct) : "-",
                     f.valid ? std::to_string(f.kernel_time_us) : "-", f.gpu_rows);
}

}  // namespace

std::string hta_to_text(const std::vector<HtaRank>& h, const HtaOptions& opt) {
  std::string out = "\nHTA figures (HolisticTraceAnalysis 0.5.0 definitions; % of kernel time)\n";
  out += fmt::format("{:>5} {:<20} {:>8} {:>9} {:>13} {:>9} {:>15} {:>9}\n", "rank", "variant", "idle%", "compute%",
                     "non_compute%", "overlap%", "kernel_time_us", "gpu_rows");
  for (const HtaRank& r : h) {
    out += row(variant_name(opt), r.rank, r.hta);
    out += row("whole_trace", r.rank, r.whole_trace);
  }
  const bool filtered = !h.empty() && h.front().step_filter;
  out += filtered ? fmt::format("(HTA: ProfilerStep filter applied, {} the last step; whole_trace: every kernel, "
                                "memcpy and memset)\n", opt.include_last_step ? "including" : "without")
                  : "(HTA: fewer than two ProfilerStep names, nothing filtered; whole_trace: every kernel, memcpy and "
                    "memset)\n";
  // Why a cell is "-": HTA itself raises on such a rank, or has NaN, and a bare dash said neither.
  const auto any = [&h](auto pred) { return std::any_of(h.begin(), h.end(), pred); };
  if (any([](const HtaRank& r) { return r.hta.gpu_rows == 0 || r.whole_trace.gpu_rows == 0; }))
    out += fmt::format("(-: no GPU rows to count (kernels, copies, sets, syncs on a stream){}; HTA's breakdown raises "
                       "on such a rank)\n", filtered ? ", or none launched inside the rank's ProfilerSteps" : "");
  const auto no_share = [](const HtaFigures& f) {
    return f.gpu_rows > 0 && (std::isnan(f.idle_pct) || std::isnan(f.compute_pct) || std::isnan(f.non_compute_pct));
  };
  if (any([&](const HtaRank& r) { return no_share(r.hta) || no_share(r.whole_trace); }))
    out += "(-: no share of a kernel time of 0 us or less, or of a part that comes out below 0, where HTA's "
           "assertions fail)\n";
  if (any([](const HtaRank& r) { return !r.hta.comm_comp_overlap_pct || !r.whole_trace.comm_comp_overlap_pct; }))
    out += "(overlap% -: no communication kernel time to overlap)\n";
  return out;
}

std::string add_hta_json(const std::string& report_json, const std::vector<HtaRank>& h, const HtaOptions& opt,
                         int indent) {
  nlohmann::json j = nlohmann::json::parse(report_json);
  for (nlohmann::json& rank : j["ranks"])
    for (const HtaRank& r : h) {
      if (rank["rank"] != r.rank) continue;
      nlohmann::json hta = figures_json(r.hta);
      hta["variant"] = variant_name(opt);
      hta["step_filter"] = r.step_filter;
      rank["hta"] = std::move(hta);
      rank["hta_whole_trace"] = figures_json(r.whole_trace);
    }
  return json_text(j, indent);
}

}  // namespace memcomm::prof
