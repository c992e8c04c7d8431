// Note [Caching allocator]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// memcomm's caching allocator keeps memory it got from a MemorySource and hands it out again without
// calling the source, like PyTorch's CUDACachingAllocator, and differs where PyTorch fragments:
//
// - Requests are rounded up to min_block (512 B on a device, 64 B on the host: Note [Rounding follows
//   the memory]) and served from one of two pools per stream: small (<= 1 MiB) and large. Keeping small
//   blocks out of the large pool stops a long-lived small tensor from pinning a page in the middle of a
//   large free range. (Note [Pools and size classes])
// - Each pool's free blocks sit in a set ordered by (size, address): allocation is best fit
//   (lower_bound), except that an expandable segment's growing end is taken last
//   (Note [The growing end is taken last]). The remainder is split off when it is at least min_block
//   (small pools, and every pool of an expandable segment) or min_large_split (large pools of whole
//   segments) -- so a block wastes less than that -- and a freed block is merged with free neighbours
//   (Note [Splitting in expandable segments]).
// - With a source that maps pages (host, simulated, cuda-vmm) every pool owns ONE expandable segment: a
//   large virtual range whose pages are mapped only where blocks need them. Free space never strands in
//   a separate segment, and a request that fits nowhere is placed where the fewest new pages are
//   needed, possibly spanning free mapped and unmapped blocks (Note [Expandable segments], expandable.cpp).
// - Pages are given back lazily (Note [Lazy page release], growth.cpp): mapped bytes may exceed peak
//   allocated bytes by release_slack (2%) plus a floor (2% of them, within a page..4 MiB); only when
//   mapping more would cross that budget are free pages given back, in as few pieces as possible (Note
//   [Release order], release.cpp). Eager release would hold ~1.03 x live but cost 10-10,000 x the
//   driver calls; never releasing gives PyTorch's 1.5 x.
//   The budget grows by up to 1% of live more where giving back would cost calls again and again: pools
//   that trade pages (Note [Release churn]), slots that grow at it (Note [A slot that grows at the
//   budget]) and tensors grown by concatenation (Note [A tensor that grows by concatenation]).
//   Mapping is done in runs (one source call per contiguous run), and growth at a segment's end maps an
//   eighth of the budget's headroom with it, and at least 20 MiB in all in the large pool (Note [Map
//   ahead]), so growth takes few calls; the rest absorbs fragmentation (Note [Splitting the headroom]).
// - Sources without map (cuda) get PyTorch's whole segments: 2 MiB for the small pool, 20 MiB for
//   requests below 10 MiB, the request rounded to 2 MiB above.
// - Stream-ordered reuse (Note [Stream-ordered reuse], stream_reuse.cpp): a block belongs to the stream
//   it was allocated on. record_stream adds streams; freeing such a block records one pooled event per
//   extra stream and the block returns to the free set only when they have all completed. Once every
//   stream that used it is done, the block is idle and any stream may take it (Note [Cross-stream reuse]).
// - Capacity and OOM (Note [Garbage collection]): reserved bytes never exceed the cap. When growth does
//   not fit, the allocator waits for pending events, gives back every free page and segment, and tries
//   once more (num_alloc_retries); then it throws OutOfMemory with requested, reserved, allocated,
//   largest free block and fragmentation. With gc_threshold set, free blocks older than gc_min_age are
//   given back before reserved bytes cross gc_threshold x cap.
// - Recent frees (Note [Recent frees]): a freed small block is parked unmerged in a tiny per-pool LIFO,
//   so the alloc/free pair of a loop that frees and reallocates one size skips the free set entirely.
//   Large blocks are merged and filed at once, so that best fit places them.
//
// Locking: one mutex guards all state. The fast path (parked block or best fit, split, table insert) is a
// few hundred instructions under it. Source calls are made without the lock: the blocks they concern are
// marked busy (out of every free set) first, and the result is folded in under the lock afterwards.
// (Stream events are queried under the lock, as PyTorch does; the destructor holds it throughout.)
// Clang checks these rules from annotations in allocator_impl.hpp (Note [Annotated lock rules]).
//
// Note [Observers]
// Every state change a profiler needs is reported to observers as one AllocEvent, from the thread that
// caused it; alloc/free events are emitted under the lock, so they are ordered with the state.
//
// Note [An observer added mid-run]
// An observer sees events from the moment it is added, but a profile started inside a running
// script (memcomm.profile around the loop, after the model, optimizer and data exist) would then
// miss every byte allocated before it: a run holding 72 MiB read as 4 MiB. So add_observer(o, true)
// first sends `o` the events that would have built the current state, at the current time: each
// segment (an expandable segment's virtual range, then a SegmentMap per run of mapped blocks), each
// block the user holds (Alloc), and each block freed but waiting on its streams (Alloc, then
// FreeRequested: its FreeCompleted comes as usual). It does so under the lock it adds the observer
// under, so no event falls between the state and the first live event, or comes twice.

