// Open-addressing hash map from addresses to values: the live-block table of the fast path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace memcomm::alloc {

// Linear probing with backward-shift deletion (no tombstones). Key 0 marks an empty slot, so 0 is
// never a key (the allocator never hands out address 0). Not thread-safe.
template <class V>
class PtrMap {
 public:
  PtrMap() { slots_.resize(1024); }
  std::size_t size() const { return count_; }

  V* find(std::uintptr_t key) {
    std::size_t i = index(key);
    while (true) {
      Slot& s = slots_[i];
      if (s.key == key) return &s.value;
      if (s.key == 0) return nullptr;
      i = (i + 1) & mask();
    }
  }
  // Inserts or overwrites.
  void insert(std::uintptr_t key, V value) {
    if ((count_ + 1) * 4 > slots_.size() * 3) grow();
    std::size_t i = index(key);
    while (slots_[i].key != 0 && slots_[i].key != key) i = (i + 1) & mask();
    if (slots_[i].key == 0) ++count_;
    slots_[i] = Slot{key, value};
  }
  bool erase(std::uintptr_t key) {
    std::size_t i = index(key);
    while (slots_[i].key != key) {
      if (slots_[i].key == 0) return false;
      i = (i + 1) & mask();
    }
    // Backward shift: move later entries of the probe run into the hole.
    std::size_t hole = i;
    std::size_t j = i;
    while (true) {
      j = (j + 1) & mask();
      if (slots_[j].key == 0) break;
      std::size_t home = index(slots_[j].key);
      // Move j into the hole if its home is not cyclically in (hole, j].
      bool in_between = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
      if (!in_between) {
        slots_[hole] = slots_[j];
        hole = j;
      }
    }
    slots_[hole] = Slot{};
    --count_;
    return true;
  }
  template <class F>
  void for_each(F&& f) const {
    for (const Slot& s : slots_)
      if (s.key != 0) f(s.key, s.value);
  }
  void clear() {
    for (Slot& s : slots_) s = Slot{};
    count_ = 0;
  }

 private:
  struct Slot {
    std::uintptr_t key = 0;  // 0 = empty
    V value{};
  };
  std::size_t mask() const { return slots_.size() - 1; }
  std::size_t index(std::uintptr_t key) const {
    std::uint64_t h = std::uint64_t(key) * 0x9E3779B97F4A7C15ull;
    return std::size_t(h >> 20) & mask();
  }
  void grow() {
    std::vector<Slot> old(slots_.size() * 2);
    old.swap(slots_);
    count_ = 0;
    for (const Slot& s : old)
      if (s.key != 0) insert(s.key, s.value);
  }
  std::vector<Slot> slots_;  // power-of-two table
  std::size_t count_ = 0;    // occupied slots
};

}  // namespace memcomm::alloc
