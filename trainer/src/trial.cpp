// TrialRunner: the training pieces of one rank (those run_training builds, without the epoch loop),
// stepped as a trial asks and put back afterwards.
//
// Note [Agreeing on an out-of-memory]: after every trial step each rank contributes its OOM flag
// to an all-reduce MAX, so all ranks leave a failed trial together. A rank that ran out of memory
// first issues the gradient collectives its peers are waiting for (TrainSession::abandon_step), so
// nobody hangs; then every rank restores the model and optimizer from the copy taken when the trial
// began and empties the allocator's cache.
#include <memcomm/train/trial.hpp>

#include <memcomm/train/device_memory.hpp>
#include <memcomm/train/errors.hpp>
#include <memcomm/train/evaluate.hpp>
#include <memcomm/train/profiling.hpp>
#include <memcomm/train/rank_device.hpp>
#include <memcomm/train/session.hpp>

#include <ATen/Parallel.h>

#if __has_include(<ATen/cuda/CUDAContext.h>)
#include <ATen/cuda/CUDAContext.h>
#define MEMCOMM_TRIAL_CUDA 1
#endif
#include <memcomm/common/bytes.hpp>

#include <algorithm>
#include <array>
#include <fstream>

namespace memcomm::train {

struct TrialRunner::Impl {
  TrainOptions o;
  DistEnv env;
  UnequalData unequal;
  RankDevice rd;
  std::unique_ptr<DeviceMemory> memory;
  std::unique_ptr<RunProfiler> profiler;
  std::unique_ptr<Communicator> comm;
  std::shared_ptr<Dataset> train_set;
  std::unique_ptr<TrainSession> session;
  torch::Tensor agree_buf;  // two doubles on the host, reused by agree_step()
  double bucket_mb = 0;
  int64_t epoch = 0;

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
    comm->allreduce(agree_buf, -1, Reduce::Max);
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
  void agreed_oom(const Agreed& a, TrialOutcome& out) const {
    out.oom = true;
    out.oom_rank = a.oom_rank;
    out.oom_where = a.where;
  }

  std::vector<double> agree_max(std::vector<double> values) {
    auto t = torch::from_blob(values.data(), {int64_t(values.size())}, torch::kFloat64);
    comm->allreduce(t, -1, Reduce::Max);
    return values;
  }

  std::unique_ptr<BatchLoader> loader_for(int64_t b) {
    DistributedSampler sampler(train_set->size(), env.rank, env.world, true, o.seed, o.tail == Tail::Pad);
    sampler.set_epoch(epoch++);
    if (sampler.per_rank() < b)
      throw UsageError("micro-batch " + std::to_string(b) + " is larger than this rank's shard of " +
                       std::to_string(sampler.per_rank()) + " samples; use a larger dataset or a smaller --global-batch");
    return std::make_unique<BatchLoader>(train_set, sampler.indices(), b, o.workers, o.prefetch, rd.device.is_cuda());
  }

  // One optimizer step of the plan on this rank. Returns false after an out-of-memory, with
  // `where` set; throws anything else.
  bool step(const TrialPlan& p, std::unique_ptr<BatchLoader>& loader, StepTiming& t, TrialOutcome& out,
            std::string& where) {
    try {
      std::vector<torch::Tensor> heavier;  // UnequalData: held until the step ends
      session->step(p.accum, 0, [&](int64_t& waited) {
        Batch batch;
        if (!loader->next(batch, &waited)) {
          // A new epoch. The old loader goes first, as in the training loop: both alive at once
          // would hold a batch more than training ever does.
          loader.reset();
          loader = loader_for(p.micro_batch);
          loader->next(batch, &waited);
        }
        out.batch_bytes = batch.inputs.nbytes() + batch.targets.nbytes();
        if (unequal.rank == env.rank && unequal.bytes_per_sample > 0)
          heavier.push_back(torch::empty({p.micro_batch * unequal.bytes_per_sample},
                                         torch::TensorOptions(torch::kUInt8).device(rd.device)));
        return batch;
      }, t);
      return true;
    } catch (const CommError&) {
      throw;
    } catch (const std::exception& e) {
      if (!is_out_of_memory(e)) throw;
      where = session->phase();
      session->abandon_step();
      return false;
    }
  }

