// Every shared real PyTorch snapshot: loaded, rebuilt, replayed through every policy with invariants
// checked, peak live checked against an independent computation and against SOURCES.md, the
// PyTorch simulation checked against what PyTorch recorded on traces that start from an empty cache,
// and memcomm checked against the reserved-bytes and source-call targets.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include "memcomm/replay/call_bound.hpp"
#include "memcomm/replay/replayer.hpp"
#include "memcomm/snapshot/frames.hpp"
#include "memcomm/snapshot/snapshot.hpp"
#include "memcomm_test.hpp"

namespace fs = std::filesystem;
namespace snap = memcomm::snapshot;
namespace prof = memcomm::prof;
namespace rp = memcomm::replay;

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

std::vector<std::string> shared_snapshots() {
  std::vector<std::string> files;
  fs::path dir = memcomm::test::shared_snapshots_dir();
  if (!fs::is_directory(dir)) return files;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() == ".pickle") files.push_back(e.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

// Peak live requested bytes computed straight from the events, the way SOURCES.md describes it:
// alloc +size, free_completed -size, plus the bytes live at trace start (blocks freed but never
// allocated in the trace, and end-state active blocks at addresses the trace never names).
std::uint64_t independent_peak_live(const snap::Snapshot& s, int device) {
  const auto& events = s.device_traces.at(static_cast<std::size_t>(device));
  std::map<std::uint64_t, std::uint64_t> live;
  std::set<std::uint64_t> named;
  std::uint64_t at_start = 0;
  for (const auto& e : events) {
    if (!e.has_addr()) continue;
    if (e.kind == prof::EventKind::Alloc) {
      live[e.addr] = e.size;
      named.insert(e.addr);
    } else if (e.kind == prof::EventKind::FreeCompleted) {
      if (!live.erase(e.addr)) at_start += e.size;
      named.insert(e.addr);
    } else if (e.kind == prof::EventKind::FreeRequested) {
      named.insert(e.addr);
    }
  }
  for (const auto& seg : s.segments) {
    if (seg.device != device) continue;
    for (const auto& b : seg.blocks) {
      if (b.is_active() && !named.count(b.address)) at_start += b.requested_size ? b.requested_size : b.size;
    }
  }
  live.clear();
  std::uint64_t cur = at_start, peak = at_start;
  for (const auto& e : events) {
    if (!e.has_addr()) continue;
    if (e.kind == prof::EventKind::Alloc) {
      live[e.addr] = e.size;
      cur += e.size;
      peak = std::max(peak, cur);
    } else if (e.kind == prof::EventKind::FreeCompleted) {
      auto it = live.find(e.addr);
      cur -= it != live.end() ? it->second : e.size;
      if (it != live.end()) live.erase(it);
    }
  }
  return peak;
}

struct SourcesRow {
  std::uint64_t events = 0;
  double peak_live_mib = 0, start_reserved_mib = 0, peak_reserved_mib = 0;
};

// The table in SOURCES.md, keyed by (file, device).
std::map<std::pair<std::string, int>, SourcesRow> sources_table() {
  std::map<std::pair<std::string, int>, SourcesRow> rows;
  std::ifstream in(memcomm::test::shared_snapshots_dir() + "/SOURCES.md");
  std::string line;
  auto number = [](std::string s) {
    s.erase(std::remove(s.begin(), s.end(), ','), s.end());
    return std::stod(s);
  };
  while (std::getline(in, line)) {
    if (line.rfind("| ", 0) != 0 || line.find(".pickle") == std::string::npos) continue;
    std::vector<std::string> cells;
    std::stringstream ss(line.substr(1));
    std::string cell;
    while (std::getline(ss, cell, '|')) {
      auto b = cell.find_first_not_of(' '), e = cell.find_last_not_of(' ');
      cells.push_back(b == std::string::npos ? "" : cell.substr(b, e - b + 1));
    }
    if (cells.size() < 7) continue;
    SourcesRow r;
    r.events = static_cast<std::uint64_t>(number(cells[3]));
    r.peak_live_mib = number(cells[4]);
    r.start_reserved_mib = number(cells[5]);
    r.peak_reserved_mib = number(cells[6]);
    rows[{cells[0], std::stoi(cells[1])}] = r;
  }
  return rows;
}

}  // namespace

