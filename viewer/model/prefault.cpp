#include <memcomm/view/prefault.hpp>

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <new>
#include <system_error>
#include <thread>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace memcomm::view {

// Note [Prefaulting bulk arrays]: a 10 M-event load writes ~300 MB of fresh memory once; with
// 4 KiB pages that is ~75 k page faults, measured at ~20% of the load. MADV_POPULATE_WRITE
// (Linux >= 5.14) maps the pages of a whole chunk (~1 MiB: ChunkedArray allocates a full-size
// chunk just before filling it, Note [Chunked arrays] in chunked.hpp) in one call. It saves the
// fault entries, not the kernel's work per page (zeroing, accounting, LRU): that work moves to a
// second thread during a load (Note [Prefaulting on the second core]). MADV_HUGEPAGE was
// measured too and is not used (same Note). Advisory: older kernels refuse it (EINVAL) and
// nothing changes.
void prefault_pages(const void* p, std::size_t bytes) {
#if defined(__linux__)
  constexpr int kPopulateWrite = 23;  // MADV_POPULATE_WRITE; older headers lack the name
  constexpr std::uintptr_t kPage = 4096, kMin = 64u << 10;  // small arrays are not worth a call
  if (bytes < kMin) return;
  const auto a = (reinterpret_cast<std::uintptr_t>(p) + kPage - 1) & ~(kPage - 1);
  const auto b = (reinterpret_cast<std::uintptr_t>(p) + bytes) & ~(kPage - 1);
  if (b > a) (void)madvise(reinterpret_cast<void*>(a), b - a, kPopulateWrite);
#else
  (void)p;
  (void)bytes;
#endif
}

// Note [Prefaulting on the second core]: even in one call per chunk, mapping fresh pages costs the
// kernel ~2.5 us per 4 KiB page on these VMs (perf: __get_user_pages, memcg charge, LRU, page
// clearing), so a fresh process loading 10 M events (bench_load, /tmp/run10m.mct) spent ~0.2 s of
// its ~0.5 s load_file mapping the model's ~275 MB, on the one thread that also decodes and
// ingests. The pages need no data from the load, so a second thread maps them ahead: it allocates
// blocks of the sizes ChunkedArray asks for (sizes the loader knows of are given up front, others
// are learnt from their first request, which maps its own block) and keeps kAhead of each ready;
// the loader takes one instead of mapping it. When the worker falls behind (the other core is
// busy) the loader maps its own blocks as before, so the worst case is the one-thread load plus
// a few blocks mapped in vain by a thread that had no core. Measured on the 2-core VM, fresh
// processes, other work on the machine: the loading thread's CPU for load_file went from ~0.47 s
// to ~0.30-0.35 s; load + indexes wall from 0.42-0.70 s (median ~0.55 s, ~18 M events/s) to
// 0.29-0.46 s (median ~0.38 s, ~26 M events/s) when the second core was idle, and equal to the
// one-thread load when another process held that core (the work is the same, only who does it
// changes). kAhead = 8 rather than 3: the worker is often preempted for a scheduler slice (~4 ms),
// in which the loader takes ~4 MB, mostly of one size.
// Not used: 2 MiB pages (MADV_HUGEPAGE on 2 MiB-aligned 32 MiB blocks) mapped 272 MB in
// 0.04-0.08 s when the guest's free memory was already backed by the host, but took 0.9-1.65 s
// when it was not (no compaction: /proc/vmstat compact_stall stayed 0), so they are not robust.
// Decode-ahead (LoadOptions::decode_ahead) on top of this pool brings the loading thread's CPU
// down to ~0.2 s but adds a copy of every event and a third thread on two cores; its wall times
// were within the noise of the pool alone, so it stays off on 2 cores.
struct PrefaultPool::State {
  struct Size {
    std::size_t bytes;
    std::vector<void*> ready;  // mapped blocks not yet taken
    std::size_t pending = 0;   // blocks being mapped by the worker
  };
  static constexpr std::size_t kAhead = 8;  // blocks of each size kept ready (see the Note)
  std::condition_variable cv;  // worker: a block was taken, a size was learnt, or stop
  std::vector<Size> sizes;     // learnt from new_prefaulted() requests, in order
  std::size_t budget = 0;      // bytes the worker may still map
  bool stop = false;
  std::size_t taken = 0;        // blocks handed out ready-made
  std::thread worker;

