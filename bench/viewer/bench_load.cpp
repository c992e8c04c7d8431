// Where a trace load's time goes, in CPU seconds of this process, all threads (robust on a shared
// machine, unlike wall time), and wall seconds: the trace layer's reader alone (TraceReader's
// decompress + check for .mct; read_kineto's parse + convert for torch.profiler JSON), the whole
// model load (load_file: read + ingest + build, with the PrefaultPool's second
// thread unless MEMCOMM_PREFAULT_AHEAD=0), and the indexes memcomm-view builds next
// (build_indexes(): allocator checkpoints, step table, summary, on two threads), then those
// indexes again one job after the other for the breakdown. Best of REPEAT runs; decode-ahead off
// unless MEMCOMM_DECODE_AHEAD is set. REPEAT 1 is what a fresh memcomm-view pays (its pages are
// new); "load + indexes" is the number to hold against issue 6's >= 20 M events/s. The process's
// resident memory after the load (the model and its indexes held) and at its peak close the report.
//
//   build/bin/bench_load FILE.mct|FILE.json[.gz]|FILE.pickle [REPEAT (default 3)]
#include <memcomm/snapshot/snapshot.hpp>
#include <memcomm/trace/kineto.hpp>
#include <memcomm/trace/trace_reader.hpp>
#include <memcomm/view/allocator_state.hpp>
#include <memcomm/view/analysis.hpp>
#include <memcomm/view/indexes.hpp>
#include <memcomm/view/loader.hpp>

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace {
double cpu_s(int who = RUSAGE_SELF) {
  rusage u{};
  getrusage(who, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}
double wall_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
struct Cost {
  double cpu = 1e300, wall = 1e300;
  double main = 1e300;  // CPU of the calling thread alone: the wall time when the other core is free
};
// Resident bytes now (VmRSS) and at the peak (VmHWM), from /proc/self/status.
std::pair<double, double> rss_now_and_peak() {
  std::ifstream f("/proc/self/status");
  std::string key;
  double now = 0, peak = 0, kb = 0;
  while (f >> key) {
    if (key == "VmRSS:" && f >> kb) now = kb * 1024;
    else if (key == "VmHWM:" && f >> kb) peak = kb * 1024;
  }
  return {now, peak};
}
// Records in the file as the trace layer reads them: .mct records, torch.profiler traceEvents, or
// a PyTorch snapshot's events (decoded with their frames, as memcomm-view decodes them).
std::uint64_t read_alone(const std::string& path) {
  std::string error;
  const auto kind = memcomm::view::detect_input(path, error);
  if (kind == memcomm::view::InputKind::KinetoTrace) return memcomm::prof::read_kineto(path).info.trace_events;
  if (kind == memcomm::view::InputKind::TorchSnapshot) return memcomm::snapshot::load_snapshot(path).event_count();
  memcomm::prof::TraceReader r(path);
  memcomm::prof::ChunkView c;
  std::uint64_t records = 0;
  while (r.next(c)) records += c.count;
  return records;
}
void measure(Cost& c, const std::function<void()>& f) {
  const double c0 = cpu_s(), m0 = cpu_s(RUSAGE_THREAD), w0 = wall_s();
  f();
  c.cpu = std::min(c.cpu, cpu_s() - c0);
  c.main = std::min(c.main, cpu_s(RUSAGE_THREAD) - m0);
  c.wall = std::min(c.wall, wall_s() - w0);
}
// The allocation timeline's share of the model (issue 18): lifetimes, their index and a
// snapshot's kept frames, per event; "without frames" is the model less the frames.
void print_allocation_costs(const memcomm::view::Timeline& tl) {
  std::size_t lifetimes = 0, index = 0, frames = 0, interned = 0;
  std::vector<const memcomm::view::SnapshotStacks*> seen;
  for (const auto& rd : tl.ranks) {
    lifetimes += rd.allocations.memory_bytes();
    index += rd.alloc_index.memory_bytes();
    if (rd.stacks && std::find(seen.begin(), seen.end(), rd.stacks.get()) == seen.end()) {
      seen.push_back(rd.stacks.get());
      frames += rd.stacks->memory_bytes();
      interned += rd.stacks->snap.interned_bytes();
    }
  }
  const double ev = static_cast<double>(std::max<std::uint64_t>(1, tl.event_count));
  std::printf("  allocations: lifetimes %.1f B/event, index %.1f B/event, frames %.1f B/event (interned %.1f; %zu stacks, "
              "%zu sites); model without frames %.1f B/event\n",
              static_cast<double>(lifetimes) / ev, static_cast<double>(index) / ev, static_cast<double>(frames) / ev,
              static_cast<double>(interned) / ev,
              seen.empty() ? std::size_t{0} : seen[0]->snap.stack_count(), seen.empty() ? std::size_t{0} : seen[0]->text.site_count(),
              static_cast<double>(tl.memory_bytes() - frames) / ev);
}

void print_model(const std::string& path, std::uint64_t records, const memcomm::view::Timeline& tl) {
  std::printf("bench_load: %s: %llu trace records, %llu model events, model %.1f B/event\n", path.c_str(),
              static_cast<unsigned long long>(records), static_cast<unsigned long long>(tl.event_count),
              static_cast<double>(tl.memory_bytes()) / static_cast<double>(std::max<std::uint64_t>(1, tl.event_count)));
  print_allocation_costs(tl);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: bench_load FILE.mct|FILE.json[.gz] [REPEAT]\n");
    return 2;
  }
  const std::string path = argv[1];
  const int repeat = argc > 2 ? std::max(1, std::atoi(argv[2])) : 3;
  using namespace memcomm::view;
  Cost read, load, index, alloc_cost, steps_cost;
  std::uint64_t events = 0, records = 0;
  double rss_loaded = 0;  // resident bytes with the model and its indexes held
  for (int i = 0; i < repeat; ++i) {
    measure(read, [&] { records = read_alone(path); });
    Timeline tl;
    measure(load, [&] {
      LoadOptions o;
      o.decode_ahead = std::getenv("MEMCOMM_DECODE_AHEAD") != nullptr;  // default: one thread
      if (const char* v = std::getenv("MEMCOMM_PREFAULT_AHEAD")) o.prefault_ahead = std::atoi(v) != 0;
      std::string error;
      if (!load_file(path, tl, error, nullptr, o)) {
        std::fprintf(stderr, "bench_load: %s\n", error.c_str());
        std::exit(1);
      }
    });
    events = tl.event_count;
    measure(index, [&] {  // as memcomm-view does (AppState::set_timeline)
      const TimelineIndexes ix = build_indexes(tl);
      if (ix.steps.size() + ix.summary.spans == 0) std::printf("(empty)\n");
      rss_loaded = rss_now_and_peak().first;
    });
    // The same work one job after the other, for the breakdown (its pages are no longer fresh).
    std::vector<std::unique_ptr<AllocatorTimeline>> alloc;
    measure(alloc_cost, [&] {
      for (const auto& rd : tl.ranks) alloc.push_back(std::make_unique<AllocatorTimeline>(&rd.alloc_events));
    });
    measure(steps_cost, [&] {
      const auto steps = step_table(tl);
      const auto summary = summarize(tl);
      if (steps.size() + summary.spans == 0) std::printf("(empty)\n");
    });
    if (i + 1 == repeat) print_model(path, records, tl);
  }
  const auto line = [&](const char* what, const Cost& c) {
    std::printf("  %-34s cpu %.3f s (this thread %.3f s)  wall %.3f s (%5.1f M events/s)\n", what, c.cpu, c.main, c.wall,
                static_cast<double>(events) / c.wall / 1e6);
  };
  line("reader alone (decode)", read);
  line("load_file (decode+ingest+build)", load);
  line("  of which ingest+build", Cost{load.cpu - read.cpu, load.wall - read.wall, load.main - read.main});
  line("indexes (build_indexes, 2 threads)", index);
  line("  allocator checkpoints (1 thread)", alloc_cost);
  line("  step table + summary (1 thread)", steps_cost);
  line("load + indexes", Cost{load.cpu + index.cpu, load.wall + index.wall, load.main + index.main});
  const double per_event = static_cast<double>(std::max<std::uint64_t>(1, events));
  const double peak = rss_now_and_peak().second;
  std::printf("  process RSS with the model and indexes held %.1f MB = %.1f B/event; peak %.1f MB = %.1f B/event\n",
              rss_loaded / 1e6, rss_loaded / per_event, peak / 1e6, peak / per_event);
  return 0;
}
