// Queries over a rank's allocation lifetimes that the allocation timeline asks every column of
// every frame, without scanning every allocation (issue 18: interactive at 10 M events).
//
// Algorithm: live bytes at t are the bytes allocated at or before t minus the bytes freed at or
// before t (an allocation freed by t was allocated by t). The allocations are sorted by alloc_ns
// already; the index adds their order by free_ns and prefix sums of sizes every kStride entries
// of both orders, so live_at(t) is two binary searches and at most 2 * kStride additions. For the
// bands the view draws one by one, allocations are also kept by size class (floor(log2(size)))
// in allocation order with the latest free of each kStride block, so "allocations of at least S
// bytes that overlap [t0, t1)" visits only the classes that can hold them and skips blocks freed
// before t0. Memory: 4 B (free order) + 4 B (size class) per allocation, plus 1/kStride of that.
#pragma once

#include <memcomm/trace/allocations.hpp>

#include <array>
#include <cstdint>
#include <vector>

namespace memcomm::view {

class AllocationIndex {
 public:
  AllocationIndex() = default;
  explicit AllocationIndex(const prof::Allocations& a);

  struct Live {
    std::uint64_t bytes = 0;
    std::uint64_t count = 0;
  };
  // What is live at t (Note [Live means allocated] in memcomm/trace/allocations.hpp): the
  // figures of prof::live_bytes, in O(log n). `a` is the Allocations this index was built from.
  Live live_at(const prof::Allocations& a, std::int64_t t) const;
  // Indices (into a.list) of the allocations of at least min_size bytes live somewhere in
  // [t0, t1), in allocation order.
  void big_overlapping(const prof::Allocations& a, std::int64_t t0, std::int64_t t1, std::uint64_t min_size,
                       std::vector<std::uint32_t>& out) const;
  std::size_t memory_bytes() const;

 private:
  static constexpr std::size_t kStride = 64;
  std::uint64_t alloc_prefix(const prof::Allocations& a, std::size_t k) const;
  std::uint64_t free_prefix(const prof::Allocations& a, std::size_t k) const;
  void scan_class(const prof::Allocations& a, int c, std::int64_t t0, std::int64_t t1, std::uint64_t min_size,
                  std::vector<std::uint32_t>& out) const;
  std::vector<std::uint32_t> by_free_;     // allocation indices by free_ns
  // [k]: bytes of list[0, k * kStride); {0} for no allocations, so that an index built for none (a
  // live rank that allocated nothing yet) answers like one built from an empty list.
  std::vector<std::uint64_t> alloc_sums_{0};
  std::vector<std::uint64_t> free_sums_{0};  // [k]: bytes of by_free_[0, k * kStride)
  std::array<std::vector<std::uint32_t>, 64> classes_;     // by floor(log2(size)), allocation order
  std::array<std::vector<std::int64_t>, 64> class_free_;   // per kStride block of a class: its latest free_ns
};

}  // namespace memcomm::view
