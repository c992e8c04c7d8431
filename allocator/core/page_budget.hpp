// The page budget: how many bytes the allocator may keep mapped for a given high water of allocated
// bytes (Note [Lazy page release] in growth.cpp), and what it learns from pools that trade pages
// (Note [Release churn] in expandable.cpp), whose growth it keeps to a page at a time (Note [A slot
// that grows at the budget] in expandable.cpp) or whose growing tensor it would cut short (Note [A
// tensor that grows by concatenation] in expandable.cpp).
//
// Contract: the budget never calls the source and never touches blocks. It answers "may reserved bytes
// grow to X?" and records which pool lost pages to it; the engine calls it under the allocator's lock
// (its state is part of CachingAllocator::Impl's guarded state) and does the releasing itself.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace memcomm::alloc {

// What the budget remembers about one pool (Note [Release churn]).
struct ChurnRecord {
  std::int64_t release_hw = -1;   // high water when the budget last took pages from the pool
  int regains = 0;                // times the pool wanted pages back under that high water
  std::size_t released = 0;       // bytes the budget took from the pool under that high water
  int clipped = 0;                // growths of a slot whose medium-segment minimum the budget cut short
};

class PageBudget {
 public:
  PageBudget(double slack, std::size_t floor, std::size_t page) : slack_(slack), floor_(floor), page_(page) {}

  // Mapped bytes lazy release allows for a high water of `hw` allocated bytes, before any churn
  // allowance: hw x (1 + slack) + 2% of hw within [page, floor] (Note [Lazy page release]).
  double plain(std::int64_t hw) const {
    const double floor = std::min(double(floor_), std::max(double(page_), 0.02 * double(hw)));
    return double(hw) * (1.0 + slack_) + floor;
  }
  // What reserved bytes may reach before growth must give pages back: the plain budget plus what the
  // budget learned. The allowance keeps pages from going back and serves a slot's medium-segment minimum
  // (Note [A slot that grows at the budget]); map-ahead's share fills only `plain`.
  std::size_t limit(std::int64_t hw) const { return std::size_t(plain(hw)) + churn_allowance_; }
  std::size_t churn_allowance() const { return churn_allowance_; }
  // What budget and allowance never pass together, the floor included: slack + kChurnShare of hw, the
  // 3% memcomm promises. Note [Map-ahead's minimum at the budget] (expandable.cpp) maps up to it.
  double ceiling(std::int64_t hw) const { return double(hw) * (1.0 + slack_ + kChurnShare); }

  // Growth of `pool` needs reserved bytes to reach `wanted` under high water `hw`, above limit(hw).
  // See Note [Release churn]: on the pool's second regain under the high water at which the budget took its
  // pages, the allowance grows by what is missing, at most what was taken from it, and in all at most
  // what keeps limit(hw) within (1 + slack + kChurnShare) x hw, or one page, whichever is more (a page
  // is the least that can stop a trade).
  void learn_regain(ChurnRecord& pool, std::int64_t hw, std::size_t wanted) {
    if (pool.release_hw != hw || ++pool.regains < kChurnRegains || churn_allowance_ >= max_allowance(hw)) return;
    // Only what the budget took from this pool: a larger regain is growth, not churn.
    const std::size_t over = wanted - limit(hw);
    const std::size_t missing = std::min(whole_pages(over), pool.released);
    grow_allowance(hw, missing);
    pool.released -= missing;
  }
  // Note [A slot that grows at the budget] (expandable.cpp): growth of a slot in `pool` found `missing`
  // bytes fewer under limit(hw) than its medium-segment minimum wants. Every second time, the allowance
  // grows by them, within the same bound as learn_regain's.
  void learn_clipped_granule(ChurnRecord& pool, std::int64_t hw, std::size_t missing) {
    if (++pool.clipped < kChurnRegains) return;
    pool.clipped = 0;
    grow_allowance(hw, whole_pages(missing));
  }
  // Note [A tensor that grows by concatenation] (expandable.cpp): growth for a request slightly larger
  // than the block its pool freed last needs reserved bytes to reach `wanted`. The allowance grows at
  // once by what is missing above limit(hw), within the same bound as learn_regain's.
  void learn_growing_tensor(std::int64_t hw, std::size_t wanted) {
    if (wanted > limit(hw)) grow_allowance(hw, whole_pages(wanted - limit(hw)));
  }
  // The budget (not the cap) took `bytes` of another pool's pages under high water `hw`.
  void note_taken(ChurnRecord& from, std::int64_t hw, std::size_t bytes) {
    if (from.release_hw != hw) {
      from.regains = 0;
      from.released = 0;
    }
    from.release_hw = hw;
    from.released += bytes;
  }

 private:
  // Every lesson adds to the one allowance within the one bound (max_allowance).
  void grow_allowance(std::int64_t hw, std::size_t bytes) {
    churn_allowance_ = std::min(max_allowance(hw), churn_allowance_ + bytes);
  }
  std::size_t whole_pages(std::size_t bytes) const { return (bytes + page_ - 1) / page_ * page_; }
  // The budget and its allowance together stay within slack + kChurnShare of hw (the floor counts), or
  // the allowance is one page, whichever is more (a page is the least that can stop a trade).
  std::size_t max_allowance(std::int64_t hw) const {
    const double room = ceiling(hw) - plain(hw);
    return std::max(std::size_t(std::max(0.0, room)), page_);
  }
  // See Note [Release churn]: the budget with what it learned from churn stays within the slack plus this
  // share of the high water, the floor included. With the default slack (2%) that is the 3% memcomm
  // promises (Note [Splitting the headroom] in expandable.cpp).
  static constexpr double kChurnShare = 0.01;
  // See Note [Release churn]: a pool must want pages back this many times under one high water (the first
  // regain can be a phase change; a loop repeats it).
  static constexpr int kChurnRegains = 2;

  double slack_;
  std::size_t floor_;
  std::size_t page_;
  std::size_t churn_allowance_ = 0;  // budget bytes learned from pages given back and mapped again,
                                     // from clipped medium-segment minimums and from growing tensors
};

}  // namespace memcomm::alloc
