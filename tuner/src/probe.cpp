// Note [Probing long accumulations]: memory does not depend on K beyond K = 2 (gradients live in
// the buckets whatever K is; activations are freed after each micro-step), but time does, and a
// probe at b = 1 with K = 512 would run 512 micro-steps per step. A probe therefore runs
// min(K, accum_cap) micro-steps per step and times the synchronising last micro-step (with the
// all-reduce and the optimizer step) apart from the others:
//   step(K) = (K - 1) * t(early micro-step) + t(last micro-step + sync + optimizer).
// When K <= accum_cap nothing is extrapolated. The verification runs the full K.
//
// Note [Steady-state probes]: the loader prefetches, so the first micro-steps of a probe find their
// batches ready and run faster than training will. A probe first consumes prefetch + 2 micro-batches
// untimed, then times at least --measured-steps steps and at least --probe-seconds of wall time
// (at most 200 steps), so a data-bound configuration shows its real, data-bound speed.
//
// Note [A first step before the probes]: a model's first step does one-time work that later steps
// do not: optimizer state appears, the gradient buckets are re-packed in ready order (a transient
// copy of every gradient), lazy initialisations run. Measured inside the first probe it would make
// the smallest micro-batch look bigger than the next and spoil the peak fit, so the runner takes
// one step at b = 1 first and restores the initial state. (A real run pays that transient in its
// first step, when no activation is alive; it is the size of the gradients.)
//
// Note [Agreeing on an out-of-memory]: after every probe step each rank contributes its OOM flag
// to an all-reduce MAX, so all ranks leave a failed probe together. A rank that ran out of memory
// first issues the gradient collectives its peers are waiting for (TrainSession::abandon_step), so
// nobody hangs; then every rank restores the model and optimizer from the copy taken when the probe
// began and empties the allocator's cache.
#include "probe.hpp"

#include "memcomm/tuner/oom.hpp"

#include <memcomm/train/device_memory.hpp>
#include <memcomm/train/errors.hpp>
#include <memcomm/train/evaluate.hpp>
#include <memcomm/train/profiling.hpp>
#include <memcomm/train/rank_device.hpp>
#include <memcomm/train/session.hpp>

#include <c10/util/Exception.h>
#if __has_include(<ATen/cuda/CUDAContext.h>)
#include <ATen/cuda/CUDAContext.h>
#define MEMCOMM_TUNER_CUDA 1
#endif
#include <memcomm/allocator/caching_allocator.hpp>
#include <memcomm/profiler/recorder.hpp>

#include <algorithm>
#include <array>
#include <fstream>

namespace memcomm::tune {

using train::monotonic_ns;

struct ProbeRunner::Impl {
  train::TrainOptions o;
  train::DistEnv env;
  ProbeSettings settings;
  train::RankDevice rd;
  std::unique_ptr<train::DeviceMemory> memory;
  std::unique_ptr<train::RunProfiler> profiler;
  std::unique_ptr<train::Communicator> comm;
  std::shared_ptr<train::Dataset> train_set;
  std::unique_ptr<train::TrainSession> session;
  torch::Tensor agree_buf;  // two doubles on the host, reused by agree_step()
  double bucket_mb = 0;
  int64_t epoch = 0;
  int64_t batch_bytes = 0;  // one micro-batch's inputs and targets, as last loaded

  // Whether `e` is an out-of-memory (other failures are rethrown by the callers).
  static bool is_oom(const std::exception& e) {
    if (dynamic_cast<const alloc::OutOfMemory*>(&e) || dynamic_cast<const c10::OutOfMemoryError*>(&e)) return true;
    return is_oom_message(e.what());
  }

