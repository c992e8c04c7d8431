// Stream-ordered reuse: record_stream, pooled events, per-stream pools.
#include "allocator_test_util.hpp"

using namespace memcomm::alloc;
using namespace memcomm::alloc::test;

TEST_CASE("a block used on another stream is reused only after that stream's work completes",
          "[allocator][streams]") {
  auto streams = std::make_shared<ManualStreams>();
  CachingAllocator a(simulated(), {}, streams);
  const StreamId s1 = 1, s2 = 2;
  void* p = a.allocate(256 * KiB, s1);
  a.record_stream(p, s2);
  a.record_stream(p, s2);  // twice is once
  a.record_stream(p, s1);  // its own stream adds nothing
  a.deallocate(p);
  CHECK(streams->records() == 1);
  CHECK(a.stats().active.current == 1);  // freed but still active: waiting for s2
  CHECK(a.stats().allocation.current == 0);
  CHECK(a.memory_summary().pending_free_bytes == 256 * KiB);
  a.check_invariants();

  void* q = a.allocate(256 * KiB, s1);
  CHECK(addr(q) != addr(p));  // s2 may still be reading p
  a.deallocate(q);

  streams->complete(s2);
  a.process_events();
  CHECK(a.stats().active.current == 0);
  void* r = a.allocate(256 * KiB, s1);
  CHECK((addr(r) == addr(p) || addr(r) == addr(q)));
  a.deallocate(r);
  a.check_invariants();
}

TEST_CASE("events come from a pool", "[allocator][streams]") {
  auto streams = std::make_shared<ManualStreams>();
  {
    CachingAllocator a(simulated(), {}, streams);
    for (int i = 0; i < 100; ++i) {
      void* p = a.allocate(4 * KiB, 1);
      a.record_stream(p, 7);
      a.deallocate(p);
      streams->complete(7);
      a.process_events();
    }
    CHECK(streams->records() == 100);
    CHECK(streams->live_events() == 1);  // one event, recorded 100 times
  }
  CHECK(streams->live_events() == 0);  // destroyed with the allocator
}

TEST_CASE("blocks are not shared between streams' pools while the page budget has room", "[allocator][streams]") {
  AllocatorConfig cfg;
  cfg.release_slack = 100.0;  // growth never has to give pages back (Note [Lending before giving pages back])
  CachingAllocator a(simulated(), cfg);
  void* p = a.allocate(64 * KiB, 1);
  a.deallocate(p);
  void* q = a.allocate(64 * KiB, 2);
  CHECK(addr(q) != addr(p));
  void* r = a.allocate(64 * KiB, 1);
  CHECK(addr(r) == addr(p));
  a.deallocate(q);
  a.deallocate(r);
  CHECK(a.snapshot().size() == 2);
}

TEST_CASE("empty_cache waits for pending events", "[allocator][streams][empty_cache]") {
  auto streams = std::make_shared<ManualStreams>();
  CachingAllocator a(simulated(), {}, streams);
  void* p = a.allocate(8 * MiB, 1);
  a.record_stream(p, 2);
  a.deallocate(p);
  a.empty_cache();
  CHECK(a.stats().num_sync_all_streams == 1);
  CHECK(a.stats().active.current == 0);
  CHECK(a.stats().reserved_bytes.current == 0);
  a.check_invariants();
}

