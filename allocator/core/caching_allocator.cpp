// Note [Caching allocator]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// memcomm's caching allocator keeps memory it got from a MemorySource and hands it out again without
// calling the source, like PyTorch's CUDACachingAllocator, and differs where PyTorch fragments:
//
// - Requests are rounded up to min_block (512 B) and served from one of two pools per stream: small
//   (<= 1 MiB) and large. Keeping small blocks out of the large pool stops a long-lived 512 B tensor from
//   pinning a page in the middle of a large free range. (Note [Pools and size classes])
// - Each pool's free blocks sit in a set ordered by (size, address): allocation is best fit
//   (lower_bound), the remainder is split off when it is at least min_block (small) or min_large_split
//   (large) -- so a block wastes less than that -- and a freed block is merged with free neighbours.
// - With a source that maps pages (host, simulated, cuda-vmm) every pool owns ONE expandable segment: a
//   large virtual range whose pages are mapped only where blocks need them. Free space never strands in
//   a separate segment, and a request that fits nowhere is placed where the fewest new pages are
//   needed, possibly spanning free mapped and unmapped blocks (Note [Expandable segments], growth.cpp).
// - Pages are given back lazily (Note [Lazy page release], growth.cpp): mapped bytes may exceed peak
//   allocated bytes by release_slack (3%) plus a floor (2% of them, within a page..4 MiB); only when
//   mapping more would cross that budget are free pages given back, oldest first. Eager release would
//   hold ~1.03 x live but cost 10-10,000 x the driver calls; never releasing gives PyTorch's 1.5 x.
//   Mapping is done in runs (one source call per contiguous run, plus a little map-ahead) so growth is cheap.
// - Sources without map (cuda) get PyTorch's whole segments: 2 MiB for the small pool, 20 MiB for
//   requests below 10 MiB, the request rounded to 2 MiB above.
// - Stream-ordered reuse (Note [Stream-ordered reuse]): a block belongs to the stream it was allocated
//   on. record_stream adds streams; freeing such a block records one pooled event per extra stream and
//   the block returns to the free set only when they have all completed (process_events).
// - Capacity and OOM (Note [Garbage collection]): reserved bytes never exceed the cap. When growth does
//   not fit, the allocator waits for pending events, gives back every free page and segment, and tries
//   once more (num_alloc_retries); then it throws OutOfMemory with requested, reserved, allocated,
//   largest free block and fragmentation. With gc_threshold set, free blocks older than gc_min_age are
//   given back before reserved bytes cross gc_threshold x cap.
// - Planned mode (Note [Planned mode], planner.cpp): the allocation sequence of an iteration (between
//   step_marker() calls, or one period of the request sequence found online: Note [Detected repetition],
//   repetition.cpp) is packed into an arena by lifetime-aware best fit; the next iterations are served
//   from the arena while their sequence matches, and fall back to the caching path at the first
//   mismatch or conflict, never failing.
// - Recent frees (Note [Recent frees]): a freed block is parked unmerged in a tiny per-pool LIFO, so
//   the alloc/free pair of a loop that frees and reallocates one size skips the free set entirely.
//
// Locking: one mutex guards all state. The fast path (parked block or best fit, split, table insert) is a
// few hundred instructions under it. Source calls are made without the lock: the blocks they concern are
// marked busy (out of every free set) first, and the result is folded in under the lock afterwards.
// (Stream events are queried under the lock, as PyTorch does; the destructor holds it throughout.)
//
// Note [Observers]
// Every state change a profiler needs is reported to observers as one AllocEvent, from the thread that
// caused it; alloc/free events are emitted under the lock, so they are ordered with the state.

#include <algorithm>
#include <cassert>
#include <chrono>
#include <cstdio>
#include <string>

#include "allocator_impl.hpp"
#include "planner.hpp"

