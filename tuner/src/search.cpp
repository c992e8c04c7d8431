// The tuner's search (see search.hpp). Three phases, each a function of agreed probe results:
//
//  1. Boundary. The largest micro-batch b that runs without running out of memory. Probes b0 (the
//     smallest candidate) and a second point near 8*b0, fits peak allocated(b) = a + c*b by least
//     squares, scales it by the largest reserved/allocated ratio seen (the allocator's overhead),
//     and probes the largest candidate predicted to fit, then the one above it to confirm. Each
//     successful probe refines the fit (and a fit of reserved bytes of its own, once two points
//     exist); once a prediction is wrong, the search stays near it: a failure bounds a bisection,
//     a cautious miss gallops upwards (2, 4, 8... candidates) until the first failure. With memory
//     that is linear in b this takes 4 probes; the bound is ceil(log2(candidates)) + 3. When even
//     the smallest candidate runs out while it accumulates, the whole per-rank batch in one step is
//     probed once (Note [Accumulation needs a gradient more]).
//  2. Speed. Among candidates that fit with the safety margin (Note [Safety margin]), measure from
//     the largest down by halving while throughput holds up, then the neighbours of the best: the
//     fastest is often neither the largest nor a power of two.
//  3. Buckets. With more than one rank, the winner is measured at each candidate bucket size; the
//     one with the fastest step (least exposed communication) wins.
//
// Note [Loader allowance]: how many prefetched batches are alive at a step's peak depends on
// timing (a data-bound probe finds the ring empty, a run's first step finds it full), so a probe
// can see fewer than a long run will. A recommendation therefore also leaves room for the loader's
// whole ring, as if the probe had seen none of it.
//
// Note [Safety margin]: a probe runs a few steps, a training run thousands; reserved memory can
// creep as fragmentation shifts. A recommendation's peak reserved bytes must fit the limit and its
// peak allocated bytes must stay half the fragmentation measured at the largest micro-batch that fit
// below it, at least 2% and at most 25%, so a run whose allocator fragments more keeps more room
// (and one probe that fragmented wildly does not rule out every batch). Reserved bytes grow in
// whole segments, so the margin is taken on what the tensors really hold.
#include "memcomm/tuner/search.hpp"

#include <memcomm/common/percentile.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>

namespace memcomm::tune {

const char* purpose_name(TrialPurpose p) {
  switch (p) {
    case TrialPurpose::Fit: return "fit";
    case TrialPurpose::Boundary: return "boundary";
    case TrialPurpose::Speed: return "speed";
    case TrialPurpose::Bucket: return "bucket";
  }
  return "?";
}

std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> lo, hi;
  for (int64_t d = 1; d <= n / d; ++d)  // not d * d <= n: that overflows near INT64_MAX
    if (n % d == 0) {
      lo.push_back(d);
      if (d != n / d) hi.push_back(n / d);
    }
  lo.insert(lo.end(), hi.rbegin(), hi.rend());
  return lo;
}

double step_noise(std::vector<double> step_times) {
  if (step_times.size() < 2) return 0;
  std::sort(step_times.begin(), step_times.end());
  const double median = percentile_sorted(step_times, 0.5);  // Note [Nearest-rank percentile]
  return median > 0 ? (step_times.back() - step_times.front()) / (2 * median) : 0.0;
}

double probe_step_time(double early_total, std::vector<double> last, int64_t accum, int64_t measured) {
  if (last.empty()) return 0;
  const double early = measured > 1 ? early_total / double((measured - 1) * int64_t(last.size())) : 0.0;
  return double(accum - 1) * early + percentile(std::move(last), 0.5);
}

PeakFit fit_peak(const std::vector<std::pair<double, double>>& pts) {
  PeakFit f;
  if (pts.empty()) return f;
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const auto& [x, y] : pts) sx += x, sy += y, sxx += x * x, sxy += x * y;
  const double n = static_cast<double>(pts.size()), den = n * sxx - sx * sx;
  if (pts.size() < 2 || std::abs(den) < 1e-9) {
    f.c = pts.front().second / std::max(pts.front().first, 1.0);
    f.a = 0;
  } else {
    f.c = (n * sxy - sx * sy) / den;
    f.a = (sy - f.c * sx) / n;
  }
  f.valid = pts.size() >= 2 && std::abs(den) >= 1e-9 && f.c > 0;
  return f;
}