TEST_CASE("replay: every shared snapshot loads and rebuilds and peak live agrees with an independent count", "[replay][snapshots]") {
  auto files = shared_snapshots();
  if (files.empty()) MEMCOMM_SKIP_TEST("no shared snapshots in " + memcomm::test::shared_snapshots_dir());
  auto table = sources_table();
  CHECK(table.size() >= files.size());
  for (const auto& file : files) {
    INFO(file);
    snap::Snapshot s = snap::load_snapshot(file);
    const std::string name = fs::path(file).filename().string();
    // Frames are kept: some traced alloc points at a source line.
    bool some_frame = false;
    for (const auto& dev : s.device_traces) {
      for (const auto& e : dev) some_frame |= e.kind == prof::EventKind::Alloc && !snap::shown_frame(s, e.stack).empty();
    }
    CHECK(some_frame);

    rp::TraceRequests trace = rp::build_requests(s);
    REQUIRE_FALSE(trace.devices.empty());
    for (const auto& dev : trace.devices) {
      INFO("device " << dev.device);
      CHECK(dev.peak_live == independent_peak_live(s, dev.device));
      CHECK(dev.anomalies == 0);
      auto row = table.find({name, dev.device});
      if (row != table.end()) {
        CHECK(dev.trace_events == row->second.events);
        CHECK(std::abs(double(dev.peak_live) / kMiB - row->second.peak_live_mib) <= 1.0);
        CHECK(std::abs(double(dev.recorded.at_start) / kMiB - row->second.start_reserved_mib) <= 1.0);
        CHECK(std::abs(double(dev.recorded.peak) / kMiB - row->second.peak_reserved_mib) <= 1.0);
      }
    }
  }
}

namespace {

// Replays every shared snapshot through `policy` with overlap and invariant checks on.
void replay_all_shared(const std::string& policy) {
  auto files = shared_snapshots();
  if (files.empty()) MEMCOMM_SKIP_TEST("no shared snapshots in " + memcomm::test::shared_snapshots_dir());
  for (const auto& file : files) {
    rp::TraceRequests trace = rp::load_trace(file);
    for (const auto& dev : trace.devices) {
      INFO(file << " device " << dev.device << " policy " << policy);
      rp::PolicyOptions po;
      po.settings = trace.settings;
      auto p = rp::make_policy(policy, po);
      rp::ReplayOptions ro;
      ro.check = true;
      ro.check_every = 2000;
      rp::ReplayResult r = rp::replay_device(trace, dev, *p, ro);  // throws on overlap / broken invariant
      CHECK(r.ooms == 0);
      CHECK(r.peak_allocated >= r.peak_live);
      CHECK(r.peak_reserved >= r.peak_allocated);
      CHECK(r.events == dev.trace_events);
      if (r.peak_live > 0) CHECK(r.source_allocs > 0);
    }
  }
}

bool have_policy(const std::string& name) {
  auto names = rp::policy_names();
  return std::find(names.begin(), names.end(), name) != names.end();
}

}  // namespace

TEST_CASE("replay: shared snapshots through the pytorch policy, invariants checked", "[replay][snapshots]") {
  replay_all_shared("pytorch");
}

TEST_CASE("replay: shared snapshots through the pytorch-expandable policy, invariants checked", "[replay][snapshots]") {
  replay_all_shared("pytorch-expandable");
}

TEST_CASE("replay: shared snapshots through the memcomm engine, invariants checked", "[replay][snapshots][engine]") {
  if (!have_policy("memcomm")) MEMCOMM_SKIP_TEST("memcomm engine not in this build");
  replay_all_shared("memcomm");
}