  // One all-reduce MAX per step carries everything the ranks must agree on
  // (Note [Agreeing on an out-of-memory]): any out-of-memory, the lowest rank that had one, and
  // whether any rank wants another step.
  // The out-of-memory goes over as (world - rank) * 8 + phase, so the MAX names the lowest rank
  // that failed and where its step was.
  struct Agreed {
    bool oom = false;
    int oom_rank = -1;
    std::string where;
    bool more = false;
  };
  static constexpr std::array<const char*, 7> kPhases = {"?",        "data",          "forward", "backward",
                                                         "communication", "optimizer", "buckets"};
  Agreed agree_step(bool oom, const std::string& where, bool more) {
    double code = 0;
    if (oom) {
      const auto it = std::find(kPhases.begin(), kPhases.end(), where);
      code = double(env.world - env.rank) * 8 + double(it == kPhases.end() ? 0 : it - kPhases.begin());
    }
    // Filled in place: right after an out-of-memory, agreeing must not need memory.
    auto* v = agree_buf.data_ptr<double>();
    v[0] = code;
    v[1] = more ? 1.0 : 0.0;
    comm->allreduce(agree_buf, -1, train::Reduce::Max);
    Agreed a;
    const auto c = static_cast<int64_t>(v[0]);
    a.oom = c > 0;
    if (a.oom) {
      a.oom_rank = env.world - static_cast<int>(c / 8);
      a.where = fmt_where(a.oom_rank, kPhases[static_cast<size_t>(c % 8)]);
    }
    a.more = v[1] > 0;
    return a;
  }
  std::string fmt_where(int rank, const char* phase) const {
    return env.world > 1 ? "rank " + std::to_string(rank) + " " + phase : std::string(phase);
  }

  // Every value's largest over the ranks, in one all-reduce.
  std::vector<double> agree_max(std::vector<double> values) {
    auto t = torch::from_blob(values.data(), {int64_t(values.size())}, torch::kFloat64);
    comm->allreduce(t, -1, train::Reduce::Max);
    return values;
  }

  std::unique_ptr<train::BatchLoader> loader_for(int64_t b) {
    train::DistributedSampler sampler(train_set->size(), env.rank, env.world, true, o.seed, o.tail == train::Tail::Pad);
    sampler.set_epoch(epoch++);
    if (sampler.per_rank() < b)
      throw train::UsageError("micro-batch " + std::to_string(b) + " is larger than this rank's shard of " +
                              std::to_string(sampler.per_rank()) + " samples; use a larger dataset or a smaller --global-batch");
    return std::make_unique<train::BatchLoader>(train_set, sampler.indices(), b, o.workers, o.prefetch, rd.device.is_cuda());
  }

  // How long a probe runs (Note [Steady-state probes]).
  struct Plan {
    int64_t warmup_micro = 0;   // micro-batches consumed before timing starts (at least one step)
    int64_t min_steps = 3;      // timed steps, at least
    double min_seconds = 0;     // timed wall time, at least
    int64_t max_steps = 3;      // timed steps, at most
  };

