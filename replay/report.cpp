// Output of memcomm-replay: the table, the JSON list, and size parsing for --capacity.

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "memcomm/common/bytes.hpp"
#include "memcomm/common/json_output.hpp"
#include "memcomm/replay/replayer.hpp"
#include "memcomm/trace/event.hpp"

namespace memcomm::replay {
namespace {

std::string basename(const std::string& path) {
  auto slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

std::string format_table(const std::vector<ReplayResult>& results) {
  std::size_t file_w = 4, policy_w = 6;
  bool ranks = false, snapshots = false, mct = false, kineto = false, host = false;
  for (const auto& r : results) {
    file_w = std::max(file_w, basename(r.file).size());
    policy_w = std::max(policy_w, r.policy.size() + 1);  // + the starts-empty mark
    ranks |= r.rank != kNoRank;
    host |= r.device == prof::kHostDevice && r.format != "pytorch-snapshot";
    if (r.recorded_from_profile) kineto = true;  // also an .mct that memcomm-trace convert made of one
    else if (r.format == "mct") mct = true;
    else snapshots = true;
  }
  // The rank column appears only when some trace records ranks (.mct and torch.profiler traces).
  auto rank_cell = [&](const std::string& text) { return ranks ? fmt::format("{:>4}  ", text) : std::string(); };
  std::string out = fmt::format("{:<{}}  {}{:>4}  {:<{}}  {:>11}  {:>11}  {:>8}  {:>6}  {:>5}  {:>9}  {:>8}  {:>5}  {:>7}  {:>8}  {:>7}\n",
                                "file", file_w, rank_cell("rank"), "dev", "policy", policy_w, "live MiB", "reserv MiB",
                                "res/live", "F", "OOMs", "src alloc", "src free", "bound", "events", "seconds", "Mev/s");
  for (const auto& r : results) {
    const bool recorded = r.policy == kRecordedPolicy;
    const bool unknown = recorded && r.peak_reserved == 0;  // the trace says nothing of reserved bytes
    auto figure = [unknown](double v, int precision) { return unknown ? std::string("-") : fmt::format("{:.{}f}", v, precision); };
    out += fmt::format("{:<{}}  {}{:>4}  {:<{}}  {:>11}  {:>11}  {:>8}  {:>6}  {:>5}  {:>9}  {:>8}  {:>5}  {:>7}  {:>8}  {:>7}\n",
                       basename(r.file), file_w, rank_cell(r.rank == kNoRank ? "-" : std::to_string(r.rank)),
                       r.device == prof::kHostDevice && r.format != "pytorch-snapshot" ? std::string("host")
                                                                                        : std::to_string(r.device),
                       r.policy + (recorded && r.starts_empty ? "*" : ""), policy_w, format_mib(r.peak_live),
                       unknown ? std::string("-") : format_mib(r.peak_reserved), figure(r.reserved_over_live(), 3),
                       figure(r.fragmentation(), 3), r.ooms, r.source_allocs,
                       r.source_frees, r.call_bound, r.events, recorded ? "-" : fmt::format("{:.4f}", r.seconds),
                       recorded || r.seconds <= 0 ? "-" : fmt::format("{:.2f}", double(r.events) / r.seconds / 1e6));
  }
  out += "live = peak live requested bytes (pre-trace blocks included, and blocks freed but held for a stream, which\n"
         "the allocator cannot reuse yet); F = 1 - peak allocated / peak reserved;\n"
         "reserv = bytes backed by memory (an expandable segment's unmapped virtual range is not reserved);\n"
         "src alloc = segment allocations + page maps.";
  out += host ? " dev host = host memory.\n" : "\n";
  out += "bound = the fewest source calls (allocations + maps) any online policy needs to keep reserved <= 1.03 x\n"
         "live on the device: the ideal call bound (bench_call_bound --ratio R for other ratios).\n";
  // `recorded` is whatever allocator wrote the trace: say which, per format present (* = its cache was
  // empty at the start).
  if (snapshots)
    out += "recorded (PyTorch snapshots) = what PyTorch's allocator did in the trace (* = its cache was empty at the start);\n"
           "its peak allocated is live's requested bytes (a trace records no rounded sizes), so its F reads above a\n"
           "replay's at the same reserved bytes.\n";
  if (mct) out += "recorded (.mct traces) = what memcomm's own allocator did in the traced run (* = it started empty).\n";
  if (kineto)
    out += "recorded (torch.profiler traces, and .mct converted from one) = PyTorch's allocator as its [memory]\n"
           "events' Total Reserved shows it: the largest Total Reserved; src alloc/free = the events where it\n"
           "rose/fell (each at least one call).\n";
  return out;
}

std::string format_json(const std::vector<ReplayResult>& results) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& r : results) {
    list.push_back({
        {"file", r.file},
        {"format", r.format},
        {"rank", r.rank == kNoRank ? nlohmann::json(nullptr) : nlohmann::json(r.rank)},
        {"device", r.device},
        {"policy", r.policy},
        {"peak_live", r.peak_live},
        {"peak_reserved", r.peak_reserved},
        {"peak_allocated", r.peak_allocated},
        {"reserved_over_live", r.reserved_over_live()},
        {"fragmentation", r.fragmentation()},
        {"ooms", r.ooms},
        {"source_allocs", r.source_allocs},
        {"source_frees", r.source_frees},
        {"events", r.events},
        {"requests", r.requests},
        {"traced_allocs", r.traced_allocs},
        {"call_bound", r.call_bound},
        {"seconds", r.seconds},
        {"starts_empty", r.starts_empty},
    });
  }
  return json_text(list, 2) + "\n";
}

}  // namespace memcomm::replay
