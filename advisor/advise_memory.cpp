// Memory advice: fragmentation (with a replay of the trace's own allocations through the
// allocator policies, so the saving is measured, not guessed) and unused headroom.
#include "advise_rules.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <map>

#include "memcomm/replay/replayer.hpp"
#include "memcomm/trace/allocations.hpp"
#include "memcomm/replay/requests.hpp"

namespace memcomm::advise::detail {

void fragmentation_rule(const prof::Analysis& a, const std::vector<std::string>& files, const AdviseOptions& o,
                        std::vector<Advice>& out) {
  const prof::RankSummary* worst = nullptr;
  double worst_f = 0;
  for (const auto& r : a.ranks) {
    if (r.peak_reserved == 0) continue;
    const double f = 1.0 - double(r.peak_allocated) / double(r.peak_reserved);
    if (f > worst_f) worst_f = f, worst = &r;
  }
  if (!worst || worst_f <= o.fragmentation_threshold) return;
  Advice adv;
  adv.topic = Topic::Fragmentation;
  adv.saving_unit = "bytes";
  adv.evidence = fmt::format("rank {}: peak reserved {}, peak allocated {}: {:.1f}% of reserved memory holds no tensor",
                             worst->rank, format_bytes(worst->peak_reserved), format_bytes(worst->peak_allocated), 100 * worst_f);
  adv.change = "use an allocator policy that fragments less: memcomm's caching allocator or expandable segments";
  if (!o.replay) {
    adv.saving = double(worst->peak_reserved - worst->peak_allocated);
    adv.evidence += " (replay skipped: the saving is at most the unused part)";
    out.push_back(adv);
    return;
  }
  // Replay every file; per policy, the largest peak reserved over the ranks' devices.
  const std::vector<std::string> policies = {"pytorch", "pytorch-expandable", "memcomm"};
  std::map<std::string, uint64_t> peak;
  uint64_t live = 0;
  try {
    for (const auto& f : files) {
      const auto trace = replay::load_trace(f);
      for (const auto& r : replay::replay_all(trace, policies, 0)) {
        peak[r.policy] = std::max(peak[r.policy], r.peak_reserved);
        live = std::max(live, r.peak_live);
      }
    }
  } catch (const std::exception& e) {
    adv.evidence += fmt::format(" (replay failed: {})", e.what());
    out.push_back(adv);
    return;
  }
  if (peak.empty()) {
    out.push_back(adv);
    return;
  }
  auto best = std::min_element(peak.begin(), peak.end(), [](auto& x, auto& y) { return x.second < y.second; });
  adv.evidence += fmt::format("; replaying the trace's allocations (peak live {}):", format_bytes(live));
  for (const auto& p : policies)
    if (peak.count(p)) adv.evidence += fmt::format(" {} {}", p, format_bytes(peak[p]));
  const uint64_t now = worst->peak_reserved;
  adv.saving = best->second < now ? double(now - best->second) : 0.0;
  // Fragmentation no policy removes (rounding, a cap on how finely memory is mapped) is not advice.
  if (adv.saving < 0.05 * double(now)) return;
  if (best->first == "pytorch-expandable")
    adv.change = "use expandable segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True with PyTorch's allocator)";
  else if (best->first == "memcomm")
    adv.change = "use memcomm's caching allocator with expandable segments (memcomm-train --allocator memcomm; "
                 "memcomm.use_allocator(device) in Python, expandable=True by default)";
  else
    adv.change = "keep PyTorch's allocator: the replay finds nothing that reserves less";
  adv.change += fmt::format(": {} would reserve {} instead of {}", best->first, format_bytes(best->second), format_bytes(now));
  out.push_back(adv);
}

namespace {
// The bytes live at a rank's peak that the micro-batch does not scale: parameters, their gradients,
// optimizer state and communication buffers (the categories the recorder named); the most over ranks.
uint64_t fixed_bytes_at_peak(const prof::TraceSet& set) {
  uint64_t most = 0;
  for (const auto& r : set.ranks) {
    const prof::Allocations a = prof::rank_allocations(r);
    const prof::LivePeak peak = prof::peak_live(a);
    uint64_t fixed = 0;
    for (const auto& x : a.list) {
      const auto c = prof::MemCategory(x.category);
      const bool scales = c == prof::MemCategory::Activation || c == prof::MemCategory::Input ||
                          c == prof::MemCategory::Temporary || c == prof::MemCategory::Unknown;
      if (!scales && x.live_at(peak.t)) fixed += x.size;
    }
    most = std::max(most, fixed);
  }
  return most;
}

// The run reserved more than the limit it is to run under (--memory-limit: a smaller device, a
// share of one): the micro-batch must shrink, as far as the headroom rule would let it grow. Only
// the part that scales with the micro-batch shrinks with it: taken as all of it, a run whose
// parameters and optimizer state alone were over the limit was told to lower its micro-batch 3.4x,
// and none fitted, batch 1 included.
void over_limit(const char* what, uint64_t peak, uint64_t limit, uint64_t fixed, std::vector<Advice>& out) {
  Advice adv;
  adv.topic = Topic::Headroom;
  adv.saving_unit = "bytes";
  adv.saving = double(peak - limit);  // what must go
  adv.evidence = fmt::format("{} {} per rank, over the limit of {} by {}", what, format_bytes(peak),
                             format_bytes(limit), format_bytes(peak - limit));
  if (fixed > 0)
    adv.evidence += fmt::format("; {} of it parameters, gradients, optimizer state and communication buffers, which "
                                "do not shrink with the micro-batch", format_bytes(fixed));
  const double room = 0.9 * double(limit) - double(fixed);
  if (room <= 0 || fixed >= peak) {
    adv.change = "the run does not fit the limit at any micro-batch: what does not shrink with it is over 90% of the "
                 "limit; shard the parameters, gradients and optimizer state (FSDP, ZeRO), keep them in lower "
                 "precision, or use a smaller model";
    out.push_back(adv);
    return;
  }
  // What scales shrinks with the micro-batch at most linearly: dividing it by this brings 90% of the limit.
  const double factor = double(peak - fixed) / room;
  adv.change = fmt::format("the run does not fit the limit: lower the micro-batch (memcomm-train --batch-size; a "
                           "DataLoader's batch_size) at least {:.1f}x and raise the accumulation to match, or let "
                           "memcomm-tune (memcomm.tune) find the fastest fit",
                           factor);
  out.push_back(adv);
}

// What the headroom buys: a micro-batch up to `factor` x larger, with the accumulation lowered to match.
// A run that accumulates K micro-batches keeps its global batch with a micro-batch d x larger and
// K / d micro-batches, d a divisor of K (a run with accumulation 2 was told 230x); one that
// accumulates nothing would change its global batch.
std::string larger_micro_batch(double factor, uint32_t accum) {
  const std::string tune = "let memcomm-tune (memcomm.tune) find the fastest fit";
  uint32_t by = 1;  // the largest divisor of the accumulation that the memory holds
  for (uint32_t d = 2; d <= accum && d <= factor; ++d)
    if (accum % d == 0) by = d;
  // Not marked (torch.profiler and Python traces mark no micro-steps): whether the run accumulates is
  // the script's to say. Told "raise the micro-batch 460x and lower the accumulation to match", a run
  // without accumulation would have changed its global batch.
  if (accum == 0)
    return fmt::format("the memory holds a micro-batch about {:.1f}x larger: where the run accumulates gradients, "
                       "raise the micro-batch (memcomm-train --batch-size; a DataLoader's batch_size) and lower the "
                       "accumulation to match; where it does not, a larger micro-batch is a larger global batch, "
                       "which needs a learning rate to match; or {}",
                       factor, tune);
  if (by > 1)
    return fmt::format("raise the micro-batch {}x (--batch-size) and lower --accum from {} to {} (the memory holds "
                       "about {:.1f}x), or {}",
                       by, accum, accum / by, factor, tune);
  if (accum > 1) {  // the memory is what falls short of the accumulation's smallest step
    uint32_t smallest = 2;
    while (accum % smallest != 0) ++smallest;
    return fmt::format("the memory holds a micro-batch about {:.1f}x larger, short of the {}x that --accum {} allows at "
                       "the same global batch (a lower bound: memcomm-tune (memcomm.tune) measures whether it fits)",
                       factor, smallest, accum);
  }
  return fmt::format("the memory holds a micro-batch about {:.1f}x larger, but the run accumulates no micro-batches: "
                     "a larger one is a larger global batch, which needs a learning rate to match; for another global "
                     "batch, {}",
                     factor, tune);
}

}  // namespace

void headroom_rule(const prof::TraceSet& set, const prof::Analysis& a, const AdviseOptions& o, std::vector<Advice>& out) {
  uint64_t limit = o.memory_limit;
  if (limit == 0)  // the allocator's DeviceTotal samples (its cap or the device's memory)
    for (const auto& r : set.ranks)
      for (const auto& e : r.events)
        if (e.kind == prof::EventKind::MemSample) {
          const auto s = e.as<prof::MemSampleEvent>();
          if (s.metric == prof::MemMetric::DeviceTotal) limit = std::max<uint64_t>(limit, s.value);
        }
  uint64_t peak = 0, allocated = 0;
  for (const auto& r : a.ranks) peak = std::max(peak, r.peak_reserved), allocated = std::max(allocated, r.peak_allocated);
  // A trace that records no reserved bytes (torch.profiler's [memory] events of host memory hold 0
  // there) is judged by what it allocated, the least its allocator held; the advice says which.
  const char* what = "peak reserved";
  if (peak == 0 && allocated > 0) peak = allocated, what = "peak allocated (the trace records no reserved bytes)";
  if (limit == 0 || peak == 0) return;
  // What never scales (a fold of every rank's allocations): found only where advice follows.
  const auto fixed_part = [&set, peak] { return std::min(fixed_bytes_at_peak(set), peak); };
  if (peak > limit) return over_limit(what, peak, limit, fixed_part(), out);
  const double unused = 1.0 - double(peak) / double(limit);
  if (unused <= o.headroom_threshold) return;
  const uint64_t fixed = fixed_part();
  Advice adv;
  adv.topic = Topic::Headroom;
  adv.saving_unit = "bytes";
  adv.saving = double(limit - peak);
  // What scales with the micro-batch grows with it at most linearly, beside what does not (as
  // over_limit reads it): 90% of the limit holds at least this factor. Taken as all of the peak, a
  // run whose model and optimizer state held most of it was told 1.9x where 32x fitted.
  const double factor = peak > fixed ? (0.9 * double(limit) - double(fixed)) / double(peak - fixed)
                                     : 0.9 * double(limit) / double(peak);
  if (factor < 1.05) return;  // what does not scale leaves no room to grow
  adv.change = larger_micro_batch(factor, accumulation_of(a));
  adv.evidence = fmt::format("{} {} of {} per rank: {:.0f}% of the memory is never used", what, format_bytes(peak),
                             format_bytes(limit), 100 * unused);
  out.push_back(adv);
}

}  // namespace memcomm::advise::detail
