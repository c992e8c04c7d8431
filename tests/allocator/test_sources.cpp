// Memory sources: one shared test body for every source that works without a GPU, plus the host
// source's real memory behaviour and the factory's errors.
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <random>
#include <chrono>
#include <mutex>
#include <thread>

#include "allocator_test_util.hpp"

using namespace memcomm::alloc;
using namespace memcomm::alloc::test;

namespace {

// The same workload on any source: blocks of many sizes, written to when the source is host memory,
// freed in random order, with invariants checked along the way.
void exercise(const std::string& name, bool expandable) {
  SourceOptions o;
  auto src = make_source(name, o);
  AllocatorConfig c;
  c.expandable_segments = expandable;
  CachingAllocator a(src, c);
  std::mt19937_64 rng(42);
  std::vector<std::pair<void*, std::size_t>> live;
  for (int i = 0; i < 3000; ++i) {
    if (live.empty() || rng() % 3 != 0) {
      const std::size_t size = rng() % 4 == 0 ? 1 + rng() % (24 * MiB) : 1 + rng() % (64 * KiB);
      void* p = a.allocate(size);
      REQUIRE(p != nullptr);
      REQUIRE(addr(p) % 64 == 0);
      if (src->host_accessible()) {
        std::memset(p, int(i & 0xff), std::min<std::size_t>(size, 4096));
        static_cast<char*>(p)[size - 1] = 1;
      }
      live.emplace_back(p, size);
    } else {
      const std::size_t k = rng() % live.size();
      if (src->host_accessible()) CHECK(static_cast<char*>(live[k].first)[live[k].second - 1] == 1);
      a.deallocate(live[k].first);
      live.erase(live.begin() + std::ptrdiff_t(k));
    }
    if (i % 500 == 0) a.check_invariants();
  }
  for (auto& [p, s] : live) a.deallocate(p);
  a.check_invariants();
  a.empty_cache();
  CHECK(a.stats().reserved_bytes.current == 0);
  CHECK(src->counters().backed_bytes == 0);
}

}  // namespace

TEST_CASE("every source that needs no GPU runs the same workload", "[allocator][sources]") {
  const std::string name = GENERATE(as<std::string>{}, "host", "simulated");
  const bool expandable = GENERATE(true, false);
  INFO("source " << name << ", expandable " << expandable);
  exercise(name, expandable);
}

TEST_CASE("host source segments grow in place and give pages back to the kernel", "[allocator][sources][host]") {
  auto src = std::make_shared<HostSource>();
  CHECK(src->can_map());
  CHECK(src->granularity() == 2 * MiB);
  char* base = static_cast<char*>(src->reserve(64 * MiB));
  REQUIRE(src->map(base, 8 * MiB));
  std::memset(base, 0x5a, 8 * MiB);
  // Growing in place: the next pages, same addresses, old content intact.
  REQUIRE(src->map(base + 8 * MiB, 8 * MiB));
  std::memset(base + 8 * MiB, 0x33, 8 * MiB);
  CHECK(base[0] == 0x5a);
  CHECK(src->counters().backed_bytes == 16 * MiB);
  // Giving back the first 8 MiB: mincore sees no resident page there any more.
  src->unmap(base, 8 * MiB);
  CHECK(src->counters().backed_bytes == 8 * MiB);
  std::vector<unsigned char> resident(8 * MiB / std::size_t(sysconf(_SC_PAGESIZE)));
  REQUIRE(mincore(base + 8 * MiB, 8 * MiB, resident.data()) == 0);
  CHECK(resident[0] != 0);
  // Mapping again gives zeroed pages (fresh anonymous ones: the old ones went back to the kernel).
  REQUIRE(src->map(base, 2 * MiB));
  CHECK(base[100] == 0);
  src->unmap(base, 2 * MiB);
  src->unmap(base + 8 * MiB, 8 * MiB);
  src->release(base, 64 * MiB);
  const SourceCounters c = src->counters();
  CHECK(c.maps == 3);
  CHECK(c.unmaps == 3);
  CHECK(c.backed_bytes == 0);
  CHECK(c.peak_backed_bytes == 16 * MiB);
}

