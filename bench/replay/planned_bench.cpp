// bench_planned [DIR|FILE...]: what planned mode buys over the caching path, side by side in one run.
//  1. A marked training loop (step markers, as the trainer gives): peak reserved / peak live and
//     source calls over iterations 5..N, after reset_peak_stats() at the end of iteration 4, so the
//     first iterations (which both modes must learn online) do not hide the steady state.
//  2. Every snapshot (default: ../shared/traces/pytorch-snapshots), with detected repetition: the whole
//     trace, and its second half alone (peaks reset at the middle request), plus what the plan covers:
//     allocations served from it, iterations that left it, and its last iteration's size and arena.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "memcomm/allocator/allocator.hpp"
#include "memcomm/allocator/sources.hpp"
#include "memcomm/replay/requests.hpp"
#include "snapshot_args.hpp"

namespace fs = std::filesystem;
namespace al = memcomm::alloc;
namespace rp = memcomm::replay;

namespace {

constexpr double kMiB = 1048576.0;

std::unique_ptr<al::CachingAllocator> make(bool planned) {
  al::AllocatorConfig c;
  c.planned = planned;
  return std::make_unique<al::CachingAllocator>(al::make_source("simulated"), c);
}

// A training step whose activations stack up through the forward pass and go in the backward pass,
// with temporaries and gradient buckets (sizes scale with `shape`). Parameters live across steps.
void training_step(al::CachingAllocator& a, std::size_t shape, std::vector<void*>& params) {
  constexpr std::size_t MiB = std::size_t(1) << 20;
  if (params.empty())
    for (int i = 0; i < 8; ++i) params.push_back(a.allocate((std::size_t(i) + 1) * 3 * MiB + 1000));
  std::vector<void*> acts;
  for (int l = 0; l < 24; ++l) {
    acts.push_back(a.allocate(shape * (std::size_t(l % 5) + 1) * MiB + 777));
    void* tmp = a.allocate(shape * (std::size_t(l % 3) + 1) * 300 * 1024 + 13);
    a.deallocate(tmp);
  }
  std::vector<void*> grads;
  for (int l = 23; l >= 0; --l) {
    grads.push_back(a.allocate(shape * 2 * MiB + 5));
    a.deallocate(acts[std::size_t(l)]);
    if (grads.size() > 3) {
      a.deallocate(grads.front());
      grads.erase(grads.begin());
    }
  }
  for (void* g : grads) a.deallocate(g);
}

void marked_loop() {
  std::printf("## Marked training loop: iterations 5..20 (peaks reset after iteration 4)\n\n");
  std::printf("| shape | caching res/live | planned res/live | caching calls | planned calls | planned allocs |"
              " all iterations: caching | planned |\n");
  std::printf("|---:|---:|---:|---:|---:|---:|---|---|\n");
  for (std::size_t shape : {1, 4, 16}) {
    double ratio[2], all_ratio[2];
    long long calls[2], all_calls[2], planned_allocs = 0;
    for (int mode = 0; mode < 2; ++mode) {
      auto a = make(mode == 1);
      std::vector<void*> params;
      long long calls_at_reset = 0;
      double first_ratio = 0;
      for (int it = 0; it < 20; ++it) {
        training_step(*a, shape, params);
        a->step_marker();
        if (it == 3) {  // a plan is packed from an iteration that repeated the one before (Note [Reordered iterations])
          first_ratio = double(a->stats().reserved_bytes.peak) / double(a->stats().requested_bytes.peak);
          a->reset_peak_stats();
          calls_at_reset = a->stats().source_calls();
        }
      }
      const al::DeviceStats s = a->stats();
      ratio[mode] = double(s.reserved_bytes.peak) / double(s.requested_bytes.peak);
      calls[mode] = s.source_calls() - calls_at_reset;
      all_calls[mode] = s.source_calls();
      all_ratio[mode] = std::max(first_ratio, ratio[mode]);
      if (mode == 1) planned_allocs = s.num_planned_allocs;
      for (void* p : params) a->deallocate(p);
    }
    std::printf("| %zu | %.3f | %.3f | %lld | %lld | %lld | %.3f, %lld calls | %.3f, %lld calls |\n", shape, ratio[0],
                ratio[1], calls[0], calls[1], planned_allocs, all_ratio[0], all_calls[0], all_ratio[1], all_calls[1]);
  }
}

struct Run {
  double ratio = 0, late_ratio = 0;  // peak reserved / peak live: whole trace, second half
  long long calls = 0, late_calls = 0;
  long long planned = 0, deviations = 0, allocs = 0;
  al::MemorySummary summary;  // at the end of the trace
};

Run replay(const rp::DeviceRequests& dev, bool planned) {
  Run r;
  auto a = make(planned);
  std::vector<void*> addr(dev.block_count, nullptr);
  std::vector<std::uint64_t> size(dev.block_count, 0);
  std::uint64_t live = 0, late_live = 0;
  long long calls_mid = 0;
  std::int64_t first_half_peak = 0;  // reserved peak before the reset
  const std::size_t mid = dev.requests.size() / 2;
  for (std::size_t i = 0; i < dev.requests.size(); ++i) {
    if (i == mid) {
      first_half_peak = a->stats().reserved_bytes.peak;
      a->reset_peak_stats();
      calls_mid = a->stats().source_calls();
      late_live = live;
    }
    const rp::Request& q = dev.requests[i];
    if (q.op == rp::Request::Op::alloc) {
      size[q.block] = q.size ? q.size : 1;
      addr[q.block] = a->allocate(size[q.block], al::StreamId(q.stream));
      live += size[q.block];
      ++r.allocs;
      if (i >= mid) late_live = std::max(late_live, live);
    } else if (q.op == rp::Request::Op::free && addr[q.block]) {
      a->deallocate(addr[q.block]);
      addr[q.block] = nullptr;
      live -= size[q.block];
    } else if (q.op == rp::Request::Op::step) {
      a->step_marker();
    }
  }
  const al::DeviceStats s = a->stats();
  r.summary = a->memory_summary();
  r.late_ratio = double(s.reserved_bytes.peak) / double(late_live);
  r.late_calls = s.source_calls() - calls_mid;
  r.calls = s.source_calls();
  r.planned = s.num_planned_allocs;
  r.deviations = s.num_plan_deviations;
  r.ratio = double(std::max(first_half_peak, s.reserved_bytes.peak)) / double(dev.peak_live);
  for (void* p : addr)
    if (p) a->deallocate(p);
  return r;
}

}  // namespace

