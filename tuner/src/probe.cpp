// Note [Probing long accumulations]: memory does not depend on K beyond K = 2 (gradients live in
// the buckets whatever K is; activations are freed after each micro-step), but time does, and a
// probe at b = 1 with K = 512 would run 512 micro-steps per step. A probe therefore runs
// min(K, accum_cap) micro-steps per step and times the synchronising last micro-step (with the
// all-reduce and the optimizer step) apart from the others:
//   step(K) = (K - 1) * t(early micro-step) + t(last micro-step + sync + optimizer).
// When K <= accum_cap nothing is extrapolated. The verification runs the full K.
//
// Note [Steady-state probes]: the loader prefetches, so the first micro-steps of a probe find their
// batches ready and run faster than training will. A probe first consumes max(K, prefetch + 2)
// micro-batches untimed (at least one whole step), then times at least --measured-steps steps and at
// least --probe-seconds of wall time, stopping at 200 steps once --measured-steps are done, so a
// data-bound configuration shows its real, data-bound speed.
//
// Note [A first step before the probes]: a model's first step does one-time work that later steps
// do not: optimizer state appears, the gradient buckets are re-packed in ready order (a transient
// copy of every gradient), lazy initialisations run. Measured inside the first probe it would make
// the smallest micro-batch look bigger than the next and spoil the peak fit, so the runner takes
// one step at b = 1 first and restores the initial state. (A real run pays that transient in its
// first step, when no activation is alive; it is the size of the gradients.)
#include "probe.hpp"

#include <memcomm/profiler/recorder.hpp>
#include <memcomm/train/errors.hpp>

#include <algorithm>
#include <chrono>

namespace memcomm::tune {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// See Note [Probing long accumulations]: the early micro-steps averaged over every timed step, the
// synchronising last one by its median; `accum` is the request's K, `measured` the K that ran.
double step_seconds(const std::vector<train::StepTiming>& timed, int64_t accum, int measured) {
  double early_ns = 0;
  std::vector<double> last;
  for (const auto& t : timed) {
    early_ns += double(t.early_micro_ns);
    last.push_back(double(t.last_micro_ns));
  }
  return probe_step_time(early_ns, std::move(last), accum, measured) / 1e9;
}

// Each timed step's time, for step_noise (search.hpp).
std::vector<double> step_times(const std::vector<train::StepTiming>& timed) {
  std::vector<double> total;
  for (const auto& t : timed) total.push_back(double(t.early_micro_ns) + double(t.last_micro_ns));
  return total;
}

double exposed_seconds(const std::vector<train::StepTiming>& timed) {
  double exposed = 0;
  for (const auto& t : timed) exposed += double(t.exposed_comm_ns) / 1e9;
  return timed.empty() ? 0 : exposed / double(timed.size());
}

}  // namespace

ProbeRunner::ProbeRunner(const train::TrainOptions& o, const train::DistEnv& env, const ProbeSettings& settings)
    : trial_(o, env, settings.unequal), settings_(settings), prefetch_(o.prefetch), workers_(o.workers) {
  // See Note [A first step before the probes]: one step at b = 1; the trial puts the state back.
  train::TrialPlan one;
  const auto first = trial_.run(one);
  if (first.oom)  // the model's state fitted (tune_run checks it first): the step's own memory did not
    throw train::UsageError("--memory-limit " + format_bytes(trial_.memory_limit()) +
                            " is too small for one step at micro-batch 1: it runs out of memory (" + first.oom_where +
                            ") beside the model's parameters, gradients and optimizer state");
}

ProbeResult ProbeRunner::probe(const ProbeRequest& r) {
  const auto t0 = std::chrono::steady_clock::now();
  prof::PhaseScope probe_scope(prof::Phase::Step, static_cast<uint64_t>(r.micro_batch));
  train::TrialPlan plan;
  plan.micro_batch = r.micro_batch;
  plan.accum = static_cast<int>(std::min<int64_t>(r.accum, settings_.accum_cap));
  plan.bucket_mb = r.bucket_mb;
  plan.warmup_micro = std::max<int64_t>(plan.accum, prefetch_ + 2);  // Note [Steady-state probes]
  plan.min_steps = r.measured_steps;
  plan.min_seconds = settings_.min_seconds;
  plan.max_steps = std::max<int64_t>(r.measured_steps, 200);
  const auto run = trial_.run(plan);
  ProbeResult x;
  x.measured_accum = plan.accum;
  x.oom = run.oom;
  x.oom_where = run.oom_where;
  x.oom_rank = run.oom_rank;
  if (!x.oom) {
    // Note [Loader allowance] (search.cpp): the ring of prefetched batches plus the one a worker
    // fills; without workers batches are made on demand and the probe saw them all.
    const int64_t ring = workers_ > 0 ? int64_t(prefetch_ + 1) * run.batch_bytes : 0;
    const auto agreed = trial_.agree_max({step_seconds(run.timed, r.accum, plan.accum), exposed_seconds(run.timed),
                                          double(run.peak_allocated), double(run.peak_reserved), double(ring),
                                          step_noise(step_times(run.timed))});
    x.step_s = agreed[0];
    x.exposed_comm_s = agreed[1];
    x.peak_allocated = static_cast<int64_t>(agreed[2]);
    x.peak_reserved = static_cast<int64_t>(agreed[3]);
    x.loader_allowance = static_cast<int64_t>(agreed[4]);
    x.step_noise = agreed[5];
  }
  x.wall_s = seconds_since(t0);
  counters(r, x);
  return x;
}

Verification ProbeRunner::verify(const Recommendation& rec, int64_t steps) {
  train::TrialPlan plan;
  plan.micro_batch = rec.micro_batch;
  plan.accum = static_cast<int>(rec.accum);
  plan.bucket_mb = rec.bucket_mb;
  plan.min_steps = plan.max_steps = steps;
  plan.first_epoch = true;  // the data order of a fresh memcomm-train run with this configuration
  plan.evaluate = true;
  const auto run = trial_.run(plan);
  Verification v;
  v.micro_batch = rec.micro_batch;
  v.oom = run.oom;
  v.oom_where = run.oom_where;
  v.steps = static_cast<int64_t>(run.timed.size());
  if (!v.oom) {
    const auto agreed = trial_.agree_max({run.steps_wall_s, double(run.peak_allocated), double(run.peak_reserved)});
    v.samples_per_s = double(steps * rec.micro_batch * rec.accum * trial_.world()) / agreed[0];
    v.eval_accuracy = run.eval_accuracy;
    v.eval_loss = run.eval_loss;
    v.peak_allocated = static_cast<int64_t>(agreed[1]);
    v.peak_reserved = static_cast<int64_t>(agreed[2]);
  }
  return v;
}

int64_t ProbeRunner::agree_max(int64_t value) { return static_cast<int64_t>(trial_.agree_max({double(value)})[0]); }

void ProbeRunner::counters(const ProbeRequest& r, const ProbeResult& x) {
  trial_.counter("tune.micro_batch", double(r.micro_batch));
  trial_.counter("tune.oom", x.oom ? 1.0 : 0.0);
  if (x.oom) return;
  trial_.counter("tune.peak_reserved", double(x.peak_reserved));
  trial_.counter("tune.step_ms", x.step_s * 1e3);
}

}  // namespace memcomm::tune
