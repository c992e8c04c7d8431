// bench_replay [--policy LIST] [DIR|FILE...]: for every snapshot (default: ../shared/traces/pytorch-snapshots)
//  1. load speed: pickle decode + model, with and without frames (MB/s);
//  2. replay speed per policy: median of repeated replays, in trace events per second (goal >= 2 M/s);
//  3. the policy table: peak reserved / peak live and source calls for every policy, side by side.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "memcomm/replay/replayer.hpp"
#include "memcomm/snapshot/snapshot.hpp"
#include "snapshot_args.hpp"

namespace fs = std::filesystem;
namespace rp = memcomm::replay;
namespace snap = memcomm::snapshot;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

template <class F>
double median_seconds(int reps, F&& f) {
  std::vector<double> t;
  for (int k = 0; k < reps; ++k) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    t.push_back(seconds_since(t0));
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

static int report(std::vector<std::string> args) {
  std::vector<std::string> files;
  std::vector<std::string> policies = rp::policy_names();
  if (args.size() >= 2 && args[0] == "--policy") {
    policies.clear();
    std::string list = args[1] + ",";
    for (std::size_t at = 0, comma; (comma = list.find(',', at)) != std::string::npos; at = comma + 1) {
      if (comma > at) policies.push_back(list.substr(at, comma - at));
    }
    args.erase(args.begin(), args.begin() + 2);
  }
  files = snapshot_files(args, "bench_replay [--policy LIST] [DIR|FILE...]");
  constexpr int kReps = 15;

  std::printf("## Load speed (pickle decode + snapshot model; median of 5)\n\n");
  std::printf("| file | MB | events | ms with frames | ms without frames | MB/s without frames |\n|---|---:|---:|---:|---:|---:|\n");
  std::vector<rp::TraceRequests> traces;
  for (const auto& f : files) {
    auto bytes = snap::read_file_bytes(f);
    std::size_t events = 0;
    double with = median_seconds(5, [&] { events = snap::parse_snapshot(bytes.data(), bytes.size(), f).event_count(); });
    snap::ParseOptions nf;
    nf.keep_frames = false;
    double without = median_seconds(5, [&] { snap::parse_snapshot(bytes.data(), bytes.size(), f, nf); });
    std::printf("| %s | %.2f | %zu | %.1f | %.1f | %.0f |\n", fs::path(f).filename().c_str(), bytes.size() / 1e6, events, with * 1e3,
                without * 1e3, bytes.size() / 1e6 / without);
    traces.push_back(rp::build_requests(snap::parse_snapshot(bytes.data(), bytes.size(), f, nf)));
  }

  // Replay speed per policy over all traces (the figure of the "Replay speed" target).
  std::printf("\n## Replay speed (median of %d replays per device; events = all trace events of the device)\n\n", kReps);
  std::printf("| policy | events | median seconds (sum) | M events/s | goal |\n|---|---:|---:|---:|---|\n");
  std::map<std::string, std::vector<rp::ReplayResult>> table;  // policy -> rows
  for (const auto& policy : policies) {
    std::uint64_t events = 0;
    double secs = 0;
    for (const auto& t : traces) {
      for (const auto& dev : t.devices) {
        rp::ReplayResult last;
        double s = median_seconds(kReps, [&] {
          rp::PolicyOptions po;
          po.settings = t.settings;
          auto p = rp::make_policy(policy, po);
          last = rp::replay_device(t, dev, *p);
        });
        events += dev.trace_events;
        secs += s;
        table[policy].push_back(last);
      }
    }
    const double meps = events / secs / 1e6;
    std::printf("| %s | %llu | %.4f | %.2f | %s |\n", policy.c_str(), static_cast<unsigned long long>(events), secs, meps,
                meps >= 2.0 ? ">= 2 M/s: met" : "< 2 M/s: MISSED");
  }

  // The policy table: reserved/live and source calls, recorded PyTorch first.
  std::printf("\n## Peak reserved / peak live and source calls (allocs + maps) per policy\n\n");
  std::string head = "| file | dev | live MiB | recorded";
  std::string sep = "|---|---:|---:|---:";
  for (const auto& p : policies) {
    head += " | " + p;
    sep += "|---:";
  }
  std::printf("%s | calls: recorded", head.c_str());
  for (const auto& p : policies) std::printf(" | %s", p.c_str());
  std::printf(" |\n%s|---:", sep.c_str());
  for (std::size_t k = 0; k < policies.size(); ++k) std::printf("|---:");
  std::printf("|\n");
  std::size_t row = 0;
  std::map<std::string, double> worst;
  for (const auto& t : traces) {
    for (const auto& dev : t.devices) {
      auto rec = rp::recorded_result(t, dev);
      std::string line = fmt::format("| {} | {} | {:.0f} | {:.3f}{}", fs::path(t.file).filename().string(), dev.device,
                                     dev.peak_live / 1048576.0, rec.reserved_over_live(), dev.recorded.starts_empty() ? "*" : "");
      for (const auto& p : policies) {
        const auto& r = table[p][row];
        line += fmt::format(" | {:.3f}", r.reserved_over_live());
        worst[p] = std::max(worst[p], r.reserved_over_live());
      }
      line += fmt::format(" | {}", rec.source_allocs);
      for (const auto& p : policies) line += fmt::format(" | {}", table[p][row].source_allocs);
      std::printf("%s |\n", line.c_str());
      ++row;
    }
  }
  std::printf("\nworst reserved/live:");
  for (const auto& p : policies) std::printf("  %s %.3f", p.c_str(), worst[p]);
  std::printf("\n(* = PyTorch's cache was empty at trace start; recorded calls = segment_alloc + segment_map events in the trace)\n");
  return 0;
}

int main(int argc, char** argv) {
  return run_reporting_errors("bench_replay", [&] { return report(std::vector<std::string>(argv + 1, argv + argc)); });
}
