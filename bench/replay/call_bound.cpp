// bench_call_bound [DIR|FILE...]: the fewest source calls any online policy can make on each snapshot
// while guaranteeing peak reserved <= R x peak live, for R = 1.03, 1.05, 1.10, 1.25 -- the yardstick for
// the "calls <= pytorch's" target next to its "reserved <= 1.05 x live" one.
//
// The bound is memcomm::replay::ideal_calls (Note [Ideal online call bound] in memcomm/replay/call_bound.hpp);
// tests/replay asserts memcomm's calls against it at R = 1.05.
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "memcomm/replay/call_bound.hpp"
#include "memcomm/replay/requests.hpp"
#include "snapshot_args.hpp"

namespace fs = std::filesystem;
namespace rp = memcomm::replay;

static int report(const std::vector<std::string>& files) {
  const double ratios[] = {1.03, 1.05, 1.10, 1.25};
  std::printf("## Fewest source calls that guarantee peak reserved <= R x peak live (ideal, unfragmented)\n\n");
  std::printf("| file | dev | R = 1.03 | 1.05 | 1.10 | 1.25 |\n|---|---:|---:|---:|---:|---:|\n");
  for (const auto& f : files) {
    const rp::TraceRequests t = rp::load_trace(f);
    for (const auto& dev : t.devices) {
      std::printf("| %s | %d", fs::path(f).filename().c_str(), dev.device);
      for (double r : ratios) std::printf(" | %llu", static_cast<unsigned long long>(rp::ideal_calls(dev, r)));
      std::printf(" |\n");
    }
  }
  return 0;
}

int main(int argc, char** argv) {
  const std::vector<std::string> files = snapshot_files(argc, argv, "bench_call_bound [DIR|FILE...]");
  return run_reporting_errors("bench_call_bound", [&] { return report(files); });
}
