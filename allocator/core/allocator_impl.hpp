// Private data structures of CachingAllocator (see Note [Caching allocator] in caching_allocator.cpp).
// Lock rules are annotations checked by clang (Note [Annotated lock rules] in thread_annotations.hpp):
// state under the lock is GUARDED_BY(mu), helpers that need it REQUIRES(mu), and the slow-path steps
// that call the source and lock by themselves EXCLUDES(mu).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

#include <pthread.h>

#include "memcomm/allocator/caching_allocator.hpp"
#include "expandable_arena.hpp"
#include "node_pool.hpp"
#include "page_budget.hpp"
#include "stream_frees.hpp"
#include "ptr_map.hpp"
#include "thread_annotations.hpp"

namespace memcomm::alloc {

// Note [Allocator lock]
// One lock guards the allocator's state, and its critical sections are a few hundred instructions.
// When two threads allocate at once, a plain std::mutex sends the loser to sleep in the kernel
// (futex) and wakes it when the holder is done: two system calls around a sub-microsecond wait.
// glibc's adaptive mutex first spins briefly in user space, which is what such short sections want:
// bench_allocator's alloc+free pair with 2 threads went from 122-209 ns to 108-110 ns (4 threads:
// 188-237 -> 78-113 ns), with one thread unchanged. It still sleeps when the holder is descheduled.
class CAPABILITY("mutex") AllocatorMutex {
 public:
  AllocatorMutex() {
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
#if defined(__GLIBC__)
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_ADAPTIVE_NP);
#endif
    pthread_mutex_init(&m_, &attr);
    pthread_mutexattr_destroy(&attr);
  }
  ~AllocatorMutex() { pthread_mutex_destroy(&m_); }
  AllocatorMutex(const AllocatorMutex&) = delete;
  AllocatorMutex& operator=(const AllocatorMutex&) = delete;
  void lock() ACQUIRE() { pthread_mutex_lock(&m_); }
  bool try_lock() TRY_ACQUIRE(true) { return pthread_mutex_trylock(&m_) == 0; }
  void unlock() RELEASE() { pthread_mutex_unlock(&m_); }

 private:
  pthread_mutex_t m_;
};

// std::lock_guard for AllocatorMutex, visible to clang's analysis (Note [Annotated lock rules]).
class SCOPED_CAPABILITY AllocatorLock {
 public:
  explicit AllocatorLock(AllocatorMutex& mu) ACQUIRE(mu) : mu_(mu) { mu_.lock(); }
  ~AllocatorLock() RELEASE() { mu_.unlock(); }
  AllocatorLock(const AllocatorLock&) = delete;
  AllocatorLock& operator=(const AllocatorLock&) = delete;

 private:
  AllocatorMutex& mu_;
};

struct Segment;
struct MapAheadInputs;
struct Pool;
struct Block;

// A pool's free blocks in best-fit order: by size, then address.
struct BlockBySize {
  inline bool operator()(const Block* a, const Block* b) const;
};
using FreeSet = std::set<Block*, BlockBySize, NodePoolAllocator<Block*>>;

// A contiguous piece of a segment. The blocks of a segment tile it in address order (prev/next).
struct Block {
  std::uintptr_t addr = 0;        // first byte
  std::size_t size = 0;           // bytes (multiple of min_block; of granularity when unmapped)
  std::size_t requested = 0;      // bytes the user asked for (allocated blocks)
  Block* prev = nullptr;          // neighbour below in the same segment
  Block* next = nullptr;          // neighbour above in the same segment
  Segment* segment = nullptr;     // owner
  std::uint64_t last_used = 0;    // allocator tick of its last free (age for GC and page release)
  std::vector<StreamId>* uses = nullptr;  // streams from record_stream (other than its user's), rarely set
  StreamId stream = 0;            // stream the user allocated it on (another pool's when borrowed)
  int pending_events = 0;         // events still to complete before a freed block is reusable
  bool allocated = false;         // handed to the user
  bool mapped = true;             // backed by the source (false only inside expandable segments)
  bool busy = false;              // taken out of the free sets while a source call works on it
  bool counted_split = false;     // counted in inactive_split when it entered the free set
  bool in_recent = false;         // parked unmerged in its pool's recent-free cache (Note [Recent frees])
  bool idle = false;              // free, and events proved every stream done with it: any stream may
                                  // take it (Note [Cross-stream reuse])
  bool fresh = false;             // never handed out since its pages were mapped (safe on any stream)
  bool filed = false;             // in its pool's free set (free_insert), at free_pos: taking it out
  FreeSet::iterator free_pos;     // needs no search
  std::size_t releasable_bytes = 0;  // what it could give back, counted while it is filed
  std::size_t releasable_slot = 0;   // where Impl::releasable_blocks lists it, if it could give any
};