TEST_CASE("a forked child sees host pages copy-on-write, as malloc's memory", "[allocator][sources][host]") {
  // See Note [Host pages across fork]: a DataLoader worker's copy of the allocator hands out the parent's
  // addresses; its writes must stay in the child.
  HostSource src;
  char* base = static_cast<char*>(src.reserve(8 * MiB));
  REQUIRE(src.map(base, 4 * MiB));
  std::memset(base, 0x11, 4 * MiB);
  int pipe_fd[2];
  REQUIRE(pipe(pipe_fd) == 0);
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {  // the child: sees the parent's data, then overwrites it
    const char seen = base[12345];
    std::memset(base, 0x22, 4 * MiB);
    const char reply = seen == 0x11 ? 'y' : 'n';
    (void)!write(pipe_fd[1], &reply, 1);
    _exit(0);
  }
  char reply = 0;
  REQUIRE(read(pipe_fd[0], &reply, 1) == 1);
  int status = 0;
  waitpid(child, &status, 0);
  close(pipe_fd[0]);
  close(pipe_fd[1]);
  CHECK(reply == 'y');
  CHECK(base[12345] == 0x11);
  CHECK(base[4 * MiB - 1] == 0x11);
  src.unmap(base, 4 * MiB);
  src.release(base, 8 * MiB);
}

TEST_CASE("a child forked while another thread allocates can allocate", "[allocator][sources][host]") {
  // See Note [Allocator locks across fork]: without the at-fork handlers the child's copy of the engine's
  // lock was held by a thread that does not exist there, in some of these forks.
  if (memcomm::test::kThreadSanitizer)
    MEMCOMM_SKIP_TEST("TSan does not support fork() in a multithreaded process here");
  CachingAllocator a(make_source("host"));
  std::atomic<bool> busy{true};
  std::thread churn([&] {  // takes the engine's lock as often as it can
    while (busy.load()) a.deallocate(a.allocate(4096));
  });
  int failed = 0;  // hung (killed after 20 s) or exited badly
  for (int c = 0; c < 40; ++c) {
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      void* p = a.allocate(3 * MiB);
      std::memset(p, 1, 3 * MiB);
      a.deallocate(p);
      _exit(0);
    }
    if (!memcomm::test::child_exits_cleanly(pid, 20)) ++failed;
  }
  busy = false;
  churn.join();
  CHECK(failed == 0);
}

namespace {
// Host pages behind a lock of its own, as a real source has (the host source's, a driver's); once
// armed, the next map() holds the lock for `hold` and says when it is inside.
class SlowMapSource final : public MemorySource {
 public:
  explicit SlowMapSource(std::chrono::milliseconds hold) : inner_(make_source("host")), hold_(hold) {}
  const char* name() const override { return "slow-map"; }
  std::size_t granularity() const override { return inner_->granularity(); }
  std::size_t capacity() const override { return inner_->capacity(); }
  bool can_map() const override { return true; }
  bool host_accessible() const override { return true; }
  void* allocate(std::size_t bytes) override { return inner_->allocate(bytes); }
  void deallocate(void* ptr, std::size_t bytes) override { inner_->deallocate(ptr, bytes); }
  void* reserve(std::size_t bytes) override { return inner_->reserve(bytes); }
  void release(void* base, std::size_t bytes) override { inner_->release(base, bytes); }
  bool map(void* addr, std::size_t bytes) override {
    std::lock_guard<std::mutex> lock(call_mu_);
    if (armed_.exchange(false)) {
      inside_ = true;
      std::this_thread::sleep_for(hold_);
    }
    return inner_->map(addr, bytes);
  }
  void unmap(void* addr, std::size_t bytes) override {
    std::lock_guard<std::mutex> lock(call_mu_);
    inner_->unmap(addr, bytes);
  }
  SourceCounters counters() const override { return inner_->counters(); }
  void arm() { armed_ = true; }
  bool inside() const { return inside_; }

 private:
  std::shared_ptr<MemorySource> inner_;
  std::chrono::milliseconds hold_;
  std::mutex call_mu_;
  std::atomic<bool> armed_{false}, inside_{false};
};
}  // namespace

