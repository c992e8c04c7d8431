// Loads torch.profiler traces with memcomm's reader and reports, per file: seconds, uncompressed
// MB/s, traceEvents, memcomm events and their bytes. bench/kineto/run.py compares it with HTA.
//   bench_kineto_load FILE... [--repeat N]
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "memcomm/trace/kineto.hpp"
#include "memcomm/trace/trace_error.hpp"

int main(int argc, char** argv) {
  using namespace memcomm::prof;
  std::vector<std::string> files;
  int repeat = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--repeat") == 0 && i + 1 < argc) repeat = std::max(1, std::atoi(argv[++i]));
    else files.emplace_back(argv[i]);
  }
  if (files.empty()) {
    std::fprintf(stderr, "usage: bench_kineto_load FILE... [--repeat N]\n");
    return 2;
  }
  std::printf("{\"files\": [\n");
  for (size_t f = 0; f < files.size(); ++f) {
    double best = 1e30;
    KinetoInfo info;
    size_t events = 0;
    try {
      for (int r = 0; r < repeat; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        KinetoTrace k = read_kineto(files[f]);
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        best = std::min(best, s);
        events = k.trace.events.size();
        info = k.info;
      }
    } catch (const TraceError& e) {
      std::fprintf(stderr, "bench_kineto_load: %s\n", e.what());
      return 1;
    }
    std::printf("  {\"file\": \"%s\", \"seconds\": %.4f, \"json_bytes\": %llu, \"mb_per_s\": %.1f, \"trace_events\": %llu, "
                "\"memcomm_events\": %zu, \"gzip\": %s}%s\n",
                files[f].c_str(), best, (unsigned long long)info.json_bytes, info.json_bytes / best / 1e6,
                (unsigned long long)info.trace_events, events, info.gzip ? "true" : "false",
                f + 1 < files.size() ? "," : "");
  }
  std::printf("]}\n");
  return 0;
}
