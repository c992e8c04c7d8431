// The "simulated" source: fake addresses, no memory, every call counted and checked.

#include <cstdio>
#include <iterator>
#include <string>

#include "memcomm/allocator/sources.hpp"

namespace memcomm::alloc {

namespace {
std::string hexs(std::uintptr_t p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(p));
  return buf;
}
}  // namespace

SimulatedSource::SimulatedSource(const SourceOptions& options)
    : granularity_(options.granularity), capacity_(options.capacity), device_(options.device) {
  if (granularity_ == 0 || (granularity_ & (granularity_ - 1)) != 0)
    throw SourceError("simulated source: granularity must be a power of two, got " + std::to_string(granularity_));
}

void* SimulatedSource::allocate(std::size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (bytes == 0 || bytes % granularity_) throw SourceError("simulated allocate: size " + std::to_string(bytes) + " is not a positive multiple of the granularity");
  if (capacity_ && counters_.backed_bytes + bytes > capacity_) {
    counters_.failed++;
    return nullptr;
  }
  const std::uintptr_t base = next_;
  next_ += bytes + granularity_;  // a guard gap so neighbouring segments never touch
  segments_.emplace(base, bytes);
  counters_.allocs++;
  counters_.backed_bytes += bytes;
  if (counters_.backed_bytes > counters_.peak_backed_bytes) counters_.peak_backed_bytes = counters_.backed_bytes;
  return reinterpret_cast<void*>(base);
}

void SimulatedSource::deallocate(void* ptr, std::size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = segments_.find(reinterpret_cast<std::uintptr_t>(ptr));
  if (it == segments_.end() || it->second != bytes)
    throw SourceError("simulated deallocate(" + hexs(reinterpret_cast<std::uintptr_t>(ptr)) + ", " + std::to_string(bytes) + "): not an allocated segment of that size");
  segments_.erase(it);
  counters_.frees++;
  counters_.backed_bytes -= bytes;
}

void* SimulatedSource::reserve(std::size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (bytes == 0 || bytes % granularity_) throw SourceError("simulated reserve: size " + std::to_string(bytes) + " is not a positive multiple of the granularity");
  const std::uintptr_t base = next_;
  next_ += bytes + granularity_;
  reserved_.emplace(base, bytes);
  counters_.reserves++;
  return reinterpret_cast<void*>(base);
}

void SimulatedSource::release(void* base, std::size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto b = reinterpret_cast<std::uintptr_t>(base);
  auto it = reserved_.find(b);
  if (it == reserved_.end() || it->second != bytes) throw SourceError("simulated release(" + hexs(b) + "): not a reserved range of that size");
  auto m = mapped_.lower_bound(b);
  if (m != mapped_.end() && m->first < b + bytes) throw SourceError("simulated release(" + hexs(b) + "): pages still mapped at " + hexs(m->first));
  reserved_.erase(it);
  counters_.releases++;
}

bool SimulatedSource::map(void* addr, std::size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto a = reinterpret_cast<std::uintptr_t>(addr);
  if (bytes == 0 || bytes % granularity_ || a % granularity_) throw SourceError("simulated map(" + hexs(a) + ", " + std::to_string(bytes) + "): not page-aligned");
  auto r = reserved_.upper_bound(a);
  if (r == reserved_.begin() || std::prev(r)->first + std::prev(r)->second < a + bytes) throw SourceError("simulated map(" + hexs(a) + "): outside every reserved range");
  auto m = mapped_.lower_bound(a);
  if ((m != mapped_.end() && m->first < a + bytes) || (m != mapped_.begin() && std::prev(m)->first + std::prev(m)->second > a))
    throw SourceError("simulated map(" + hexs(a) + ", " + std::to_string(bytes) + "): pages already mapped");
  if (capacity_ && counters_.backed_bytes + bytes > capacity_) {
    counters_.failed++;
    return false;
  }
  mapped_.emplace(a, bytes);
  counters_.maps++;
  counters_.backed_bytes += bytes;
  if (counters_.backed_bytes > counters_.peak_backed_bytes) counters_.peak_backed_bytes = counters_.backed_bytes;
  return true;
}

void SimulatedSource::unmap(void* addr, std::size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto a = reinterpret_cast<std::uintptr_t>(addr);
  if (bytes == 0 || bytes % granularity_ || a % granularity_) throw SourceError("simulated unmap(" + hexs(a) + ", " + std::to_string(bytes) + "): not page-aligned");
  // The range may cover parts of several mapped runs; every page in it must be mapped.
  std::uintptr_t cur = a;
  const std::uintptr_t end = a + bytes;
  auto m = mapped_.upper_bound(a);
  if (m != mapped_.begin()) --m;
  while (cur < end) {
    if (m == mapped_.end() || m->first > cur || m->first + m->second <= cur)
      throw SourceError("simulated unmap(" + hexs(a) + ", " + std::to_string(bytes) + "): page " + hexs(cur) + " is not mapped");
    const std::uintptr_t lo = m->first, hi = m->first + m->second;
    m = mapped_.erase(m);
    if (lo < cur) mapped_.emplace(lo, cur - lo);
    if (hi > end) {
      mapped_.emplace(end, hi - end);
      cur = end;
    } else {
      cur = hi;
    }
    m = mapped_.lower_bound(cur);
  }
  counters_.unmaps++;
  counters_.backed_bytes -= bytes;
}

SourceCounters SimulatedSource::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_;
}

bool SimulatedSource::is_backed(const void* addr, std::size_t bytes) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto a = reinterpret_cast<std::uintptr_t>(addr);
  auto s = segments_.upper_bound(a);
  if (s != segments_.begin() && std::prev(s)->first + std::prev(s)->second >= a + bytes) return true;
  std::uintptr_t cur = a;
  while (cur < a + bytes) {
    auto m = mapped_.upper_bound(cur);
    if (m == mapped_.begin()) return false;
    --m;
    if (m->first + m->second <= cur) return false;
    cur = m->first + m->second;
  }
  return true;
}

}  // namespace memcomm::alloc