TEST_CASE("replay: the pytorch simulation matches PyTorch's recorded reserved bytes on traces that start empty", "[replay][snapshots][pytorch]") {
  auto files = shared_snapshots();
  if (files.empty()) MEMCOMM_SKIP_TEST("no shared snapshots in " + memcomm::test::shared_snapshots_dir());
  int compared = 0;
  for (const auto& file : files) {
    rp::TraceRequests trace = rp::load_trace(file);
    for (const auto& dev : trace.devices) {
      if (!dev.recorded.starts_empty()) continue;
      // Compare against the simulation of the mode PyTorch ran in.
      const char* policy = dev.recorded.expandable ? "pytorch-expandable" : "pytorch";
      rp::PolicyOptions po;
      po.settings = trace.settings;
      auto p = rp::make_policy(policy, po);
      rp::ReplayResult r = rp::replay_device(trace, dev, *p);
      const double deviation = double(r.peak_reserved) / double(dev.recorded.peak) - 1.0;
      const double calls_dev = double(r.source_allocs) / double(std::max<std::uint64_t>(dev.recorded.source_allocs, 1)) - 1.0;
      std::printf("%-45s dev %d  %-18s simulated %9.1f MiB  recorded %9.1f MiB  deviation %+.2f%%   "
                  "source calls %llu vs %llu\n",
                  fs::path(file).filename().c_str(), dev.device, policy, r.peak_reserved / kMiB, dev.recorded.peak / kMiB,
                  deviation * 100, static_cast<unsigned long long>(r.source_allocs),
                  static_cast<unsigned long long>(dev.recorded.source_allocs));
      INFO(file << " device " << dev.device << " deviation " << deviation * 100 << "%, calls " << calls_dev * 100 << "%");
      CHECK(std::abs(deviation) <= 0.05);
      CHECK(std::abs(calls_dev) <= 0.05);  // segment_alloc + segment_map events PyTorch made
      ++compared;
    }
  }
  CHECK(compared >= 1);
}

// Every device trace of both shared snapshot sets (pytorch-snapshots and pytorch-snapshots-2).
std::vector<std::string> all_shared_snapshots() {
  std::vector<std::string> files = shared_snapshots();
  const fs::path second = fs::path(memcomm::test::shared_snapshots_dir()).parent_path() / "pytorch-snapshots-2";
  if (fs::is_directory(second))
    for (const auto& e : fs::directory_iterator(second))
      if (e.path().extension() == ".pickle") files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

TEST_CASE("replay: memcomm against PyTorch on every shared snapshot (reserved and source calls)",
          "[replay][snapshots][engine][targets]") {
  // Deterministic simulations, not timings: each figure is the same on every run and machine. What
  // holds on every shared trace (bench/replay/allocator_targets.py reports the tighter
  // targets trace by trace, and bench/results/allocator-cpu.md which of them are met):
  //  * memcomm's peak reserved <= 1.05 x peak live, and <= the pytorch policy's;
  //  * its source calls (maps + unmaps) stay within 20 x the ideal online bound at 1.03 (Note [Ideal
  //    online call bound]) plus 8: eager release, the other way to hold reserved near live, costs
  //    10-10,000 x PyTorch's calls, so this catches a release policy gone eager.
  if (!have_policy("memcomm")) MEMCOMM_SKIP_TEST("memcomm engine not in this build");
  auto files = all_shared_snapshots();
  if (files.empty()) MEMCOMM_SKIP_TEST("no shared snapshots in " + memcomm::test::shared_snapshots_dir());
  constexpr double kRatio = 1.05;
  constexpr std::uint64_t kCallFactor = 20, kCallSlack = 8;
  for (const auto& file : files) {
    rp::TraceRequests trace = rp::load_trace(file);
    for (const auto& dev : trace.devices) {
      rp::PolicyOptions po;
      po.settings = trace.settings;
      po.device = dev.device;
      auto mc = rp::make_policy("memcomm", po);
      auto pt = rp::make_policy("pytorch", po);
      const rp::ReplayResult m = rp::replay_device(trace, dev, *mc);
      const rp::ReplayResult p = rp::replay_device(trace, dev, *pt);
      const std::uint64_t bound = rp::ideal_calls(dev, rp::kCallBoundRatio);
      const std::uint64_t calls = m.source_allocs + m.source_frees;
      std::printf("%-45s dev %d  live %9.1f MiB  memcomm %9.1f MiB (%.3fx, %llu calls)  pytorch %9.1f MiB  "
                  "ideal calls at %.2f: %llu\n",
                  fs::path(file).filename().c_str(), dev.device, double(dev.peak_live) / kMiB,
                  double(m.peak_reserved) / kMiB, m.reserved_over_live(), static_cast<unsigned long long>(calls),
                  double(p.peak_reserved) / kMiB, rp::kCallBoundRatio, static_cast<unsigned long long>(bound));
      INFO(file << " device " << dev.device << ": memcomm reserved " << m.peak_reserved << " B, " << calls
                << " calls; pytorch " << p.peak_reserved << " B; live " << dev.peak_live << " B; ideal calls " << bound);
      CHECK(double(m.peak_reserved) <= kRatio * double(dev.peak_live));
      CHECK(m.peak_reserved <= p.peak_reserved);
      CHECK(calls <= kCallFactor * bound + kCallSlack);
    }
  }
}