  // The size the worker should map next (npos: none). Caller holds the lock.
  std::size_t pick() const {
    std::size_t best = SIZE_MAX, least = kAhead;
    for (std::size_t k = 0; k < sizes.size(); ++k) {
      const std::size_t have = sizes[k].ready.size() + sizes[k].pending;
      if (have < least && sizes[k].bytes <= budget) {
        least = have;
        best = k;
      }
    }
    return best;
  }
  void run();
};

namespace {
std::mutex g_mu;                           // guards g_active and the active pool's State
PrefaultPool::State* g_active = nullptr;   // the pool new_prefaulted() takes from
}  // namespace

void PrefaultPool::State::run() {
  std::unique_lock<std::mutex> lock(g_mu);
  for (;;) {
    std::size_t k = SIZE_MAX;
    cv.wait(lock, [&] { return stop || (k = pick()) != SIZE_MAX; });
    if (stop) return;
    const std::size_t bytes = sizes[k].bytes;
    budget -= bytes;
    ++sizes[k].pending;
    lock.unlock();
    void* p = ::operator new(bytes, std::nothrow);
    if (p != nullptr) prefault_pages(p, bytes);
    lock.lock();
    --sizes[k].pending;  // sizes only grows: index k still names this size
    if (p != nullptr) {
      try {
        sizes[k].ready.push_back(p);
      } catch (const std::bad_alloc&) {  // no room to keep it: give it back, stop mapping
        ::operator delete(p);
        budget = 0;
      }
    } else {
      budget = 0;  // out of memory: leave the rest to the loader
    }
  }
}

PrefaultPool::PrefaultPool(std::size_t budget, std::initializer_list<std::size_t> sizes) {
  if (std::thread::hardware_concurrency() <= 1) return;  // no second core to map on
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_active != nullptr) return;
  auto state = std::make_unique<State>();
  state->budget = budget;
  for (const std::size_t bytes : sizes)
    if (std::none_of(state->sizes.begin(), state->sizes.end(), [bytes](const State::Size& z) { return z.bytes == bytes; }))
      state->sizes.push_back({bytes, {}, 0});
  try {
    // The pool is advisory: if the worker fails (an exception from the library), it stops mapping
    // and the loader maps its own pages; nothing reaches std::terminate, the destructor joins.
    state->worker = std::thread([s = state.get()] {
      try {
        s->run();
      } catch (...) {
        std::lock_guard<std::mutex> lock(g_mu);
        s->budget = 0;
      }
    });
  } catch (const std::system_error&) {
    return;  // no thread to spare: the loader maps its own pages
  }
  state_ = std::move(state);
  g_active = state_.get();
}

PrefaultPool::~PrefaultPool() {
  if (!state_) return;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_active = nullptr;
    state_->stop = true;
  }
  state_->cv.notify_all();
  state_->worker.join();
  for (auto& s : state_->sizes)
    for (void* p : s.ready) ::operator delete(p);
}

std::size_t PrefaultPool::taken() const {
  if (!state_) return 0;
  std::lock_guard<std::mutex> lock(g_mu);
  return state_->taken;
}

void* new_prefaulted(std::size_t bytes) {
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (g_active != nullptr) {
      auto& sizes = g_active->sizes;
      auto it = std::find_if(sizes.begin(), sizes.end(), [bytes](const PrefaultPool::State::Size& s) { return s.bytes == bytes; });
      if (it == sizes.end()) {
        sizes.push_back({bytes, {}, 0});
        it = sizes.end() - 1;
      }
      void* p = nullptr;
      if (!it->ready.empty()) {
        p = it->ready.back();
        it->ready.pop_back();
      }
      g_active->cv.notify_one();  // room for one more of this size (or a new size)
      if (p != nullptr) {
        ++g_active->taken;
        return p;
      }
    }
  }
  void* p = ::operator new(bytes);
  prefault_pages(p, bytes);
  return p;
}

}  // namespace memcomm::view