namespace memcomm::alloc {

namespace {

std::string human_bytes(std::uint64_t bytes) {
  char buf[64];
  const double b = double(bytes);
  if (bytes >= (1ull << 30)) std::snprintf(buf, sizeof buf, "%.2f GiB", b / double(1ull << 30));
  else if (bytes >= (1ull << 20)) std::snprintf(buf, sizeof buf, "%.2f MiB", b / double(1ull << 20));
  else if (bytes >= (1ull << 10)) std::snprintf(buf, sizeof buf, "%.2f KiB", b / double(1ull << 10));
  else std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  return buf;
}

std::string hex(std::uintptr_t p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(p));
  return buf;
}

std::uint64_t now_ns() {
  return std::uint64_t(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
}

}  // namespace

const char* to_string(EventKind kind) {
  switch (kind) {
    case EventKind::alloc: return "alloc";
    case EventKind::free_requested: return "free_requested";
    case EventKind::free_completed: return "free_completed";
    case EventKind::segment_alloc: return "segment_alloc";
    case EventKind::segment_free: return "segment_free";
    case EventKind::segment_map: return "segment_map";
    case EventKind::segment_unmap: return "segment_unmap";
    case EventKind::oom: return "oom";
  }
  return "unknown";
}

// ---------------------------------------------------------------------------------------------
// Impl: construction and small helpers
// ---------------------------------------------------------------------------------------------

CachingAllocator::Impl::Impl(std::shared_ptr<MemorySource> src, AllocatorConfig cfg,
                             std::shared_ptr<StreamModel> stream_model)
    : source(std::move(src)), config(cfg), streams(std::move(stream_model)) {
  if (!source) throw AllocatorError("CachingAllocator: the memory source is null");
  if (config.min_block < 64 || (config.min_block & (config.min_block - 1)) != 0)
    throw AllocatorError("CachingAllocator: min_block must be a power of two >= 64, got " +
                         std::to_string(config.min_block));
  page = source->granularity();
  if (page == 0 || page % config.min_block != 0)
    throw AllocatorError("CachingAllocator: source granularity " + std::to_string(page) +
                         " is not a multiple of min_block " + std::to_string(config.min_block));
  if (config.release_slack < 0 || config.map_ahead < 0 || config.gc_threshold < 0 || config.gc_threshold > 1)
    throw AllocatorError("CachingAllocator: release_slack and map_ahead must be >= 0, gc_threshold in [0, 1]");
  cap = config.capacity;
  if (source->capacity() != 0 && (cap == 0 || cap > source->capacity())) cap = source->capacity();
  expandable = config.expandable_segments && source->can_map();
  device = source->device();
  if (!streams) streams = std::make_shared<ImmediateStreams>();
  // Planned mode needs an arena that maps pages; with whole-segment sources it stays off.
  if (config.planned && expandable) plan = std::make_unique<PlanImpl>();
}

CachingAllocator::Impl::~Impl() {
  try {
    release_everything();
  } catch (...) {
    // A destructor must not throw; a failing source at shutdown leaks its memory instead.
  }
  for (Block* b : block_free_list) delete b;
  for (EventHandle e : event_pool) streams->destroy_event(e);
  for (PendingFree& p : pending)
    for (EventHandle e : p.events) streams->destroy_event(e);
}

std::size_t CachingAllocator::Impl::round_size(std::size_t bytes) const {
  const std::size_t m = config.min_block;
  if (bytes > std::size_t(-1) - m) throw AllocatorError("allocate: size " + std::to_string(bytes) + " overflows");
  return (bytes + m - 1) & ~(m - 1);
}

Pool* CachingAllocator::Impl::pool_for(StreamId stream, bool small) {
  for (auto& p : pools)
    if (p->stream == stream && p->small == small) return p.get();
  pools.push_back(std::make_unique<Pool>(stream, small, &nodes));
  return pools.back().get();
}

Block* CachingAllocator::Impl::new_block() {
  if (block_free_list.empty()) return new Block();
  Block* b = block_free_list.back();
  block_free_list.pop_back();
  *b = Block();
  return b;
}

Block* CachingAllocator::Impl::split_mapped_block(Block* b, std::uintptr_t at) {
  Block* r = new_block();
  r->addr = at;
  r->size = b->addr + b->size - at;
  r->segment = b->segment;
  r->mapped = true;
  r->last_used = b->last_used;
  r->prev = b;
  r->next = b->next;
  if (b->next) b->next->prev = r;
  b->next = r;
  b->size = at - b->addr;
  return r;
}

void CachingAllocator::Impl::delete_block(Block* b) {
  delete b->uses;
  b->uses = nullptr;
  block_free_list.push_back(b);
}

void CachingAllocator::Impl::count_split(Block* b) {
  b->counted_split = b->prev != nullptr || b->next != nullptr;
  if (b->counted_split) {
    stats.inactive_split.increase(1);
    stats.inactive_split_bytes.increase(std::int64_t(b->size));
  }
}

void CachingAllocator::Impl::uncount_split(Block* b) {
  if (b->counted_split) {
    stats.inactive_split.decrease(1);
    stats.inactive_split_bytes.decrease(std::int64_t(b->size));
    b->counted_split = false;
  }
}

void CachingAllocator::Impl::free_insert(Block* b) {
  assert(b->mapped && !b->allocated && !b->busy && b->pending_events == 0 && !b->in_recent);
  count_split(b);
  b->segment->pool->free.insert(b);
}

void CachingAllocator::Impl::free_erase(Block* b) {
  uncount_split(b);
  b->segment->pool->free.erase(b);
}

// Note [Recent frees]
// A freed block is first parked, unmerged, in a small per-pool LIFO. An allocation of exactly its size
// takes it back at once: the alloc/free pair of a training loop then touches neither
// the free set nor the block links. When the LIFO is full its oldest entry is merged and filed as usual,
// and any allocation that misses them, and every slow path (growth, release, empty_cache), files all of
// them first, so best fit always sees the merged state: parked blocks are only a shortcut in front of it.
Block* CachingAllocator::Impl::take_recent(Pool* pool, std::size_t size) {
  for (std::size_t i = pool->n_recent; i-- > 0;) {
    Block* b = pool->recent[i];
    if (b->size == size) {  // exact fits only: a parked block never adds internal waste
      for (std::size_t j = i + 1; j < pool->n_recent; ++j) pool->recent[j - 1] = pool->recent[j];
      --pool->n_recent;
      b->in_recent = false;
      uncount_split(b);
      return b;
    }
  }
  return nullptr;
}

void CachingAllocator::Impl::flush_recent() {
  for (auto& pool : pools) {
    for (std::size_t i = 0; i < pool->n_recent; ++i) {
      Block* b = pool->recent[i];
      b->in_recent = false;
      uncount_split(b);
      free_insert(merge_free(b));
    }
    pool->n_recent = 0;
  }
}

void CachingAllocator::Impl::count_backed(std::int64_t delta) {
  if (delta >= 0) stats.reserved_bytes.increase(delta);
  else stats.reserved_bytes.decrease(-delta);
}

void CachingAllocator::Impl::emit_slow(EventKind kind, std::uintptr_t addr, std::size_t size, std::size_t requested,
                                       StreamId stream) {
  AllocEvent e{};
  e.time_ns = now_ns();
  e.address = addr;
  e.size = size;
  e.requested = requested;
  e.stream = stream;
  e.device = device;
  e.kind = kind;
  for (Observer* o : observers) o->on_event(e);
}

// Best fit in the pool, honouring the oversize rules (Note [Pools and size classes]).
Block* CachingAllocator::Impl::find_free(Pool* pool, std::size_t size) {
  Block key;
  key.size = size;
  key.addr = 0;
  auto it = pool->free.lower_bound(&key);
  if (it == pool->free.end()) return nullptr;
  Block* b = *it;
  const std::size_t max_split = config.max_split_size;
  if (size < max_split && b->size >= max_split) return nullptr;  // never cut an oversize block for a normal request
  if (size >= max_split && b->size >= size + config.max_oversize_waste) return nullptr;
  return b;
}

// Hands out `b` (already out of the free set, mapped) for `size` bytes, splitting off the rest.
Block* CachingAllocator::Impl::take(Block* b, std::size_t size, std::size_t requested) {
  Pool* pool = b->segment->pool;
  const std::size_t remaining = b->size - size;
  const std::size_t min_split = pool->small ? config.min_block : config.min_large_split;
  b->allocated = true;  // before splitting, so the remainder does not merge back into it
  if (remaining >= min_split && remaining > 0 && b->size < config.max_split_size) {
    free_insert(merge_free(split_mapped_block(b, b->addr + size)));
  }
  b->allocated = true;
  b->requested = requested;
  live.insert(b->addr, b);
  stats.allocation.increase(1);
  stats.active.increase(1);
  stats.allocated_bytes.increase(std::int64_t(b->size));
  stats.active_bytes.increase(std::int64_t(b->size));
  stats.requested_bytes.increase(std::int64_t(requested));
  if (b->size >= config.max_split_size) stats.oversize_allocations.increase(1);
  if (stats.allocated_bytes.current > allocated_high_water) allocated_high_water = stats.allocated_bytes.current;
  emit(EventKind::alloc, b->addr, b->size, requested, pool->stream);
  return b;
}

// Merges a free (not allocated, not pending, not busy) block with like neighbours; returns the result,
// which is in no free set.
Block* CachingAllocator::Impl::merge_free(Block* b) {
  auto mergeable = [&](Block* n) {
    return n && !n->allocated && !n->busy && n->pending_events == 0 && !n->in_recent && n->mapped == b->mapped;
  };
  if (mergeable(b->prev)) {
    Block* p = b->prev;
    if (p->mapped) free_erase(p);
    p->size += b->size;
    p->next = b->next;
    if (b->next) b->next->prev = p;
    p->last_used = std::max(p->last_used, b->last_used);
    if (b->segment->head == b) b->segment->head = p;
    delete_block(b);
    b = p;
  }
  if (mergeable(b->next)) {
    Block* n = b->next;
    if (n->mapped) free_erase(n);
    b->size += n->size;
    b->next = n->next;
    if (n->next) n->next->prev = b;
    b->last_used = std::max(b->last_used, n->last_used);
    delete_block(n);
  }
  return b;
}

// A block the user freed whose stream events (if any) have completed: back into the free set.
void CachingAllocator::Impl::free_block(Block* b) {
  const std::uintptr_t addr = b->addr;
  const std::size_t size = b->size;
  const StreamId stream = b->segment->pool->stream;
  stats.active.decrease(1);
  stats.active_bytes.decrease(std::int64_t(size));
  b->allocated = false;
  b->requested = 0;
  b->last_used = tick;
  delete b->uses;
  b->uses = nullptr;
  Pool* pool = b->segment->pool;
  b->in_recent = true;  // first, so filing the oldest parked block cannot merge b away
  if (pool->n_recent == Pool::kRecent) {  // file the oldest parked block
    Block* old = pool->recent[0];
    for (std::size_t j = 1; j < Pool::kRecent; ++j) pool->recent[j - 1] = pool->recent[j];
    --pool->n_recent;
    old->in_recent = false;
    uncount_split(old);
    free_insert(merge_free(old));
  }
  count_split(b);
  pool->recent[pool->n_recent++] = b;
  emit(EventKind::free_completed, addr, size, 0, stream);
}

void CachingAllocator::Impl::process_events_locked() {
  std::size_t kept = 0;
  for (std::size_t i = 0; i < pending.size(); ++i) {
    PendingFree& p = pending[i];
    bool done = true;
    for (EventHandle e : p.events)
      if (!streams->query_event(e)) {
        done = false;
        break;
      }
    if (!done) {
      if (kept != i) pending[kept] = std::move(p);
      ++kept;
      continue;
    }
    for (EventHandle e : p.events) event_pool.push_back(e);
    p.block->pending_events = 0;
    if (p.block->planned) plan_free(p.block);
    else free_block(p.block);
  }
  pending.resize(kept);
}

// ---------------------------------------------------------------------------------------------
// Public API
// ---------------------------------------------------------------------------------------------

CachingAllocator::CachingAllocator(std::shared_ptr<MemorySource> source, AllocatorConfig config,
                                   std::shared_ptr<StreamModel> streams)
    : impl_(std::make_unique<Impl>(std::move(source), config, std::move(streams))) {}

CachingAllocator::~CachingAllocator() = default;

void* CachingAllocator::allocate(std::size_t bytes, StreamId stream) {
  if (bytes == 0) return nullptr;
  Impl& m = *impl_;
  const std::size_t size = m.round_size(bytes);
  const bool small = size <= m.config.small_size;
  Pool* pool;
  {
    std::unique_lock<std::mutex> lock(m.mu);
    ++m.tick;
    if (!m.pending.empty()) m.process_events_locked();
    if (m.plan) {
      if (void* p = m.plan_allocate(size, bytes, stream, lock)) return p;
    }
    pool = m.pool_for(stream, small);
    if (Block* b = m.take_recent(pool, size)) {
      b = m.take(b, size, bytes);
      if (m.plan) m.plan_record_alloc(b);
      return reinterpret_cast<void*>(b->addr);
    }
    if (pool->n_recent) m.flush_recent();  // best fit sees the merged state
    if (Block* b = m.find_free(pool, size)) {
      m.free_erase(b);
      b = m.take(b, size, bytes);
      if (m.plan) m.plan_record_alloc(b);
      return reinterpret_cast<void*>(b->addr);
    }
  }
  Block* b = m.grow(pool, size, bytes);  // locks as needed; throws OutOfMemory
  if (m.plan) {
    std::lock_guard<std::mutex> lock(m.mu);
    m.plan_record_alloc(b);
  }
  return reinterpret_cast<void*>(b->addr);
}

void CachingAllocator::deallocate(void* ptr) {
  if (!ptr) return;
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mu);
  ++m.tick;
  const auto addr = reinterpret_cast<std::uintptr_t>(ptr);
  Block** found = m.live.find(addr);
  if (!found)
    throw AllocatorError("deallocate(" + hex(addr) + "): not a live block of this allocator "
                         "(double free, a pointer from elsewhere, or not the start of a block)");
  Block* b = *found;
  m.live.erase(addr);
  const StreamId stream = b->segment->pool->stream;
  m.stats.allocation.decrease(1);
  m.stats.allocated_bytes.decrease(std::int64_t(b->size));
  m.stats.requested_bytes.decrease(std::int64_t(b->requested));
  if (b->size >= m.config.max_split_size) m.stats.oversize_allocations.decrease(1);
  m.emit(EventKind::free_requested, b->addr, b->size, b->requested, stream);
  if (m.plan) m.plan_record_free(b);
  if (b->uses && !b->uses->empty()) {
    // Note [Stream-ordered reuse]: the memory may still be in use by work queued on other streams.
    PendingFree p{b, {}};
    for (StreamId s : *b->uses) {
      EventHandle e;
      if (m.event_pool.empty()) e = m.streams->create_event();
      else {
        e = m.event_pool.back();
        m.event_pool.pop_back();
      }
      m.streams->record_event(e, s);
      p.events.push_back(e);
    }
    b->allocated = false;
    b->pending_events = int(p.events.size());
    m.pending.push_back(std::move(p));
    return;
  }
  if (b->planned) m.plan_free(b);
  else m.free_block(b);
}