  // The plan's steps: untimed until warmup_micro micro-batches are consumed, then timed as long as
  // the plan says. Every step ends with agree_step, so all ranks stop together.
  void run_steps(const TrialPlan& p, TrialOutcome& out) {
    std::unique_ptr<BatchLoader> loader;
    std::string where;
    bool mine = false;  // this rank ran out of memory (it then only answers its peers' collectives)
    try {
      loader = loader_for(p.micro_batch);
    } catch (const UsageError&) {
      throw;
    } catch (const std::exception& e) {
      if (!is_out_of_memory(e)) throw;
      mine = true;
      where = "data";
    }
    int64_t consumed = 0;
    int64_t t_timing = p.warmup_micro == 0 ? monotonic_ns() : -1;
    for (;;) {
      StepTiming t;
      if (!mine)
        mine = !step(p, loader, t, out, where);
      else
        session->abandon_step();  // what the healthy ranks' step waits for
      consumed += p.accum;
      bool more = true;
      if (t_timing >= 0) {
        out.timed.push_back(t);
        const double elapsed = double(monotonic_ns() - t_timing) / 1e9;
        const auto n = static_cast<int64_t>(out.timed.size());
        more = n < p.max_steps && (n < p.min_steps || elapsed < p.min_seconds);
      } else if (consumed >= p.warmup_micro) {
        t_timing = monotonic_ns();
      }
      const Agreed a = agree_step(mine, where, more);
      if (a.oom) return agreed_oom(a, out);
      if (!a.more) return;
      if (t_timing < 0 && consumed >= p.warmup_micro) t_timing = monotonic_ns();
    }
  }

  // Re-packs the gradient buckets for another bucket size, agreed over ranks: if any rank runs out
  // of memory doing it, every rank keeps (or goes back to) the old layout.
  bool set_buckets(double mb, TrialOutcome& out) {
    if (!session->sync() || mb <= 0 || mb == bucket_mb) return true;
    bool failed = false;
    try {
      session->sync()->rebucket(mb);
    } catch (const std::exception& e) {
      if (!is_out_of_memory(e)) throw;
      failed = true;
    }
    const Agreed a = agree_step(failed, "buckets", false);
    if (!a.oom) {
      bucket_mb = mb;
      return true;
    }
    if (!failed) session->sync()->rebucket(bucket_mb);  // back to the layout the others kept
    agreed_oom(a, out);
    return false;
  }

