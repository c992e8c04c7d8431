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
#include "memcomm/profiler/trace_set.hpp"
#include "memcomm/profiler/trace_writer.hpp"
#include "training_like.hpp"

using namespace memcomm::prof;
using memcomm::prof::bench::training_like;

namespace {

Codec codec_of(int64_t arg) { return arg == 0 ? Codec::Lz4 : arg == 100 ? Codec::None : Codec::Zstd; }

// Counts and forgets: isolates the recorder from sink costs.
class NullSink : public Sink {
 public:
  void consume(const Batch& b) override { events.fetch_add(b.n_events, std::memory_order_relaxed); }
  std::atomic<uint64_t> events{0};
};

std::string temp_file(const char* stem) {
  return std::string("/tmp/memcomm_bench_") + stem + "_" + std::to_string(::getpid()) + ".mct";
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
    o.codec = codec_of(level);
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
BENCHMARK(BM_WriteFile)->Arg(0)->Arg(1)->Arg(100)->Unit(benchmark::kMillisecond)->UseRealTime();

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
    wo.codec = codec_of(st.range(0));
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
BENCHMARK(BM_RecorderToFile)->Arg(0)->Arg(100)->Unit(benchmark::kMillisecond)->UseRealTime();

// Reader: iterate every event of a training-like file, touching each.
void BM_ReadFile(benchmark::State& st) {
  const auto events = training_like(1 << 22);
  const std::string path = temp_file("read");
  {
    WriterOptions o;
    o.codec = codec_of(st.range(0));
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
BENCHMARK(BM_ReadFile)->Arg(0)->Arg(1)->Arg(100)->Unit(benchmark::kMillisecond)->UseRealTime();

// Full load as the tools and the viewer do it: read, group by rank, sort, apply offsets.
void BM_LoadTraceSet(benchmark::State& st) {
  const auto events = training_like(1 << 22);
  const std::string path = temp_file("load");
  {
    TraceWriter w(path, WriterOptions{});
    for (size_t i = 0; i < events.size(); i += 1 << 16) w.write_chunk(nullptr, 0, events.data() + i, 1 << 16);
  }
  for (auto _ : st) benchmark::DoNotOptimize(TraceSet::load({path}).event_count());
  st.SetItemsProcessed(int64_t(st.iterations() * events.size()));
  std::remove(path.c_str());
}
BENCHMARK(BM_LoadTraceSet)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