// The reuse history of a merge of `a` and `b` (Note [Cross-stream reuse]): idle when both parts are
// idle or fresh and one of them is idle (fresh memory alone stays with its pool's stream).
inline void merge_history(Block* a, const Block* b) {
  a->idle = (a->idle || a->fresh) && (b->idle || b->fresh) && (a->idle || b->idle);
  a->fresh = a->fresh && b->fresh;
}

bool BlockBySize::operator()(const Block* a, const Block* b) const {
  return a->size != b->size ? a->size < b->size : a->addr < b->addr;
}

struct BlockByAddr {
  bool operator()(const Block* a, const Block* b) const { return a->addr < b->addr; }
};
// An expandable segment's unmapped blocks (Note [Finding a window's free blocks]); its nodes come from
// the free sets' NodePool (they are the same size), so growth does not call malloc for them either.
using UnmappedIndex = std::set<Block*, BlockByAddr, NodePoolAllocator<Block*>>;

// A whole segment from allocate(), or an expandable virtual range whose pages are mapped on demand.
struct Segment {
  explicit Segment(NodePool* nodes) : unmapped(BlockByAddr{}, NodePoolAllocator<Block*>(nodes)) {}
  std::uintptr_t base = 0;        // first byte
  std::size_t size = 0;           // bytes (virtual range size when expandable)
  std::size_t mapped_bytes = 0;   // bytes backed now (== size for whole segments)
  Pool* pool = nullptr;           // owner
  Block* head = nullptr;          // lowest block
  bool expandable = false;        // reserve/map segment
  UnmappedIndex unmapped;         // its unmapped blocks, busy ones included (empty for whole segments)
};

// Free blocks of one stream and size class (small <= small_size, large above).
struct Pool {
  Pool(StreamId stream, bool small, NodePool* nodes)
      : stream(stream), small(small), free(BlockBySize{}, NodePoolAllocator<Block*>(nodes)) {}
  StreamId stream;                        // blocks here are used on this stream
  bool small;                             // small pool (requests <= small_size) or large
  ChurnRecord churn;                      // what the page budget took from it (Note [Release churn])
  std::size_t last_freed = 0;             // size of the block freed last, large pools only (Note [A
                                          // tensor that grows by concatenation], expandable.cpp)
  FreeSet free;                           // mapped free blocks, best fit = lower_bound(size)
  static constexpr std::size_t kRecent = 8;
  Block* recent[kRecent] = {};            // freed blocks parked unmerged, oldest first; small pools only
                                          // (Note [Recent frees])
  std::size_t n_recent = 0;               // entries of recent in use
  Segment* expandable = nullptr;          // the pool's one growing virtual range, if any
  std::vector<Segment*> segments;         // whole segments of this pool
};


// Free for the slow path: not handed out, not waiting for events, not parked, not in a source call.
inline bool is_free(const Block* b) {
  return !b->allocated && !b->busy && b->pending_events == 0 && !b->in_recent;
}

// Note [Allocator locks across fork] (fork_locks.cpp): every live engine's lock is held across fork().
void register_engine_lock(AllocatorMutex* mu);
void unregister_engine_lock(AllocatorMutex* mu);
// A call into a memory source in flight, which runs without the engine's lock: fork() waits until
// none is (Note [Allocator locks across fork]). Scopes never nest, and none takes an engine's lock.
class SourceCallScope {
 public:
  SourceCallScope();
  ~SourceCallScope();
  SourceCallScope(const SourceCallScope&) = delete;
  SourceCallScope& operator=(const SourceCallScope&) = delete;
};

struct CachingAllocator::Impl {
  Impl(std::shared_ptr<MemorySource> src, AllocatorConfig cfg, std::shared_ptr<StreamModel> streams);
  ~Impl();

  // --- configuration and collaborators (set by the constructor, read-only afterwards) ---
  std::shared_ptr<MemorySource> source;
  AllocatorConfig config;
  std::shared_ptr<StreamModel> streams;
  std::size_t page = 0;                  // source granularity
  std::size_t cap = 0;                   // reserved bytes at most (0 = none)
  bool expandable = false;               // use reserve/map
  int device = -1;                       // for events