namespace {

class Search {
 public:
  Search(const SearchConfig& cfg, const ProbeFn& probe, SearchOutcome& out)
      : cfg_(cfg), probe_(probe), out_(out) {
    per_rank_ = out.global_batch / cfg.world;
    if (cfg.any_micro_batch) {
      if (per_rank_ > kMaxAnyMicroBatchCandidates)
        throw std::invalid_argument("--any-micro-batch: a per-rank batch of " + std::to_string(per_rank_) +
                                    " would make as many candidates; at most " +
                                    std::to_string(kMaxAnyMicroBatchCandidates));
      for (int64_t b = 1; b <= per_rank_; ++b) cand_.push_back(b);
    } else {
      cand_ = divisors(per_rank_);
    }
    // A micro-batch larger than the rank's shard cannot be drawn: a usage error, had it been probed.
    // One smaller than min_micro_batch cannot step.
    const auto outside = [&](int64_t b) {
      return b < cfg.min_micro_batch || (cfg.max_micro_batch > 0 && b > cfg.max_micro_batch);
    };
    cand_.erase(std::remove_if(cand_.begin(), cand_.end(), outside), cand_.end());
  }

  void run() {
    const bool ok = (cfg_.strategy == Strategy::Lightning ? boundary_lightning()
                     : cfg_.strategy == Strategy::Grid    ? boundary_grid()
                                                          : boundary_memcomm()) ||
                    whole_batch_fits();
    out_.boundary_probes = static_cast<int>(out_.trials.size());
    if (!ok) return;
    set_margin();
    if (cfg_.fit_only) return recommend_largest();
    if (cfg_.strategy == Strategy::Memcomm) speed_memcomm();
    recommend_fastest();
    if (out_.recommendation && cfg_.world > 1) tune_buckets();
  }

 private:
  int64_t accum_for(int64_t b) const { return std::max<int64_t>(1, per_rank_ / b); }
  bool budget_left(int kept = 0) const { return static_cast<int>(out_.trials.size()) + kept < cfg_.max_trials; }
  // Trials the boundary search leaves: fit-only over any micro-batch may need one more, for the
  // largest divisor below the boundary (recommend_largest), which the search steps over.
  int kept_for_recommendation() const { return cfg_.fit_only && cfg_.any_micro_batch && cfg_.max_trials > 1 ? 1 : 0; }
  size_t index_of(int64_t b) const {
    return static_cast<size_t>(std::lower_bound(cand_.begin(), cand_.end(), b) - cand_.begin());
  }
  // Largest candidate <= v (the first one when v is below all).
  size_t floor_index(int64_t v) const {
    auto it = std::upper_bound(cand_.begin(), cand_.end(), v);
    return it == cand_.begin() ? 0 : static_cast<size_t>(it - cand_.begin() - 1);
  }

  double reserved_ratio() const {
    double r = 1.0;
    for (const auto& t : out_.trials)
      if (!t.result.oom && t.result.peak_allocated > 0 && t.result.peak_reserved > 0)
        r = std::max(r, double(t.result.peak_reserved) / double(t.result.peak_allocated));
    return r;
  }
  // Reserved bytes: their own linear fit once it exists (segment rounding averages out), else the
  // allocated fit scaled by the largest reserved/allocated ratio seen.
  double predicted_reserved(int64_t b) const {
    return reserved_fit_.valid ? reserved_fit_.at(double(b)) : fit_.at(double(b)) * reserved_ratio();
  }

