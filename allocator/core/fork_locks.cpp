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
// Source calls run without the engine's lock (growth maps pages, release unmaps them), so holding
// the engines' locks does not stop them: a fork during one could leave the source's own lock (the
// host source's, a driver's) held in the child, and its first growth waited forever. So each source
// call holds a process-wide gate shared (SourceCallScope), and the handler, once it holds every
// engine's lock, takes the gate exclusively: it waits for the calls in flight, and a call cannot
// start until after fork(). The order (engines, then the gate) leaves no cycle: a call made under its
// engine's lock (destruction, a lost race) finishes before the handler can hold that lock, and a
// call made without it gives the gate back before it takes the lock again. The gate prefers the
// handler over new calls, so a stream of calls cannot keep fork() waiting.
// What the child still inherits: blocks another thread had claimed for its growth or release stay
// claimed there (busy, never handed out), as that thread's own allocation would have been; the
// child has no such thread. The test forks during a map that holds its source's lock for 300 ms.

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
  // Held shared by source calls in flight, exclusively across fork(); taken after the engines' locks.
  pthread_rwlock_t calls = PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP;
};
Engines& engines() {
  static auto* e = new Engines();  // leaked on purpose: engines may outlive static destruction
  return *e;
}

void lock_engines() NO_THREAD_SAFETY_ANALYSIS {
  Engines& e = engines();
  e.mu.lock();
  for (AllocatorMutex* mu : e.live) mu->lock();
  pthread_rwlock_wrlock(&e.calls);
}

void unlock_engines() NO_THREAD_SAFETY_ANALYSIS {
  Engines& e = engines();
  pthread_rwlock_unlock(&e.calls);
  for (AllocatorMutex* mu : e.live) mu->unlock();
  e.mu.unlock();
}

// glibc's rwlock knows its writer by thread id, and the child's one thread has a new id: unlocking
// there would count as a reader leaving and keep the gate shut. The child has no other thread, so a
// fresh gate is the same as an open one.
void unlock_engines_in_child() NO_THREAD_SAFETY_ANALYSIS {
  Engines& e = engines();
  pthread_rwlock_t fresh = PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP;
  e.calls = fresh;
  for (AllocatorMutex* mu : e.live) mu->unlock();
  e.mu.unlock();
}
}  // namespace

void register_engine_lock(AllocatorMutex* mu) {
  static const int registered = ::pthread_atfork(&lock_engines, &unlock_engines, &unlock_engines_in_child);
  (void)registered;
  Engines& e = engines();
  std::lock_guard<std::mutex> lock(e.mu);
  e.live.push_back(mu);
}

SourceCallScope::SourceCallScope() { pthread_rwlock_rdlock(&engines().calls); }
SourceCallScope::~SourceCallScope() { pthread_rwlock_unlock(&engines().calls); }

void unregister_engine_lock(AllocatorMutex* mu) {
  Engines& e = engines();
  std::lock_guard<std::mutex> lock(e.mu);
  e.live.erase(std::remove(e.live.begin(), e.live.end(), mu), e.live.end());
}

}  // namespace memcomm::alloc
