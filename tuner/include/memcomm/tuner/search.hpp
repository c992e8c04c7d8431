// The tuner's search, free of LibTorch: it only sees probes through a callback, so it is tested
// against synthetic memory and speed models, and drives real training probes in memcomm-tune.
//
// Every decision is a pure function of probe results. In a distributed run each probe's result is
// already agreed by all ranks (any rank's out-of-memory, the largest peak, the slowest step), so
// every rank walks the same search and no rank diverges or waits on a collective the others skip.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace memcomm::tune {

// One configuration to try.
struct ProbeRequest {
  int64_t micro_batch = 1;  // b, per rank
  int64_t accum = 1;        // K
  double bucket_mb = 25;    // gradient bucket cap
  int measured_steps = 3;   // optimizer steps timed after the warm-up step
};

// What one probe measured, agreed over ranks.
struct ProbeResult {
  bool oom = false;             // some rank ran out of memory (then the timings are not meaningful)
  std::string oom_where;        // phase of the first out-of-memory: data, forward, backward, optimizer
  int oom_rank = -1;            // lowest rank that ran out of memory
  int64_t peak_allocated = -1;  // bytes, largest over ranks (-1: unknown)
  int64_t peak_reserved = -1;   // bytes, largest over ranks
  double step_s = 0;            // seconds per optimizer step of K micro-steps (slowest rank, median step)
  // Half the range of the timed steps' times, as a fraction of their median (largest over ranks; 0
  // with one timed step): how far two probes' speeds may differ by noise (Note [Speeds within noise]).
  double step_noise = 0;
  double exposed_comm_s = 0;    // seconds per step waiting for gradients after backward
  int measured_accum = 0;       // micro-steps per step actually run (K, or fewer: Note [Probing long accumulations])
  double wall_s = 0;            // the probe's own wall time
  int64_t loader_allowance = 0; // bytes of batches the data loader may hold that the probe may not
                                // have seen (Note [Loader allowance] in search.cpp)

  // Reserved bytes beyond allocated, as a fraction of reserved (the allocator's fragmentation).
  double fragmentation() const {
    return peak_reserved > 0 && peak_allocated >= 0 ? 1.0 - double(peak_allocated) / double(peak_reserved) : 0.0;
  }
};

using ProbeFn = std::function<ProbeResult(const ProbeRequest&)>;

// Why a trial was run, for the table.
enum class TrialPurpose { Fit, Boundary, Speed, Bucket };
const char* purpose_name(TrialPurpose p);

struct Trial {
  ProbeRequest request;
  ProbeResult result;
  TrialPurpose purpose = TrialPurpose::Fit;
  int64_t predicted_peak_allocated = -1;  // the linear fit's prediction before the probe (-1: no fit yet)
  int64_t predicted_peak_reserved = -1;
  double samples_per_s = 0;               // global samples per second (0 for an out-of-memory)
};

enum class Strategy {
  Memcomm,    // linear peak fit, probes near the prediction, then speed among the feasible
  Lightning,  // Lightning's BatchSizeFinder "binsearch" (double from 2 until OOM, then bisect): for comparison
  Grid,       // every candidate: the exhaustive reference
};

struct SearchConfig {
  int64_t global_batch = 0;     // G
  int world = 1;                // N
  int64_t memory_limit = 0;     // bytes a rank may reserve
  int max_trials = 24;          // probes for fit, boundary, speed and buckets (verification excluded)
  Strategy strategy = Strategy::Memcomm;
  bool fit_only = false;        // stop once the largest feasible micro-batch is known
  bool any_micro_batch = false; // candidates are 1..G/N rather than the divisors of G/N (with fit_only)
  double bucket_mb = 25;        // bucket cap used while tuning b and K
  std::vector<double> bucket_candidates;  // tried with the winner when world > 1 (empty: none)
  int measured_steps = 3;
  int64_t max_micro_batch = 0;  // 0: none; else the rank's shard of the training set (no larger b can be drawn)
  int64_t min_micro_batch = 1;  // smaller candidates are left out: a model that cannot step on fewer samples
                                // (BatchNorm in training mode needs 2 per channel)
};

struct Recommendation {
  int64_t micro_batch = 0, accum = 0;
  int world = 1;
  double bucket_mb = 25;
  double samples_per_s = 0;
  int64_t peak_reserved = 0, peak_allocated = 0;
  double headroom = 0;  // 1 - peak_allocated / limit
};

struct SearchOutcome {
  int64_t global_batch = 0;          // the batch actually tuned (G, or the nearest achievable)
  std::string batch_note;            // said when it differs from what was asked
  std::vector<Trial> trials;
  int64_t largest_feasible = 0;      // largest candidate micro-batch that ran without OOM (0: none)
  int64_t smallest_infeasible = 0;   // smallest candidate that ran out of memory (0: none found)
  int boundary_probes = 0;           // probes spent until the largest feasible micro-batch was known
  // False when --max-trials ran out before the boundary was pinned down: largest_feasible is then
  // only the largest that was tried and fit, and larger ones may fit too.
  bool boundary_found = true;
  double safety_margin = 0;          // fraction of the limit kept free (Note [Safety margin])
  std::optional<Recommendation> recommendation;
  std::string failure;               // why there is no recommendation
};

// The largest per-rank batch --any-micro-batch takes: its candidates are every b up to it, one
// vector entry each.
constexpr int64_t kMaxAnyMicroBatchCandidates = int64_t(1) << 20;
// The largest --global-batch: divisors() walks up to its square root (2^20 steps).
constexpr int64_t kMaxGlobalBatch = int64_t(1) << 40;

// Candidate micro-batches for a per-rank batch P: its divisors (b x K = P exactly), ascending.
std::vector<int64_t> divisors(int64_t per_rank_batch);

// Least-squares fit peak(b) = a + c*b over (b, peak) points. With one point, c = peak/b, a = 0.
struct PeakFit {
  double a = 0, c = 0;
  bool valid = false;
  double at(double b) const { return a + c * b; }
};
PeakFit fit_peak(const std::vector<std::pair<double, double>>& points);

// ProbeResult::step_noise of a probe's timed steps (their times, in any unit): half their range over
// their median; 0 for fewer than two (Note [Speeds within noise] in search.cpp). memcomm-tune's probes
// and memcomm.tune's (through the binding) both take it from here.
double step_noise(std::vector<double> step_times);

// A step's time at K = `accum` micro-steps from a probe that ran `measured` of them per step (Note
// [Probing long accumulations] in probe.cpp): the early micro-steps' mean over every timed step
// (`early_total`: their times summed over all timed steps) times K - 1, plus the median of each
// timed step's synchronising last micro-step (`last`). Any one unit, in and out; 0 with no timed step.
// memcomm-tune's probes and memcomm.tune's (through the binding) both take it from here.
double probe_step_time(double early_total, std::vector<double> last, int64_t accum, int64_t measured);

// Runs the search; `probe` is called once per trial. Verification is the caller's (memcomm-tune runs
// the winner for >= 50 steps and an eval pass).
SearchOutcome run_search(const SearchConfig& cfg, const ProbeFn& probe);

}  // namespace memcomm::tune