  const Trial& probe(int64_t b, TrialPurpose why, double bucket_mb) {
    const bool default_bucket = bucket_mb == cfg_.bucket_mb;
    if (default_bucket)
      if (auto it = done_.find(b); it != done_.end()) return out_.trials[it->second];
    Trial t;
    t.purpose = why;
    t.request = {b, accum_for(b), bucket_mb, cfg_.measured_steps};
    if (fit_.valid) {
      t.predicted_peak_allocated = static_cast<int64_t>(fit_.at(double(b)));
      t.predicted_peak_reserved = static_cast<int64_t>(predicted_reserved(b));
    }
    t.result = probe_(t.request);
    if (!t.result.oom && t.result.step_s > 0)
      t.samples_per_s = double(b * t.request.accum * cfg_.world) / t.result.step_s;
    out_.trials.push_back(t);
    const size_t idx = out_.trials.size() - 1;
    if (!default_bucket) return out_.trials[idx];
    done_[b] = idx;
    if (t.result.oom) {
      if (out_.smallest_infeasible == 0 || b < out_.smallest_infeasible) out_.smallest_infeasible = b;
    } else {
      out_.largest_feasible = std::max(out_.largest_feasible, b);
      if (t.result.peak_allocated >= 0) {
        points_.emplace_back(double(b), double(t.result.peak_allocated));
        fit_ = fit_peak(points_);
      }
      if (t.result.peak_reserved >= 0) {
        reserved_points_.emplace_back(double(b), double(t.result.peak_reserved));
        reserved_fit_ = fit_peak(reserved_points_);
      }
    }
    return out_.trials[idx];
  }

  bool fits(size_t i, TrialPurpose why) { return !probe(cand_[i], why, cfg_.bucket_mb).result.oom; }

  // Note [Accumulation needs a gradient more]: a micro-step after the first adds its gradients into
  // the .grad tensors the first one left, and holds both while it adds; a step without accumulation
  // hands its gradients over as they are. So a model whose state nearly fills the limit can run out
  // at every micro-batch that accumulates and still fit the rank's whole batch in one step (2 MiB of
  // parameters with momentum under 8 MiB: b = 1 with K = 64 ran out, b = 64 with K = 1 peaked at
  // 6.8 MiB), and a search that assumes peaks grow with b said nothing fits. When none does with
  // accumulation, the whole batch is probed once.
  bool whole_batch_fits() {
    const size_t whole = cand_.size() - 1;
    if (cand_.empty() || cand_[whole] != per_rank_ || accum_for(cand_[0]) == 1 || done_.count(per_rank_) ||
        !budget_left() || !fits(whole, TrialPurpose::Fit))
      return false;
    out_.failure.clear();
    out_.batch_note += fmt::format("{}every micro-batch tried that accumulates ran out of memory (adding into the "
                                   "gradients holds a second copy while it adds); the whole per-rank batch of {} "
                                   "in one step fits", out_.batch_note.empty() ? "" : "; ", per_rank_);
    return true;
  }

  bool first_fits() {
    if (fits(0, TrialPurpose::Fit)) return true;
    out_.failure = "even micro-batch " + std::to_string(cand_[0]) + " runs out of memory under the limit";
    return false;
  }

  // Note [A fit that is right but cautious]: where memory grows more slowly than linearly in b
  // (activations that stop growing, a cache that fills), a line through the probes overestimates
  // every larger b, so each prediction fits and moves lo up a little: one MLP took 22 probes to
  // climb from 1030 to its boundary of 1890, where bisection needs 10. A prediction that fits and
  // climbs is trusted once; a second in a row means the fit lags the memory, and the search gallops
  // from there, by the last climb and then doubling, until a failure bounds a bisection. A fit that
  // is right stops climbing at once: its next prediction is lo itself, confirmed by the one above.
  bool boundary_memcomm() {
    if (!first_fits()) return false;
    long lo = 0, hi = static_cast<long>(cand_.size());  // cand_[lo] fits; cand_[hi] fails (or is past the end)
    auto record = [&](long i, bool ok) { ok ? lo = std::max(lo, i) : hi = std::min(hi, i); };
    if (hi > 1 && budget_left()) {  // a second point for the fit, well apart from the first
      const long j = std::max<long>(1, static_cast<long>(floor_index(8 * cand_[0])));
      record(j, fits(static_cast<size_t>(j), TrialPurpose::Fit));
    }
    bool trust_fit = true;
    int64_t gallop = 0;  // after a prediction that was too cautious: step above lo, doubling
    int right_climbs = 0;  // predictions in a row that fitted and moved lo up by more than one
    while (hi - lo > 1 && budget_left(kept_for_recommendation())) {
      long t = -1;
      bool predicted_fit = false;
      const bool predicting = trust_fit && fit_.valid;
      if (predicting) {
        const double limit = static_cast<double>(cfg_.memory_limit);
        for (long i = hi - 1; i > lo; --i)
          if (predicted_reserved(cand_[static_cast<size_t>(i)]) <= limit) {
            t = i;
            predicted_fit = true;
            break;
          }
        if (t < 0) t = lo + 1;  // the fit says lo is the last: confirm with the one above
      } else if (gallop > 0) {
        t = std::min<long>(hi - 1, lo + static_cast<long>(gallop));
        gallop *= 2;
      } else {
        t = lo + (hi - lo) / 2;
      }
      const bool ok = fits(static_cast<size_t>(t), TrialPurpose::Boundary);
      right_climbs = predicting && ok && predicted_fit && t > lo + 1 ? right_climbs + 1 : 0;
      if (predicting && ok != predicted_fit) {  // a wrong prediction: search near it from now on
        trust_fit = false;
        gallop = ok ? 2 : 0;  // too cautious: gallop upwards; too bold: the failure bounds a bisection
      } else if (right_climbs >= 2) {  // Note [A fit that is right but cautious]
        trust_fit = false;
        gallop = t - lo;
      } else if (gallop > 0 && !ok) {
        gallop = 0;
      }
      record(t, ok);
    }
    out_.boundary_found = hi - lo <= 1;
    return true;
  }

