#include "size_pairing.hpp"

#include <algorithm>
#include <map>

namespace memcomm::prof::kineto {
namespace {
constexpr uint64_t kSyntheticBase = uint64_t(1) << 46;
constexpr uint64_t kAlign = 512;
}  // namespace

uint64_t SizePairing::fresh(uint8_t device, uint64_t size) {
  uint64_t& next = next_.try_emplace(device, kSyntheticBase).first->second;
  const uint64_t addr = next;
  next += (std::max<uint64_t>(size, 1) + kAlign - 1) / kAlign * kAlign;
  return addr;
}

uint64_t SizePairing::alloc(int64_t ts, uint8_t device, uint64_t size) {
  const uint64_t addr = fresh(device, size);
  live_[{device, size}].push_back(addr);
  deltas_.push_back({ts, device, true, size});
  return addr;
}

uint64_t SizePairing::free(int64_t ts, uint8_t device, uint64_t size) {
  deltas_.push_back({ts, device, false, size});
  auto it = live_.find({device, size});
  if (it == live_.end() || it->second.empty()) {  // allocated before the trace: live from its start
    before_trace_[device] += size;
    return fresh(device, size);
  }
  const uint64_t addr = it->second.back();
  it->second.pop_back();
  return addr;
}

void SizePairing::emit_samples(std::vector<Event>& out) const {
  std::map<uint8_t, uint64_t> live(before_trace_.begin(), before_trace_.end());
  for (const Delta& d : deltas_) {
    uint64_t& level = live[d.device];
    level = d.alloc ? level + d.bytes : level - d.bytes;
    out.push_back(Event::from(make_mem_sample(d.ts, MemMetric::Allocated, level, d.device)));
  }
}

}  // namespace memcomm::prof::kineto
