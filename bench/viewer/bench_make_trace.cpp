// Writes a training-like memcomm trace of about N events for load benchmarks (issue 6: "load >=
// 20 M events/s" with 10 M events): RANKS ranks merged in one file, per step 4 phases, 200 kernels
// on 4 streams, memcpys, 6 collectives, allocator events with an expandable segment, memory
// samples. Then time the load with `memcomm-view --bench FILE` (prints load events/s).
//
//   build/bin/bench_make_trace OUT.mct [EVENTS (default 10000000) [RANKS (default 2)]]
#include <memcomm/trace/trace_writer.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace prof = memcomm::prof;

namespace {
constexpr const char* kUsage =
    "usage: bench_make_trace OUT.mct [EVENTS [RANKS]]\n"
    "  writes a training-like memcomm trace of about EVENTS events (default 10000000, at most 1e9;\n"
    "  ~11 bytes each on disk) from RANKS ranks (1..64, default 2) merged in OUT.mct\n";

// A whole-word number: atof/atoi would read "abc" as 0 and "5x" as 5.
bool parse_number(const char* text, double& out) {
  char* end = nullptr;
  out = std::strtod(text, &end);
  return end != text && *end == '\0';
}

// Writes about `events` trace records over `ranks` ranks into one merged file; returns how many.
std::uint64_t write_trace(const std::string& out, double events, int ranks) {
  prof::WriterOptions o;
  o.merged = true;
  o.world_size = static_cast<std::uint32_t>(ranks);
  prof::TraceWriter w(out, o);
  constexpr int kKernels = 200, kCopies = 8, kColls = 6, kBlocks = 20;
  const int per_step = 8 + kKernels + kCopies + 2 * kColls + 3 * kBlocks + 4;  // trace records per step
  const long steps = static_cast<long>(events / ranks / per_step) + 1;
  const std::uint64_t base = 0x7f0000000000ull;
  std::uint64_t written = 0;
  for (int r = 0; r < ranks; ++r) {
    std::vector<std::string> names;  // a StringDef views its text: the names outlive the chunk's write
    std::vector<prof::StringDef> defs;
    for (std::uint32_t k = 1; k <= 32; ++k) names.push_back("kernel_" + std::to_string(k));
    for (std::uint32_t k = 1; k <= 32; ++k) defs.push_back({k, names[k - 1]});
    std::vector<prof::Event> ev;
    const auto rank = static_cast<std::uint32_t>(r);
    const auto push = [&](const auto& e) { ev.push_back(prof::Event::from(e)); };
    push(prof::make_comm_info(0, 0, static_cast<std::uint16_t>(ranks), static_cast<std::uint16_t>(r), 7));
    push(prof::make_mem_block(prof::EventKind::SegmentAlloc, 1, base, 128ull << 30));
    std::uint64_t mapped = 0;
    for (long s = 0; s < steps; ++s) {
      const std::int64_t t = 1'000'000 + s * 10'000'000 + r * 5'000;
      push(prof::make_range(prof::EventKind::RangeBegin, t, prof::Phase::Step, 0, static_cast<std::uint64_t>(s), 0));
      push(prof::make_range(prof::EventKind::RangeBegin, t + 10, prof::Phase::Forward, 0, 0, 0));
      for (int k = 0; k < kKernels; ++k) {
        const std::int64_t kt = t + 1'000 + k * 40'000;
        if (k == kKernels / 2) {
          push(prof::make_range(prof::EventKind::RangeEnd, kt, prof::Phase::Forward, 0, 0, 0));
          push(prof::make_range(prof::EventKind::RangeBegin, kt + 1, prof::Phase::Backward, 0, 0, 0));
        }
        push(prof::make_compute(prof::EventKind::Kernel, kt, kt + 30'000 + k % 7 * 1'000, static_cast<std::uint8_t>(k % 4),
                                1 + static_cast<std::uint32_t>((k + s) % 32)));
      }
      for (int c = 0; c < kCopies; ++c)
        push(prof::make_compute(prof::EventKind::Memcpy, t + c * 900'000, t + c * 900'000 + 20'000, 5,
                                prof::encode_bytes32(1u << 20), 0, 0, static_cast<std::uint8_t>(prof::CopyKind(1))));
      push(prof::make_range(prof::EventKind::RangeEnd, t + 8'500'000, prof::Phase::Backward, 0, 0, 0));
      for (int c = 0; c < kColls; ++c) {
        const std::int64_t ct = t + 4'000'000 + c * 600'000 + r * 20'000;
        const auto seq = static_cast<std::uint64_t>(s * kColls + c);
        push(prof::make_collective(prof::EventKind::CollStart, ct, prof::CollOp(1), prof::DType(0), 25u << 20, 0, seq));
        push(prof::make_collective(prof::EventKind::CollEnd, ct + 400'000, prof::CollOp(1), prof::DType(0), 25u << 20, 0, seq));
      }
      push(prof::make_range(prof::EventKind::RangeBegin, t + 8'600'000, prof::Phase::Optimizer, 0, 0, 0));
      // Allocator events in time order, as the allocator's observer records them.
      for (int b = 0; b < kBlocks; ++b) {
        const std::uint64_t addr = base + static_cast<std::uint64_t>(b) * (4u << 20);
        const std::int64_t bt = t + 2'000 + b * 100'000;
        if (addr + (4u << 20) > base + mapped) {
          push(prof::make_mem_block(prof::EventKind::SegmentMap, bt, base + mapped, 4u << 20));
          mapped += 4u << 20;
        }
        push(prof::make_mem_block(prof::EventKind::Alloc, bt + 1, addr, 3u << 20, 0, 0));
      }
      for (int b = 0; b < kBlocks; ++b) {
        const std::uint64_t addr = base + static_cast<std::uint64_t>(b) * (4u << 20);
        const std::int64_t bt = t + 2'000 + b * 100'000;
        push(prof::make_mem_block(prof::EventKind::FreeRequested, bt + 5'000'000, addr, 3u << 20, 0, 0));
        push(prof::make_mem_block(prof::EventKind::FreeCompleted, bt + 5'000'100, addr, 3u << 20, 0, 0));
      }
      push(prof::make_mem_sample(t + 9'000'000, prof::MemMetric::Allocated, 60u << 20));
      push(prof::make_mem_sample(t + 9'000'000, prof::MemMetric::Reserved, mapped));
      push(prof::make_range(prof::EventKind::RangeEnd, t + 9'500'000, prof::Phase::Optimizer, 0, 0, 0));
      push(prof::make_range(prof::EventKind::RangeEnd, t + 9'900'000, prof::Phase::Step, 0, static_cast<std::uint64_t>(s), 0));
      if (ev.size() >= 60'000) {
        written += ev.size();
        w.write_chunk(defs, ev, rank);
        defs.clear();
        ev.clear();
      }
    }
    written += ev.size();
    if (!ev.empty()) w.write_chunk(defs, ev, rank);
  }
  w.close();
  return written;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && (std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0)) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  // OUT.mct is written over: an argument that looks like a flag is a mistake, not a file name.
  for (int i = 1; i < argc; ++i)
    if (argv[i][0] == '-') {
      std::fprintf(stderr, "bench_make_trace: unknown option '%s'\n%s", argv[i], kUsage);
      return 2;
    }
  if (argc < 2 || argc > 4 || argv[1][0] == '\0') {
    std::fputs(kUsage, stderr);
    return 2;
  }
  const std::string out = argv[1];
  double events = 1e7, ranks_d = 2;
  if ((argc > 2 && !parse_number(argv[2], events)) || (argc > 3 && !parse_number(argv[3], ranks_d)) ||
      !(events > 0 && events <= 1e9) || !(ranks_d >= 1 && ranks_d <= 64) || ranks_d != static_cast<int>(ranks_d)) {
    std::fprintf(stderr, "bench_make_trace: 0 < EVENTS <= 1e9 and RANKS an integer 1..64\n%s", kUsage);
    return 2;
  }
  const int ranks = static_cast<int>(ranks_d);
  try {
    const std::uint64_t written = write_trace(out, events, ranks);
    std::printf("bench_make_trace: %s: %llu trace records, %d ranks\n", out.c_str(), static_cast<unsigned long long>(written), ranks);
  } catch (const std::exception& e) {  // an OUT that cannot be written, a full disk
    std::fprintf(stderr, "bench_make_trace: %s\n", e.what());
    return 1;
  }
  return 0;
}
