// Several threads on one allocator: no block is handed out twice, and the counters add up.
#include <atomic>
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