  // --- state, all under mu ---
  mutable AllocatorMutex mu;  // Note [Allocator lock]
  NodePool nodes GUARDED_BY(mu);         // set nodes for every FreeSet
  std::vector<std::unique_ptr<Pool>> pools GUARDED_BY(mu);
  std::vector<std::unique_ptr<Segment>> segments GUARDED_BY(mu);
  PtrMap<Block*> live GUARDED_BY(mu);    // allocated blocks by address
  std::vector<Block*> block_free_list GUARDED_BY(mu);  // recycled Block objects
  StreamOrderedFrees frees GUARDED_BY(mu){streams};  // frees waiting for events (stream_frees.hpp)
  DeviceStats stats GUARDED_BY(mu);
  std::uint64_t tick GUARDED_BY(mu) = 0;                 // operations so far (ages)
  std::int64_t allocated_high_water GUARDED_BY(mu) = 0;  // largest allocated bytes since the start or the last
                                                         // empty_cache (page budget; Note [Emptying the cache
                                                         // forgets the high water])
  std::int64_t allocated_low_since_high_water GUARDED_BY(mu) = 0;  // least allocated bytes since the high
                                                                   // water last rose (Note [A repeated peak])
  std::int64_t last_iteration_peak GUARDED_BY(mu) = 0;  // the last high water that live bytes then fell
                                                        // below half of (Note [A repeated peak])
  std::int64_t reserved_high_water GUARDED_BY(mu) = 0;   // largest reserved bytes since the start or the
                                                         // last empty_cache (Note [Map-ahead in a trough])
  PageBudget budget GUARDED_BY(mu){0.0, 0, 1};           // Note [Lazy page release]; set up by the constructor
  std::vector<Observer*> observers GUARDED_BY(mu);
  std::atomic<bool> has_observers{false};  // observers is not empty (read without the lock by emit)
  bool multi_stream GUARDED_BY(mu) = false;  // pools of two or more streams exist (Note [Cross-stream reuse])
  // Filed blocks that could give memory back, and the bytes they could give (Note [Counting releasable bytes]).
  std::vector<Block*> releasable_blocks GUARDED_BY(mu);
  std::size_t releasable_total GUARDED_BY(mu) = 0;

