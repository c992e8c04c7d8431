// A source that fails partway through growth: the allocator must leave its stats, its observers'
// event stream and the source's own counters in agreement, and its blocks consistent.
#include <cstdint>
#include <memory>
#include <string>

#include "allocator_test_util.hpp"

using namespace memcomm::alloc;
using namespace memcomm::alloc::test;

namespace {

// Forwards to a simulated source; once armed with n, the n-th map() call after that throws
// SourceError (a driver error, not out of memory) without mapping anything.
class FailingMapSource final : public MemorySource {
 public:
  FailingMapSource() : inner_(simulated()) {}
  const char* name() const override { return "failing-map"; }
  std::size_t granularity() const override { return inner_->granularity(); }
  std::size_t capacity() const override { return inner_->capacity(); }
  bool can_map() const override { return true; }
  void* allocate(std::size_t bytes) override { return inner_->allocate(bytes); }
  void deallocate(void* ptr, std::size_t bytes) override { inner_->deallocate(ptr, bytes); }
  void* reserve(std::size_t bytes) override {
    if (bytes > reserve_limit_) throw SourceError("failing-map: mmap reserve: Cannot allocate memory");
    return inner_->reserve(bytes);
  }
  void release(void* base, std::size_t bytes) override { inner_->release(base, bytes); }
  bool map(void* addr, std::size_t bytes) override {
    if (fail_at_ > 0 && --fail_at_ == 0) throw SourceError("failing-map: injected failure");
    return inner_->map(addr, bytes);
  }
  void unmap(void* addr, std::size_t bytes) override { inner_->unmap(addr, bytes); }
  SourceCounters counters() const override { return inner_->counters(); }

  void fail_map_call(int n) { fail_at_ = n; }
  void refuse_reserves_over(std::size_t bytes) { reserve_limit_ = bytes; }  // as `ulimit -v` does

 private:
  std::shared_ptr<SimulatedSource> inner_;
  int fail_at_ = 0;
  std::size_t reserve_limit_ = SIZE_MAX;
};

// Bytes the event stream says are mapped now: maps minus unmaps.
std::int64_t mapped_by_events(const Recorder& rec) {
  std::int64_t bytes = 0;
  for (const AllocEvent& e : rec.events) {
    if (e.kind == EventKind::SegmentMap) bytes += std::int64_t(e.size);
    if (e.kind == EventKind::SegmentUnmap) bytes -= std::int64_t(e.size);
  }
  return bytes;
}

void check_agreement(const CachingAllocator& a, const Recorder& rec, const FailingMapSource& src) {
  const DeviceStats s = a.stats();
  CHECK(rec.count(EventKind::SegmentMap) == std::size_t(s.num_device_map));
  CHECK(rec.count(EventKind::SegmentUnmap) == std::size_t(s.num_device_unmap));
  CHECK(mapped_by_events(rec) == s.reserved_bytes.current);
  CHECK(src.counters().maps == std::uint64_t(s.num_device_map));
  CHECK(src.counters().backed_bytes == std::uint64_t(s.reserved_bytes.current));
}

}  // namespace

TEST_CASE("a map that throws partway through a window leaves events and stats in agreement",
          "[allocator][growth][observers]") {
  // Layout of one 18 MiB virtual range (2 MiB pages): a b c d (4 MiB each) and a 2 MiB tail. With b's
  // pages unmapped and c, d free, the only window for 14 MiB is b..tail: two map calls (b's hole and
  // the tail). The second one throws, after the first has mapped b's pages.
  auto src = std::make_shared<FailingMapSource>();
  AllocatorConfig c;
  c.virtual_size = 18 * MiB;
  CachingAllocator al(src, c);
  Recorder rec;
  al.add_observer(&rec);
  void* a = al.allocate(4 * MiB);
  void* b = al.allocate(4 * MiB);
  void* cc = al.allocate(4 * MiB);
  void* d = al.allocate(4 * MiB);
  REQUIRE(addr(b) == addr(a) + 4 * MiB);
  REQUIRE(addr(cc) == addr(b) + 4 * MiB);
  REQUIRE(addr(d) == addr(cc) + 4 * MiB);
  al.deallocate(b);
  al.empty_cache();  // unmaps b's pages (and any mapped tail)
  al.deallocate(cc);
  al.deallocate(d);
  const std::int64_t maps_before = al.stats().num_device_map;
  REQUIRE(src->counters().backed_bytes == 12 * MiB);  // a, c, d

  src->fail_map_call(2);
  CHECK_THROWS_AS(al.allocate(14 * MiB), SourceError);
  INFO("maps " << al.stats().num_device_map - maps_before << ", events " << rec.count(EventKind::SegmentMap));
  CHECK(al.stats().num_device_map == maps_before + 1);  // b's hole was mapped before the failure
  check_agreement(al, rec, *src);
  al.check_invariants();

  // The mapped hole is ordinary free memory now: the retry maps only the tail and succeeds.
  void* big = al.allocate(14 * MiB);
  CHECK(addr(big) == addr(b));
  check_agreement(al, rec, *src);
  al.check_invariants();
  al.deallocate(big);
  al.deallocate(a);
  al.empty_cache();
  check_agreement(al, rec, *src);
  CHECK(src->counters().backed_bytes == 0);
  al.remove_observer(&rec);
}

TEST_CASE("a refused address-space reservation is halved down to one page, then named", "[allocator][expandable]") {
  // See Note [Address space for a segment]: 1 TiB by default on a device; a source that refuses more
  // than 1.5 x the cap gets, halving, the cap itself (1 TiB / 2^14), and the allocator works up to it.
  auto src = std::make_shared<FailingMapSource>();
  src->refuse_reserves_over(96 * MiB);
  AllocatorConfig c;
  c.capacity = 64 * MiB;
  CachingAllocator al(src, c);
  void* p = al.allocate(60 * MiB);
  CHECK(p != nullptr);
  al.deallocate(p);
  // Below the cap: the allocator works within what it could reserve, and the out-of-memory past that
  // says why it came before the cap.
  auto small = std::make_shared<FailingMapSource>();
  small->refuse_reserves_over(16 * MiB);
  CachingAllocator below(small, c);
  void* q = below.allocate(4 * MiB);
  CHECK(q != nullptr);
  CHECK_THROWS_WITH(below.allocate(32 * MiB), Catch::Contains("capacity 64.00 MiB") &&
                                                Catch::Contains("expandable segment has 16.00 MiB of address space"));
  below.deallocate(q);
  // Nothing at all: the error names the reservation instead of a bare mmap failure.
  auto none = std::make_shared<FailingMapSource>();
  none->refuse_reserves_over(0);
  CachingAllocator refused(none, c);
  CHECK_THROWS_WITH(refused.allocate(4 * MiB), Catch::Contains("2.0 MiB of address space") && Catch::Contains("ulimit -v"));
}
