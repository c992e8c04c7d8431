// The engines' locks across fork (Note [Allocator locks across fork]).
//
// Note [Allocator locks across fork]
// A process that forks while another of its threads holds an engine's lock (an intra-op thread
// freeing a tensor, the profiler's sampler reading the stats) gives the child a copy of that lock
// that nobody will release: the child's first allocation, a DataLoader worker's first batch, waits
// forever. So, as glibc's malloc does for its arenas, an at-fork handler takes every live engine's
// lock before fork() and releases it after, in the parent and in the child: the child starts with
// every engine unlocked and in a state no thread was midway through changing. The first engine
// registers the handlers; engines enter and leave a process-wide list as they are built and
// destroyed.
// What this does not cover: a source call in flight, which runs without the engine's lock (growth
// maps pages, release unmaps them). A fork at that instant can leave the source's own lock (the host
// source's) held in the child, and the pages of that call unaccounted there. Such a call lasts a
// system call; the engines' locks are held far more often.

#include <pthread.h>

#include <algorithm>
#include <mutex>
#include <vector>

#include "allocator_impl.hpp"

namespace memcomm::alloc {

namespace {
struct Engines {
  std::mutex mu;  // guards live; taken before any engine's lock, never while one is held
  std::vector<AllocatorMutex*> live;  // every live engine's lock
};
Engines& engines() {
  static auto* e = new Engines();  // leaked on purpose: engines may outlive static destruction
  return *e;
}

void lock_engines() NO_THREAD_SAFETY_ANALYSIS {
  Engines& e = engines();
  e.mu.lock();
  for (AllocatorMutex* mu : e.live) mu->lock();
}

void unlock_engines() NO_THREAD_SAFETY_ANALYSIS {
  Engines& e = engines();
  for (AllocatorMutex* mu : e.live) mu->unlock();
  e.mu.unlock();
}
}  // namespace

void register_engine_lock(AllocatorMutex* mu) {
  static const int registered = ::pthread_atfork(&lock_engines, &unlock_engines, &unlock_engines);
  (void)registered;
  Engines& e = engines();
  std::lock_guard<std::mutex> lock(e.mu);
  e.live.push_back(mu);
}

void unregister_engine_lock(AllocatorMutex* mu) {
  Engines& e = engines();
  std::lock_guard<std::mutex> lock(e.mu);
  e.live.erase(std::remove(e.live.begin(), e.live.end(), mu), e.live.end());
}

}  // namespace memcomm::alloc
