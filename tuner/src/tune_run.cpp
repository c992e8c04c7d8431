#include "tune_run.hpp"

#include <memcomm/common/json_output.hpp>
#include <memcomm/common/replacing_file.hpp>
#include <memcomm/train/errors.hpp>
#include "memcomm/tuner/report.hpp"
#include "memcomm/tuner/verify.hpp"
#include "probe.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <limits>
#include <set>

namespace memcomm::tune {

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The trainer flags of `args` that bear on the result: the probes never write the run's outputs
// (summary, checkpoints, logs; --trace and --live record the tuning itself), so those flags do not
// change the result, and changing them is still a hit.
std::vector<std::string> result_args(const std::vector<std::string>& args) {
  static const std::set<std::string> outputs = {"--summary-json",   "--trace",        "--live",
                                                "--cupti",          "--checkpoint-dir", "--checkpoint-every",
                                                "--log-interval",   "--dump-params"};
  std::vector<std::string> kept;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    const auto eq = a.find('=');
    if (a == "--resume") continue;  // the only switch among them
    if (outputs.count(a.substr(0, eq))) {
      if (eq == std::string::npos) ++i;  // its value follows
      continue;
    }
    kept.push_back(a);
  }
  return kept;
}

// What the result depends on (Note [Tuning cache] in report.hpp).
nlohmann::json cache_key(const TuneOptions& t, const ProbeRunner& runner) {
  const auto& o = t.train;
  return {{"memcomm_version", MEMCOMM_VERSION},
          {"device", runner.device_description()},
          {"dtype", o.amp == train::Amp::Bf16 ? "bf16-autocast" : "fp32"},
          {"model", {{"name", to_string(o.model)}, {"hidden", o.hidden}, {"layers", o.layers}, {"width", o.width},
                     {"heads", o.heads}, {"seq_len", o.seq_len}, {"vocab", o.vocab}}},
          {"dataset", to_string(resolved_dataset(o))},
          {"optimizer", to_string(o.optimizer)},
          {"allocator", to_string(o.allocator)},
          {"grad_compression", to_string(o.grad_compression)},
          {"overlap", o.overlap},
          {"threads", o.threads},
          {"workers", o.workers},
          {"prefetch", o.prefetch},
          {"world", runner.world()},
          {"global_batch", t.search.global_batch},
          {"memory_limit", runner.memory_limit()},
          {"search", static_cast<int>(t.search.strategy)},
          {"fit_only", t.search.fit_only},
          {"any_micro_batch", t.search.any_micro_batch},
          {"max_trials", t.search.max_trials},
          {"verify_steps", t.verify_steps},
          // Every trainer flag as given but the outputs', and how probes are timed: either may change
          // the result (a hit ignored most flags before).
          {"train_args", result_args(t.train_args)},
          {"probe", {{"measured_steps", t.search.measured_steps}, {"accum_cap", t.probe.accum_cap},
                     {"min_seconds", t.probe.min_seconds}, {"buckets", t.search.bucket_candidates}}}};
}

// An argument as a POSIX shell reads it back: quoted unless made only of characters that need none.
std::string shell_quoted(const std::string& a) {
  const bool plain = !a.empty() && a.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                                       "0123456789_-+=.,/:@%") == std::string::npos;
  if (plain) return a;
  std::string q = "'";
  for (char c : a) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// How the recommended run starts its ranks as this one did: torchrun's and Slurm's ranks come from the
// launcher, not from a flag (--nproc, when given, is among the flags), so the bare command trained one
// rank at 1/N of the global batch.
std::string launch_prefix(const train::DistEnv& env) {
  if (env.launcher == "torchrun") {
    const int nodes = std::max(1, env.world / std::max(1, env.local_world));
    return nodes > 1 ? fmt::format("torchrun --nnodes {} --nproc-per-node {} --no-python ", nodes, env.local_world)
                     : fmt::format("torchrun --nproc-per-node {} --no-python ", env.local_world);
  }
  if (env.launcher == "slurm") return fmt::format("srun -n {} ", env.world);
  return "";
}