  // Steps of `accum` micro-steps at micro-batch b as `plan` says. Returns the timed steps' timings,
  // or sets oom/where/oom_rank when any rank ran out of memory.
  std::vector<train::StepTiming> run_steps(int64_t b, int accum, const Plan& plan, bool& oom, std::string& where,
                                           int& oom_rank) {
    std::vector<train::StepTiming> timed;
    std::unique_ptr<train::BatchLoader> loader;
    bool mine = false;
    try {
      loader = loader_for(b);
    } catch (const train::UsageError&) {
      throw;
    } catch (const std::exception& e) {
      if (!is_oom(e)) throw;
      mine = true;
      where = "data";
    }
    int64_t consumed = 0;
    int64_t t_timing = plan.warmup_micro == 0 ? monotonic_ns() : -1;
    for (;;) {
      train::StepTiming t;
      if (!mine) {
        try {
          // Test hook (--unequal-data): this rank's samples weigh more, for the whole step.
          std::vector<torch::Tensor> heavier;
          session->step(accum, 0, [&](int64_t& waited) {
            train::Batch batch;
            if (!loader->next(batch, &waited)) {
              // A new epoch. The old loader goes first, as in the training loop: both alive at once
              // would hold a batch more than training ever does.
              loader.reset();
              loader = loader_for(b);
              loader->next(batch, &waited);
            }
            batch_bytes = batch.inputs.nbytes() + batch.targets.nbytes();
            if (settings.heavy_rank == env.rank && settings.heavy_bytes_per_sample > 0)
              heavier.push_back(torch::empty({b * settings.heavy_bytes_per_sample},
                                             torch::TensorOptions(torch::kUInt8).device(rd.device)));
            return batch;
          }, t);
        } catch (const train::CommError&) {
          throw;
        } catch (const std::exception& e) {
          if (!is_oom(e)) throw;
          mine = true;
          where = session->phase();
          session->abandon_step();
        }
      } else {
        session->abandon_step();  // what the healthy ranks' step waits for
      }
      consumed += accum;
      bool more = true;
      if (t_timing >= 0) {
        timed.push_back(t);
        const double elapsed = double(monotonic_ns() - t_timing) / 1e9;
        const auto n = static_cast<int64_t>(timed.size());
        more = n < plan.max_steps && (n < plan.min_steps || elapsed < plan.min_seconds);
      } else if (consumed >= plan.warmup_micro) {
        t_timing = monotonic_ns();
      }
      const Agreed a = agree_step(mine, where, more);
      if (a.oom) {
        oom = true;
        oom_rank = a.oom_rank;
        where = a.where;
        return timed;
      }
      if (!a.more) return timed;
      if (t_timing < 0 && consumed >= plan.warmup_micro) t_timing = monotonic_ns();
    }
  }

  // Re-packs the gradient buckets for a probe at another bucket size, agreed over ranks: if any rank
  // runs out of memory doing it, every rank keeps (or goes back to) the old layout.
  bool set_buckets(double mb, std::string& where, int& oom_rank) {
    if (!session->sync() || mb == bucket_mb) return true;
    bool failed = false;
    try {
      session->sync()->rebucket(mb);
    } catch (const std::exception& e) {
      if (!is_oom(e)) throw;
      failed = true;
    }
    const Agreed a = agree_step(failed, "buckets", false);
    if (!a.oom) {
      bucket_mb = mb;
      return true;
    }
    if (!failed) session->sync()->rebucket(bucket_mb);  // back to the layout the others kept
    where = a.where;
    oom_rank = a.oom_rank;
    return false;
  }

  void recover(const train::TrainSession::State& state) {
    session->load_state(state);
    memory->release_cache();
  }

