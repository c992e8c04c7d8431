#include <memcomm/view/builder.hpp>
#include <memcomm/view/synthetic.hpp>

#include <random>

namespace memcomm::view {

// A data-parallel run: per step, data-wait / forward / backward / optimizer phases; dense kernels
// on `streams` streams; bucketed all-reduces during backward with a rotating straggler; and
// allocator traffic (activations allocated in forward, freed in backward). ~88% of the events
// are kernels, as in real GPU traces.
Timeline make_synthetic(const SyntheticOptions& opt) {
  TimelineBuilder b;
  std::mt19937_64 rng(opt.seed);
  const std::uint32_t kernels_per_step_per_stream = 2000;
  const std::uint64_t per_step = static_cast<std::uint64_t>(opt.ranks) *
                                 (opt.streams * kernels_per_step_per_stream + 5 + 16 + 2 * 128);
  const std::uint64_t steps = std::max<std::uint64_t>(1, opt.events / per_step);
  const TimeNs step_ns = 100'000'000;  // 100 ms
  std::vector<std::uint32_t> names;
  for (int i = 0; i < 64; ++i) names.push_back(b.intern("kernel_" + std::to_string(i) + "_gemm"));
  const std::uint32_t ph_step = b.intern("step"), ph_wait = b.intern("data_wait"), ph_fwd = b.intern("forward"),
                      ph_bwd = b.intern("backward"), ph_opt = b.intern("optimizer");
  std::uniform_int_distribution<int> name_pick(0, 63);
  for (std::uint64_t s = 0; s < steps; ++s) {
    const TimeNs t = static_cast<TimeNs>(s) * step_ns;
    for (std::uint32_t r = 0; r < opt.ranks; ++r) {
      const TimeNs jitter = static_cast<TimeNs>(rng() % 2'000'000);
      b.span(r, LaneKind::Phase, 0, ph_step, t, t + step_ns - 1000);
      b.span(r, LaneKind::Phase, 0, ph_wait, t, t + 5'000'000 + jitter);
      b.span(r, LaneKind::Phase, 0, ph_fwd, t + 8'000'000, t + 40'000'000);
      b.span(r, LaneKind::Phase, 0, ph_bwd, t + 40'000'000, t + 85'000'000);
      b.span(r, LaneKind::Phase, 0, ph_opt, t + 88'000'000, t + 98'000'000);
      for (std::uint32_t st = 0; st < opt.streams; ++st) {
        TimeNs k = t + 8'000'000;
        const TimeNs slot = 90'000'000 / kernels_per_step_per_stream;  // 45 us
        for (std::uint32_t i = 0; i < kernels_per_step_per_stream; ++i, k += slot)
          b.span(r, LaneKind::Kernel, 7 + st, names[static_cast<std::size_t>(name_pick(rng))], k,
                 k + 5'000 + static_cast<TimeNs>(rng() % 35'000));
      }
      for (std::uint32_t c = 0; c < 16; ++c) {
        const TimeNs cs = t + 45'000'000 + c * 2'500'000 + ((s + c) % opt.ranks == r ? 900'000 : 0);
        b.collective(r, "all_reduce", 25u << 20, 0, s * 16 + c, cs, cs + 1'500'000, opt.ranks);
      }
      std::uint64_t addr = 0x7f0000000000ull;
      b.alloc_event(r, {t, addr, 1ull << 30, 0, prof::EventKind::SegmentAlloc});
      for (std::uint32_t a = 0; a < 128; ++a) {
        const std::uint64_t sz = (1 + a % 7) << 20;
        b.alloc_event(r, {t + 8'000'000 + a * 250'000, addr + 1024 + (static_cast<std::uint64_t>(a) << 23), sz, 0, prof::EventKind::Alloc});
      }
      for (std::uint32_t a = 0; a < 128; ++a) {
        const std::uint64_t sz = (1 + (127 - a) % 7) << 20;
        b.alloc_event(r, {t + 40'000'000 + a * 300'000, addr + 1024 + (static_cast<std::uint64_t>(127 - a) << 23), sz, 0,
                          prof::EventKind::FreeCompleted});
      }
      b.alloc_event(r, {t + step_ns - 2000, addr, 1ull << 30, 0, prof::EventKind::SegmentFree});
    }
  }
  return b.finish("synthetic:" + std::to_string(opt.events));
}

}  // namespace memcomm::view
