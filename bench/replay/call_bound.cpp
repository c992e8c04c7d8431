// bench_call_bound [DIR|FILE...]: the fewest source calls any online policy can make on each snapshot
// while guaranteeing peak reserved <= R x peak live, for R = 1.03, 1.05, 1.10, 1.25 -- the yardstick for
// the "calls <= pytorch's" target next to its "reserved <= 1.05 x live" one.
//
// Online, a policy that never exceeds R x the peak live bytes *so far* is the only kind that can
// guarantee R (the trace may end at any request), so the best it can do at each source call is to map
// up to R x that high water. This computes that ideal: no fragmentation at all (one address space, live
// bytes packed perfectly), 2 MiB pages, requests rounded to 512 B, one call whenever live bytes outgrow
// what is mapped. Real allocators fragment, so they need at least this many calls.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "memcomm/replay/requests.hpp"
#include "snapshot_args.hpp"

namespace fs = std::filesystem;
namespace rp = memcomm::replay;

namespace {

std::uint64_t ideal_calls(const rp::DeviceRequests& dev, double ratio) {
  constexpr std::uint64_t kPage = std::uint64_t(2) << 20;
  std::vector<std::uint64_t> size(dev.block_count, 0);
  std::uint64_t live = 0, high_water = 0, mapped = 0, calls = 0;
  for (const rp::Request& q : dev.requests) {
    if (q.op == rp::Request::Op::alloc) {
      size[q.block] = (std::max<std::uint64_t>(q.size, 1) + 511) / 512 * 512;
      live += size[q.block];
      high_water = std::max(high_water, live);
      if (live > mapped) {
        ++calls;
        const auto allowed = std::uint64_t(ratio * double(high_water)) / kPage * kPage;
        mapped = std::max(allowed, (live + kPage - 1) / kPage * kPage);
      }
    } else if (q.op == rp::Request::Op::free) {
      live -= size[q.block];
      size[q.block] = 0;
    }
  }
  return calls;
}

}  // namespace

static int report(const std::vector<std::string>& files) {
  const double ratios[] = {1.03, 1.05, 1.10, 1.25};
  std::printf("## Fewest source calls that guarantee peak reserved <= R x peak live (ideal, unfragmented)\n\n");
  std::printf("| file | dev | R = 1.03 | 1.05 | 1.10 | 1.25 |\n|---|---:|---:|---:|---:|---:|\n");
  for (const auto& f : files) {
    const rp::TraceRequests t = rp::load_trace(f);
    for (const auto& dev : t.devices) {
      std::printf("| %s | %d", fs::path(f).filename().c_str(), dev.device);
      for (double r : ratios) std::printf(" | %llu", static_cast<unsigned long long>(ideal_calls(dev, r)));
      std::printf(" |\n");
    }
  }
  return 0;
}

int main(int argc, char** argv) {
  const std::vector<std::string> files = snapshot_files(argc, argv, "bench_call_bound [DIR|FILE...]");
  return run_reporting_errors("bench_call_bound", [&] { return report(files); });
}
