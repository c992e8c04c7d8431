// Several threads on one allocator: no block is handed out twice, and the counters add up.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <cstring>
#include <random>
#include <thread>

#include "allocator_test_util.hpp"

using namespace memcomm::alloc;
using namespace memcomm::alloc::test;

TEST_CASE("threads share one allocator safely", "[allocator][threads]") {
  for (const char* name : {"host", "simulated"}) {
    auto src = make_source(name);
    CachingAllocator a(src);
    std::atomic<int> corrupted{0};
    auto worker = [&](int id) {
      std::mt19937_64 rng(std::uint64_t(id) + 1);
      std::vector<std::pair<unsigned char*, std::size_t>> mine;
      for (int i = 0; i < 20000; ++i) {
        if (mine.size() < 32 && rng() % 2 == 0) {
          const std::size_t size = rng() % 4 == 0 ? 1 + rng() % (6 * MiB) : 1 + rng() % (32 * KiB);
          auto* p = static_cast<unsigned char*>(a.allocate(size, StreamId(id % 2)));
          if (src->host_accessible()) {
            p[0] = static_cast<unsigned char>(id);
            p[size - 1] = static_cast<unsigned char>(id);
          }
          mine.emplace_back(p, size);
        } else if (!mine.empty()) {
          const std::size_t k = rng() % mine.size();
          auto [p, size] = mine[k];
          // Another thread writing into our block would have changed the marks.
          if (src->host_accessible() && (p[0] != id || p[size - 1] != id)) corrupted++;
          a.deallocate(p);
          mine.erase(mine.begin() + std::ptrdiff_t(k));
        }
      }
      for (auto& [p, s] : mine) a.deallocate(p);
    };
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) threads.emplace_back(worker, t);
    for (auto& t : threads) t.join();
    CHECK(corrupted == 0);
    const DeviceStats s = a.stats();
    CHECK(s.allocation.current == 0);
    CHECK(s.allocated_bytes.current == 0);
    CHECK(s.allocation.allocated == s.allocation.freed);
    a.check_invariants();
    a.empty_cache();
    CHECK(src->counters().backed_bytes == 0);
  }
}

namespace {

// Forwards to a simulated source; once armed, the next map() or allocate() waits until release() is
// called, and says (entered()) that it is inside the source call.
class BlockingSource final : public MemorySource {
 public:
  BlockingSource() : inner_(simulated()) {}
  const char* name() const override { return "blocking"; }
  std::size_t granularity() const override { return inner_->granularity(); }
  std::size_t capacity() const override { return inner_->capacity(); }
  bool can_map() const override { return inner_->can_map(); }
  void* allocate(std::size_t bytes) override {
    wait_if_armed();
    return inner_->allocate(bytes);
  }
  void deallocate(void* ptr, std::size_t bytes) override { inner_->deallocate(ptr, bytes); }
  void* reserve(std::size_t bytes) override { return inner_->reserve(bytes); }
  void release(void* base, std::size_t bytes) override { inner_->release(base, bytes); }
  bool map(void* addr, std::size_t bytes) override {
    wait_if_armed();
    return inner_->map(addr, bytes);
  }
  void unmap(void* addr, std::size_t bytes) override { inner_->unmap(addr, bytes); }
  SourceCounters counters() const override { return inner_->counters(); }

  void arm() {
    std::lock_guard<std::mutex> l(m_);
    armed_ = true;
  }
  // Waits (at most `guard`, so a broken allocator fails instead of hanging) until a call is inside.
  bool wait_entered(std::chrono::seconds guard) {
    std::unique_lock<std::mutex> l(m_);
    return cv_.wait_for(l, guard, [&] { return inside_; });
  }
  void let_go() {
    std::lock_guard<std::mutex> l(m_);
    go_ = true;
    cv_.notify_all();
  }

 private:
  void wait_if_armed() {
    std::unique_lock<std::mutex> l(m_);
    if (!armed_) return;
    armed_ = false;
    inside_ = true;
    cv_.notify_all();
    cv_.wait(l, [&] { return go_; });
  }
  std::shared_ptr<SimulatedSource> inner_;
  std::mutex m_;
  std::condition_variable cv_;
  bool armed_ = false, inside_ = false, go_ = false;
};

}  // namespace

TEST_CASE("the allocator's lock is not held across source calls", "[allocator][threads]") {
  // Thread A's allocation needs new memory and blocks inside the source; meanwhile thread B's cached
  // allocation and free must complete. Were the lock held across the source call, B would wait for A,
  // which waits for B: the guard below turns that deadlock into a failure.
  for (bool expandable : {true, false}) {
    INFO("expandable=" << expandable);
    auto src = std::make_shared<BlockingSource>();
    AllocatorConfig c;
    c.expandable_segments = expandable;
    CachingAllocator a(src, c);
    a.deallocate(a.allocate(64 * KiB));  // cached from now on
    const std::int64_t calls = a.stats().source_calls();
    src->arm();
    std::atomic<bool> a_done{false};
    std::thread grower([&] {
      void* big = a.allocate(64 * MiB);  // nothing cached fits: a source call
      a_done = true;
      a.deallocate(big);
    });
    const bool entered = src->wait_entered(std::chrono::seconds(60));
    CHECK(entered);
    std::atomic<bool> b_done{false};
    std::thread cached([&] {
      void* p = a.allocate(64 * KiB);
      a.deallocate(p);
      b_done = true;
    });
    // B must finish while A is still inside the source call (A cannot return before let_go()).
    for (int i = 0; i < 60000 && !b_done; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    CHECK(b_done);
    CHECK_FALSE(a_done);
    src->let_go();
    grower.join();
    cached.join();
    CHECK(a_done);
    CHECK(a.stats().source_calls() > calls);
    a.check_invariants();
  }
}