  // --- helpers (caching_allocator.cpp, free_sets.cpp); all with mu held ---
  std::size_t round_size(std::size_t bytes) const;
  Pool* pool_for(StreamId stream, bool small) REQUIRES(mu);
  Block* new_block() REQUIRES(mu);
  void delete_block(Block* b) REQUIRES(mu);
  // A new segment of `pool` over [base, base + size), owned by `segments` and counted, whose one block
  // (its head, fresh) covers it; mapped unless `expandable`. The caller files the block.
  Segment* add_segment(std::uintptr_t base, std::size_t size, Pool* pool, bool expandable) REQUIRES(mu);
  // Cuts `b` at `at` (inside it): `b` keeps [addr, at); the returned new block, [at, end) of the same
  // segment, is linked after it, in none of the free sets, every other field at its default.
  Block* split_off(Block* b, std::uintptr_t at) REQUIRES(mu);
  // Cuts mapped block `b` at `at` (inside it): `b` keeps [addr, at), the returned new block gets
  // [at, end), linked after it in the segment and in none of the free sets.
  Block* split_mapped_block(Block* b, std::uintptr_t at) REQUIRES(mu);
  // The other way round: the returned new block gets [addr, at), linked before `b`, which keeps
  // [at, end) and its place in a free set, if filed (Note [Re-keying in place]). Inline in
  // caching_allocator.cpp, its only user.
  Block* split_mapped_below(Block* b, std::uintptr_t at) REQUIRES(mu);
  // The same for an unmapped block: the tail stays unmapped and counts as never handed out.
  Block* split_unmapped(Block* b, std::uintptr_t at) REQUIRES(mu);
  void free_insert(Block* b) REQUIRES(mu);
  void free_erase(Block* b) REQUIRES(mu);
  // A filed block whose size or address changed (its key grew or shrank): moved in its set only if the
  // key no longer sorts between its neighbours' (Note [Re-keying in place]).
  void refile(Block* b, bool grew) REQUIRES(mu);
  // Merges a freed block with free neighbours and files the result (Note [Re-keying in place]).
  void file_merged(Block* b) REQUIRES(mu);
  // Joins `gone`, a neighbour of `keep` on either side, into `keep` and deletes it; `keep` stays in
  // whatever set or index holds it, with its key changed. Inline in free_sets.cpp, its only user.
  void absorb(Block* keep, Block* gone) REQUIRES(mu);
  // Segment::unmapped follows a block that becomes unmapped, or mapped, or is merged away while unmapped.
  void unmapped_insert(Block* b) REQUIRES(mu) { b->segment->unmapped.insert(b); }
  void unmapped_erase(Block* b) REQUIRES(mu) { b->segment->unmapped.erase(b); }
  bool fits(const Block* b, std::size_t size) const;  // the oversize rules allow b for size
  Block* find_free(Pool* pool, std::size_t size) REQUIRES(mu);
  // The smallest free block of `pool` that may serve `size` (best fit by size alone), or free.end().
  FreeSet::iterator smallest_fit(Pool* pool, std::size_t size) const REQUIRES(mu);
  static std::size_t grown_size(const Block* b);  // its size plus the unmapped pages just above it
  // The same stream's pool of the other size class, or null while it has none (growth.cpp).
  Pool* other_class(const Pool* pool) const REQUIRES(mu);
  // A free block for `size` in other_class(pool), by find_free's rule (growth.cpp).
  Block* find_in_other_class(Pool* pool, std::size_t size) REQUIRES(mu);
  // The whole segment grow_whole() makes for a request of `size` in `pool` (growth.cpp).
  std::size_t whole_segment(const Pool* pool, std::size_t size) const;
  // Hands out `b` (out of the free sets, mapped) for `size` bytes to `stream`, splitting off the rest.
  Block* take(Block* b, std::size_t size, std::size_t requested, StreamId stream) REQUIRES(mu);
  // The same for a block still filed in its free set: the remainder keeps the set's node when it can
  // (Note [Re-keying in place]).
  Block* take_filed(Block* b, std::size_t size, std::size_t requested, StreamId stream) REQUIRES(mu);
  // Whether take() splits the rest of `b` off for `size` (inline in caching_allocator.cpp, its only user).
  bool splits(const Block* b, std::size_t size) const;
  // Back into the pool's free memory: parked (Note [Recent frees]: small pools only), or filed merged
  // when `park` is false or the block is large.
  void free_block(Block* b, bool park = true) REQUIRES(mu);
  void count_split(Block* b) REQUIRES(mu);
  void uncount_split(Block* b) REQUIRES(mu);
  // A filed block's releasable bytes in and out of releasable_total, around any change of its key or
  // neighbours (Note [Counting releasable bytes]).
  void count_releasable(Block* b) REQUIRES(mu);
  void uncount_releasable(Block* b) REQUIRES(mu);
  Block* take_recent(Pool* pool, std::size_t size) REQUIRES(mu);
  void flush_recent() REQUIRES(mu);
  Block* merge_free(Block* b) REQUIRES(mu);
  // --- stream-ordered reuse (stream_reuse.cpp; the waiting frees themselves: stream_frees.hpp) ---
  // Files the frees whose events have completed.
  void process_events_locked() REQUIRES(mu);
  // Waits for every pending free's events and files them all (the OOM retry, empty_cache).
  void synchronize_pending() REQUIRES(mu);
  // Queues a freed block behind events (record_stream uses, or a borrowed block); false when the
  // block needs none and is free at once.
  bool defer_free(Block* b) REQUIRES(mu);
  // Best fit among other streams' idle free blocks (Note [Cross-stream reuse]).
  Block* find_idle(StreamId stream, bool small, std::size_t size) REQUIRES(mu);
  // Best fit among other streams' free blocks of the size class; its owner stream is waited for and
  // its pool's free blocks made idle (Note [Lending before giving pages back]). Null if none fits.
  Block* lend_after_sync(StreamId stream, bool small, std::size_t size) REQUIRES(mu);
  void emit(EventKind kind, std::uintptr_t addr, std::size_t size, std::size_t requested, StreamId stream,
            std::uint8_t flags = 0) REQUIRES(mu) {
    if (has_observers.load(std::memory_order_relaxed)) emit_slow(kind, addr, size, requested, stream, flags);
  }
  void emit_slow(EventKind kind, std::uintptr_t addr, std::size_t size, std::size_t requested, StreamId stream,
                 std::uint8_t flags) REQUIRES(mu);
  AllocEvent event(std::uint64_t t, EventKind kind, std::uintptr_t addr, std::size_t size, std::size_t requested,
                   StreamId stream, std::uint8_t flags) const;
  // Sends `o` the events that would have built the current state (Note [An observer added mid-run]).
  void describe_state(Observer& o) const REQUIRES(mu);
  void count_backed(std::int64_t delta) REQUIRES(mu);

