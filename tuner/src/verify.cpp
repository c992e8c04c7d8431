// Note [Verifying the winner] (verify.hpp): the long run of the recommendation, and the fallback to
// a smaller candidate when it runs out of memory.
#include "memcomm/tuner/verify.hpp"

#include <memcomm/common/duration.hpp>

#include <algorithm>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace memcomm::tune {

namespace {

constexpr int kMaxVerifications = 3;

// The fastest probed candidate below `ceiling` that fit with the margin and divides the per-rank
// batch; null when none does.
const Trial* fastest_below(const SearchOutcome& o, int64_t limit, int world, int64_t ceiling) {
  const Trial* best = nullptr;
  for (const Trial& t : o.trials)
    if (!t.result.oom && t.purpose != TrialPurpose::Bucket && t.request.micro_batch < ceiling &&
        (o.global_batch / world) % t.request.micro_batch == 0 &&  // b x K must be the batch asked for
        (t.result.peak_reserved < 0 ||
         (t.result.peak_reserved <= limit &&  // Notes [Safety margin], [Loader allowance]
          double(t.result.peak_allocated + t.result.loader_allowance) <= double(limit) * (1 - o.safety_margin))) &&
        (!best || t.samples_per_s > best->samples_per_s))  // the first of equally fast ones
      best = &t;
  return best;
}

// The next candidate after a long run ran out of memory at micro-batch `ceiling`: the fastest probed
// one below it, unless the largest divisor of the per-rank batch below it is larger than every
// micro-batch probed there (a --fit-only search probes few: b = 5 was taken, at a fifth of the speed,
// where 50 was never probed and fitted); then that divisor, not probed (its speed is then the long
// run's own).
std::optional<Recommendation> next_below(const SearchOutcome& o, int64_t limit, int world, int64_t ceiling,
                                         double bucket_mb, int64_t smallest) {
  const int64_t per_rank = o.global_batch / world;
  int64_t largest_probed = 0;  // below the ceiling, a divisor, fitted
  for (const Trial& t : o.trials)
    if (!t.result.oom && t.request.micro_batch < ceiling && per_rank % t.request.micro_batch == 0)
      largest_probed = std::max(largest_probed, t.request.micro_batch);
  const auto ran_out = [&](int64_t b) {
    return std::any_of(o.trials.begin(), o.trials.end(),
                       [b](const Trial& t) { return t.result.oom && t.request.micro_batch == b; });
  };
  int64_t largest_divisor = 0;
  for (int64_t b : divisors(per_rank))  // ascending
    if (b < ceiling && b >= smallest && !ran_out(b)) largest_divisor = b;
  const Trial* t = fastest_below(o, limit, world, ceiling);
  if (t && largest_divisor <= largest_probed)
    return Recommendation{t->request.micro_batch, t->request.accum, world, bucket_mb,
                          t->samples_per_s, t->result.peak_reserved, t->result.peak_allocated, 0};
  if (largest_divisor > 0) return Recommendation{largest_divisor, per_rank / largest_divisor, world, bucket_mb, 0, -1, -1, 0};
  return std::nullopt;
}

bool evaluation_ran_out(const Verification& v) {  // where: "evaluation", or "rank N evaluation"
  const std::string_view where = v.oom_where, phase = "evaluation";
  return v.oom && where.size() >= phase.size() && where.substr(where.size() - phase.size()) == phase;
}

}  // namespace

void verify_recommendation(TuneResult& r, const VerifyFn& verify, EvaluationBatches evaluation) {
  const int64_t limit = r.config.memory_limit;
  const int world = r.config.world;
  while (r.outcome.recommendation) {
    auto& rec = *r.outcome.recommendation;
    const Verification v = verify(rec);
    r.verifications.push_back(v);
    if (!v.oom) {
      rec.peak_reserved = std::max(rec.peak_reserved, v.peak_reserved);
      rec.peak_allocated = std::max(rec.peak_allocated, v.peak_allocated);
      rec.headroom = 1.0 - double(rec.peak_allocated) / double(limit);
      if (rec.samples_per_s <= 0) rec.samples_per_s = v.samples_per_s;  // not probed: the long run's speed
      return;
    }
    if (evaluation == EvaluationBatches::Own && evaluation_ran_out(v)) {
      r.outcome.failure = "the long run of micro-batch " + std::to_string(rec.micro_batch) + " x " +
                          std::to_string(rec.accum) + " fitted, then the evaluation ran out of memory (" + v.oom_where +
                          "): its batches are evaluate's own, so no smaller micro-batch helps; evaluate in smaller "
                          "batches, or leave evaluate out";
      r.outcome.recommendation.reset();
      return;
    }
    // A larger micro-batch holds more activations, so it would run out of memory too.
    const auto next = int(r.verifications.size()) < kMaxVerifications
                          ? next_below(r.outcome, limit, world, rec.micro_batch, rec.bucket_mb, r.config.min_micro_batch)
                          : std::nullopt;
    if (!next) {
      r.outcome.recommendation.reset();
      r.outcome.failure = "every verified candidate ran out of memory in its long run";
      return;
    }
    rec = *next;
  }
}

VerificationPlan plan_verification(const Recommendation& rec, int64_t verify_steps) {
  VerificationPlan p;
  if (rec.samples_per_s > 0)
    p.step_s = double(rec.micro_batch) * double(rec.accum) * double(rec.world) / rec.samples_per_s;
  p.steps = verify_steps;
  if (p.step_s > 0)
    p.steps = std::max<int64_t>(1, static_cast<int64_t>(std::min(kVerifyBudgetS / p.step_s, double(verify_steps))));
  return p;
}

std::string cut_note(const VerificationPlan& plan, int64_t asked, const std::string& setting) {
  if (!plan.cut(asked)) return "";
  return " (of " + setting + std::to_string(asked) + ": each takes about " + format_rough_duration(plan.step_s) + ")";
}

std::string time_note(const VerificationPlan& plan) {
  if (plan.step_s <= 0) return "";
  return ", about " + format_rough_duration(plan.step_s * double(plan.steps)) + " at the probed speed";
}

std::string too_long_reason(const VerificationPlan& plan, const Recommendation& rec) {
  return "one step at micro-batch " + std::to_string(rec.micro_batch) + " x " + std::to_string(rec.accum) +
         " would take about " + format_rough_duration(plan.step_s) + " at the probed speed";
}

}  // namespace memcomm::tune
