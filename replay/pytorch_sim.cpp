// Note [PyTorch simulation]
// A small, separate engine that makes the same decisions as PyTorch 2.x's DeviceCachingAllocator
// (c10/cuda/CUDACachingAllocator.cpp) with default settings, so replays can compare against it:
//  * Sizes round up to 512 B. Requests <= 1 MiB use the small pool, larger ones the large pool.
//  * A cache miss allocates a segment: 2 MiB for the small pool, 20 MiB for requests < 10 MiB,
//    else the size rounded up to 2 MiB.
//  * Best fit: the free set is ordered by (stream, size, address), so a request takes the smallest
//    free block on its own stream that fits; blocks never move between streams.
//  * Split: small-pool blocks split when the remainder is >= 512 B; large-pool blocks when the
//    remainder is > 1 MiB and the request is below max_split_size. Freed blocks merge with free
//    neighbours in the same segment.
//  * Oversize (max_split_size set): requests below it never take a block at or above it; larger
//    requests take a cached block only if it wastes < 20 MiB; on a miss, oversize free blocks are
//    released first (release_available_cached_blocks).
//  * Under a cap, a failed cudaMalloc frees every unsplit cached segment (and unmaps every free
//    page of expandable segments) and retries once before reporting OOM.
//  * Expandable segments (expandable_segments:True): one huge virtual range per (stream, pool),
//    mapped on demand in pages of 2 MiB (small pool) or 20 MiB (large pool), as the traces show.
//    A request looks for the lowest unmapped range on its stream that, together with a free block
//    just before it, has room; maps the pages it needs (one map call per run) and merges. Free pages
//    stay mapped until the cache is emptied. In best fit, a block at the growing end of a segment is
//    judged by the size it could grow to, so blocks that cannot grow are preferred.
// Addresses are fake (a bump pointer); nothing is touched.
#include <cassert>
#include <deque>
#include <set>
#include <stdexcept>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "memcomm/replay/pytorch_sim.hpp"

namespace memcomm::replay {
namespace {

using u64 = std::uint64_t;

constexpr u64 kMinBlockSize = 512;            // every size rounds up to this
constexpr u64 kSmallSize = 1u << 20;          // largest small-pool request
constexpr u64 kSmallBuffer = 2u << 20;        // small-pool segment / expandable small page
constexpr u64 kLargeBuffer = 20u << 20;       // segment for 1-10 MiB requests / expandable large page
constexpr u64 kMinLargeAlloc = 10u << 20;     // requests at or above get their own rounded segment
constexpr u64 kRoundLarge = 2u << 20;         // rounding of those segments
constexpr u64 kExpandableVirtual = u64{1} << 40;  // virtual bytes reserved per expandable segment

u64 round_up(u64 x, u64 m) { return (x + m - 1) / m * m; }

struct Pool;

struct ExpandableSegment {
  u64 base = 0;    // start of the virtual range
  u64 size = 0;    // bytes of virtual range
  u64 page = 0;    // map granularity
  u64 mapped = 0;  // bytes mapped now
};

struct Blk {
  u64 addr = 0;
  u64 size = 0;
  u64 requested = 0;                // bytes asked for while allocated
  std::int64_t stream = 0;
  Blk* prev = nullptr;              // neighbours within the segment (address order)
  Blk* next = nullptr;
  Pool* pool = nullptr;
  ExpandableSegment* es = nullptr;  // non-null inside an expandable segment
  bool allocated = false;
  bool mapped = true;               // false: unmapped virtual range (expandable only)
  bool live = false;                // slot in use (storage bookkeeping)
};

struct BySize {  // PyTorch's BlockComparatorSize
  bool operator()(const Blk* a, const Blk* b) const {
    if (a->stream != b->stream) return static_cast<u64>(a->stream) < static_cast<u64>(b->stream);
    if (a->size != b->size) return a->size < b->size;
    return a->addr < b->addr;
  }
};
struct ByAddr {  // PyTorch's BlockComparatorAddress
  bool operator()(const Blk* a, const Blk* b) const {
    if (a->stream != b->stream) return static_cast<u64>(a->stream) < static_cast<u64>(b->stream);
    return a->addr < b->addr;
  }
};

struct Pool {
  bool small = false;
  std::set<Blk*, BySize> blocks;    // free mapped blocks
  std::set<Blk*, ByAddr> unmapped;  // free unmapped ranges of expandable segments
};

class PyTorchSim final : public Policy {
 public:
  explicit PyTorchSim(const PyTorchSimConfig& cfg) : cfg_(cfg) {
    small_.small = true;
    active_.reserve(1024);
  }
  ~PyTorchSim() override {
    for (ExpandableSegment* es : segments_) delete es;
  }

