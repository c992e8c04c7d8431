// The verification of a search's winner before it is recommended, free of LibTorch: it runs the
// long run through a callback, so memcomm-tune (real LibTorch steps) and memcomm.tune (the user's
// Python step) reach the same recommendation from the same trials and verifications.
#pragma once

#include "memcomm/tuner/report.hpp"

#include <functional>

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
void verify_recommendation(TuneResult& r, const VerifyFn& verify);

}  // namespace memcomm::tune
