// See Note [Ideal online call bound] in call_bound.hpp.
#include "memcomm/replay/call_bound.hpp"

#include <algorithm>
#include <vector>

namespace memcomm::replay {

std::uint64_t ideal_calls(const DeviceRequests& dev, double ratio) {
  constexpr std::uint64_t kPage = std::uint64_t(2) << 20;
  std::vector<std::uint64_t> size(dev.block_count, 0);
  std::uint64_t live = 0, high_water = 0, mapped = 0, calls = 0;
  for (const Request& q : dev.requests) {
    if (q.op == Request::Op::alloc) {
      size[q.block] = (std::max<std::uint64_t>(q.size, 1) + 511) / 512 * 512;
      live += size[q.block];
      high_water = std::max(high_water, live);
      if (live > mapped) {
        ++calls;
        const auto allowed = std::uint64_t(ratio * double(high_water)) / kPage * kPage;
        mapped = std::max(allowed, (live + kPage - 1) / kPage * kPage);
      }
    } else if (q.op == Request::Op::free) {
      live -= size[q.block];
      size[q.block] = 0;
    }
  }
  return calls;
}

}  // namespace memcomm::replay