  // The allocated high water if a request of `size` bytes were handed out now (what the page budget
  // is computed from during a growth).
  std::int64_t high_water_with(std::size_t size) const REQUIRES(mu) {
    return std::max<std::int64_t>(allocated_high_water, stats.allocated_bytes.current + std::int64_t(size));
  }

  // --- growth and release (growth.cpp, expandable.cpp, release.cpp) ---
  // These call the source, so they take mu themselves around their locked steps.
  Block* grow(Pool* pool, std::size_t size, std::size_t requested) EXCLUDES(mu);
  // exact: map only the request's own pages, no map-ahead (Note [Feasibility is monotonic in the cap]).
  Block* grow_expandable(Pool* pool, std::size_t size, std::size_t requested, bool exact = false) EXCLUDES(mu);
  Block* grow_whole(Pool* pool, std::size_t size, std::size_t requested) EXCLUDES(mu);
  // Gives back free memory until at most `target` bytes stay reserved (0 = everything free), in the
  // order of Note [Release order], skipping blocks younger than min_age ticks. Returns bytes given back.
  std::size_t release_free(std::size_t target, std::uint64_t min_age, bool count_gc) EXCLUDES(mu);
  Segment* ensure_expandable(Pool* pool) EXCLUDES(mu);
  // Virtual bytes per expandable segment when config.virtual_size is 0 (Note [Address space for a
  // segment]).
  std::size_t default_virtual_size() const;
  // The process's address space is limited (`ulimit -v`: a finite RLIMIT_AS); Note [Address space for a segment].
  static bool address_space_limited();
  // Reserves an expandable segment's address space; `vsize` is what was reserved (Note [Address
  // space for a segment]).
  void* reserve_segment_space(std::size_t& vsize) EXCLUDES(mu);
  void release_everything() EXCLUDES(mu);
  // Page release in three steps so no source call runs under mu: pick (locked) marks pieces busy,
  // run (unlocked) calls the source, finish (locked) folds the result in.
  struct Releases {
    std::vector<Block*> pieces;     // page-aligned pieces of free expandable blocks to unmap
    std::vector<Segment*> whole;    // free whole segments to deallocate
    std::size_t bytes = 0;          // total bytes they give back
  };
  // `whole`: each block picked gives all its interior pages, not only what is still wanted (Note
  // [A block gives back all its pages], release.cpp).
  void pick_releases(std::size_t want, std::uint64_t min_age, Releases& out, bool whole = false) REQUIRES(mu);
  void run_releases(Releases& r) EXCLUDES(mu);
  void finish_releases(Releases& r, bool count_gc) REQUIRES(mu);
  void unpick_releases(Releases& r) REQUIRES(mu);
  void restore_window(std::vector<Block*>& window) REQUIRES(mu);
  std::size_t largest_free_locked() const REQUIRES(mu);
  std::size_t releasable_locked() const REQUIRES(mu) { return releasable_total; }
  std::size_t releasable(const Block* b) const REQUIRES(mu);  // what one free block can give back

