// Issue 4: "a thread that records never blocks and never allocates on the hot path". This executable
// replaces the global operator new with one that counts per thread, so the test sees exactly what
// the recording thread allocates once it is attached (its first event takes the slow path: a ring).
#include <catch2/catch.hpp>

#include <cstdlib>
#include <new>
#include <thread>

#include "memcomm/profiler/recorder.hpp"
#include "memcomm/profiler/sink.hpp"

namespace {
thread_local long t_allocations = 0;
}

void* operator new(std::size_t n) {
  ++t_allocations;
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  ++t_allocations;
  return std::malloc(n ? n : 1);
}
// The over-aligned forms too: the recorder's rings are alignas(64), and a hot-path allocation of
// such a type would otherwise go uncounted.
void* operator new(std::size_t n, std::align_val_t a) {
  ++t_allocations;
  const std::size_t align = static_cast<std::size_t>(a);
  if (void* p = std::aligned_alloc(align, (n + align - 1) / align * align + (n ? 0 : align))) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  try {
    return ::operator new(n, a);
  } catch (...) {
    return nullptr;
  }
}
// Every form that can free what the forms above return, so a sanitizer's own operators never see
// our blocks (ASan reports malloc'd memory freed by its operator delete as a mismatch).
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }

using namespace memcomm::prof;

TEST_CASE("recording allocates nothing after a thread's first event and also not when the ring is full") {
  RecorderOptions o;
  o.ring_events = 1 << 10;  // small: most of the events below are dropped, which must not allocate either
  o.drain_interval_ms = 1000;
  Recorder rec(o);
  rec.add_sink(std::make_shared<MemorySink>());
  const Name step = rec.name("step"), loss = rec.name("loss");
  rec.start();
  long attach_allocations = -1, hot_path_allocations = -1;
  constexpr int kEvents = 100'000;
  std::thread t([&] {
    rec.record(make_counter(now_ns(), loss.id, 0.0));  // attaches the thread: allocations allowed here
    attach_allocations = t_allocations;
    t_allocations = 0;
    for (int i = 0; i < kEvents; ++i) {
      PhaseScope s(Phase::Step, uint64_t(i), step, rec);
      rec.record(make_mem_block(EventKind::Alloc, now_ns(), 0x1000u + uint64_t(i), 512));
      record_counter(rec, loss, double(i));
    }
    hot_path_allocations = t_allocations;
  });
  t.join();
  rec.stop();
  CHECK(attach_allocations > 0);  // the counting operator new does see the recorder's allocations
  CHECK(hot_path_allocations == 0);
  const RecorderStats s = rec.stats();
  CHECK(s.dropped > 0);  // the full ring was exercised
  CHECK(s.recorded + s.dropped >= 1 + 4 * uint64_t(kEvents));  // plus start()'s metadata records
}
