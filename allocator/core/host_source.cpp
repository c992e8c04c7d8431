// The "host" source: memfd pages mapped into reserved address space (the CPU analog of CUDA VMM).
//
// Every reserved range owns an equally large, sparse range of one memfd, so an address always maps the
// same file offset: map() is one mmap(MAP_FIXED|MAP_SHARED) over the reservation, unmap() puts PROT_NONE
// anonymous memory back over the range and punches the file range out (fallocate PUNCH_HOLE), which is
// what returns the pages to the kernel.

#include <fcntl.h>
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
  fd_ = memfd_create("memcomm-host", MFD_CLOEXEC);
  if (fd_ < 0) throw SourceError(sys_error("memfd_create"));
}

HostSource::~HostSource() {
  if (fd_ >= 0) close(fd_);
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
  // Give the range its own file window.
  const std::uint64_t off = file_size_;
  file_size_ += bytes;
  if (ftruncate(fd_, off_t(file_size_)) != 0) {
    munmap(reinterpret_cast<void*>(base), bytes);
    throw SourceError(sys_error("ftruncate"));
  }
  mapped_.emplace(base, std::make_pair(off, bytes));  // reservation table: base -> (file offset, bytes)
  counters_.reserves++;
  return reinterpret_cast<void*>(base);
}

void HostSource::release(void* base, std::size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = mapped_.find(reinterpret_cast<std::uintptr_t>(base));
  if (it == mapped_.end() || it->second.second != bytes) throw SourceError("host release: not a reserved range of that size");
  mapped_.erase(it);
  if (munmap(base, bytes) != 0) throw SourceError(sys_error("munmap"));
  counters_.releases++;
}

bool HostSource::map(void* addr, std::size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  return map_locked(addr, bytes);
}

bool HostSource::map_locked(void* addr, std::size_t bytes) {
  const auto a = reinterpret_cast<std::uintptr_t>(addr);
  if (bytes == 0 || bytes % granularity_ || a % granularity_) throw SourceError("host map: range not page-aligned");
  auto it = mapped_.upper_bound(a);
  if (it == mapped_.begin() || std::prev(it)->first + std::prev(it)->second.second < a + bytes)
    throw SourceError("host map: range outside every reservation");
  --it;
  if (capacity_ && counters_.backed_bytes + bytes > capacity_) {
    counters_.failed++;
    return false;
  }
  const std::uint64_t off = it->second.first + (a - it->first);
  void* p = mmap(addr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd_, off_t(off));
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
  const auto a = reinterpret_cast<std::uintptr_t>(addr);
  if (bytes == 0 || bytes % granularity_ || a % granularity_) throw SourceError("host unmap: range not page-aligned");
  auto it = mapped_.upper_bound(a);
  if (it == mapped_.begin() || std::prev(it)->first + std::prev(it)->second.second < a + bytes)
    throw SourceError("host unmap: range outside every reservation");
  --it;
  const std::uint64_t off = it->second.first + (a - it->first);
  void* p = mmap(addr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) throw SourceError(sys_error("mmap unmap"));
  if (fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off_t(off), off_t(bytes)) != 0)
    throw SourceError(sys_error("fallocate punch hole"));
  counters_.unmaps++;
  counters_.backed_bytes -= bytes;
}

void* HostSource::allocate(std::size_t bytes) {
  void* base = reserve(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  if (!map_locked(base, bytes)) {
    counters_.reserves--;
    mapped_.erase(reinterpret_cast<std::uintptr_t>(base));
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
  auto it = mapped_.find(reinterpret_cast<std::uintptr_t>(ptr));
  if (it == mapped_.end() || it->second.second != bytes) throw SourceError("host deallocate: not a segment of that size");
  mapped_.erase(it);
  if (munmap(ptr, bytes) != 0) throw SourceError(sys_error("munmap"));
}

SourceCounters HostSource::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_;
}

}  // namespace memcomm::alloc
