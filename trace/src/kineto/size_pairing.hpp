// Addresses for [memory] events that carry none (Note [Memory events without addresses]).
#pragma once

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "memcomm/trace/event.hpp"

namespace memcomm::prof::kineto {

// Note [Memory events without addresses]
// The 2021 schema's [memory] events give Bytes, the device and the time, but no Addr and no
// totals; every block event at address 0 made one block of the whole trace, and replay, memory
// and the curves wrong (a 2.6 GiB peak read as 111 MiB). Without addresses a free cannot be matched
// to its allocation for certain, but by size it can be matched to one that holds the same bytes, so
// live bytes at every moment are exact:
// - an allocation gets a fresh address from a bump pointer per device (high in the 48 bits, so no
//   real address is near);
// - a free takes the address of the latest live allocation of its size on its device (LIFO, as a
//   caching allocator hands back the block freed last); with none, the block was allocated before
//   the trace, and a fresh address makes it one that is live from the trace's start, as the block
//   events of every other source are read;
// - the Allocated curve, absent from the file, is the running sum of Bytes, raised by the bytes of
//   those blocks from before the trace.
// Which of two same-size blocks a free released stays unknown, so lifetimes between them may be
// swapped; `memcomm-trace info` counts the events read this way.
class SizePairing {
 public:
  uint64_t alloc(int64_t ts, uint8_t device, uint64_t size);
  uint64_t free(int64_t ts, uint8_t device, uint64_t size);
  // Appends the Allocated samples, one per event, in the order the events came.
  void emit_samples(std::vector<Event>& out) const;
  bool empty() const { return deltas_.empty(); }

 private:
  struct Delta {  // unsigned sums: a corrupt file's Bytes wrap, they do not overflow
    int64_t ts;
    uint8_t device;
    bool alloc;
    uint64_t bytes;
  };
  uint64_t fresh(uint8_t device, uint64_t size);
  std::map<std::pair<uint8_t, uint64_t>, std::vector<uint64_t>> live_;  // (device, size) -> addresses
  std::map<uint8_t, uint64_t> next_;                                   // bump pointer per device
  std::map<uint8_t, uint64_t> before_trace_;                            // bytes freed, never allocated
  std::vector<Delta> deltas_;
};

}  // namespace memcomm::prof::kineto
