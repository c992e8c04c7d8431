// CachingAllocator's read-only side: statistics, memory summary, observers and the messages it
// builds (Note [Observers] in caching_allocator.cpp).

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

#include "allocator_impl.hpp"
#include "memcomm/common/bytes.hpp"

namespace memcomm::alloc {

namespace {

std::uint64_t now_ns() {
  return std::uint64_t(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
}

}  // namespace

AllocEvent CachingAllocator::Impl::event(std::uint64_t t, EventKind kind, std::uintptr_t addr, std::size_t size,
                                         std::size_t requested, StreamId stream, std::uint8_t flags) const {
  AllocEvent e{};
  e.time_ns = t;
  e.address = addr;
  e.size = size;
  e.requested = requested;
  e.stream = stream;
  e.device = device;
  e.kind = kind;
  e.flags = flags;
  return e;
}

void CachingAllocator::Impl::emit_slow(EventKind kind, std::uintptr_t addr, std::size_t size, std::size_t requested,
                                       StreamId stream, std::uint8_t flags) {
  const AllocEvent e = event(now_ns(), kind, addr, size, requested, stream, flags);
  for (Observer* o : observers) o->on_event(e);
}

DeviceStats CachingAllocator::stats() const {
  AllocatorLock lock(impl_->mu);
  return impl_->stats;
}

MemorySummary CachingAllocator::memory_summary() const {
  Impl& m = *impl_;
  AllocatorLock lock(m.mu);
  MemorySummary s;
  for (auto& seg : m.segments) {
    ++s.segments;
    for (Block* b = seg->head; b; b = b->next) {
      ++s.blocks;
      if (!b->allocated && b->mapped && b->pending_events == 0) {
        s.free_bytes += b->size;
        s.largest_free_block = std::max<std::uint64_t>(s.largest_free_block, b->size);
      }
      if (b->pending_events > 0) s.pending_free_bytes += b->size;
    }
  }
  s.internal_waste = std::uint64_t(m.stats.allocated_bytes.current - m.stats.requested_bytes.current);
  return s;
}

void CachingAllocator::reset_peak_stats() {
  AllocatorLock lock(impl_->mu);
  DeviceStats& s = impl_->stats;
  for (Stat* st : {&s.allocation, &s.segment, &s.active, &s.inactive_split, &s.allocated_bytes, &s.reserved_bytes,
                   &s.active_bytes, &s.inactive_split_bytes, &s.requested_bytes, &s.oversize_allocations,
                   &s.oversize_segments})
    st->reset_peak();
}

void CachingAllocator::add_observer(Observer* observer, bool with_state) {
  if (!observer) throw AllocatorError("add_observer: observer is null");
  AllocatorLock lock(impl_->mu);
  if (with_state) impl_->describe_state(*observer);  // Note [An observer added mid-run]
  impl_->observers.push_back(observer);
  impl_->has_observers.store(true);
}

void CachingAllocator::Impl::describe_state(Observer& o) const {
  const std::uint64_t t = now_ns();
  const auto send = [&](EventKind kind, std::uintptr_t addr, std::size_t size, std::size_t requested,
                        StreamId stream, std::uint8_t flags) {
    o.on_event(event(t, kind, addr, size, requested, stream, flags));
  };
  for (const auto& seg : segments) {
    const StreamId pool_stream = seg->pool->stream;
    send(EventKind::SegmentAlloc, seg->base, seg->size, 0, pool_stream, seg->expandable ? prof::kSegmentVirtualRange : 0);
    if (seg->expandable)  // runs of mapped blocks: unmapped blocks are page-aligned, so the runs are too
      for (const Block* b = seg->head; b;) {
        if (!b->mapped) {
          b = b->next;
          continue;
        }
        const std::uintptr_t begin = b->addr;
        std::uintptr_t end = begin;
        for (; b && b->mapped; b = b->next) end = b->addr + b->size;
        send(EventKind::SegmentMap, begin, end - begin, 0, pool_stream, 0);
      }
    for (const Block* b = seg->head; b; b = b->next) {
      if (!b->allocated && b->pending_events == 0) continue;
      send(EventKind::Alloc, b->addr, b->size, b->requested, b->stream, 0);
      if (!b->allocated) send(EventKind::FreeRequested, b->addr, b->size, b->requested, b->stream, 0);
    }
  }
}

void CachingAllocator::remove_observer(Observer* observer) {
  AllocatorLock lock(impl_->mu);
  auto& v = impl_->observers;
  v.erase(std::remove(v.begin(), v.end(), observer), v.end());
  impl_->has_observers.store(!v.empty());
}

const AllocatorConfig& CachingAllocator::config() const { return impl_->config; }
MemorySource& CachingAllocator::source() const { return *impl_->source; }

// Out-of-line so OutOfMemory's message is built in one place (growth.cpp throws it).
std::string format_oom(std::size_t size, std::size_t requested, const MemorySource& src, std::size_t cap,
                       std::uint64_t reserved, std::uint64_t allocated, std::uint64_t largest_free,
                       std::size_t whole_segment) {
  const double frag = reserved > 0 ? 1.0 - double(allocated) / double(reserved) : 0.0;
  char f[32];
  std::snprintf(f, sizeof f, "%.3f", frag);
  return "memcomm: out of memory allocating " + format_bytes(size, 2) + " (requested " + std::to_string(requested) +
         " bytes) from " + src.name() + " source, device " + std::to_string(src.device()) + ": capacity " +
         (cap ? format_bytes(cap, 2) : std::string("unlimited")) + ", reserved " + format_bytes(reserved, 2) +
         ", allocated " + format_bytes(allocated, 2) + ", largest free block " + format_bytes(largest_free, 2) +
         ", fragmentation " + f +
         (whole_segment > size ? "; without expandable segments a request this size takes a whole " +
                                     format_bytes(whole_segment, 2) + " segment"
                               : std::string());
}

std::vector<SegmentInfo> mapped_runs(const std::vector<SegmentInfo>& segments) {
  std::vector<SegmentInfo> out;
  for (const SegmentInfo& s : segments) {
    SegmentInfo* run = nullptr;  // the run the next mapped block extends; null after a hole
    for (const BlockInfo& b : s.blocks) {
      if (!b.mapped) {
        run = nullptr;
        continue;
      }
      if (!run) {
        run = &out.emplace_back();
        run->base = b.address;
        run->stream = s.stream;
        run->expandable = s.expandable;
        run->small_pool = s.small_pool;
      }
      run->blocks.push_back(b);
      run->size += b.size;
      run->mapped_bytes += b.size;
    }
  }
  return out;
}

}  // namespace memcomm::alloc
