// One memcomm-tune run on this rank: the cache, the search over real probes, the verification,
// and what rank 0 prints and writes. Free of LibTorch.
#pragma once

#include <memcomm/train/launch.hpp>
#include "tune_options.hpp"

namespace memcomm::tune {

// Returns the exit code. Throws train::UsageError (exit 2) and train::CommError (exit 3).
int run_tuning(TuneOptions t, const train::DistEnv& env);

}  // namespace memcomm::tune
