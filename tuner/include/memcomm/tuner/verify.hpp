// The verification of a search's winner before it is recommended, free of LibTorch: it runs the
// long run through a callback, so memcomm-tune (real LibTorch steps) and memcomm.tune (the user's
// Python step) reach the same recommendation from the same trials and verifications.
#pragma once

#include "memcomm/tuner/report.hpp"

#include <cstdint>
#include <functional>
#include <string>

namespace memcomm::tune {

// Runs the recommendation's long run on every rank and returns its agreed figures.
using VerifyFn = std::function<Verification(const Recommendation&)>;

// Note [Verifying the winner]: the recommendation runs its long run through `verify`. When it
// fits, its peaks grow to the larger of probe and long run, and the headroom follows; when it runs
// out of memory, so would every larger micro-batch (more activations at once), and a smaller one is
// verified instead: the fastest probed candidate below it (one that fit with the margin and divides
// the per-rank batch), else the largest divisor of the per-rank batch below it, which no probe timed
// (its speed is then the long run's). At most three long runs in all; with none left, the result has
// no recommendation. A long run can exceed its probe because probes run fewer micro-steps than a long
// accumulation (Note [Probing long accumulations]) and no evaluation pass. Every verification is
// appended to r.verifications.
// An evaluation pass that runs out of memory after the steps fitted is another matter where its batches
// are its own (memcomm.tune's evaluate(model)): no smaller micro-batch changes them, and three long
// runs were spent going down before "every verified candidate ran out of memory" blamed the training.
// Then the search ends at once, with a failure that names the evaluation. memcomm-tune evaluates in
// batches of the micro-batch, so a smaller one may fit, and is verified as after any other failure.
enum class EvaluationBatches { MicroBatch, Own };
void verify_recommendation(TuneResult& r, const VerifyFn& verify,
                           EvaluationBatches evaluation = EvaluationBatches::MicroBatch);

// Note [A verification that would take hours]
// The verification runs all K micro-steps of each step (the probes timed at most a capped number).
// A global batch far beyond the ranks' shards makes K huge: 2^40 samples on a 4,096-row set ran
// verification steps of 2^28 micro-steps, for hours, without a word, in memcomm-tune and in
// memcomm.tune alike. So the steps are cut to what kVerifyBudgetS takes at the probed speed, at least
// one (memory, which the verification confirms, shows in the first), and the announcement says how
// long it should take. A step longer than kLongestStepS cannot be verified (nor trained) in any useful
// time: the caller refuses it as a usage error. Every rank computes the same plan from the agreed
// recommendation.
inline constexpr double kVerifyBudgetS = 600;
inline constexpr double kLongestStepS = 24 * 3600;

struct VerificationPlan {
  int64_t steps = 0;   // what runs: the steps asked for, cut to kVerifyBudgetS, at least one
  double step_s = 0;   // one step at the probed speed (0: not known)
  bool too_long() const { return step_s > kLongestStepS; }
  bool cut(int64_t asked) const { return steps < asked; }
};
VerificationPlan plan_verification(const Recommendation& rec, int64_t verify_steps);
// The announcement's words, one text for memcomm-tune and memcomm.tune: cut_note is " (of SETTING
// ASKED: each takes about X)" when the plan cut the steps asked for (`setting` as the caller's user
// writes it: "--verify-steps ", "verify_steps="), time_note ", about Y at the probed speed" when the
// speed is known, and too_long_reason why a too_long() plan is refused.
std::string cut_note(const VerificationPlan& plan, int64_t asked, const std::string& setting);
std::string time_note(const VerificationPlan& plan);
std::string too_long_reason(const VerificationPlan& plan, const Recommendation& rec);

}  // namespace memcomm::tune