#include <algorithm>
#include <cstdio>
#include <string>

#include "allocator_impl.hpp"

namespace memcomm::alloc {

std::string hex_address(std::uintptr_t p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(p));
  return buf;
}

// ---------------------------------------------------------------------------------------------
// Impl: construction and small helpers
// ---------------------------------------------------------------------------------------------

CachingAllocator::Impl::Impl(std::shared_ptr<MemorySource> src, AllocatorConfig cfg,
                             std::shared_ptr<StreamModel> stream_model)
    : source(std::move(src)),
      config(cfg),
      streams(stream_model ? std::move(stream_model) : std::make_shared<ImmediateStreams>()) {
  if (!source) throw AllocatorError("CachingAllocator: the memory source is null");
  if (config.min_block == 0) config.min_block = source->host_accessible() ? kHostMinBlock : kDeviceMinBlock;
  if (config.min_block < 64 || (config.min_block & (config.min_block - 1)) != 0)
    throw AllocatorError("CachingAllocator: min_block must be a power of two >= 64, got " +
                         std::to_string(config.min_block));
  page = source->granularity();
  if (page == 0 || page % config.min_block != 0)
    throw AllocatorError("CachingAllocator: source granularity " + std::to_string(page) +
                         " is not a multiple of min_block " + std::to_string(config.min_block));
  if (config.release_slack < 0 || config.map_ahead < 0 || config.map_ahead > 1 || config.gc_threshold < 0 ||
      config.gc_threshold > 1)
    throw AllocatorError("CachingAllocator: release_slack must be >= 0, map_ahead and gc_threshold in [0, 1]");
  cap = config.capacity;
  if (source->capacity() != 0 && (cap == 0 || cap > source->capacity())) cap = source->capacity();
  // Under `ulimit -v` a host range reserved ahead takes address space plain allocations need: whole
  // segments (Note [Address space for a segment] in expandable.cpp), unless a range size was asked for.
  expandable = config.expandable_segments && source->can_map() &&
               (config.virtual_size != 0 || !source->host_accessible() || !address_space_limited());
  device = source->device();
  budget = PageBudget(config.release_slack, config.release_floor, page);
  register_engine_lock(&mu);  // Note [Allocator locks across fork] (fork_locks.cpp)
}

CachingAllocator::Impl::~Impl() {
  unregister_engine_lock(&mu);
  try {
    release_everything();
  } catch (...) {
    // A destructor must not throw; a failing source at shutdown leaks its memory instead.
  }
  for (Block* b : block_free_list) delete b;
}