  std::string name() const override { return cfg_.expandable_segments ? "pytorch-expandable" : "pytorch"; }

  std::optional<u64> allocate(u64 orig, std::int64_t stream) override {
    const u64 size = orig < kMinBlockSize ? kMinBlockSize : round_up(orig, kMinBlockSize);
    Pool& pool = size <= kSmallSize ? small_ : large_;
    const u64 alloc_size = size <= kSmallSize ? kSmallBuffer : size < kMinLargeAlloc ? kLargeBuffer : round_up(size, kRoundLarge);
    Blk* b = get_free_block(pool, stream, size);
    if (!b) {
      b = alloc_block(pool, stream, size, alloc_size);
      if (!b && release_available_cached_blocks(pool, stream, size)) b = alloc_block(pool, stream, size, alloc_size);
      if (!b) {
        ++stats_.retries;
        release_cached_blocks();
        b = alloc_block(pool, stream, size, alloc_size);
      }
      if (!b) return std::nullopt;
    }
    if (should_split(b, size)) {
      Blk* rem = new_blk(b->addr + size, b->size - size, b->stream, &pool, b->es, true);
      rem->prev = b;
      rem->next = b->next;
      if (b->next) b->next->prev = rem;
      b->next = rem;
      b->size = size;
      pool.blocks.insert(rem);
    }
    b->allocated = true;
    b->requested = orig;
    stats_.allocated += b->size;
    if (stats_.allocated > stats_.peak_allocated) stats_.peak_allocated = stats_.allocated;
    active_.emplace(b->addr, b);
    return b->addr;
  }

  void free(u64 addr) override {
    auto it = active_.find(addr);
    if (it == active_.end()) throw std::logic_error(fmt::format("{}: free of unknown address 0x{:x}", name(), addr));
    Blk* b = it->second;
    active_.erase(it);
    b->allocated = false;
    stats_.allocated -= b->size;
    Pool& pool = *b->pool;
    try_merge(b, b->prev, pool);
    try_merge(b, b->next, pool);
    pool.blocks.insert(b);
  }

  PolicyStats stats() const override { return stats_; }

  void check_invariants() const override;

 private:
  bool should_split(const Blk* b, u64 size) const {
    const u64 remaining = b->size - size;
    if (b->pool->small || cfg_.expandable_segments) return remaining >= kMinBlockSize;
    return size < cfg_.max_split_size && remaining > kSmallSize;
  }

  Blk* get_free_block(Pool& pool, std::int64_t stream, u64 size) {
    Blk key;
    key.stream = stream;
    key.size = size;
    auto it = pool.blocks.lower_bound(&key);
    if (it == pool.blocks.end() || (*it)->stream != stream) return nullptr;
    if ((*it)->es) {
      // A block at the growing end of an expandable segment counts as the size it could grow to.
      auto expandable_size = [](const Blk* b) { return b->size + (b->next && !b->next->mapped ? b->next->size : 0); };
      auto next = std::next(it);
      while ((*it)->es && next != pool.blocks.end() && (*next)->stream == stream &&
             expandable_size(*next) < expandable_size(*it)) {
        it = next++;
      }
    }
    if (size < cfg_.max_split_size && (*it)->size >= cfg_.max_split_size) return nullptr;
    if (size >= cfg_.max_split_size && (*it)->size >= size + kLargeBuffer) return nullptr;
    Blk* b = *it;
    pool.blocks.erase(it);
    return b;
  }