TEST_CASE("a child forked while another thread maps pages can map pages", "[allocator][sources][host]") {
  // See Note [Allocator locks across fork]: a source call runs without the engine's lock, so holding the
  // engines' locks did not stop a fork in the middle of one, and the child's copy of the source's own
  // lock stayed held: its first growth waited forever. fork() now waits for the call to end.
  if (memcomm::test::kThreadSanitizer)
    MEMCOMM_SKIP_TEST("TSan does not support fork() in a multithreaded process here");
  auto src = std::make_shared<SlowMapSource>(std::chrono::milliseconds(300));
  CachingAllocator a(src);
  a.deallocate(a.allocate(4096));  // the expandable segments exist: the next growth only maps
  src->arm();
  std::thread grower([&] { a.deallocate(a.allocate(8 * MiB)); });
  while (!src->inside()) std::this_thread::yield();
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    void* p = a.allocate(24 * MiB);  // more than the parent's thread claimed: a growth, a map
    std::memset(p, 1, 24 * MiB);
    a.deallocate(p);
    _exit(0);
  }
  const bool clean = memcomm::test::child_exits_cleanly(pid, 20);
  grower.join();
  CHECK(clean);
}

TEST_CASE("host source honours its capacity", "[allocator][sources][host]") {
  SourceOptions o;
  o.capacity = 8 * MiB;
  HostSource src(o);
  void* p = src.allocate(8 * MiB);
  REQUIRE(p != nullptr);
  CHECK(src.allocate(2 * MiB) == nullptr);
  CHECK(src.counters().failed == 1);
  src.deallocate(p, 8 * MiB);
  CHECK(src.counters().backed_bytes == 0);
}

TEST_CASE("an allocator on host memory gives LibTorch-grade alignment", "[allocator][sources][host]") {
  CachingAllocator a(make_source("host"));
  for (std::size_t size : {1u, 63u, 64u, 65u, 1000u, 4096u, 100000u, 3000000u}) {
    void* p = a.allocate(size);
    CHECK(addr(p) % 64 == 0);
    std::memset(p, 1, size);
    a.deallocate(p);
  }
}

TEST_CASE("the simulated source checks its callers and counts calls", "[allocator][sources][simulated]") {
  SourceOptions o;
  o.capacity = 16 * MiB;
  SimulatedSource s(o);
  char* r = static_cast<char*>(s.reserve(32 * MiB));
  REQUIRE(s.map(r, 4 * MiB));
  CHECK_THROWS_AS(s.map(r + 2 * MiB, 2 * MiB), SourceError);      // already mapped
  CHECK_THROWS_AS(s.map(r + 1, 2 * MiB), SourceError);            // not page-aligned
  CHECK_THROWS_AS(s.unmap(r + 4 * MiB, 2 * MiB), SourceError);    // not mapped
  CHECK_THROWS_AS(s.release(r, 32 * MiB), SourceError);           // pages still mapped
  CHECK_FALSE(s.map(r + 4 * MiB, 14 * MiB));                       // past the capacity
  s.unmap(r + 2 * MiB, 2 * MiB);                                   // part of a mapped run
  CHECK(s.is_backed(r, 2 * MiB));
  CHECK_FALSE(s.is_backed(r + 2 * MiB, 2 * MiB));
  s.unmap(r, 2 * MiB);
  s.release(r, 32 * MiB);
  const SourceCounters c = s.counters();
  CHECK(c.maps == 1);
  CHECK(c.unmaps == 2);
  CHECK(c.failed == 1);
  CHECK(c.backed_bytes == 0);
}

TEST_CASE("make_source names what it does not know", "[allocator][sources]") {
  try {
    make_source("gpu-magic");
    FAIL("unknown source accepted");
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    CHECK(what.find("gpu-magic") != std::string::npos);
    CHECK(what.find("simulated") != std::string::npos);
  }
  // This test program does not link memcomm::allocator_cuda, so the CUDA sources are not registered
  // (Note [Sources by name]): asking for one is a SourceError that says where it lives.
  try {
    make_source("cuda-vmm");
    FAIL("an unregistered CUDA source was built");
  } catch (const SourceError& e) {
    CHECK(std::string(e.what()).find("register_cuda_sources") != std::string::npos);
  }
}

TEST_CASE("register_source adds a source to make_source and to the known names", "[allocator][sources]") {
  register_source("test-simulated", [](const SourceOptions& o) -> std::shared_ptr<MemorySource> {
    return make_source("simulated", o);
  });
  const auto names = known_source_names();
  CHECK(std::find(names.begin(), names.end(), "test-simulated") != names.end());
  SourceOptions o;
  o.capacity = 8u << 20;
  auto src = make_source("test-simulated", o);
  CHECK(std::string(src->name()) == "simulated");
}
