// Note [Verifying the winner] (verify.hpp): the long run of the recommendation, and the fallback to
// the next fastest candidate when it runs out of memory.
#include "memcomm/tuner/verify.hpp"

#include <algorithm>
#include <set>

namespace memcomm::tune {

namespace {

// Candidates for the recommendation, fastest first: probed, fit with the margin, not excluded.
std::vector<const Trial*> ranked(const SearchOutcome& o, int64_t limit, int world, const std::set<int64_t>& excluded) {
  std::vector<const Trial*> out;
  for (const Trial& t : o.trials)
    if (!t.result.oom && t.purpose != TrialPurpose::Bucket && !excluded.count(t.request.micro_batch) &&
        (o.global_batch / world) % t.request.micro_batch == 0 &&  // b x K must be the batch asked for
        (t.result.peak_reserved < 0 ||
         (t.result.peak_reserved <= limit &&  // Notes [Safety margin], [Loader allowance]
          double(t.result.peak_allocated + t.result.loader_allowance) <= double(limit) * (1 - o.safety_margin))))
      out.push_back(&t);
  std::stable_sort(out.begin(), out.end(), [](const Trial* a, const Trial* b) { return a->samples_per_s > b->samples_per_s; });
  return out;
}

}  // namespace

void verify_recommendation(TuneResult& r, const VerifyFn& verify) {
  const int64_t limit = r.config.memory_limit;
  const int world = r.config.world;
  std::set<int64_t> excluded;
  while (r.outcome.recommendation) {
    auto& rec = *r.outcome.recommendation;
    const Verification v = verify(rec);
    r.verifications.push_back(v);
    if (!v.oom) {
      rec.peak_reserved = std::max(rec.peak_reserved, v.peak_reserved);
      rec.peak_allocated = std::max(rec.peak_allocated, v.peak_allocated);
      rec.headroom = 1.0 - double(rec.peak_allocated) / double(limit);
      return;
    }
    excluded.insert(rec.micro_batch);
    const auto next = ranked(r.outcome, limit, world, excluded);
    if (next.empty() || excluded.size() >= 3) {
      r.outcome.recommendation.reset();
      r.outcome.failure = "every verified candidate ran out of memory in its long run";
      return;
    }
    const double bucket = rec.bucket_mb;
    rec = {next.front()->request.micro_batch, next.front()->request.accum, world, bucket,
           next.front()->samples_per_s, next.front()->result.peak_reserved, next.front()->result.peak_allocated, 0};
  }
}

}  // namespace memcomm::tune