  void counters(const ProbeRequest& r, const ProbeResult& x) {
    if (!profiler) return;
    profiler->counter("tune.micro_batch", double(r.micro_batch));
    profiler->counter("tune.oom", x.oom ? 1.0 : 0.0);
    if (x.oom) return;
    profiler->counter("tune.peak_reserved", double(x.peak_reserved));
    profiler->counter("tune.step_ms", x.step_s * 1e3);
  }
};

ProbeRunner::ProbeRunner(const train::TrainOptions& o, const train::DistEnv& env, const ProbeSettings& settings)
    : impl_(std::make_unique<Impl>()) {
  auto& m = *impl_;
  m.o = o;
  m.env = env;
  m.settings = settings;
  m.rd = train::choose_device(o, env);
  m.memory = std::make_unique<train::DeviceMemory>(o, m.rd.device);  // before the first tensor
  if (m.o.memory_limit == 0 && m.rd.device.is_cuda()) {  // on a GPU the limit defaults to its free memory
    m.o.memory_limit = m.memory->free_bytes();
    train::DeviceMemory::cap_gpu(m.rd.device, m.o.memory_limit);
  }
  m.profiler = std::make_unique<train::RunProfiler>(o, env, m.memory->cpu_allocator(), m.rd.device.is_cuda());
  m.comm = std::make_unique<train::Communicator>(env, m.rd.backend, o.timeout_s);
  auto* prof = m.profiler.get();
  m.comm->on_collective = [prof](const train::CollectiveRecord& r) { prof->collective(r); };
  m.comm->set_device(m.rd.device);
  try {
    m.agree_buf = torch::zeros({2}, torch::kFloat64);
    m.train_set = train::make_dataset(o, "train");
    m.session = std::make_unique<train::TrainSession>(o, *m.comm, m.rd.device, m.train_set->num_classes());
  } catch (const train::UsageError&) {
    throw;
  } catch (const std::exception& e) {
    if (!Impl::is_oom(e)) throw;
    throw train::UsageError("--memory-limit " + format_bytes(o.memory_limit) +
                            " is below the model's own size: the model and its data do not fit before any step (" +
                            e.what() + ")");
  }
  m.bucket_mb = o.bucket_mb;
  // Note [A first step before the probes]: one step at b = 1, then back to the initial state.
  const auto pristine = m.session->save_state();
  Impl::Plan one;
  one.min_steps = one.max_steps = 1;
  bool oom = false;
  std::string where;
  int rank = -1;
  m.run_steps(1, 1, one, oom, where, rank);
  if (oom)
    throw train::UsageError("--memory-limit " + format_bytes(o.memory_limit) +
                            " is below the model's own size: one step at micro-batch 1 runs out of memory (" + where + ")");
  m.recover(pristine);
}

ProbeRunner::~ProbeRunner() = default;

ProbeResult ProbeRunner::probe(const ProbeRequest& r) {
  auto& m = *impl_;
  const int64_t t0 = monotonic_ns();
  prof::PhaseScope probe_scope(prof::Phase::Step, static_cast<uint64_t>(r.micro_batch));
  ProbeResult x;
  if (!m.set_buckets(r.bucket_mb, x.oom_where, x.oom_rank)) {
    x.oom = true;
    x.wall_s = double(monotonic_ns() - t0) / 1e9;
    m.counters(r, x);
    return x;
  }
  const auto state = m.session->save_state();
  m.memory->release_cache();
  m.memory->reset_peaks();
  const int accum = static_cast<int>(std::min<int64_t>(r.accum, m.settings.accum_cap));
  x.measured_accum = accum;
  Impl::Plan plan;
  plan.warmup_micro = std::max<int64_t>(accum, m.o.prefetch + 2);
  plan.min_steps = r.measured_steps;
  plan.min_seconds = m.settings.min_seconds;
  plan.max_steps = std::max<int64_t>(r.measured_steps, 200);
  const auto timed = m.run_steps(r.micro_batch, accum, plan, x.oom, x.oom_where, x.oom_rank);
  if (!x.oom) {
    const auto mem = m.memory->figures();
    // Note [Probing long accumulations]: early micro-steps averaged over every timed step, the
    // synchronising last one by its median.
    double early_ns = 0, exposed = 0;
    std::vector<double> last;
    for (const auto& t : timed) {
      early_ns += double(t.early_micro_ns);
      last.push_back(double(t.last_micro_ns));
      exposed += double(t.exposed_comm_ns) / 1e9;
    }
    std::sort(last.begin(), last.end());
    const double early = accum > 1 && !timed.empty() ? early_ns / double((accum - 1) * timed.size()) : 0.0;
    const double mine = last.empty() ? 0 : (double(r.accum - 1) * early + last[last.size() / 2]) / 1e9;
    // Note [Loader allowance] (search.cpp): the ring of prefetched batches plus the one a worker
    // fills; without workers batches are made on demand and the probe saw them all.
    const int64_t ring = m.o.workers > 0 ? int64_t(m.o.prefetch + 1) * m.batch_bytes : 0;
    const auto agreed = m.agree_max({mine, timed.empty() ? 0 : exposed / double(timed.size()),
                                     double(mem.peak_allocated), double(mem.peak_reserved), double(ring)});
    x.step_s = agreed[0];
    x.exposed_comm_s = agreed[1];
    x.peak_allocated = static_cast<int64_t>(agreed[2]);
    x.peak_reserved = static_cast<int64_t>(agreed[3]);
    x.loader_allowance = static_cast<int64_t>(agreed[4]);
  }
  m.recover(state);
  x.wall_s = double(monotonic_ns() - t0) / 1e9;
  m.counters(r, x);
  return x;
}

Verification ProbeRunner::verify(const Recommendation& rec, int64_t steps) {
  auto& m = *impl_;
  Verification v;
  v.micro_batch = rec.micro_batch;
  int rank = -1;
  if (!m.set_buckets(rec.bucket_mb, v.oom_where, rank)) {
    v.oom = true;
    return v;
  }
  const auto state = m.session->save_state();
  m.memory->release_cache();
  m.memory->reset_peaks();
  m.epoch = 0;  // the data order of a fresh memcomm-train run with this configuration
  const int64_t t0 = monotonic_ns();
  Impl::Plan plan;
  plan.min_steps = plan.max_steps = steps;
  const auto timed = m.run_steps(rec.micro_batch, static_cast<int>(rec.accum), plan, v.oom, v.oom_where, rank);
  const double wall = double(monotonic_ns() - t0) / 1e9;
  v.steps = static_cast<int64_t>(timed.size());
  if (!v.oom) {
    v.samples_per_s = double(steps * rec.micro_batch * rec.accum * m.env.world) / m.agree_max({wall})[0];
    auto eo = m.o;
    eo.batch_size = rec.micro_batch;
    try {
      const auto e = train::evaluate(m.session->model(), eo, m.env, *m.comm, m.rd.device);
      v.eval_accuracy = e.accuracy;
      v.eval_loss = e.loss;
    } catch (const train::CommError&) {
      throw;
    } catch (const std::exception& e) {
      // Every rank throws together (Note [Evaluation fails together] in evaluate.cpp).
      if (!Impl::is_oom(e)) throw;
      v.oom = true;
      v.oom_where = "evaluation";
    }
    const auto mem = m.memory->figures();
    const auto peaks = m.agree_max({double(mem.peak_allocated), double(mem.peak_reserved)});
    v.peak_allocated = static_cast<int64_t>(peaks[0]);
    v.peak_reserved = static_cast<int64_t>(peaks[1]);
  }
  m.recover(state);
  return v;
}

int64_t ProbeRunner::agree_max(int64_t value) { return static_cast<int64_t>(impl_->agree_max({double(value)})[0]); }
bool ProbeRunner::leader() const { return impl_->env.rank == 0; }
int ProbeRunner::world() const { return impl_->env.world; }

std::string ProbeRunner::device_description() const {
  const auto& d = impl_->rd.device;
  if (!d.is_cuda()) {
    std::ifstream f("/proc/cpuinfo");
    for (std::string line; std::getline(f, line);)
      if (line.rfind("model name", 0) == 0) return "cpu:" + line.substr(line.find(':') + 2);
    return "cpu";
  }
#ifdef MEMCOMM_TUNER_CUDA
  return std::string("cuda:") + at::cuda::getDeviceProperties(d.index())->name;
#else
  return "cuda";
#endif
}

int64_t ProbeRunner::memory_limit() const { return impl_->o.memory_limit; }

int64_t ProbeRunner::model_state_bytes() const {
  int64_t params = 0;
  for (const auto& p : impl_->session->params()) params += p.numel() * p.element_size();
  const int64_t opt_copies = impl_->o.optimizer == train::OptimizerKind::Sgd ? (impl_->o.momentum != 0 ? 1 : 0) : 2;
  return params * (2 + opt_copies);  // parameters, gradient buckets, optimizer state
}

std::pair<int64_t, int64_t> ProbeRunner::finish_trace() { return impl_->profiler->finish(); }

}  // namespace memcomm::tune