// See Note [Cross-stream reuse]: once the events of a block freed with record_stream uses have completed,
// any stream may take it; before that, and for blocks freed without events, only its own stream.
TEST_CASE("a block freed with record_stream uses is reused by any stream once its events complete",
          "[allocator][streams][cross-stream]") {
  auto streams = std::make_shared<ManualStreams>();
  CachingAllocator a(simulated(), {}, streams);
  Recorder rec;
  a.add_observer(&rec);
  const StreamId s1 = 1, s2 = 2, s3 = 3;
  void* warm = a.allocate(4 * KiB, s3);  // a second allocating stream: idle blocks have takers
  void* p = a.allocate(3 * MiB, s1);
  a.record_stream(p, s2);
  a.deallocate(p);
  CHECK(streams->records() == 2);  // on s2, and on s1 itself so completion proves every stream done

  void* q = a.allocate(3 * MiB, s3);  // s1 and s2 may still be using p
  CHECK(addr(q) != addr(p));
  a.deallocate(q);  // q is s3's own block: no events, and not idle
  streams->complete(s2);
  a.process_events();
  CHECK(a.stats().active.current == 2);  // warm, and p still waiting for s1
  CHECK(a.memory_summary().pending_free_bytes == 3 * MiB);

  streams->complete(s1);
  a.process_events();
  CHECK(a.stats().active.current == 1);
  const std::size_t reserved = std::size_t(a.stats().reserved_bytes.current);
  const auto calls = a.stats().source_calls();
  void* r = a.allocate(3 * MiB, 4);  // a stream with no cached block of its own takes the idle one
  CHECK(addr(r) == addr(p));
  CHECK(a.stats().source_calls() == calls);
  CHECK(std::size_t(a.stats().reserved_bytes.current) == reserved);
  CHECK(rec.events.back().kind == EventKind::Alloc);
  CHECK(rec.events.back().stream == 4);  // events name the borrower
  a.check_invariants();

  // The borrower's free is not ordered with s1: s1 gets the block back only after s4's event.
  a.deallocate(r);
  CHECK(rec.events.back().stream == 4);
  CHECK(a.memory_summary().pending_free_bytes == 3 * MiB);
  void* t = a.allocate(3 * MiB, s1);
  CHECK(addr(t) != addr(p));
  a.deallocate(t);
  streams->complete(4);
  a.process_events();
  void* u = a.allocate(3 * MiB, s1);
  CHECK(addr(u) == addr(p));
  a.deallocate(u);
  a.deallocate(warm);
  a.check_invariants();
  a.remove_observer(&rec);
}

TEST_CASE("without a second allocating stream no extra event is recorded", "[allocator][streams][cross-stream]") {
  auto streams = std::make_shared<ManualStreams>();
  CachingAllocator a(simulated(), {}, streams);
  void* p = a.allocate(3 * MiB, 1);
  a.record_stream(p, 2);  // e.g. a communication stream that reads but never allocates
  a.deallocate(p);
  CHECK(streams->records() == 1);
  streams->complete(2);
  a.process_events();
  void* q = a.allocate(3 * MiB, 1);
  CHECK(addr(q) == addr(p));
  a.deallocate(q);
  a.check_invariants();
}

// See Note [Lending before giving pages back]: at the page budget, growth waits for the stream that owns a
// fitting free block and borrows it, instead of unmapping that stream's pages and mapping its own.
TEST_CASE("growth at the page budget borrows another stream's free block after waiting for that stream",
          "[allocator][streams][cross-stream]") {
  auto streams = std::make_shared<ManualStreams>();
  CachingAllocator a(simulated(), {}, streams);
  const StreamId s1 = 1, s2 = 2;
  void* p = a.allocate(8 * MiB, s1);
  a.deallocate(p);  // freed without events: s1's queued work may still use it
  const auto calls = a.stats().source_calls();
  const auto unmaps = a.stats().num_device_unmap;
  const auto reserved = a.stats().reserved_bytes.current;
  const auto records = streams->records();
  void* q = a.allocate(8 * MiB, s2);  // 16 MiB would cross the budget of an 8 MiB high water
  CHECK(addr(q) == addr(p));
  CHECK(a.stats().source_calls() == calls);
  CHECK(a.stats().num_device_unmap == unmaps);
  CHECK(a.stats().reserved_bytes.current == reserved);
  CHECK(a.stats().num_stream_syncs == 1);
  CHECK(streams->records() == records + 1);  // the wait for s1
  a.check_invariants();

  // The borrower's free waits for its own stream, as for any borrowed block (Note [Cross-stream reuse]).
  a.deallocate(q);
  CHECK(a.memory_summary().pending_free_bytes == 8 * MiB);
  streams->complete(s2);
  a.process_events();
  void* r = a.allocate(8 * MiB, s1);
  CHECK(addr(r) == addr(p));
  CHECK(a.stats().source_calls() == calls);
  a.deallocate(r);
  a.check_invariants();
}

TEST_CASE("growth with room under the page budget maps instead of waiting for another stream",
          "[allocator][streams][cross-stream]") {
  auto streams = std::make_shared<ManualStreams>();
  AllocatorConfig cfg;
  cfg.release_slack = 3.0;  // a budget of four times the high water: room for map-ahead and s2
  CachingAllocator a(simulated(), cfg, streams);
  void* p = a.allocate(8 * MiB, 1);
  a.deallocate(p);
  void* q = a.allocate(8 * MiB, 2);
  CHECK(addr(q) != addr(p));
  CHECK(a.stats().num_stream_syncs == 0);
  CHECK(a.stats().num_device_unmap == 0);
  a.deallocate(q);
  a.check_invariants();
}