  // Lightning's BatchSizeFinder, mode "binsearch", init_val 2 (lightning/pytorch/tuner/batch_size_scaling.py):
  // double after each success until the first failure, then bisect between the last success and it.
  bool boundary_lightning() {
    int64_t low = 1, high = 0, size = std::min<int64_t>(2, per_rank_);
    out_.boundary_found = false;  // each way out of the loop but the budget's sets it
    while (budget_left()) {
      const size_t i = floor_index(size);
      const bool ok = fits(i, TrialPurpose::Boundary);
      if (ok) {
        low = cand_[i];
        if (high) {
          if (high - low <= 1) { out_.boundary_found = true; break; }
          size = (high + low) / 2;
        } else {
          int64_t next = std::min(size * 2, per_rank_);
          // Doubling may land between two divisors: keep doubling to the next candidate, as Lightning's
          // sizes would reach it (98's divisors: 2 fits, 4 is none, 7 is next).
          while (floor_index(next) == i && next < per_rank_) next = std::min(next * 2, per_rank_);
          if (floor_index(next) == i) { out_.boundary_found = true; break; }  // at the largest candidate
          size = next;
        }
      } else {
        high = cand_[i];
        if (high - low <= 1 || cand_[i] == cand_[0]) { out_.boundary_found = true; break; }
        size = (high + low) / 2;
      }
      if (floor_index(size) == i) {  // no new candidate in between (divisor candidates)
        out_.boundary_found = true;
        break;
      }
    }
    // Lightning ends at `low` when its first size fails, assuming that 1 fits without running it; the
    // smallest candidate is run here instead (the first step before the probes passed at it), so a
    // search whose first probe ran out says "none fits" only when it does not fit either.
    if (out_.largest_feasible == 0 && !done_.count(cand_[0]) && budget_left()) fits(0, TrialPurpose::Boundary);
    if (out_.largest_feasible == 0) out_.failure = "no micro-batch fits under the limit";
    return out_.largest_feasible > 0;
  }

  // Every candidate from the smallest up, until the first out-of-memory (peaks grow with b).
  bool boundary_grid() {
    if (!first_fits()) return false;
    for (size_t i = 1; i < cand_.size(); ++i)
      if (!fits(i, TrialPurpose::Speed)) break;
    return true;
  }

  // See Note [Safety margin]: from the fragmentation of the largest micro-batch that fit, the regime
  // a recommendation lives in (tiny probes are dominated by segment rounding and say nothing).
  void set_margin() {
    double f = 0;
    if (auto it = done_.find(out_.largest_feasible); it != done_.end()) f = out_.trials[it->second].result.fragmentation();
    out_.safety_margin = std::clamp(f / 2, 0.02, 0.25);
  }

