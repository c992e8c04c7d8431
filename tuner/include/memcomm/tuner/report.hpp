// What memcomm-tune prints and writes: the trial table, the recommendation, the --json document,
// and the result cache. Free of LibTorch.
#pragma once

#include "memcomm/tuner/search.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>

namespace memcomm::tune {

// The winner's long run before it is recommended.
struct Verification {
  int64_t steps = 0;
  bool oom = false;
  std::string oom_where;
  double samples_per_s = 0;
  int64_t peak_reserved = -1, peak_allocated = -1;
  double eval_accuracy = 0, eval_loss = 0;
  int64_t micro_batch = 0;  // the configuration verified
  bool evaluated = true;    // an evaluation pass ran (memcomm.tune without `evaluate` runs none)
};

// Everything one tuning produced.
struct TuneResult {
  SearchConfig config;
  SearchOutcome outcome;
  std::vector<Verification> verifications;  // the last one is the recommendation's, unless it failed
  std::string command;                      // memcomm-train command line with the recommendation
  double tuning_wall_s = 0;
  nlohmann::json key;                       // what the cache is keyed by
};

// "512.0 MiB", "1.50 GiB".
std::string format_bytes(int64_t bytes);
// The trial table: b, K, bucket, predicted and measured peaks, fragmentation, step time, samples/s, OOM.
std::string format_trials(const TuneResult& r);
// The recommendation paragraph (or why there is none).
std::string format_recommendation(const TuneResult& r);

// --json document: {"trials": [...], "recommendation": {micro_batch, accum, world, samples_per_s,
// peak_reserved, oom, ...} or null, ...}.
nlohmann::json to_json(const TuneResult& r);
// Rebuilds a result from to_json() output (the cache). Throws std::runtime_error on a malformed document.
TuneResult from_json(const nlohmann::json& j);

// Note [Tuning cache]: results are kept per key (model configuration, device, dtype, limit, world,
// global batch, memcomm version, every trainer flag as given but those naming the run's own outputs,
// such as --summary-json or --checkpoint-dir, which the probes never use, and how probes are timed) in
// $MEMCOMM_CACHE_DIR, else $XDG_CACHE_HOME/memcomm, else ~/.cache/memcomm, else (no HOME: a batch
// job's bare environment) memcomm-cache in the temporary folder, as tune-<hash of key>.json.
// A file whose stored key differs, or whose recommendation does not make its global batch, is a miss.
// A hit prints the recommended command built from this run's flags, never the stored one.
std::string cache_path(const nlohmann::json& key);
std::optional<TuneResult> load_cached(const nlohmann::json& key);
// Atomic (temp file + rename). Returns false with a warning on stderr when the cache is not writable.
bool store_cached(const TuneResult& r);

}  // namespace memcomm::tune