static int report(const std::vector<std::string>& files) {
  marked_loop();
  std::printf("\n## Snapshots, detected repetition (res/live: peak reserved / peak live requested bytes)\n\n");
  std::printf("| file | dev | caching res/live, calls | planned res/live, calls | 2nd half caching | 2nd half planned |"
              " planned allocs / allocs | left plan | last plan: allocs, in arena, arena MiB | live MiB |\n");
  std::printf("|---|---:|---|---|---|---|---|---:|---|---:|\n");
  for (const auto& f : files) {
    const rp::TraceRequests t = rp::load_trace(f);
    for (const auto& dev : t.devices) {
      const Run c = replay(dev, false), p = replay(dev, true);
      std::printf("| %s | %d | %.3f, %lld | %.3f, %lld | %.3f, %lld | %.3f, %lld | %lld / %lld | %lld | %llu, %llu, %.0f | %.0f |\n",
                  fs::path(f).filename().c_str(), dev.device, c.ratio, c.calls, p.ratio, p.calls, c.late_ratio,
                  c.late_calls, p.late_ratio, p.late_calls, p.planned, p.allocs, p.deviations,
                  static_cast<unsigned long long>(p.summary.planned_iteration_allocs),
                  static_cast<unsigned long long>(p.summary.planned_in_arena), p.summary.planned_arena_bytes / kMiB,
                  dev.peak_live / kMiB);
    }
  }
  std::printf("\n(2nd half: peaks reset at the middle request; calls = source allocations + maps in that half.\n"
              " last plan: the plan in force at the end of the trace, if any.)\n");
  return 0;
}

int main(int argc, char** argv) {
  const std::vector<std::string> files = snapshot_files(argc, argv, "bench_planned [DIR|FILE...]");
  return run_reporting_errors("bench_planned", [&] { return report(files); });
}
