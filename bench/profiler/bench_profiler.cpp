// Profiler benchmarks. Run: build/bench/... bench_profiler [--benchmark_repetitions=5]
// Targets (issue 4): record <= 10 ns p50/event on one thread and scaling to 2; sustained write
// >= 20 M events/s; <= 24 B/event before compression (24 by construction); read >= 50 M events/s.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <random>
#include <thread>

#include "memcomm/profiler/recorder.hpp"
#include "memcomm/profiler/trace_reader.hpp"
#include "memcomm/profiler/trace_writer.hpp"

using namespace memcomm::prof;

namespace {

// Counts and forgets: isolates the recorder from sink costs.
class NullSink : public Sink {
 public:
  void consume(const Batch& b) override { events.fetch_add(b.n_events, std::memory_order_relaxed); }
  std::atomic<uint64_t> events{0};
};

std::string temp_file(const char* stem) {
  return std::string("/tmp/memcomm_bench_") + stem + "_" + std::to_string(::getpid()) + ".mct";
}

// A training-like event stream: per "step" phases, allocations/frees, kernels, a collective,
// memory samples and a loss counter, with realistic timestamps and addresses.
std::vector<Event> training_like(size_t n) {
  std::vector<Event> v;
  v.reserve(n);
  std::mt19937_64 rng(42);
  int64_t t = 1'000'000'000;
  uint32_t corr = 1, seq = 0;
  uint64_t step = 0;
  std::vector<std::pair<uint64_t, uint64_t>> live;
  while (v.size() < n) {
    v.push_back(Event::from(make_range(EventKind::RangeBegin, t, Phase::Step, 0, step, 0)));
    for (int phase = 0; phase < 3 && v.size() < n; ++phase) {
      const Phase p = phase == 0 ? Phase::Forward : phase == 1 ? Phase::Backward : Phase::Optimizer;
      v.push_back(Event::from(make_range(EventKind::RangeBegin, t += 500, p, 0, 0, 0)));
      for (int i = 0; i < 60 && v.size() < n; ++i) {
        t += 200 + int64_t(rng() % 3000);
        if (rng() % 2 || live.empty()) {
          const uint64_t addr = 0x7f00'0000'0000ull + (rng() % (1u << 30)) * 512, size = 512 * (1 + rng() % 8192);
          live.emplace_back(addr, size);
          v.push_back(Event::from(make_mem_block(EventKind::Alloc, t, addr, size, 0, 0)));
        } else {
          const auto [addr, size] = live.back();
          live.pop_back();
          v.push_back(Event::from(make_mem_block(EventKind::FreeRequested, t, addr, size, 0, 0)));
        }
        v.push_back(Event::from(make_compute(EventKind::Kernel, t + 3000, t + 3000 + int64_t(rng() % 50000), 7,
                                             uint32_t(1 + rng() % 40), corr++, 0)));
      }
      v.push_back(Event::from(make_range(EventKind::RangeEnd, t += 500, p, 0, 0, 0)));
      if (p == Phase::Backward) {
        v.push_back(Event::from(make_collective(EventKind::CollStart, t, CollOp::AllReduce, DType::F32, 25u << 20, 0, seq)));
        v.push_back(Event::from(make_collective(EventKind::CollEnd, t + 900000, CollOp::AllReduce, DType::F32, 25u << 20, 0, seq++)));
      }
    }
    v.push_back(Event::from(make_mem_sample(t, MemMetric::Allocated, 1ull << 33)));
    v.push_back(Event::from(make_counter(t, 41, 2.5 / double(step + 1))));
    v.push_back(Event::from(make_range(EventKind::RangeEnd, t += 100, Phase::Step, 0, step++, 0)));
  }
  v.resize(n);
  return v;
}

void BM_ClockGettime(benchmark::State& st) {
  for (auto _ : st) benchmark::DoNotOptimize(monotonic_ns());
}
BENCHMARK(BM_ClockGettime);

void BM_NowNs(benchmark::State& st) {
  clock_init();
  for (auto _ : st) benchmark::DoNotOptimize(now_ns());
  st.SetLabel(clock_source());
}
BENCHMARK(BM_NowNs);

Recorder& bench_recorder() {
  static Recorder* r = [] {
    RecorderOptions o;
    o.ring_events = 1 << 20;
    o.drain_interval_ms = 1;
    auto* rec = new Recorder(o);
    rec->add_sink(std::make_shared<NullSink>());
    return rec;
  }();
  return *r;
}

// The full hot path: take a timestamp, build a 24-byte record, push it.
void BM_RecordNow(benchmark::State& st) {
  Recorder& rec = bench_recorder();
  if (st.thread_index() == 0) rec.start();
  const uint64_t drops0 = rec.stats().dropped;
  uint64_t addr = 0x1000;
  for (auto _ : st) rec.record(make_mem_block(EventKind::Alloc, now_ns(), addr += 512, 512));
  st.SetItemsProcessed(int64_t(st.iterations()));
  if (st.thread_index() == 0) {
    rec.stop();
    st.counters["dropped"] = double(rec.stats().dropped - drops0);
  }
}
BENCHMARK(BM_RecordNow)->Threads(1)->Threads(2)->UseRealTime();

// Events that already carry their time (CUPTI records, batched producers): the ring cost alone.
void BM_RecordPretimed(benchmark::State& st) {
  Recorder& rec = bench_recorder();
  if (st.thread_index() == 0) rec.start();
  int64_t t = 0;
  for (auto _ : st) rec.record(make_counter(++t, 1, 1.0));
  st.SetItemsProcessed(int64_t(st.iterations()));
  if (st.thread_index() == 0) rec.stop();
}
BENCHMARK(BM_RecordPretimed)->Threads(1)->Threads(2)->UseRealTime();

// Stopped recorder: what instrumentation costs when profiling is off.
void BM_RecordStopped(benchmark::State& st) {
  Recorder& rec = bench_recorder();
  int64_t t = 0;
  for (auto _ : st) rec.record(make_counter(++t, 1, 1.0));
  st.SetItemsProcessed(int64_t(st.iterations()));
}
BENCHMARK(BM_RecordStopped);

void BM_PhaseScope(benchmark::State& st) {
  Recorder& rec = bench_recorder();
  rec.start();
  for (auto _ : st) {
    PhaseScope s(Phase::Forward, 0, {}, rec);
  }
  st.SetItemsProcessed(int64_t(st.iterations()) * 2);
  rec.stop();
}
BENCHMARK(BM_PhaseScope);

// Writer alone: compress + checksum + write, training-like events, 64 Ki-event chunks.
void BM_WriteFile(benchmark::State& st) {
  const auto events = training_like(1 << 22);
  const std::string path = temp_file("write");
  const int level = int(st.range(0));
  uint64_t bytes = 0, n = 0;
  for (auto _ : st) {
    WriterOptions o;
    o.codec = level == 0 ? Codec::Lz4 : Codec::Zstd;
    o.zstd_level = level;
    TraceWriter w(path, o);
    for (size_t i = 0; i < events.size(); i += 1 << 16) w.write_chunk(nullptr, 0, events.data() + i, 1 << 16);
    w.close();
    bytes = w.bytes_written();
    n = events.size();
  }
  st.SetItemsProcessed(int64_t(st.iterations() * n));
  st.counters["disk_B_per_event"] = double(bytes) / double(n);
  st.counters["raw_B_per_event"] = double(sizeof(Event));
  std::remove(path.c_str());
}
BENCHMARK(BM_WriteFile)->Arg(0)->Arg(1)->Arg(-5)->Unit(benchmark::kMillisecond)->UseRealTime();

// End to end: one thread records pre-timed events as fast as it can into a FileSink.
void BM_RecorderToFile(benchmark::State& st) {
  const auto events = training_like(1 << 22);
  const std::string path = temp_file("sustained");
  uint64_t delivered = 0, dropped = 0, bytes = 0;
  for (auto _ : st) {
    RecorderOptions ro;
    ro.ring_events = 1 << 22;
    ro.drain_interval_ms = 1;
    Recorder rec(ro);
    WriterOptions wo;
    wo.codec = st.range(0) == 0 ? Codec::Lz4 : Codec::Zstd;
    wo.zstd_level = int(st.range(0));
    auto sink = std::make_shared<FileSink>(path, wo);
    rec.add_sink(sink);
    rec.start();
    for (const Event& e : events) rec.record(e);
    rec.stop();
    sink->close();
    delivered = sink->events_written();
    dropped = rec.stats().dropped;
    bytes = sink->bytes_written();
  }
  st.SetItemsProcessed(int64_t(st.iterations() * delivered));
  st.counters["dropped"] = double(dropped);
  st.counters["disk_B_per_event"] = delivered ? double(bytes) / double(delivered) : 0.0;
  std::remove(path.c_str());
}
BENCHMARK(BM_RecorderToFile)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

// Reader: iterate every event of a training-like file, touching each.
void BM_ReadFile(benchmark::State& st) {
  const auto events = training_like(1 << 22);
  const std::string path = temp_file("read");
  {
    WriterOptions o;
    o.codec = st.range(0) == 0 ? Codec::Lz4 : Codec::Zstd;
    o.zstd_level = int(st.range(0));
    TraceWriter w(path, o);
    for (size_t i = 0; i < events.size(); i += 1 << 16) w.write_chunk(nullptr, 0, events.data() + i, 1 << 16);
  }
  uint64_t n = 0;
  for (auto _ : st) {
    TraceReader r(path);
    ChunkView c;
    uint64_t sum = 0;
    n = 0;
    while (r.next(c)) {
      for (const Event& e : c) sum += uint8_t(e.kind);
      n += c.count;
    }
    benchmark::DoNotOptimize(sum);
  }
  st.SetItemsProcessed(int64_t(st.iterations() * n));
  std::remove(path.c_str());
}
BENCHMARK(BM_ReadFile)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