  // The evaluation pass; every rank throws together (Note [Evaluation fails together] in evaluate.cpp).
  void evaluate_into(int64_t micro_batch, TrialOutcome& out) {
    auto eo = o;
    eo.batch_size = micro_batch;
    try {
      const auto e = evaluate(session->model(), eo, env, *comm, rd.device);
      out.eval_accuracy = e.accuracy;
      out.eval_loss = e.loss;
    } catch (const CommError&) {
      throw;
    } catch (const std::exception& e) {
      if (!is_out_of_memory(e)) throw;
      out.oom = true;
      out.oom_where = "evaluation";
    }
  }
};

namespace {

// Runs `make`; its out-of-memory becomes a UsageError saying `what`, with the allocator's message.
template <typename Make>
void refuse_out_of_memory(const std::string& what, Make make) {
  try {
    make();
  } catch (const UsageError&) {
    throw;
  } catch (const std::exception& e) {
    if (!is_out_of_memory(e)) throw;
    throw UsageError(what + " (" + error_message(e) + ")");
  }
}

}  // namespace

TrialRunner::TrialRunner(const TrainOptions& o, const DistEnv& env, const UnequalData& unequal)
    : impl_(std::make_unique<Impl>()) {
  auto& m = *impl_;
  m.o = o;
  m.env = env;
  m.unequal = unequal;
  m.rd = choose_device(o, env);
  m.memory = std::make_unique<DeviceMemory>(o, m.rd.device);  // before the first tensor
  if (m.o.memory_limit == 0 && m.rd.device.is_cuda()) {  // on a GPU the limit defaults to its free memory
    m.o.memory_limit = m.memory->free_bytes();
    DeviceMemory::cap_gpu(m.rd.device, m.o.memory_limit);
  }
  m.profiler = std::make_unique<RunProfiler>(o, env, m.memory->cpu_allocator(), m.rd.device.is_cuda());
  m.comm = std::make_unique<Communicator>(env, m.rd.backend, o.timeout_s);
  auto* prof = m.profiler.get();
  m.comm->on_collective = [prof](const CollectiveRecord& r) { prof->collective(r); };
  m.comm->set_device(m.rd.device);
  // What ran out before any step is named: the training set lives under the cap too, and a 45 MiB
  // Fashion-MNIST under 40 MiB was blamed on a model of a few hundred KiB.
  const auto limit = format_bytes(static_cast<uint64_t>(o.memory_limit));
  refuse_out_of_memory("--memory-limit " + limit + " is below the training set's size: the data is held in memory, "
                       "under the limit, before any step", [&] {
    m.agree_buf = torch::zeros({2}, torch::kFloat64);
    m.train_set = make_dataset(o, "train");
  });
  refuse_out_of_memory("--memory-limit " + limit + " is below the model's own size: the model does not fit beside "
                       "its data before any step", [&] {
    m.session = std::make_unique<TrainSession>(o, *m.comm, m.rd.device, m.train_set->num_classes());
  });
  m.bucket_mb = o.bucket_mb;
}

TrialRunner::~TrialRunner() = default;

TrialOutcome TrialRunner::run(const TrialPlan& plan) {
  auto& m = *impl_;
  TrialOutcome out;
  if (!m.set_buckets(plan.bucket_mb, out)) return out;
  const auto state = m.session->save_state();
  m.memory->release_cache();
  m.memory->reset_peaks();
  if (plan.first_epoch) m.epoch = 0;
  const int64_t t0 = monotonic_ns();
  m.run_steps(plan, out);
  out.steps_wall_s = double(monotonic_ns() - t0) / 1e9;
  if (!out.oom && plan.evaluate) m.evaluate_into(plan.micro_batch, out);
  if (!out.oom) {
    const auto mem = m.memory->figures();
    out.peak_allocated = mem.peak_allocated;
    out.peak_reserved = mem.peak_reserved;
  }
  m.session->load_state(state);
  m.memory->release_cache();
  return out;
}

std::vector<double> TrialRunner::agree_max(std::vector<double> values) { return impl_->agree_max(std::move(values)); }

void TrialRunner::counter(const char* name, double value) {
  if (impl_->profiler) impl_->profiler->counter(name, value);
}

std::pair<int64_t, int64_t> TrialRunner::finish_trace() { return impl_->profiler->finish(); }

int TrialRunner::rank() const { return impl_->env.rank; }
int TrialRunner::world() const { return impl_->env.world; }

std::string TrialRunner::device_description() const {
  const auto& d = impl_->rd.device;
  if (!d.is_cuda()) {  // and the threads a step runs on: the same CPU with other cores is another speed
    const std::string threads = " x" + std::to_string(at::get_num_threads()) + " threads";
    std::ifstream f("/proc/cpuinfo");
    for (std::string line; std::getline(f, line);)
      if (line.rfind("model name", 0) == 0) return "cpu:" + line.substr(line.find(':') + 2) + threads;
    return "cpu" + threads;
  }
#ifdef MEMCOMM_TRIAL_CUDA
  return std::string("cuda:") + at::cuda::getDeviceProperties(d.index())->name;
#else
  return "cuda";
#endif
}

int64_t TrialRunner::memory_limit() const { return impl_->o.memory_limit; }

int64_t TrialRunner::shard_size() const {
  const Impl& m = *impl_;
  return DistributedSampler(m.train_set->size(), m.env.rank, m.env.world, true, m.o.seed, m.o.tail == Tail::Pad).per_rank();
}

int64_t TrialRunner::model_state_bytes() const {
  int64_t params = 0;
  for (const auto& p : impl_->session->params()) params += p.numel() * p.element_size();
  const int64_t opt_copies = impl_->o.optimizer == OptimizerKind::Sgd ? (impl_->o.momentum != 0 ? 1 : 0) : 2;
  return params * (2 + opt_copies);  // parameters, gradient buckets, optimizer state
}

}  // namespace memcomm::train