// Note [Rounding follows the memory]
// Unless the configuration names one, min_block is the rounding of the allocator memcomm stands in for.
// On a device it is PyTorch's CUDA allocator's 512 B: replays compare against it block for block, and
// kernels' vector loads want more than the 64 B alignment anyway. On the host it is 64 B, LibTorch's CPU
// alignment (DefaultCPUAllocator rounds no further: malloc's 16 B steps above it). CPU programs hold
// many tiny tensors -- scalars, indices, a loss per step -- and at 512 B each a million scalars took
// 1.85 x the resident memory they take under torch's own allocator, 1.19 x at 64 B (the rest is the
// Block each one needs, against malloc's 16 B header). A 512 B minimum buys the CPU nothing: its
// caches work in 64 B lines.
//
// Note [Pools and size classes]
// Every size is rounded up to min_block (Note [Rounding follows the memory]), and each stream has two
// pools: small (requests up to small_size, 1 MiB) and large. Small tensors come and go at a high rate
// and some live long (a scalar kept for the whole run); mixed into the large pool, one of them would pin
// a page in the middle of a large free range, which could then be neither reused whole nor unmapped.
// Kept apart, the small pool's pages fill with small blocks only, and a large free range stays one
// range. Within a pool a free block is split when the remainder is at least min_block (small) or
// min_large_split (large), which bounds a block's waste; in an expandable segment every remainder of
// min_block is split off (Note [Splitting in expandable segments]). PyTorch's max_split_size rule is kept as an option: blocks
// at or above it are never split for smaller requests, and an oversize request takes a cached block only
// if it wastes less than max_oversize_waste (fits()). The separation is a heuristic, not a rule worth an OOM: under a
// cap the other class is tried last (Note [Last resort: the other size class] in growth.cpp).
//
// Note [Splitting in expandable segments]
// In a whole segment, a large block keeps a remainder under min_large_split: split off, the sliver could
// serve no large request until a neighbour is freed, and it stays in the segment either way. In an
// expandable segment the remainder is split off whatever its size (from min_block, as PyTorch's
// should_split does with expandable segments). There it is free space at the edge of a window, next to
// other free or unmapped space: the next window starts in it (Note [Window choice]), so blocks placed one
// after another pack without a page's tail between them, and its page can go back to the budget when
// its neighbour is freed. Kept in the block, it is reserved waste for the block's whole life: ftcourse
// held 30 MiB of such remainders at its peak, nothanmin 24 MiB (bench/results/allocator-cpu.md).
// Alone, this moved decomfl's last growth to a size that map-ahead rounded up (Note [Map ahead]).
std::size_t CachingAllocator::Impl::round_size(std::size_t bytes) const {
  const std::size_t m = config.min_block;
  if (bytes > std::size_t(-1) - m) throw AllocatorError("allocate: size " + std::to_string(bytes) + " overflows");
  return (bytes + m - 1) & ~(m - 1);
}