  // Fits with the margin: its reserved bytes within the limit and its allocated bytes a margin
  // below it; measured when probed, else predicted (and known to be below a fit).
  bool safe(size_t i) const {
    const int64_t b = cand_[i];
    const double limit = double(cfg_.memory_limit), room = limit * (1.0 - out_.safety_margin);
    if (auto it = done_.find(b); it != done_.end()) {
      const auto& r = out_.trials[it->second].result;
      return !r.oom && (r.peak_reserved < 0 || (double(r.peak_reserved) <= limit &&
                                                double(r.peak_allocated + r.loader_allowance) <= room));
    }
    return b < out_.largest_feasible && (!fit_.valid || (fit_.at(double(b)) <= room && predicted_reserved(b) <= limit));
  }

  double speed_of(size_t i) {
    const auto& t = probe(cand_[i], TrialPurpose::Speed, cfg_.bucket_mb);
    return t.result.oom ? 0 : t.samples_per_s;
  }

  void speed_memcomm() {
    long top = -1;
    for (long i = static_cast<long>(cand_.size()) - 1; i >= 0; --i)
      if (cand_[static_cast<size_t>(i)] <= out_.largest_feasible && safe(static_cast<size_t>(i))) {
        top = i;
        break;
      }
    // A top the boundary search did not run costs a probe like any other: none past --max-trials.
    if (top < 0 || (!done_.count(cand_[static_cast<size_t>(top)]) && !budget_left())) return;
    double best = speed_of(static_cast<size_t>(top));
    size_t best_i = static_cast<size_t>(top);
    int below = 0;
    for (int64_t b = cand_[static_cast<size_t>(top)] / 2; b >= cand_[0] && budget_left(); b /= 2) {
      const size_t i = floor_index(b);
      const double s = speed_of(i);
      if (s > best) best = s, best_i = i, below = 0;
      else if (s < 0.85 * best && ++below >= 2) break;  // well past the peak of the throughput curve
      if (i == 0) break;
    }
    for (int round = 0; round < 3 && budget_left(); ++round) {  // the neighbours of the best
      const size_t before = best_i;
      for (long d : {-1L, 1L}) {
        const long j = static_cast<long>(before) + d;
        if (j < 0 || j >= static_cast<long>(cand_.size()) || !safe(static_cast<size_t>(j)) || !budget_left()) continue;
        const double s = speed_of(static_cast<size_t>(j));
        if (s > best) best = s, best_i = static_cast<size_t>(j);
      }
      if (best_i == before) break;
    }
  }

  Recommendation make_rec(const Trial& t) const {
    Recommendation r;
    r.micro_batch = t.request.micro_batch;
    r.accum = t.request.accum;
    r.world = cfg_.world;
    r.bucket_mb = t.request.bucket_mb;
    r.samples_per_s = t.samples_per_s;
    r.peak_reserved = t.result.peak_reserved;
    r.peak_allocated = t.result.peak_allocated;
    // Of what tensors hold: under a cap the cache grows into any room, so reserved says little.
    r.headroom = cfg_.memory_limit > 0 ? 1.0 - double(t.result.peak_allocated) / double(cfg_.memory_limit) : 0;
    return r;
  }

  // With --fit-only: the largest micro-batch that fits with the margin and divides the per-rank batch
  // (so that b x K is the batch asked for). With --any-micro-batch the boundary search steps over most
  // divisors, so the largest divisor below the boundary is probed now if it was not, rather than taking
  // a small divisor probed on the way (8 where 100 fits below a boundary of 105).
  void recommend_largest() {
    int64_t largest_fit = 0;  // the largest probed micro-batch that fits, dividing or not
    for (size_t i = 0; i < cand_.size(); ++i)
      if (done_.count(cand_[i]) && safe(i)) largest_fit = std::max(largest_fit, cand_[i]);
    for (long i = largest_fit > 0 ? static_cast<long>(floor_index(largest_fit)) : -1; i >= 0; --i) {
      const size_t k = static_cast<size_t>(i);
      if (per_rank_ % cand_[k] != 0 || (!done_.count(cand_[k]) && !budget_left())) continue;
      if (!done_.count(cand_[k])) {
        // Its own accumulation (K = per-rank batch / b) may need more than the boundary's probes
        // (b = 512, K = 2 ran out where 658, K = 1 fitted): listed with the trials, no part of the boundary.
        const int64_t feasible = out_.largest_feasible, infeasible = out_.smallest_infeasible;
        probe(cand_[k], TrialPurpose::Fit, cfg_.bucket_mb);
        out_.largest_feasible = feasible;
        out_.smallest_infeasible = infeasible;
      }
      if (safe(k)) {
        out_.recommendation = make_rec(out_.trials[done_.at(cand_[k])]);
        return;
      }
    }
    out_.failure = largest_fit > 0 ? fmt::format("micro-batches up to {} fit, but none of those probed divides the "
                                                 "per-rank batch {} (b x K must be the batch asked for)",
                                                 largest_fit, per_rank_)
                                   : "no probed micro-batch fits with the safety margin";
  }

