// The "host" source: pages mapped into reserved address space (the CPU analog of CUDA VMM).
//
// reserve() takes PROT_NONE address space; map() puts fresh private anonymous pages over part of it
// (one mmap(MAP_FIXED)), and unmap() puts PROT_NONE anonymous memory back, which returns the pages to
// the kernel.
//
// Note [Host pages across fork]: the pages must be private, not shared. A process that forks (a
// DataLoader's workers do) must give the child a copy-on-write view, as malloc's memory is: the
// child's copy of the allocator hands out the same addresses as the parent's, so with shared pages
// (this source once mapped a memfd with MAP_SHARED) a worker's batches were written over the parent's
// gradients. tests/allocator/test_sources.cpp forks to check it.
// Locks across fork are Note [Allocator locks across fork] (fork_locks.cpp) for the engines, and
// Note [Recording across fork] (profiler/core/src/recorder.cpp) for the profiler's recorder.

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iterator>
#include <string>

#include "memcomm/allocator/sources.hpp"

namespace memcomm::alloc {

namespace {
std::string sys_error(const char* what) { return std::string("host source: ") + what + ": " + std::strerror(errno); }
}  // namespace

HostSource::HostSource(const SourceOptions& options) : granularity_(options.granularity), capacity_(options.capacity) {
  const auto os_page = std::size_t(sysconf(_SC_PAGESIZE));
  if (granularity_ == 0 || granularity_ % os_page != 0 || (granularity_ & (granularity_ - 1)) != 0)
    throw SourceError("host source: granularity " + std::to_string(granularity_) +
                      " must be a power of two and a multiple of the OS page size " + std::to_string(os_page));
}

void* HostSource::reserve(std::size_t bytes) {
  if (bytes == 0 || bytes % granularity_) throw SourceError("host reserve: size " + std::to_string(bytes) + " is not a positive multiple of the granularity");
  // Over-reserve by one granule to align the base.
  void* raw = mmap(nullptr, bytes + granularity_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) throw SourceError(sys_error("mmap reserve"));
  auto r = reinterpret_cast<std::uintptr_t>(raw);
  const std::uintptr_t base = (r + granularity_ - 1) / granularity_ * granularity_;
  if (base > r) munmap(raw, base - r);
  const std::uintptr_t tail = r + bytes + granularity_ - (base + bytes);
  if (tail) munmap(reinterpret_cast<void*>(base + bytes), tail);
  std::lock_guard<std::mutex> lock(mu_);
  reservations_.emplace(base, bytes);
  counters_.reserves++;
  return reinterpret_cast<void*>(base);
}

void HostSource::release(void* base, std::size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = reservations_.find(reinterpret_cast<std::uintptr_t>(base));
  if (it == reservations_.end() || it->second != bytes) throw SourceError("host release: not a reserved range of that size");
  reservations_.erase(it);
  if (munmap(base, bytes) != 0) throw SourceError(sys_error("munmap"));
  counters_.releases++;
}

bool HostSource::map(void* addr, std::size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  return map_locked(addr, bytes);
}

void HostSource::check_inside_reservation(const char* what, void* addr, std::size_t bytes) const {
  const auto a = reinterpret_cast<std::uintptr_t>(addr);
  if (bytes == 0 || bytes % granularity_ || a % granularity_)
    throw SourceError(std::string("host ") + what + ": range not page-aligned");
  auto it = reservations_.upper_bound(a);
  if (it == reservations_.begin() || std::prev(it)->first + std::prev(it)->second < a + bytes)
    throw SourceError(std::string("host ") + what + ": range outside every reservation");
}

bool HostSource::map_locked(void* addr, std::size_t bytes) {
  check_inside_reservation("map", addr, bytes);
  if (capacity_ && counters_.backed_bytes + bytes > capacity_) {
    counters_.failed++;
    return false;
  }
  // See Note [Host pages across fork]: private pages.
  void* p = mmap(addr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
  if (p == MAP_FAILED) {
    if (errno == ENOMEM) {
      counters_.failed++;
      return false;
    }
    throw SourceError(sys_error("mmap map"));
  }
  counters_.maps++;
  counters_.backed_bytes += bytes;
  if (counters_.backed_bytes > counters_.peak_backed_bytes) counters_.peak_backed_bytes = counters_.backed_bytes;
  return true;
}

void HostSource::unmap(void* addr, std::size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  unmap_locked(addr, bytes);
}

void HostSource::unmap_locked(void* addr, std::size_t bytes) {
  check_inside_reservation("unmap", addr, bytes);
  void* p = mmap(addr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) throw SourceError(sys_error("mmap unmap"));
  counters_.unmaps++;
  counters_.backed_bytes -= bytes;
}

void* HostSource::allocate(std::size_t bytes) {
  void* base = reserve(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  if (!map_locked(base, bytes)) {
    counters_.reserves--;
    reservations_.erase(reinterpret_cast<std::uintptr_t>(base));
    munmap(base, bytes);
    return nullptr;
  }
  counters_.reserves--;
  counters_.maps--;
  counters_.allocs++;
  return base;
}

void HostSource::deallocate(void* ptr, std::size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  unmap_locked(ptr, bytes);
  counters_.unmaps--;
  counters_.frees++;
  auto it = reservations_.find(reinterpret_cast<std::uintptr_t>(ptr));
  if (it == reservations_.end() || it->second != bytes) throw SourceError("host deallocate: not a segment of that size");
  reservations_.erase(it);
  if (munmap(ptr, bytes) != 0) throw SourceError(sys_error("munmap"));
}

SourceCounters HostSource::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_;
}

}  // namespace memcomm::alloc