Pool* CachingAllocator::Impl::pool_for(StreamId stream, bool small) {
  for (auto& p : pools)
    if (p->stream == stream && p->small == small) return p.get();
  for (auto& p : pools)
    if (p->stream != stream) multi_stream = true;
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

Segment* CachingAllocator::Impl::add_segment(std::uintptr_t base, std::size_t size, Pool* pool, bool expandable) {
  auto seg = std::make_unique<Segment>(&nodes);
  seg->base = base;
  seg->size = size;
  seg->pool = pool;
  seg->expandable = expandable;
  Block* b = new_block();
  b->addr = base;
  b->size = size;
  b->segment = seg.get();
  b->fresh = true;  // no stream has used it (Note [Cross-stream reuse])
  seg->head = b;
  segments.push_back(std::move(seg));
  stats.segment.increase(1);
  return segments.back().get();
}

Block* CachingAllocator::Impl::split_off(Block* b, std::uintptr_t at) {
  Block* r = new_block();
  r->addr = at;
  r->size = b->addr + b->size - at;
  r->segment = b->segment;
  r->prev = b;
  r->next = b->next;
  if (b->next) b->next->prev = r;
  b->next = r;
  b->size = at - b->addr;
  return r;
}

namespace {
// A mapped part cut from `whole` keeps its age and reuse history.
void inherit_mapped(Block* part, const Block* whole) {
  part->mapped = true;
  part->last_used = whole->last_used;
  part->idle = whole->idle;
  part->fresh = whole->fresh;
}
}  // namespace

Block* CachingAllocator::Impl::split_mapped_block(Block* b, std::uintptr_t at) {
  Block* r = split_off(b, at);
  inherit_mapped(r, b);
  return r;
}

inline Block* CachingAllocator::Impl::split_mapped_below(Block* b, std::uintptr_t at) {
  Block* a = new_block();
  a->addr = b->addr;
  a->size = at - b->addr;
  a->segment = b->segment;
  a->prev = b->prev;
  a->next = b;
  if (b->prev) b->prev->next = a;
  else b->segment->head = a;
  b->prev = a;
  b->addr = at;
  b->size -= a->size;
  inherit_mapped(a, b);
  return a;
}

Block* CachingAllocator::Impl::split_unmapped(Block* b, std::uintptr_t at) {
  Block* r = split_off(b, at);
  r->mapped = false;
  r->fresh = true;
  unmapped_insert(r);
  return r;
}

void CachingAllocator::Impl::delete_block(Block* b) {
  delete b->uses;
  b->uses = nullptr;
  block_free_list.push_back(b);
}

void CachingAllocator::Impl::count_backed(std::int64_t delta) {
  if (delta >= 0) stats.reserved_bytes.increase(delta);
  else stats.reserved_bytes.decrease(-delta);
  reserved_high_water = std::max(reserved_high_water, stats.reserved_bytes.current);
}

// The oversize rules (Note [Pools and size classes]) for serving `size` bytes from free block `b`.
bool CachingAllocator::Impl::fits(const Block* b, std::size_t size) const {
  const std::size_t max_split = config.max_split_size;
  if (size < max_split && b->size >= max_split) return false;  // never cut an oversize block for a normal request
  if (size >= max_split && b->size >= size + config.max_oversize_waste) return false;
  return true;
}

// Note [The growing end is taken last]
// In an expandable segment, a free block just below unmapped pages (a growing end: below the segment's
// unmapped top, or below a gap that page release left) is unlike a hole between live blocks: fresh
// pages extend it, so a request larger than any hole can still be served there by mapping just the
// difference. Cutting it for a request that fits a hole elsewhere spends that property and keeps the
// hole. So best fit judges a growing end by the size it could grow to, its own plus the unmapped pages
// above it, as PyTorch does with expandable segments: from the smallest free block that fits, it moves
// on to the next larger one while that one could grow to less. Below the segment's top that means any
// other block that fits; below a released gap, a block smaller than the two together. A growing end
// that the request fits exactly is taken at once: nothing of it is left to keep, and cutting a larger
// block instead would only add a split and a merge.
// On the shared snapshots this fills the holes a deep model's forward leaves between its kept
// activations (bolongcheng: 384 MiB of holes at the peak, 304 with the rule). The cost is that a small
// request may now take a hole that a later request would have fitted exactly, which is why the rule is
// close to a wash on the synthetic workloads (bench/results/allocator-cpu.md). Only expandable segments
// have unmapped blocks, so the test needs no look at the segment.
std::size_t CachingAllocator::Impl::grown_size(const Block* b) {
  return b->next != nullptr && !b->next->mapped ? b->size + b->next->size : b->size;
}

// Best fit in the pool, growing ends judged by the size they could grow to (Note [The growing end is
// taken last]).
FreeSet::iterator CachingAllocator::Impl::smallest_fit(Pool* pool, std::size_t size) const {
  Block key;
  key.size = size;
  key.addr = 0;
  const auto it = pool->free.lower_bound(&key);
  return it != pool->free.end() && fits(*it, size) ? it : pool->free.end();
}

Block* CachingAllocator::Impl::find_free(Pool* pool, std::size_t size) {
  const auto it = smallest_fit(pool, size);
  if (it == pool->free.end()) return nullptr;
  // No larger block grows to less (or there is no larger block).
  if ((*it)->size == size || grown_size(*it) == (*it)->size || *it == *pool->free.rbegin()) return *it;
  auto best = it;
  for (auto other = std::next(it); other != pool->free.end() && fits(*other, size); ++other) {
    if (grown_size(*other) >= grown_size(*best)) break;
    best = other;
  }
  return *best;
}

inline bool CachingAllocator::Impl::splits(const Block* b, std::size_t size) const {
  const std::size_t remaining = b->size - size;
  // See Note [Splitting in expandable segments].
  const std::size_t min_split =
      b->segment->pool->small || b->segment->expandable ? config.min_block : config.min_large_split;
  return remaining >= min_split && remaining > 0 && b->size < config.max_split_size;
}

Block* CachingAllocator::Impl::take(Block* b, std::size_t size, std::size_t requested, StreamId stream) {
  b->allocated = true;  // before splitting, so the remainder does not merge back into it
  if (splits(b, size)) free_insert(merge_free(split_mapped_block(b, b->addr + size)));
  b->allocated = true;
  b->idle = false;
  b->fresh = false;
  b->stream = stream;
  b->requested = requested;
  live.insert(b->addr, b);
  stats.allocation.increase(1);
  stats.active.increase(1);
  stats.allocated_bytes.increase(std::int64_t(b->size));
  stats.active_bytes.increase(std::int64_t(b->size));
  stats.requested_bytes.increase(std::int64_t(requested));
  if (b->size >= config.max_split_size) stats.oversize_allocations.increase(1);
  if (stats.allocated_bytes.current > allocated_high_water) {
    // Note [A repeated peak] (expandable.cpp): this climb is another iteration's.
    if (iteration_ended()) last_iteration_peak = allocated_high_water;
    allocated_high_water = allocated_low_since_high_water = stats.allocated_bytes.current;
  }
  emit(EventKind::Alloc, b->addr, b->size, requested, stream);
  return b;
}

// Note [Re-keying in place] (free_sets.cpp): `b` stays filed as the remainder, [addr + size, end), and
// the request gets a new block for [addr, addr + size) below it, the same layout take() makes.
Block* CachingAllocator::Impl::take_filed(Block* b, std::size_t size, std::size_t requested, StreamId stream) {
  if (!splits(b, size)) {
    free_erase(b);
    return take(b, size, requested, stream);
  }
  uncount_split(b);
  uncount_releasable(b);
  Block* a = split_mapped_below(b, b->addr + size);
  count_split(b);
  refile(b, /*grew=*/false);
  count_releasable(b);
  return take(a, size, requested, stream);
}

// A block the user freed whose stream events (if any) have completed.
void CachingAllocator::Impl::free_block(Block* b, bool park) {
  const std::uintptr_t addr = b->addr;
  const std::size_t size = b->size, requested = b->requested;  // the event says what was asked for, as its alloc did
  const StreamId stream = b->stream;
  stats.active.decrease(1);
  stats.active_bytes.decrease(std::int64_t(size));
  b->allocated = false;
  b->requested = 0;
  b->last_used = tick;
  delete b->uses;
  b->uses = nullptr;
  Pool* pool = b->segment->pool;
  if (!pool->small) pool->last_freed = size;  // Note [A tensor that grows by concatenation]
  if (!park || !pool->small) {  // Note [Recent frees]: large blocks are filed at once
    file_merged(b);
    emit(EventKind::FreeCompleted, addr, size, requested, stream);
    return;
  }
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
  emit(EventKind::FreeCompleted, addr, size, requested, stream);
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
    AllocatorLock lock(m.mu);
    ++m.tick;
    if (!m.frees.empty()) m.process_events_locked();
    pool = m.pool_for(stream, small);
    if (Block* b = m.take_recent(pool, size)) {
      b = m.take(b, size, bytes, stream);
      return reinterpret_cast<void*>(b->addr);
    }
    if (pool->n_recent) m.flush_recent();  // best fit sees the merged state
    Block* b = m.find_free(pool, size);
    // Another stream's idle block before growing (Note [Cross-stream reuse]).
    if (!b && m.multi_stream) b = m.find_idle(stream, small, size);
    if (b) {
      b = m.take_filed(b, size, bytes, stream);
      return reinterpret_cast<void*>(b->addr);
    }
  }
  Block* b = m.grow(pool, size, bytes);  // locks as needed; throws OutOfMemory
  return reinterpret_cast<void*>(b->addr);
}