  Blk* alloc_block(Pool& pool, std::int64_t stream, u64 size, u64 alloc_size) {
    if (cfg_.expandable_segments) return try_allocate_expandable_block(pool, stream, size);
    if (cfg_.capacity && stats_.reserved + alloc_size > cfg_.capacity) return nullptr;
    Blk* b = new_blk(next_addr_, alloc_size, stream, &pool, nullptr, true);
    next_addr_ += round_up(alloc_size, kRoundLarge);
    add_reserved(alloc_size);
    ++stats_.source_allocs;
    return b;
  }

  // --- expandable segments ---
  static bool allocatable(const Blk* b) { return b && !b->allocated; }

  Blk* find_expandable_block(Pool& pool, std::int64_t stream, u64 size) {
    auto has_room = [&](const Blk* b) {
      u64 bytes = 0;
      while (bytes < size && allocatable(b)) {
        bytes += b->size;
        b = b->next;
      }
      return bytes >= size;
    };
    Blk key;
    key.stream = stream;
    for (auto it = pool.unmapped.lower_bound(&key); it != pool.unmapped.end() && (*it)->stream == stream; ++it) {
      Blk* c = *it;
      if (allocatable(c->prev)) c = c->prev;  // a free block just before the range can be used too
      if (has_room(c)) return c;
    }
    auto* es = new ExpandableSegment{next_addr_, kExpandableVirtual, pool.small ? kSmallBuffer : kLargeBuffer, 0};
    segments_.insert(es);
    next_addr_ += kExpandableVirtual;
    Blk* c = new_blk(es->base, es->size, stream, &pool, es, false);
    pool.unmapped.insert(c);
    return c;
  }

  Blk* try_allocate_expandable_block(Pool& pool, std::int64_t stream, u64 size) {
    Blk* c = find_expandable_block(pool, stream, size);
    if (!c->mapped && !map_block(c, std::min(c->size, size))) return nullptr;
    while (c->size < size) {  // free -> unmapped -> ...: map what is still missing and merge
      Blk* nc = c->next;
      if (!nc || nc->mapped) throw std::logic_error("pytorch-expandable: expected an unmapped range after a free block");
      if (!map_block(nc, std::min(size - c->size, nc->size))) return nullptr;
      c = nc;
    }
    c->pool->blocks.erase(c);
    return c;
  }

  bool map_block(Blk* b, u64 size) {
    ExpandableSegment* es = b->es;
    const u64 begin = b->addr - es->base;
    if (begin % es->page) throw std::logic_error("pytorch-expandable: unmapped range is not page aligned");
    const u64 bytes = round_up(begin + size, es->page) - begin;
    if (cfg_.capacity && stats_.reserved + bytes > cfg_.capacity) return false;
    Pool& pool = *b->pool;
    pool.unmapped.erase(b);
    b->mapped = true;
    if (bytes < b->size) {
      Blk* rem = new_blk(b->addr + bytes, b->size - bytes, b->stream, &pool, es, false);
      rem->prev = b;
      rem->next = b->next;
      if (b->next) b->next->prev = rem;
      b->next = rem;
      b->size = bytes;
      pool.unmapped.insert(rem);
    }
    try_merge(b, b->prev, pool);
    try_merge(b, b->next, pool);
    pool.blocks.insert(b);
    es->mapped += bytes;
    add_reserved(bytes);
    ++stats_.source_allocs;
    return true;
  }