void CachingAllocator::record_stream(void* ptr, StreamId stream) {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mu);
  const auto addr = reinterpret_cast<std::uintptr_t>(ptr);
  Block** found = m.live.find(addr);
  if (!found) throw AllocatorError("record_stream(" + hex(addr) + "): not a live block of this allocator");
  Block* b = *found;
  if (stream == b->segment->pool->stream) return;
  if (!b->uses) b->uses = new std::vector<StreamId>();
  if (std::find(b->uses->begin(), b->uses->end(), stream) == b->uses->end()) b->uses->push_back(stream);
}

std::size_t CachingAllocator::block_size(const void* ptr) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  Block** found = impl_->live.find(reinterpret_cast<std::uintptr_t>(ptr));
  if (!found) throw AllocatorError("block_size(" + hex(reinterpret_cast<std::uintptr_t>(ptr)) + "): not a live block");
  return (*found)->size;
}

std::size_t CachingAllocator::requested_size(const void* ptr) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  Block** found = impl_->live.find(reinterpret_cast<std::uintptr_t>(ptr));
  if (!found)
    throw AllocatorError("requested_size(" + hex(reinterpret_cast<std::uintptr_t>(ptr)) + "): not a live block");
  return (*found)->requested;
}

void CachingAllocator::empty_cache() {
  Impl& m = *impl_;
  {
    std::lock_guard<std::mutex> lock(m.mu);
    if (!m.pending.empty()) {
      for (PendingFree& p : m.pending)
        for (EventHandle e : p.events) m.streams->synchronize_event(e);
      m.stats.num_sync_all_streams++;
      m.process_events_locked();
    }
  }
  m.release_free(0, 0, false);  // files parked blocks first
  if (m.plan) m.plan_release_arena();
}

