// bench_call_bound [--ratio R]... [DIR|FILE...]: the fewest source calls any online policy can make on
// each snapshot while guaranteeing peak reserved <= R x peak live, for each --ratio R given (any R > 1;
// default: 1.03, 1.05, 1.10, 1.25) -- the yardstick for the call target next to its
// "reserved <= 1.03 x live" one.
//
// The bound is memcomm::replay::ideal_calls (Note [Ideal online call bound] in memcomm/replay/call_bound.hpp);
// tests/replay asserts memcomm's calls against it, and memcomm-replay --json reports it at 1.03 (call_bound).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "memcomm/replay/call_bound.hpp"
#include "memcomm/replay/requests.hpp"
#include "snapshot_args.hpp"

namespace fs = std::filesystem;
namespace rp = memcomm::replay;

namespace {

constexpr const char* kUsage = "bench_call_bound [--ratio R]... [DIR|FILE...]  (R > 1, e.g. 1.03; repeatable)";

// A ratio as the user wrote it: the whole text a finite number above 1. Exits 2 otherwise.
double parse_ratio(const std::string& text) {
  char* end = nullptr;
  const double r = text.empty() ? 0.0 : std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !std::isfinite(r) || r <= 1.0) {
    std::fprintf(stderr, "bench_call_bound: --ratio '%s': a ratio must be a number above 1 (e.g. 1.03)\nusage: %s\n",
                 text.c_str(), kUsage);
    std::exit(2);
  }
  return r;
}

struct Arguments {
  std::vector<double> ratios;     // columns, in the order given
  std::vector<std::string> rest;  // files and folders
};

Arguments parse(int argc, char** argv) {
  Arguments a;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--ratio") {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bench_call_bound: --ratio needs a value\nusage: %s\n", kUsage);
        std::exit(2);
      }
      a.ratios.push_back(parse_ratio(argv[++i]));
    } else if (arg.rfind("--ratio=", 0) == 0) {
      a.ratios.push_back(parse_ratio(arg.substr(8)));
    } else {
      a.rest.push_back(arg);
    }
  }
  if (a.ratios.empty()) a.ratios = {1.03, 1.05, 1.10, 1.25};
  return a;
}

// A column's ratio: two decimals (1.10, as the default columns always read), more only if it has more.
std::string ratio_text(double r) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", r);
  if (std::strtod(buf, nullptr) != r) std::snprintf(buf, sizeof buf, "%g", r);
  return buf;
}

int report(const std::vector<std::string>& files, const std::vector<double>& ratios) {
  std::printf("## Fewest source calls that guarantee peak reserved <= R x peak live (ideal, unfragmented)\n\n");
  std::printf("| file | dev");
  for (std::size_t i = 0; i < ratios.size(); ++i) std::printf(i == 0 ? " | R = %s" : " | %s", ratio_text(ratios[i]).c_str());
  std::printf(" |\n|---|---:");
  for (std::size_t i = 0; i < ratios.size(); ++i) std::printf("|---:");
  std::printf("|\n");
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

}  // namespace

int main(int argc, char** argv) {
  const Arguments args = parse(argc, argv);
  const std::vector<std::string> files = snapshot_files(args.rest, kUsage);
  return run_reporting_errors("bench_call_bound", [&] { return report(files, args.ratios); });
}
