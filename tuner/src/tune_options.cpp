#include "tune_options.hpp"

#include <CLI/CLI.hpp>
#include <memcomm/common/bytes.hpp>
#include <memcomm/common/cli_checks.hpp>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <stdexcept>

namespace memcomm::tune {

namespace {

[[noreturn]] void usage_error(const std::string& msg) {
  std::fprintf(stderr, "memcomm-tune: %s\nRun 'memcomm-tune --help' for the flags.\n", msg.c_str());
  std::exit(2);
}

// Tuner flags that take a value, and tuner switches: left out of the recommended trainer command.
const std::set<std::string> kTunerValueFlags = {"--global-batch", "--max-trials", "--json", "--search",
                                                "--measured-steps", "--probe-accum-cap", "--verify-steps", "--probe-seconds",
                                                "--buckets", "--unequal-data", "--trace", "--live"};
const std::set<std::string> kTunerSwitches = {"--fresh", "--fit-only", "--any-micro-batch", "--print-decisions"};

// Flags read into locals before they become TuneOptions fields.
struct RawTuneFlags {
  std::string search = "memcomm", unequal;
  std::vector<double> buckets = {1, 5, 25, 100};
};

void add_tuning_options(CLI::App& app, TuneOptions& t, RawTuneFlags& raw) {
  auto* g = app.add_option_group("Tuning");
  // Required, but checked after parsing (check_tune_options): CLI11 checks required flags before
  // unknown ones, and a typo'd flag was then reported as a missing --global-batch.
  g->add_option("--global-batch", t.search.global_batch,
                "Samples per optimizer step over all ranks (b x K x ranks); required");
  g->add_option("--max-trials", t.search.max_trials,
                "Most probes for fit, boundary, speed and buckets (with --any-micro-batch the boundary search "
                "leaves one for the largest divisor below the boundary; --search grid runs every candidate)")
      ->capture_default_str()->check(CLI::Range(1, 1000));
  g->add_option("--json", t.json_out, "Write trials and recommendation as JSON to FILE");
  g->add_flag("--fresh", t.fresh, "Tune again even when a cached result exists");
  g->add_option("--search", raw.search,
                "memcomm (peak fit + speed search), lightning (Lightning's binsearch, for comparison) or grid "
                "(every candidate)")
      ->check(CLI::IsMember({"memcomm", "lightning", "grid"}))->capture_default_str();
  g->add_flag("--fit-only", t.search.fit_only,
              "Stop the search once the largest micro-batch that fits is known (no speed probes); that one is still "
              "verified (--verify-steps)");
  g->add_flag("--any-micro-batch", t.search.any_micro_batch,
              "Needs --fit-only: candidates are every b up to the per-rank batch (at most 2^20), not only its divisors");
  g->add_option("--measured-steps", t.search.measured_steps, "Timed steps per probe, after one warm-up step")
      ->capture_default_str()->check(CLI::Range(3, 1000));
  g->add_option("--probe-accum-cap", t.probe.accum_cap,
                "Micro-steps per probe step; longer accumulations are timed from these (the verification runs all)")
      ->capture_default_str()->check(CLI::Range(2, 1 << 20));
  g->add_option("--probe-seconds", t.probe.min_seconds, "Timed wall time per probe, at least (steady state)")
      ->capture_default_str()->check(CLI::Range(0.0, 3600.0));
  g->add_option("--verify-steps", t.verify_steps, "Steps the winner runs, plus an evaluation pass, before it is recommended")
      ->capture_default_str()->check(CLI::Range(1, 1 << 30));
  g->add_option("--buckets", raw.buckets, "Bucket sizes (MiB) tried with the winner when there is more than one rank")
      ->capture_default_str()->delimiter(',')->allow_extra_args(false);  // "1,5,25": a space ends it
  app.add_option("--unequal-data", raw.unequal, "RANK:BYTES: that rank's samples take BYTES more each (test hook)")
      ->group("");
  app.add_flag("--print-decisions", t.print_decisions, "Every rank prints its decisions (test hook)")->group("");
}

// What the flags alone cannot check; every failure is a usage error (exit 2) before any probe.
void check_tune_options(const CLI::App& app, const TuneOptions& t, const RawTuneFlags& raw) {
  for (const char* chosen : {"--batch-size", "--accum", "--steps"})
    if (app.count(chosen) > 0)
      usage_error(std::string(chosen) + " is what memcomm-tune chooses; give --global-batch (and --verify-steps)");
  if (app.count("--global-batch") == 0) usage_error("--global-batch is required");
  if (t.train.sync_every > 0) usage_error("memcomm-tune tunes synchronous data parallelism; drop --sync-every");
  train::check_train_options(t.train, "memcomm-tune");
  if (t.search.global_batch < 1 || t.search.global_batch > kMaxGlobalBatch)
    usage_error("--global-batch must be between 1 and 2^40");
  if (t.search.any_micro_batch && t.search.global_batch / t.train.nproc > kMaxAnyMicroBatchCandidates)
    usage_error("--any-micro-batch tries every micro-batch up to the per-rank batch: at most " +
                std::to_string(kMaxAnyMicroBatchCandidates) + " of them (--global-batch / --nproc)");
  if (t.search.global_batch < t.train.nproc)
    usage_error("--global-batch " + std::to_string(t.search.global_batch) + " is smaller than --nproc " +
                std::to_string(t.train.nproc) + ": every rank needs at least one sample per step");
  if (t.train.memory_limit == 0 && t.train.device == train::DeviceKind::Cpu)  // with --device auto, run_tuning() checks
    usage_error("--memory-limit is required on the CPU (on a GPU it defaults to the free device memory)");
  if (t.train.allocator != train::AllocatorKind::Memcomm && t.train.device != train::DeviceKind::Cuda)
    usage_error("memcomm-tune on the CPU needs --allocator memcomm: its cap makes the limit real");
  // `!(b > 0 ...)`: also NaN, which every comparison rejects.
  for (double b : raw.buckets)
    if (!(b > 0 && b <= train::kMaxBucketMb)) usage_error("--buckets: sizes must be positive and at most 1e6 (MiB)");
  // CLI::Range lets NaN through (it only rejects values outside the range, and NaN is outside nothing).
  if (!(t.probe.min_seconds >= 0 && t.probe.min_seconds <= 3600))
    usage_error("--probe-seconds must be between 0 and 3600");
  if (!t.json_out.empty()) {  // Note [Outputs checked first] in options.cpp
    try {
      train::check_output_file("--json", t.json_out);
    } catch (const std::invalid_argument& e) {
      usage_error(e.what());
    }
  }
  if (t.search.any_micro_batch && !t.search.fit_only)
    usage_error("--any-micro-batch needs --fit-only: a recommended micro-batch must divide the per-rank batch");
}

// --unequal-data RANK:BYTES into the probe settings; BYTES is a size as every tool reads one ("5MB").
void parse_unequal_data(const std::string& unequal, ProbeSettings& probe) {
  const auto colon = unequal.find(':');
  const std::string rank = unequal.substr(0, colon);
  const bool rank_ok = colon != std::string::npos && !rank.empty() && rank.size() < 10 &&
                       std::all_of(rank.begin(), rank.end(), [](unsigned char c) { return std::isdigit(c); });
  if (!rank_ok) usage_error("--unequal-data wants RANK:BYTES, got '" + unequal + "'");
  probe.unequal.rank = std::stoll(rank);
  try {
    probe.unequal.bytes_per_sample = static_cast<int64_t>(parse_size(unequal.substr(colon + 1), /*allow_zero=*/true));
  } catch (const std::invalid_argument& e) {
    usage_error(std::string("--unequal-data: ") + e.what());
  }
}

// The trainer flags as given, minus the tuner's own: the base of the recommended command.
std::vector<std::string> trainer_args(int argc, char** argv) {
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    const std::string name = a.substr(0, a.find('='));
    if (kTunerSwitches.count(name)) continue;
    if (kTunerValueFlags.count(name)) {
      if (a.find('=') == std::string::npos) ++i;  // its value follows
      continue;
    }
    args.push_back(a);
  }
  return args;
}

}  // namespace