void CachingAllocator::process_events() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->process_events_locked();
  impl_->flush_recent();
}

void CachingAllocator::step_marker() {
  if (impl_->plan) impl_->plan_step();
}

DeviceStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->stats;
}

MemorySummary CachingAllocator::memory_summary() const {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mu);
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
  if (m.plan) m.plan->summarize(s);
  s.internal_waste = std::uint64_t(m.stats.allocated_bytes.current - m.stats.requested_bytes.current);
  return s;
}

void CachingAllocator::reset_peak_stats() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  DeviceStats& s = impl_->stats;
  for (Stat* st : {&s.allocation, &s.segment, &s.active, &s.inactive_split, &s.allocated_bytes, &s.reserved_bytes,
                   &s.active_bytes, &s.inactive_split_bytes, &s.requested_bytes, &s.oversize_allocations,
                   &s.oversize_segments})
    st->reset_peak();
}

void CachingAllocator::add_observer(Observer* observer) {
  if (!observer) throw AllocatorError("add_observer: observer is null");
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->observers.push_back(observer);
  impl_->has_observers.store(true);
}

void CachingAllocator::remove_observer(Observer* observer) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto& v = impl_->observers;
  v.erase(std::remove(v.begin(), v.end(), observer), v.end());
  impl_->has_observers.store(!v.empty());
}

const AllocatorConfig& CachingAllocator::config() const { return impl_->config; }
MemorySource& CachingAllocator::source() const { return *impl_->source; }

// Out-of-line so OutOfMemory's message is built in one place (growth.cpp throws it).
std::string format_oom(std::size_t size, std::size_t requested, const MemorySource& src, std::size_t cap,
                       std::uint64_t reserved, std::uint64_t allocated, std::uint64_t largest_free) {
  const double frag = reserved > 0 ? 1.0 - double(allocated) / double(reserved) : 0.0;
  char f[32];
  std::snprintf(f, sizeof f, "%.3f", frag);
  return "memcomm: out of memory allocating " + human_bytes(size) + " (requested " + std::to_string(requested) +
         " bytes) from " + src.name() + " source, device " + std::to_string(src.device()) + ": capacity " +
         (cap ? human_bytes(cap) : std::string("unlimited")) + ", reserved " + human_bytes(reserved) +
         ", allocated " + human_bytes(allocated) + ", largest free block " + human_bytes(largest_free) +
         ", fragmentation " + f;
}

}  // namespace memcomm::alloc