void CachingAllocator::deallocate(void* ptr) {
  if (!ptr) return;
  Impl& m = *impl_;
  AllocatorLock lock(m.mu);
  ++m.tick;
  const auto addr = reinterpret_cast<std::uintptr_t>(ptr);
  Block** found = m.live.find(addr);
  if (!found)
    throw AllocatorError("deallocate(" + hex_address(addr) + "): not a live block of this allocator "
                         "(double free, a pointer from elsewhere, or not the start of a block)");
  Block* b = *found;
  m.live.erase(addr);
  const StreamId stream = b->stream;
  m.stats.allocation.decrease(1);
  m.stats.allocated_bytes.decrease(std::int64_t(b->size));
  if (m.stats.allocated_bytes.current < m.allocated_low_since_high_water)  // Note [A repeated peak]
    m.allocated_low_since_high_water = m.stats.allocated_bytes.current;
  m.stats.requested_bytes.decrease(std::int64_t(b->requested));
  if (b->size >= m.config.max_split_size) m.stats.oversize_allocations.decrease(1);
  m.emit(EventKind::FreeRequested, b->addr, b->size, b->requested, stream);
  // See Note [Stream-ordered reuse]: the memory may still be in use by work queued on other streams.
  if (m.defer_free(b)) return;
  m.free_block(b);
}

std::size_t CachingAllocator::block_size(const void* ptr) const {
  AllocatorLock lock(impl_->mu);
  Block** found = impl_->live.find(reinterpret_cast<std::uintptr_t>(ptr));
  if (!found) throw AllocatorError("block_size(" + hex_address(reinterpret_cast<std::uintptr_t>(ptr)) + "): not a live block");
  return (*found)->size;
}

std::size_t CachingAllocator::requested_size(const void* ptr) const {
  AllocatorLock lock(impl_->mu);
  Block** found = impl_->live.find(reinterpret_cast<std::uintptr_t>(ptr));
  if (!found)
    throw AllocatorError("requested_size(" + hex_address(reinterpret_cast<std::uintptr_t>(ptr)) + "): not a live block");
  return (*found)->requested;
}

}  // namespace memcomm::alloc