TuneOptions parse_tune_options(int argc, char** argv) {
  TuneOptions t;
  CLI::App app{
      "memcomm-tune: the fastest micro-batch x gradient accumulation for a global batch under a memory limit,\n"
      "found with short real training probes (forward, backward, optimizer step) that run out of memory\n"
      "safely: an out-of-memory is caught, agreed by all ranks and recovered in process. The winner is\n"
      "verified with a longer run and an evaluation pass before it is recommended. Results are cached.\n"
      "Takes every memcomm-train flag for the model, data, optimizer and allocator; those for a run's own\n"
      "outputs (--summary-json, --checkpoint-dir, --resume...) are not used by the probes and only go into\n"
      "the recommended memcomm-train command. --trace and --live record the tuning itself (its probes, with\n"
      "tune.* counters) and are left out of that command."};
  app.get_formatter()->column_width(34);
  app.footer(
      "Exit codes:\n"
      "  0  a recommendation (tuned, or reused from the cache)\n"
      "  1  no micro-batch fits the limit, or a runtime error (a --json file that cannot be written)\n"
      "  2  a usage error: a bad flag or value or a --json path that cannot be written (checked before\n"
      "     any probe), or a limit that cannot hold the model (by its size, or one step at micro-batch 1)\n"
      "  3  a collective failed or took longer than --timeout; the message names the lost rank(s)\n"
      "With --nproc the launcher exits with the code of the first rank to fail, or 1 when that rank was\n"
      "killed by a signal.");
  train::add_train_options(app, t.train);
  // What the tuner chooses is not a flag here: hidden from --help, and refused with a reason below.
  for (const char* chosen : {"--batch-size", "--accum", "--steps"}) app.get_option(chosen)->group("");
  // The trainer's "(0: none)" is not the tuner's: the search needs a limit to fit under.
  app.get_option("--memory-limit")
      ->description("The limit the search fits under (e.g. 512MiB, 1.5GiB, 2GB = 2e9 bytes): memcomm's CPU allocator's "
                    "cap, required on the CPU; on a GPU PyTorch's CUDA allocator's, by default the free device memory");
  RawTuneFlags raw;
  add_tuning_options(app, t, raw);

  train::parse_or_exit(app, argc, argv, "memcomm-tune");
  check_tune_options(app, t, raw);
  t.search.strategy = raw.search == "lightning" ? Strategy::Lightning
                      : raw.search == "grid"    ? Strategy::Grid
                                                : Strategy::Memcomm;
  t.search.bucket_mb = t.train.bucket_mb;
  for (double mb : raw.buckets)  // each size once, in the order given: a repeat probed the same layout again
    if (std::find(t.search.bucket_candidates.begin(), t.search.bucket_candidates.end(), mb) ==
        t.search.bucket_candidates.end())
      t.search.bucket_candidates.push_back(mb);
  t.search.world = t.train.nproc;  // replaced by the real world size under torchrun/Slurm
  if (!raw.unequal.empty()) parse_unequal_data(raw.unequal, t.probe);
  t.train_args = trainer_args(argc, argv);
  return t;
}

}  // namespace memcomm::tune
