// The advisor's time rules (exposed communication, data wait, stragglers) and the formatting; the
// memory rules are in advise_memory.cpp. Each rule fires only past its threshold and always says
// the numbers it read.
#include "advise_rules.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>

#include "memcomm/common/json_output.hpp"
#include "memcomm/common/percentile.hpp"

namespace memcomm::advise {

const char* topic_name(Topic t) {
  switch (t) {
    case Topic::Fragmentation: return "fragmentation";
    case Topic::Communication: return "communication";
    case Topic::DataWait: return "data";
    case Topic::Headroom: return "headroom";
    case Topic::Straggler: return "straggler";
    case Topic::Oom: return "oom";
    case Topic::Churn: return "churn";
  }
  return "?";
}

namespace detail {

uint32_t accumulation_of(const prof::Analysis& a) {
  std::map<uint32_t, size_t> seen;
  for (const auto& s : a.steps)
    if (s.micro_steps > 0) ++seen[s.micro_steps];
  const auto most = std::max_element(seen.begin(), seen.end(), [](const auto& x, const auto& y) { return x.second < y.second; });
  return most == seen.end() ? 0 : most->first;
}

namespace {

struct RankTime {
  uint64_t steps = 0;
  int64_t step_ns = 0, data_wait_ns = 0, compute_ns = 0, exposed_ns = 0, idle_ns = 0;
  int64_t first_begin = 0, first_step_ns = 0, first_wait_ns = 0;  // the rank's first step (Note [The first step's wait])
};

using RankTimes = std::map<uint32_t, RankTime>;

RankTimes per_rank_steps(const prof::Analysis& a) {
  RankTimes m;
  for (const auto& s : a.steps) {
    auto& t = m[s.rank];
    if (t.steps == 0 || s.begin < t.first_begin) t.first_begin = s.begin, t.first_step_ns = s.end - s.begin, t.first_wait_ns = s.data_wait_ns;
    ++t.steps;
    t.step_ns += s.end - s.begin;
    t.data_wait_ns += s.data_wait_ns;
    t.compute_ns += s.breakdown.compute_ns;
    t.exposed_ns += s.breakdown.exposed_comm_ns;
    t.idle_ns += s.breakdown.idle_ns;
  }
  return m;
}

// Note [What accumulation saves]: gradient synchronisation (all-reduce, reduce-scatter) runs once
// per optimizer step, so --accum 2 halves it per sample; the rest (all-to-all of expert or embedding
// parallelism, point-to-point, all-gather of sharded parameters) runs in every micro-batch and stays.
// A DLRM run whose communication was 69% all-to-all was promised half of all of it. The share of
// the matched collectives' time that is gradient synchronisation scales that saving, each collective
// counted from its first rank's arrival to its end: the exposed time it scales includes the wait for
// the last rank (skew), and an 8-rank DLRM's all-to-alls are mostly that wait (counted from the last
// arrival, its all-reduces were 80% of the time and the saving five times too large).
double gradient_sync_share(const prof::Analysis& a) {
  int64_t sync = 0, all = 0;
  for (const auto& c : a.collectives) {
    const int64_t held = c.time_ns + c.skew_ns;
    all += held;
    if (c.op == prof::CollOp::AllReduce || c.op == prof::CollOp::ReduceScatter) sync += held;
  }
  return all > 0 ? double(sync) / double(all) : 1.0;  // no timed collective: nothing says otherwise
}

// "--accum 2K doubles the samples per all-reduce", from the run's own K (K = 1 when not marked).
// Doubling the accumulation, in the run's own terms: memcomm-train marks its micro-steps (and so its
// --accum); a script's trace does not, so it is told the change, not a flag value it may already use.
// Either way the global batch doubles: each step takes longer, for twice the samples.
std::string doubled_accumulation(const prof::Analysis& a) {
  const uint32_t k = accumulation_of(a);
  if (k == 0)
    return "accumulate twice the micro-batches per all-reduce (DDP's no_sync() on all but the last of them), which "
           "doubles the global batch";
  return fmt::format("--accum {} doubles the samples per all-reduce{}, and the global batch", 2 * k,
                     k > 1 ? fmt::format(", from --accum {}", k) : std::string());
}

void communication_rule(const prof::Analysis& a, const RankTimes& times, const AdviseOptions& o,
                        std::vector<Advice>& out) {
  const RankTime* worst = nullptr;
  uint32_t worst_rank = 0;
  for (const auto& [rank, t] : times)
    if (t.steps && (!worst || t.exposed_ns * worst->step_ns > worst->exposed_ns * t.step_ns)) worst = &t, worst_rank = rank;
  if (!worst || worst->step_ns == 0 || double(worst->exposed_ns) / double(worst->step_ns) <= o.exposed_comm_threshold)
    return;
  const int64_t exposed = worst->exposed_ns / int64_t(worst->steps), step = worst->step_ns / int64_t(worst->steps);
  // Gradient buckets: the all-reduces that carry a bucket index.
  std::map<uint16_t, std::pair<uint64_t, int64_t>> buckets;  // bucket -> (bytes, summed time)
  std::map<uint16_t, int64_t> count;
  bool fp32 = false;
  for (const auto& c : a.collectives) {
    if (c.op != prof::CollOp::AllReduce || c.bucket == prof::kNoBucket) continue;
    buckets[c.bucket].first = c.bytes;
    buckets[c.bucket].second += c.time_ns;
    ++count[c.bucket];
    fp32 |= c.dtype == prof::DType::F32;
  }
  int64_t comm_per_step = 0, last_bucket = 0;
  uint64_t total_bytes = 0;
  for (const auto& [b, v] : buckets) {
    const int64_t mean = v.second / std::max<int64_t>(1, count[b]);
    comm_per_step += mean;
    total_bytes += v.first;
    last_bucket = mean;  // the highest index goes out last (Note [Buckets go out in order])
  }
  Advice adv;
  adv.topic = Topic::Communication;
  adv.saving_unit = "ms/step";
  adv.evidence = fmt::format("rank {}: {} of each {} step waits for communication ({:.0f}%)", worst_rank, format_ms(exposed),
                             format_ms(step), 100.0 * double(exposed) / double(step));
  if (!buckets.empty())
    adv.evidence += fmt::format("; {} gradient bucket(s), {} in all, all-reduce {} per step, last bucket {}",
                                buckets.size(), format_bytes(total_bytes), format_ms(comm_per_step), format_ms(last_bucket));
  // One bucket is no advice to split it: the first bucket closes at the parameter that takes it past
  // 1 MiB (Note [Gradient buckets] in memcomm/train/grad_sync.hpp; DDP's first bucket alike), so one
  // bucket is one parameter past that, which no cap splits (--bucket-mb 1 left a 2.5 MiB bucket whole).
  // The saving is a bound: the exposed time holds the wait for a slower rank, which fewer bytes do not
  // shorten (a CPU run whose waits were the other rank's lateness saved nothing with bf16).
  adv.at_most = true;
  if (const double sync = gradient_sync_share(a); sync == 0) {
    adv.change = "overlap the communication with compute: none of it is gradient synchronisation (all-reduce, "
                 "reduce-scatter), so accumulating micro-batches would not reduce it";
    adv.saving = 0;
  } else if (buckets.size() <= 1 || exposed > 2 * last_bucket) {
    adv.change = fp32 ? "halve the bytes on the wire (memcomm-train --grad-compression bf16; DDP's bf16_compress_hook), "
                        "or communicate less often (" + doubled_accumulation(a) + ")"
                      : "communicate less often: " + doubled_accumulation(a);
    adv.saving = double(exposed) * sync / 2e6;
    if (sync < 1) adv.evidence += fmt::format("; {:.0f}% of the collectives' time (all ranks) is gradient synchronisation", 100 * sync);
  } else {
    adv.change = "smaller buckets (memcomm-train --bucket-mb, DDP's bucket_cap_mb: half the current): only the last "
                 "bucket is left exposed";
    adv.saving = double(last_bucket) / 2e6;
  }
  out.push_back(adv);
}

// The data rule's change and saving: the whole wait per step, a bound (two more workers won back
// half of it, measured).
Advice data_wait_advice(int64_t wait_per_step_ns) {
  Advice adv;
  adv.topic = Topic::DataWait;
  adv.saving_unit = "ms/step";
  adv.saving = double(wait_per_step_ns) / 1e6;
  adv.at_most = true;
  adv.change = "feed the steps faster: more loader workers and a deeper prefetch (memcomm-train --workers, "
               "--prefetch; a DataLoader's num_workers, prefetch_factor, persistent_workers), pinned host memory on GPUs";
  return adv;
}

// Note [The first step's wait]: a rank's first step waits for its loader to start (spawned workers
// import torch: seconds), a cost paid once that more workers make longer, not shorter. Counted in,
// it made the mean wait of a 40-step run with two spawned workers 60% of a step, where the steps
// after it waited 4%, and the advice promised the whole mean back. So the rule reads the steps after
// each rank's first, where a rank has more than one.
std::optional<Advice> data_wait_from_steps(uint32_t rank, const RankTime& t, const AdviseOptions& o) {
  const bool after_first = t.steps > 1;
  const auto steps = int64_t(after_first ? t.steps - 1 : t.steps);
  const int64_t step_ns = after_first ? t.step_ns - t.first_step_ns : t.step_ns;
  const int64_t wait_ns = after_first ? t.data_wait_ns - t.first_wait_ns : t.data_wait_ns;
  if (!steps || step_ns <= 0 || double(wait_ns) / double(step_ns) <= o.data_wait_threshold) return std::nullopt;
  Advice adv = data_wait_advice(wait_ns / steps);
  adv.evidence = fmt::format("rank {} waits {} for data in each {} step ({:.0f}%{})", rank, format_ms(wait_ns / steps),
                             format_ms(step_ns / steps), 100.0 * double(wait_ns) / double(step_ns),
                             after_first ? ", the steps after its first" : "");
  return adv;
}

// Note [Batches for steps]
// A torch.profiler trace taken without a schedule has no ProfilerStep# spans, so no steps, and every
// per-step rule read nothing: a loop that waited for its DataLoader 36 ms of each 38 ms iteration (97%
// of the window idle in report) was told "nothing to change". Its DataLoader __next__ spans are still
// there (Note [Phases a torch.profiler trace names]), and a training loop takes one batch per
// iteration, so where a rank marks no steps each data wait stands for one: the waits after the first
// (Note [The first step's wait]) against the time from the first wait's end to the trace's end. A
// loop that takes two batches an iteration shows half the wait per "step" at the same share, so the
// share decides, and the evidence says what was counted.
std::optional<Advice> data_wait_from_batches(const prof::RankSummary& r, const AdviseOptions& o) {
  if (r.data_waits < 2) return std::nullopt;
  const auto batches = int64_t(r.data_waits - 1);
  const int64_t wait_ns = r.data_wait_ns - r.first_data_wait_ns, span_ns = r.end_ns - r.first_data_wait_end;
  if (span_ns <= 0 || double(wait_ns) / double(span_ns) <= o.data_wait_threshold) return std::nullopt;
  Advice adv = data_wait_advice(wait_ns / batches);
  adv.evidence = fmt::format("rank {} waits {} for data in each of its {} batches after the first, {:.0f}% of the {} "
                             "after it (the trace marks no steps: each DataLoader batch stands for one)",
                             r.rank, format_ms(wait_ns / batches), batches, 100.0 * double(wait_ns) / double(span_ns),
                             format_ms(span_ns));
  return adv;
}

void data_wait_rule(const prof::Analysis& a, const RankTimes& times, const AdviseOptions& o, std::vector<Advice>& out) {
  for (const prof::RankSummary& r : a.ranks) {  // in rank order
    const auto t = times.find(r.rank);
    auto adv = t != times.end() && t->second.steps ? data_wait_from_steps(r.rank, t->second, o)
                                                    : data_wait_from_batches(r, o);
    if (adv) {
      out.push_back(std::move(*adv));
      return;  // one piece of advice, from the rank that waits first in rank order
    }
  }
}

// The median of the other ranks' mean steps (the lower one of an even count): with two ranks the
// median of all of them was the straggler's own, and "274.4 ms against a median of 274.4 ms" said
// nothing, nor could a slow rank of two ever pass the step-time test.
int64_t others_median_step(const RankTimes& times, uint32_t who) {
  std::vector<double> means;
  for (const auto& [r, t] : times)
    if (r != who && t.steps) means.push_back(double(t.step_ns / int64_t(t.steps)));
  return static_cast<int64_t>(percentile(std::move(means), 0.5));  // Note [Nearest-rank percentile]
}

// Who started the matched collectives last, and how often (Note [Collectives the ranks disagree on]).
struct Arrivals {
  uint32_t last_most = 0;  // the rank last most often
  int64_t times_last = -1;
  int64_t matched = 0;
  int64_t mean_skew_ns = 0;
};

Arrivals late_arrivals(const prof::Analysis& a) {
  std::map<uint32_t, int64_t> late;  // rank -> collectives it started last
  int64_t skew_sum = 0;
  Arrivals out;
  for (const auto& c : a.collectives)
    if (c.matched() && !c.ranks_disagree) {
      ++late[c.straggler_rank];
      skew_sum += c.skew_ns;
      ++out.matched;
    }
  for (const auto& [r, n] : late)
    if (n > out.times_last) out.times_last = n, out.last_most = r;
  out.mean_skew_ns = out.matched ? skew_sum / out.matched : 0;
  return out;
}

int64_t mean_step_ns(const RankTime& t) { return t.steps ? t.step_ns / int64_t(t.steps) : 0; }

// What the straggler spends per step beyond the other ranks' mean: compute, data wait, idle.
std::vector<std::pair<const char*, int64_t>> excess_per_step(const RankTimes& times, uint32_t who) {
  const RankTime& me = times.at(who);
  RankTime others;
  uint64_t n_others = 0;
  for (const auto& [r, t] : times)
    if (r != who && t.steps) {
      others.compute_ns += t.compute_ns / int64_t(t.steps);
      others.data_wait_ns += t.data_wait_ns / int64_t(t.steps);
      others.idle_ns += t.idle_ns / int64_t(t.steps);
      ++n_others;
    }
  const auto per = [&](int64_t v) { return v / int64_t(std::max<uint64_t>(1, me.steps)); };
  const auto oth = [&](int64_t v) { return v / int64_t(std::max<uint64_t>(1, n_others)); };
  return {{"compute", per(me.compute_ns) - oth(others.compute_ns)},
          {"data wait", per(me.data_wait_ns) - oth(others.data_wait_ns)},
          {"idle (host work outside the measured phases)", per(me.idle_ns) - oth(others.idle_ns)}};
}

std::string signed_ms(int64_t ns) {
  const int64_t to_10us = ns / 10'000 * 10'000;  // toward zero: no "-0.00"
  return (to_10us >= 0 ? "+" : "") + format_ms(to_10us, 2);
}

// The advice on rank `who`; `skewed`: it was named by its late arrivals, else by its step time.
Advice straggler_advice(const RankTimes& times, uint32_t who, bool skewed, const Arrivals& arrivals, int64_t median) {
  const auto excess = excess_per_step(times, who);
  const auto top = *std::max_element(excess.begin(), excess.end(), [](auto& x, auto& y) { return x.second < y.second; });
  const int64_t telling = std::max<int64_t>(100'000, median / 100);  // an excess worth naming as the cause
  Advice adv;
  adv.topic = Topic::Straggler;
  adv.saving_unit = "ms/step";
  adv.saving = double(std::max<int64_t>(0, top.second)) / 1e6;
  adv.evidence = skewed ? fmt::format("rank {} starts {} of {} collectives last, {} behind on average; ", who,
                                      arrivals.times_last, arrivals.matched, format_ms(arrivals.mean_skew_ns))
                        : std::string();
  adv.evidence += fmt::format("its steps take {} against the other ranks' median of {}; ",
                              format_ms(mean_step_ns(times.at(who))), format_ms(others_median_step(times, who)));
  if (top.second > telling) {
    adv.change = fmt::format("rank {} holds the others back: look at its {} (its host, its data shard, its GPU's clocks)",
                             who, top.first);
    adv.evidence += fmt::format("it spends {} more per step in {}", format_ms(top.second), top.first);
  } else {  // late, yet no part of its steps is longer than the others': the cause is outside what was measured
    adv.change = fmt::format("rank {} holds the others back, and no phase of its steps is longer than the other "
                             "ranks' by more than {}: look outside the training loop (other processes on its host, "
                             "its network, its clocks)", who, format_ms(telling, 2));
    adv.evidence += fmt::format("against the others it spends {} in compute, {} in data wait, {} idle per step",
                                signed_ms(excess[0].second), signed_ms(excess[1].second), signed_ms(excess[2].second));
  }
  return adv;
}

void straggler_rule(const prof::Analysis& a, const RankTimes& times, const AdviseOptions& o,
                    std::vector<Advice>& out) {
  if (times.size() < 2) return;
  const Arrivals arrivals = late_arrivals(a);
  std::vector<double> means;
  for (const auto& [r, t] : times) means.push_back(double(mean_step_ns(t)));
  const auto median = static_cast<int64_t>(percentile(std::move(means), 0.5));  // the same rule as others_median_step
  // Being last in a collective by chance happens to each rank 1/W of the time: a straggler is last
  // more than three standard deviations above that, and late by a real share of a step.
  const double w = double(times.size()), expected = double(arrivals.matched) / w;
  const double sigma = std::sqrt(double(arrivals.matched) * (1.0 / w) * (1.0 - 1.0 / w));
  const bool skewed = arrivals.matched && double(arrivals.times_last) > expected + 3 * sigma &&
                      double(arrivals.mean_skew_ns) > o.straggler_threshold * double(median);
  // Enough matched collectives that a rank last in every one would stand out, and none does: nobody
  // holds the others back. A rank whose step is longer then started it earlier and waited in a
  // collective for the rest (the fastest rank's steps are the longest), so step time names a
  // straggler only where the collectives are too few to tell (none matched, or a handful).
  const bool arrivals_tell = double(arrivals.matched) > expected + 3 * sigma;
  if (!skewed && arrivals_tell) return;
  uint32_t who = arrivals.last_most;
  if (!skewed) {
    int64_t slowest = 0;
    for (const auto& [r, t] : times)
      if (mean_step_ns(t) > slowest) slowest = mean_step_ns(t), who = r;
    if (double(slowest) <= (1 + o.straggler_threshold) * double(others_median_step(times, who))) return;
  }
  out.push_back(straggler_advice(times, who, skewed, arrivals, median));
}

}  // namespace
}  // namespace detail

std::vector<Advice> advise(const prof::TraceSet& set, const prof::Analysis& a, const std::vector<std::string>& files,
                           const AdviseOptions& o) {
  std::vector<Advice> out;
  detail::fragmentation_rule(a, files, o, out);
  const auto times = detail::per_rank_steps(a);  // per rank: steps and where their time went
  detail::communication_rule(a, times, o, out);
  detail::data_wait_rule(a, times, o, out);
  detail::headroom_rule(set, a, o, out);
  detail::straggler_rule(a, times, o, out);
  return out;
}

std::string saving_text(const Advice& a) {
  const std::string bound = a.at_most ? "at most " : "";
  if (a.saving_unit == "bytes") return bound + format_bytes(uint64_t(a.saving));
  if (a.saving_unit == "calls") return bound + fmt::format("{:.0f} segment calls", a.saving);
  return bound + fmt::format("{:.1f} ms per step", a.saving);
}

std::string advice_to_text(const std::vector<Advice>& advice) {
  if (advice.empty()) return "nothing to change: no rule's threshold is crossed\n";
  std::string s;
  int n = 0;
  for (const auto& a : advice) {
    s += fmt::format("{}. [{}] {}\n   evidence: {}\n", ++n, topic_name(a.topic), a.change, a.evidence);
    if (a.saving > 0)
      s += fmt::format("   expected saving: {}\n", saving_text(a));
  }
  return s;
}

std::string advice_to_json(const std::vector<Advice>& advice) {
  nlohmann::json j = nlohmann::json::array();
  for (const auto& a : advice)
    j.push_back({{"topic", topic_name(a.topic)}, {"change", a.change}, {"evidence", a.evidence},
                 {"saving", a.saving}, {"saving_unit", a.saving_unit}, {"saving_at_most", a.at_most},
                 {"saving_text", saving_text(a)}});
  return json_text(j, 2);
}

}  // namespace memcomm::advise