std::string train_command(const TuneOptions& t, const Recommendation& c, const train::DistEnv& env) {
  std::string s = launch_prefix(env) + "memcomm-train";
  for (const auto& a : t.train_args) s += " " + shell_quoted(a);
  s += fmt::format(" --batch-size {} --accum {}", c.micro_batch, c.accum);
  if (c.world > 1) s += fmt::format(" --bucket-mb {:g}", c.bucket_mb);
  return s;
}

void print_result(const TuneResult& r) {
  fmt::print("\n{}\n{}", format_trials(r), format_recommendation(r));
}

void write_json(const TuneResult& r, const std::string& path) {
  if (path.empty()) return;
  write_replacing(path, json_text(to_json(r), 1) + "\n");  // Note [Outputs replaced whole]
}

// The checks that need the ranks: the agreed memory limit against the batch and the model's size.
void check_limits(const TuneOptions& t, ProbeRunner& runner) {
  if (t.search.memory_limit <= 0)  // --device auto found no GPU, whose free memory would be the default
    throw train::UsageError("--memory-limit is required on the CPU (on a GPU it defaults to the free device memory)");
  if (t.search.global_batch < t.search.world)
    throw train::UsageError(fmt::format("--global-batch {} is smaller than the {} ranks: every rank needs a sample",
                                        t.search.global_batch, t.search.world));
  if (runner.model_state_bytes() >= t.search.memory_limit)
    throw train::UsageError(fmt::format(
        "--memory-limit {} is below the model's own size: {} for parameters, gradients and optimizer state",
        format_bytes(t.search.memory_limit), format_bytes(runner.model_state_bytes())));
}

// Rank 0 decides about the cache; every rank follows (one file system may not be shared). True when
// the cached result was used.
bool reuse_cached(const TuneOptions& t, ProbeRunner& runner, const nlohmann::json& key, const train::DistEnv& env) {
  std::optional<TuneResult> cached;
  if (!t.fresh && runner.leader()) cached = load_cached(key);
  if (runner.agree_max(cached ? 1 : 0) == 0) return false;
  if (runner.leader()) {
    fmt::print("memcomm-tune: reusing the cached result {} (tuned in {:.1f} s; --fresh tunes again)\n", cache_path(key),
               cached->tuning_wall_s);
    cached->config.memory_limit = t.search.memory_limit;
    if (cached->outcome.recommendation) cached->command = train_command(t, *cached->outcome.recommendation, env);
    print_result(*cached);
    write_json(*cached, t.json_out);
  }
  return true;
}

// The search's probe: runs it on every rank and prints it on the leader (every rank with --print-decisions).
ProbeFn printing_probe(const TuneOptions& t, ProbeRunner& runner, const train::DistEnv& env, int& n) {
  return [&t, &runner, &env, &n](const ProbeRequest& q) {
    ++n;
    // What is probed is said as the probe starts (a probe can take many seconds), its outcome when it
    // ends; ranks printing their decisions say both at once, so that their lines do not interleave.
    const bool prints = runner.leader() || t.print_decisions;
    const std::string who = t.print_decisions ? fmt::format("rank {} ", env.rank) : "";
    const std::string what = fmt::format("  {}probe {:>2}: b={} K={} bucket={:g} MiB: ", who, n, q.micro_batch, q.accum,
                                         q.bucket_mb);
    if (prints && !t.print_decisions) {
      fmt::print("{}", what);
      std::fflush(stdout);
    }
    ProbeResult x;
    try {
      x = runner.probe(q);
    } catch (...) {  // the line is ended, so that the error says itself on its own
      if (prints && !t.print_decisions) fmt::print("failed\n");
      std::fflush(stdout);
      throw;
    }
    if (prints) {
      const std::string outcome =
          x.oom ? fmt::format("out of memory in {} ({:.1f} s)\n", x.oom_where, x.wall_s)
                : fmt::format("fits, peak reserved {}, step {:.1f} ms ({:.1f} s)\n", format_bytes(x.peak_reserved),
                              x.step_s * 1e3, x.wall_s);
      fmt::print("{}{}", t.print_decisions ? what : "", outcome);
      std::fflush(stdout);
    }
    return x;
  };
}

