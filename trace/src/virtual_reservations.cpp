// VirtualReservations (Note [Virtual reservations] in virtual_reservations.hpp): live segments by
// start; a map marks the segment it lands in; a SegmentFree shares its SegmentAlloc's verdict.
#include "memcomm/trace/virtual_reservations.hpp"

namespace memcomm::prof {

size_t VirtualReservations::add(EventKind kind, uint64_t addr, uint64_t size, bool flagged) {
  if (kind == EventKind::SegmentAlloc) {
    live_[addr] = {addr + size, instance_virtual_.size()};
    instance_of_.push_back(instance_virtual_.size());
    instance_virtual_.push_back(flagged);
    return instance_of_.size() - 1;
  }
  if (kind == EventKind::SegmentFree) {
    auto it = live_.find(addr);
    if (it != live_.end()) {  // the release of a segment seen: what that segment turned out to be
      instance_of_.push_back(it->second.instance);
      live_.erase(it);
    } else {  // allocated before the trace began: only its own flag can tell
      instance_of_.push_back(instance_virtual_.size());
      instance_virtual_.push_back(flagged);
    }
    return instance_of_.size() - 1;
  }
  if (kind == EventKind::SegmentMap) {
    auto it = live_.upper_bound(addr);
    if (it != live_.begin() && addr < (--it)->second.end) instance_virtual_[it->second.instance] = true;
  }
  return kNoIndex;
}

}  // namespace memcomm::prof
