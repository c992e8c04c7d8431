// AllocationIndex (allocation_index.hpp): prefix sums over the alloc and free orders, and size
// classes with per-block latest frees.
#include <memcomm/view/allocation_index.hpp>

#include <algorithm>
#include <numeric>

namespace memcomm::view {
namespace {
int size_class(std::uint64_t size) { return size == 0 ? 0 : 63 - __builtin_clzll(size); }
}  // namespace

AllocationIndex::AllocationIndex(const prof::Allocations& a) {
  alloc_sums_.clear();
  free_sums_.clear();
  const auto& list = a.list;
  by_free_.resize(list.size());
  std::iota(by_free_.begin(), by_free_.end(), 0u);
  std::stable_sort(by_free_.begin(), by_free_.end(), [&](std::uint32_t x, std::uint32_t y) { return list[x].free_ns < list[y].free_ns; });
  std::uint64_t sa = 0, sf = 0;
  for (std::size_t i = 0; i < list.size(); ++i) {
    if (i % kStride == 0) {
      alloc_sums_.push_back(sa);
      free_sums_.push_back(sf);
    }
    sa += list[i].size;
    sf += list[by_free_[i]].size;
    const int c = size_class(list[i].size);
    if (classes_[c].size() % kStride == 0) class_free_[c].push_back(list[i].free_ns);
    classes_[c].push_back(static_cast<std::uint32_t>(i));
    class_free_[c].back() = std::max(class_free_[c].back(), list[i].free_ns);
  }
  alloc_sums_.push_back(sa);
  free_sums_.push_back(sf);
  for (auto& c : classes_) c.shrink_to_fit();
  for (auto& c : class_free_) c.shrink_to_fit();
}

std::uint64_t AllocationIndex::alloc_prefix(const prof::Allocations& a, std::size_t k) const {
  std::uint64_t s = alloc_sums_[k / kStride];
  for (std::size_t i = k / kStride * kStride; i < k; ++i) s += a.list[i].size;
  return s;
}

std::uint64_t AllocationIndex::free_prefix(const prof::Allocations& a, std::size_t k) const {
  std::uint64_t s = free_sums_[k / kStride];
  for (std::size_t i = k / kStride * kStride; i < k; ++i) s += a.list[by_free_[i]].size;
  return s;
}

AllocationIndex::Live AllocationIndex::live_at(const prof::Allocations& a, std::int64_t t) const {
  if (by_free_.size() != a.list.size()) return {};  // not this index's allocations
  const auto& list = a.list;
  const auto na = static_cast<std::size_t>(
      std::upper_bound(list.begin(), list.end(), t, [](std::int64_t v, const prof::Allocation& x) { return v < x.alloc_ns; }) -
      list.begin());
  const auto nf = static_cast<std::size_t>(
      std::upper_bound(by_free_.begin(), by_free_.end(), t, [&](std::int64_t v, std::uint32_t i) { return v < list[i].free_ns; }) -
      by_free_.begin());
  return {alloc_prefix(a, na) - free_prefix(a, nf), na - nf};
}

void AllocationIndex::scan_class(const prof::Allocations& a, int c, std::int64_t t0, std::int64_t t1,
                                 std::uint64_t min_size, std::vector<std::uint32_t>& out) const {
  const auto& ids = classes_[c];
  const auto end = static_cast<std::size_t>(
      std::lower_bound(ids.begin(), ids.end(), t1, [&](std::uint32_t i, std::int64_t v) { return a.list[i].alloc_ns < v; }) -
      ids.begin());
  for (std::size_t blk = 0; blk * kStride < end; ++blk) {
    if (class_free_[c][blk] <= t0) continue;  // every allocation of the block was freed by t0
    for (std::size_t k = blk * kStride; k < std::min(end, (blk + 1) * kStride); ++k) {
      const prof::Allocation& x = a.list[ids[k]];
      if (x.size >= min_size && x.free_ns > t0) out.push_back(ids[k]);
    }
  }
}

void AllocationIndex::big_overlapping(const prof::Allocations& a, std::int64_t t0, std::int64_t t1,
                                      std::uint64_t min_size, std::vector<std::uint32_t>& out) const {
  out.clear();
  if (by_free_.size() != a.list.size()) return;
  for (int c = size_class(min_size); c < 64; ++c) scan_class(a, c, t0, t1, min_size, out);
  std::sort(out.begin(), out.end());
}

std::size_t AllocationIndex::memory_bytes() const {
  std::size_t n = (by_free_.capacity() + 0) * 4 + (alloc_sums_.capacity() + free_sums_.capacity()) * 8;
  for (int c = 0; c < 64; ++c) n += classes_[c].capacity() * 4 + class_free_[c].capacity() * 8;
  return n;
}

}  // namespace memcomm::view