  // Note [Speeds within noise]: two probes' speeds differ by chance as much as each one's timed
  // steps spread (half their range over their median, ProbeResult::step_noise), and never less than
  // 1% here. Compared without it, three tune() calls of one script gave 256 x 4, 256 x 4 and 128 x 8,
  // and a bucket size won on one measurement 2% faster amid 10% noise. A speed counts as higher only
  // past both probes' noise; within it the larger micro-batch (fewer steps per sample) and the
  // default bucket size (what DDP would use) stay.
  static double noise_between(const ProbeResult& a, const ProbeResult& b) {
    return std::max(0.01, a.step_noise + b.step_noise);
  }
  static bool clearly_faster(const Trial& a, const Trial& b) {
    return a.samples_per_s > b.samples_per_s * (1 + noise_between(a.result, b.result));
  }

  void recommend_fastest() {
    const Trial* best = nullptr;
    for (const auto& [b, idx] : done_) {  // in increasing b
      const Trial& t = out_.trials[idx];
      if (t.result.oom || !safe(index_of(b))) continue;
      if (!best || clearly_faster(t, *best) || !clearly_faster(*best, t)) best = &t;
    }
    if (best) out_.recommendation = make_rec(*best);
    else out_.failure = "no probed micro-batch fits with the safety margin";
  }

  void tune_buckets() {
    const int64_t b = out_.recommendation->micro_batch;
    size_t best = done_.at(b);  // an index: each probe grows out_.trials
    for (double mb : cfg_.bucket_candidates) {
      if (mb == cfg_.bucket_mb || !budget_left()) continue;
      probe(b, TrialPurpose::Bucket, mb);
      const Trial& t = out_.trials.back();
      if (!t.result.oom && clearly_faster(t, out_.trials[best])) best = out_.trials.size() - 1;
    }
    out_.recommendation = make_rec(out_.trials[best]);
  }

  const SearchConfig& cfg_;
  const ProbeFn& probe_;
  SearchOutcome& out_;
  int64_t per_rank_ = 0;
  std::vector<int64_t> cand_;
  std::map<int64_t, size_t> done_;  // micro-batch -> its trial at the default bucket size
  std::vector<std::pair<double, double>> points_, reserved_points_;
  PeakFit fit_, reserved_fit_;
};

}  // namespace

SearchOutcome run_search(const SearchConfig& cfg, const ProbeFn& probe) {
  if (cfg.world < 1) throw std::invalid_argument("world must be >= 1");
  if (cfg.global_batch < cfg.world)
    throw std::invalid_argument("global batch " + std::to_string(cfg.global_batch) + " is smaller than the " +
                                std::to_string(cfg.world) + " ranks: each rank needs at least one sample");
  SearchOutcome out;
  out.global_batch = cfg.global_batch;
  if (cfg.global_batch % cfg.world != 0) {
    const int64_t per_rank = std::max<int64_t>(1, (cfg.global_batch + cfg.world / 2) / cfg.world);
    out.global_batch = per_rank * cfg.world;
    out.batch_note = "global batch " + std::to_string(cfg.global_batch) + " is not a multiple of " +
                     std::to_string(cfg.world) + " ranks; tuning the nearest achievable, " +
                     std::to_string(out.global_batch) + " (" + std::to_string(per_rank) + " per rank)";
  }
  Search(cfg, probe, out).run();
  return out;
}

}  // namespace memcomm::tune
