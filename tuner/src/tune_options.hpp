// memcomm-tune's options: its own, plus the trainer's model, data, optimizer and allocator flags.
// Free of LibTorch.
#pragma once

#include "memcomm/tuner/search.hpp"
#include <memcomm/train/options.hpp>
#include "probe.hpp"

#include <string>
#include <vector>

namespace memcomm::tune {

struct TuneOptions {
  train::TrainOptions train;       // --model, --dataset, --optimizer, --memory-limit, --nproc ...
  SearchConfig search;             // --global-batch, --max-trials, --search, --fit-only ...
  ProbeSettings probe;             // --probe-accum-cap, test hooks
  std::string json_out;            // --json FILE
  bool fresh = false;              // --fresh: ignore the cache
  int64_t verify_steps = 50;       // --verify-steps
  bool print_decisions = false;    // test hook: every rank prints its decisions
  std::vector<std::string> train_args;  // the trainer flags as given, for the recommended command line
};

// Parses argv; --help prints usage and exits 0; a bad flag prints what is wrong and exits 2.
TuneOptions parse_tune_options(int argc, char** argv);

}  // namespace memcomm::tune