  void unmap_block(Blk* b) {
    ExpandableSegment* es = b->es;
    const u64 lo = es->base + round_up(b->addr - es->base, es->page);
    const u64 hi = es->base + (b->addr + b->size - es->base) / es->page * es->page;
    if (lo >= hi) return;
    Pool& pool = *b->pool;
    pool.blocks.erase(b);
    if (lo > b->addr) {  // partial page before: stays mapped and free
      Blk* before = new_blk(b->addr, lo - b->addr, b->stream, &pool, es, true);
      before->prev = b->prev;
      before->next = b;
      if (b->prev) b->prev->next = before;
      b->prev = before;
      pool.blocks.insert(before);
    }
    if (b->addr + b->size > hi) {  // partial page after
      Blk* after = new_blk(hi, b->addr + b->size - hi, b->stream, &pool, es, true);
      after->prev = b;
      after->next = b->next;
      if (b->next) b->next->prev = after;
      b->next = after;
      pool.blocks.insert(after);
    }
    b->addr = lo;
    b->size = hi - lo;
    b->mapped = false;
    try_merge(b, b->prev, pool);
    try_merge(b, b->next, pool);
    pool.unmapped.insert(b);
    es->mapped -= hi - lo;
    stats_.reserved -= hi - lo;
    ++stats_.source_frees;
  }

  // --- cache release ---
  bool release_available_cached_blocks(Pool& pool, std::int64_t stream, u64 size) {
    if (cfg_.max_split_size == std::numeric_limits<u64>::max()) return false;
    Blk key;
    key.stream = stream;
    key.size = size < cfg_.max_split_size ? cfg_.max_split_size : size;
    auto it = pool.blocks.lower_bound(&key);
    if (it == pool.blocks.end() || (*it)->stream != stream || (*it)->es) {
      // No single block is large enough: free oversize blocks, largest first.
      if (it == pool.blocks.begin()) return false;
      u64 released = 0;
      --it;
      while (released < key.size && (*it)->size >= cfg_.max_split_size && (*it)->stream == stream) {
        auto cur = it;
        const bool first = cur == pool.blocks.begin();
        if (!first) --it;
        Blk* b = *cur;
        if (!b->es && !b->prev && !b->next) {
          released += b->size;
          release_block(b);
        }
        if (first) break;
      }
      return released >= key.size;
    }
    Blk* b = *it;
    if (b->prev || b->next) return false;
    release_block(b);
    return true;
  }

  void release_cached_blocks() {
    release_blocks(large_);
    release_blocks(small_);
  }

  void release_blocks(Pool& pool) {
    std::vector<Blk*> to_unmap;
    for (auto it = pool.blocks.begin(); it != pool.blocks.end();) {
      Blk* b = *it++;
      if (b->es) to_unmap.push_back(b);
      else if (!b->prev && !b->next) release_block(b);
    }
    for (Blk* b : to_unmap) {
      unmap_block(b);
      if (!b->mapped && !b->prev && !b->next) {  // the whole virtual range is unmapped: release it
        b->pool->unmapped.erase(b);
        segments_.erase(b->es);
        delete b->es;
        release_blk(b);
      }
    }
  }

  void release_block(Blk* b) {
    b->pool->blocks.erase(b);
    stats_.reserved -= b->size;
    ++stats_.source_frees;
    release_blk(b);
  }

  void try_merge(Blk* dst, Blk* src, Pool& pool) {
    if (!src || src->allocated || src->mapped != dst->mapped) return;
    if (dst->prev == src) {
      dst->addr = src->addr;
      dst->prev = src->prev;
      if (dst->prev) dst->prev->next = dst;
    } else {
      dst->next = src->next;
      if (dst->next) dst->next->prev = dst;
    }
    dst->size += src->size;
    if (src->mapped) pool.blocks.erase(src);
    else pool.unmapped.erase(src);
    release_blk(src);
  }

  void add_reserved(u64 bytes) {
    stats_.reserved += bytes;
    if (stats_.reserved > stats_.peak_reserved) stats_.peak_reserved = stats_.reserved;
  }