// The search's winner runs --verify-steps full steps and an evaluation pass (Note [Verifying the
// winner] in verify.hpp), cut to a time budget (Note [A verification that would take hours]) and
// announced by the leader.
VerifyFn verifying(const TuneOptions& t, ProbeRunner& runner) {
  return [&t, &runner](const Recommendation& rec) {
    const VerificationPlan plan = plan_verification(rec, t.verify_steps);
    if (plan.too_long())
      throw train::UsageError(fmt::format("--global-batch {}: {}; use a smaller global batch", t.search.global_batch,
                                          too_long_reason(plan, rec)));
    if (runner.leader()) {
      fmt::print("  verifying b={} K={}: {} steps{} and an evaluation pass{}\n", rec.micro_batch, rec.accum, plan.steps,
                 cut_note(plan, t.verify_steps, "--verify-steps "), time_note(plan));
      std::fflush(stdout);
    }
    return runner.verify(rec, plan.steps);
  };
}

}  // namespace

int run_tuning(TuneOptions t, const train::DistEnv& env) {
  const double t0 = now_s();
  ProbeRunner runner(t.train, env, t.probe);
  const bool leader = runner.leader();
  t.search.world = runner.world();
  // The smallest rank's limit (on GPUs each defaults to its own free memory): one search for all.
  t.search.memory_limit = -runner.agree_max(-runner.memory_limit());
  t.search.max_micro_batch = -runner.agree_max(-runner.shard_size());
  // The fewest micro-steps a step can take is the per-rank batch over the largest micro-batch a shard
  // gives; past what a step counts (an int), the global batch cannot be trained on this data.
  const int64_t per_rank = t.search.global_batch / std::max(1, t.search.world);
  const int64_t shard = std::max<int64_t>(1, t.search.max_micro_batch);
  if ((per_rank + shard - 1) / shard > std::numeric_limits<int>::max())
    throw train::UsageError(fmt::format("--global-batch {}: with {} samples per rank's shard, each optimizer step "
                                        "would take over 2^31 micro-steps; use a smaller global batch or more data",
                                        t.search.global_batch, shard));
  check_limits(t, runner);

  TuneResult r;
  r.config = t.search;
  r.key = cache_key(t, runner);
  if (reuse_cached(t, runner, r.key, env)) return 0;

  if (leader)
    fmt::print("memcomm-tune: global batch {} on {} rank(s), limit {} per rank, search {}\n", t.search.global_batch,
               t.search.world, format_bytes(t.search.memory_limit),
               t.search.strategy == Strategy::Memcomm ? "memcomm" : t.search.strategy == Strategy::Grid ? "grid" : "lightning");
  int n = 0;
  r.outcome = run_search(t.search, printing_probe(t, runner, env, n));
  verify_recommendation(r, verifying(t, runner));
  if (r.outcome.recommendation) r.command = train_command(t, *r.outcome.recommendation, env);
  r.tuning_wall_s = now_s() - t0;
  if (t.print_decisions && r.outcome.recommendation)
    fmt::print("rank {} decided: largest feasible {}, micro-batch {}, accum {}, bucket {:g}\n", env.rank,
               r.outcome.largest_feasible, r.outcome.recommendation->micro_batch, r.outcome.recommendation->accum,
               r.outcome.recommendation->bucket_mb);
  const auto [events, drops] = runner.finish_trace();
  if (leader) {
    print_result(r);
    if (events > 0) fmt::print("trace: {} events ({} dropped)\n", events, drops);
    if (r.outcome.recommendation) store_cached(r);  // first: a --json that cannot be written loses nothing
    write_json(r, t.json_out);
  }
  return r.outcome.recommendation ? 0 : 1;
}

}  // namespace memcomm::tune