  // --- one growth of an expandable segment, step by step (expandable.cpp) ---
  // A window decision and the free block behind each range it ranked (decide_window).
  struct WindowChoice {
    WindowDecision decision;
    std::vector<Block*> blocks;
  };
  // What the steps hand on: claimed under mu, mapped without it, folded in under mu again.
  struct WindowGrowth {
    Segment* seg = nullptr;         // the pool's expandable range
    std::uintptr_t start = 0;       // first byte of the request
    std::vector<Block*> window;     // blocks making up the window, address order, all busy
    std::vector<Block*> to_map;     // its unmapped blocks, cut to the pages to map
    std::size_t need = 0;           // bytes of to_map
    Releases rel;                   // free pages given back to make room
  };
  // Claims the blocks of the window `choice` chose (decide_window's for this segment and size, made
  // under the same hold of mu; Note [Window choice]): busy, unmapped ones cut at page boundaries to the
  // pages the window and map-ahead need. False when no run of free blocks holds the request.
  bool claim_window(Pool* pool, std::size_t size, const WindowChoice& choice, WindowGrowth& g) REQUIRES(mu);
  // The window for `size` bytes in `seg`, with the free block behind each range it ranked.
  WindowChoice decide_window(const Segment* seg, std::size_t size) REQUIRES(mu);
  // Whether growing for `size` bytes into window `d` would have to give pages back first: the page
  // budget (or the cap) leaves no room for its pages.
  bool growth_gives_back(const WindowDecision& d, std::size_t size) REQUIRES(mu);
  // What reserved bytes may reach under high water `hw` before growth gives pages back: the page
  // budget's limit, or the cap when it is lower.
  std::size_t capped_limit(std::int64_t hw) const REQUIRES(mu) {
    return cap ? std::min(budget.limit(hw), cap) : budget.limit(hw);
  }
  // The blocks, in address order, of every run of touching free blocks of expandable segment `seg`
  // that may hold `size` bytes, found without visiting its other blocks
  // (Note [Finding a window's free blocks]).
  std::vector<Block*> candidate_runs(const Segment* seg, std::size_t size) REQUIRES(mu);
  // Gives back the pages claim_window added past the request's last page (map-ahead, a segment's
  // worth), so that g.to_map holds only the pages the request itself needs (growth.cpp).
  void trim_to_request(WindowGrowth& g, std::size_t size) REQUIRES(mu);
  // See Note [Map ahead]: bytes to map past the window's end inside an unmapped block whose first
  // `piece` bytes the window maps anyway.
  std::size_t map_ahead_for(Pool* pool, std::size_t size, std::size_t window_need, std::size_t piece) REQUIRES(mu);
  // The medium-segment minimum of a large-pool growth, within the budget's ceiling (Note [Map-ahead's
  // minimum at the budget]); a slot's teaches the allowance (Note [A slot that grows at the budget]).
  std::size_t medium_minimum(Pool* pool, std::size_t size, std::int64_t hw, std::int64_t held, std::size_t window_need,
                             const MapAheadInputs& in) REQUIRES(mu);
  // Whether live bytes with a request of `size` are below the high water by more than the page budget's
  // headroom for high water `hw` (Note [Map-ahead in a trough]).
  bool in_trough(std::int64_t hw, std::size_t size) const REQUIRES(mu);
  // How far map-ahead may raise reserved bytes for this growth (Note [Map-ahead in a trough]).
  double trough_room(std::int64_t hw, std::size_t size, std::size_t window_need) const REQUIRES(mu);
  // Whether live bytes are climbing with nothing left free behind them (Note [Map-ahead on a ramp]).
  bool on_ramp(std::int64_t hw) const REQUIRES(mu);
  // The free bytes under which growth reads a ramp for high water `hw` (Note [Map-ahead on a ramp]).
  double ramp_free_limit(std::int64_t hw) const REQUIRES(mu);
  // Whether the large pool holds (almost) no free block outside the window being grown, so that a
  // medium growth may map a whole medium segment ahead (Note [A medium ramp maps whole pages]).
  bool pool_on_ramp(const Pool* pool, std::int64_t hw) const REQUIRES(mu);
  // Whether a request of `size` takes live bytes past the last iteration's peak by less than the page
  // budget's headroom (Note [A repeated peak]).
  bool repeats_peak(std::size_t size) const REQUIRES(mu);
  // Whether live bytes fell below half their high water since it last rose: an iteration ended
  // (Note [A repeated peak]).
  bool iteration_ended() const REQUIRES(mu) { return 2 * allocated_low_since_high_water < allocated_high_water; }
  // Whether a request of `size` is a tensor grown by concatenation: a large one at most a page larger
  // than the block its pool freed last (Note [A tensor that grows by concatenation]).
  bool grows_last_freed(const Pool* pool, std::size_t size) const REQUIRES(mu);
  // Picks free pages to give back so the window's pages fit the page budget and the cap (Note [Lazy
  // page release], Note [Release churn], Note [A tensor that grows by concatenation]); false when even
  // everything free would not fit under the cap.
  bool make_room(Pool* pool, std::size_t size, WindowGrowth& g) REQUIRES(mu);
  // Maps the blocks in order, stopping at the first refusal or exception (kept in `error`); returns
  // how many were mapped (Note [A map that fails partway]).
  std::size_t map_pieces(const std::vector<Block*>& to_map, std::exception_ptr& error) EXCLUDES(mu);
  // Counts, reports and marks mapped the first `mapped` blocks of g.to_map.
  void commit_maps(Pool* pool, WindowGrowth& g, std::size_t mapped) REQUIRES(mu);
  // Folds the mapped window into one block and hands out the request from it.
  Block* take_window(WindowGrowth& g, std::size_t size, std::size_t requested) REQUIRES(mu);
};

}  // namespace memcomm::alloc
