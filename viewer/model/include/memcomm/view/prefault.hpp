// Fresh memory for bulk loads, with its pages already mapped (Note [Prefaulting bulk arrays] and
// Note [Prefaulting on the second core] in prefault.cpp). ChunkedArray takes its full-size chunks
// from here.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <memory>

namespace memcomm::view {

// Maps [p, p + bytes) (its whole pages) in one call rather than a fault per page. For memory about
// to be written.
void prefault_pages(const void* p, std::size_t bytes);

// A block of `bytes` from operator new with its pages mapped, for memory about to be written
// (free it with operator delete). Taken ready-made from the active PrefaultPool when it has one of
// that size; else allocated and mapped here (and the pool learns the size).
void* new_prefaulted(std::size_t bytes);

// While one lives (a bulk load), a second thread allocates and maps blocks of the sizes that
// new_prefaulted() is asked for, a few of each ahead, up to `budget` bytes in all: the kernel's
// page work then runs beside the load instead of inside it. Blocks not taken are freed at the end.
// One pool is active at a time (a second constructed while one lives stays inactive). Nothing
// happens on machines with one core.
class PrefaultPool {
 public:
  // `sizes`: block sizes known to come (ChunkedArray<T>::kChunkBytes), mapped from the start
  // rather than after their first request.
  explicit PrefaultPool(std::size_t budget, std::initializer_list<std::size_t> sizes = {});
  ~PrefaultPool();
  PrefaultPool(const PrefaultPool&) = delete;
  PrefaultPool& operator=(const PrefaultPool&) = delete;

  bool active() const { return state_ != nullptr; }  // has a worker (else new_prefaulted() maps its own)
  std::size_t taken() const;                          // blocks new_prefaulted() handed out ready-made

  struct State;  // shared with the worker thread (prefault.cpp)

 private:
  std::unique_ptr<State> state_;  // null when inactive
};

}  // namespace memcomm::view