  // --- block storage: stable addresses, recycled slots ---
  Blk* new_blk(u64 addr, u64 size, std::int64_t stream, Pool* pool, ExpandableSegment* es, bool mapped) {
    Blk* b;
    if (!free_slots_.empty()) {
      b = free_slots_.back();
      free_slots_.pop_back();
      *b = Blk{};
    } else {
      b = &storage_.emplace_back();
    }
    b->addr = addr;
    b->size = size;
    b->stream = stream;
    b->pool = pool;
    b->es = es;
    b->mapped = mapped;
    b->live = true;
    return b;
  }
  void release_blk(Blk* b) {
    b->live = false;
    free_slots_.push_back(b);
  }

  PyTorchSimConfig cfg_;
  Pool small_;
  Pool large_;
  std::unordered_map<u64, Blk*> active_;  // allocated blocks by address
  std::deque<Blk> storage_;
  std::vector<Blk*> free_slots_;
  std::set<ExpandableSegment*> segments_;
  u64 next_addr_ = u64{1} << 32;  // fake device addresses start here
  PolicyStats stats_;
};

void PyTorchSim::check_invariants() const {
  auto fail = [&](const std::string& what) { throw std::logic_error(fmt::format("{}: invariant broken: {}", name(), what)); };
  u64 whole = 0, mapped = 0, allocated = 0;
  std::size_t free_mapped = 0, free_unmapped = 0, n_alloc = 0;
  std::unordered_map<const ExpandableSegment*, u64> es_mapped;
  for (const Blk& b : storage_) {
    if (!b.live) continue;
    if (b.next && (b.next->prev != &b || b.addr + b.size != b.next->addr)) fail(fmt::format("block 0x{:x} and its next neighbour do not tile", b.addr));
    if (b.prev && b.prev->next != &b) fail(fmt::format("block 0x{:x}: broken prev link", b.addr));
    if (b.size == 0) fail("empty block");
    if (b.allocated) {
      ++n_alloc;
      allocated += b.size;
      auto it = active_.find(b.addr);
      if (it == active_.end() || it->second != &b) fail(fmt::format("allocated block 0x{:x} missing from the active map", b.addr));
      if (!b.mapped) fail("allocated block is unmapped");
      if (b.requested > b.size) fail("block smaller than its request");
    } else if (b.mapped) {
      ++free_mapped;
      if (!b.pool->blocks.count(const_cast<Blk*>(&b))) fail(fmt::format("free block 0x{:x} missing from its pool", b.addr));
      if (b.next && !b.next->allocated && b.next->mapped) fail(fmt::format("free neighbours 0x{:x} and 0x{:x} not merged", b.addr, b.next->addr));
    } else {
      ++free_unmapped;
      if (!b.pool->unmapped.count(const_cast<Blk*>(&b))) fail("unmapped range missing from its pool");
      if (b.next && !b.next->allocated && !b.next->mapped) fail("unmapped neighbours not merged");
    }
    if (b.mapped) {
      if (b.es) {
        mapped += b.size;
        es_mapped[b.es] += b.size;
      } else {
        whole += b.size;
      }
    }
  }
  if (whole + mapped != stats_.reserved) fail(fmt::format("blocks hold {} B but reserved is {} B", whole + mapped, stats_.reserved));
  if (allocated != stats_.allocated) fail("allocated bytes disagree with the blocks");
  if (n_alloc != active_.size()) fail("active map size disagrees with the blocks");
  if (free_mapped != small_.blocks.size() + large_.blocks.size()) fail("free sets hold blocks that are not free");
  if (free_unmapped != small_.unmapped.size() + large_.unmapped.size()) fail("unmapped sets disagree with the blocks");
  for (const ExpandableSegment* es : segments_) {
    auto it = es_mapped.find(es);
    if ((it == es_mapped.end() ? 0 : it->second) != es->mapped) fail("expandable segment mapped bytes disagree with its blocks");
  }
}

}  // namespace

std::unique_ptr<Policy> make_pytorch_sim(const PyTorchSimConfig& config) { return std::make_unique<PyTorchSim>(config); }

}  // namespace memcomm::replay
