// One rank's training loop.
//
// Per optimizer step: K = --accum micro-batches. Each runs forward and backward with the loss scaled
// by 1/K; gradients accumulate in the bucket views (Note [Gradient buckets]) and only the last
// micro-batch synchronises them (no_sync semantics). With --sync-every K (local SGD) each rank steps
// on its own gradients and parameters are averaged every K steps instead.
//
// Note [Micro-batch position]: the data stream is addressed by a global micro-batch counter m:
// epoch = m / batches_per_epoch, batch = m % batches_per_epoch. Step s starts at m = s*K, which is
// all a resume needs to continue exactly where an uninterrupted run would be.
#include <memcomm/train/trainer.hpp>

#include "checkpoint.hpp"
#include <memcomm/train/errors.hpp>
#include <memcomm/train/profiling.hpp>
#include <memcomm/train/session.hpp>
#include "summary.hpp"

#include <fmt/core.h>
#include <memcomm/allocator/torch_allocator.hpp>
#include <memcomm/profiler/recorder.hpp>
#include <memcomm/profiler/sink.hpp>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <thread>

namespace memcomm::train {

namespace {

double lr_at(const TrainOptions& o, int64_t step) {
  const double frac = static_cast<double>(step) / static_cast<double>(o.steps);
  switch (o.schedule) {
    case Schedule::None: return o.lr;
    case Schedule::Step: return o.lr * (frac >= 0.75 ? 0.01 : frac >= 0.5 ? 0.1 : 1.0);
    case Schedule::Cosine: return o.lr * 0.5 * (1.0 + std::cos(M_PI * frac));
  }
  return o.lr;  // unreachable: the switch is exhaustive
}

// The process's peak resident set (getrusage), for runs whose allocator keeps no statistics.
int64_t peak_rss_bytes() {
  struct rusage ru {};
  ::getrusage(RUSAGE_SELF, &ru);
  return static_cast<int64_t>(ru.ru_maxrss) * 1024;  // Linux reports KiB
}

// memcomm-view's path when it sits beside this binary (build/bin/), else its bare name.
std::string viewer_command() {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const auto viewer = self.parent_path() / "memcomm-view";
    if (std::filesystem::exists(viewer, ec)) return viewer.string();
  }
  return "memcomm-view";
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1))];
}

}  // namespace

int run_training(const TrainOptions& o, const DistEnv& env) {
  const bool leader = env.rank == 0;
  // Before the first tensor, so that every CPU tensor of the run lives in it.
  alloc::CachingAllocator* cpu_alloc = install_allocators(o);
  const RankDevice rd = choose_device(o, env);
  const torch::Device dev = rd.device;
  if (!o.checkpoint_dir.empty()) ensure_writable_dir(o.checkpoint_dir);

  if (o.mode == Mode::Dp && env.world > 1)
    throw UsageError("--mode dp is one process driving every device, but the launcher started " +
                     std::to_string(env.world) + " ranks: use --mode ddp under torchrun/Slurm");
  RunProfiler profiler(o, env, cpu_alloc, dev.is_cuda());
  Communicator comm(env, rd.backend, o.timeout_s);
  comm.on_collective = [&profiler](const CollectiveRecord& r) { profiler.collective(r); };
  comm.set_device(dev);
  if (profiler.active()) profiler.clock_offset(comm.estimate_clock_offset());
  auto train_set = make_dataset(o, "train");
  TrainSession session(o, comm, dev, train_set->num_classes());
  auto& model = session.model();
  auto& params = session.params();
  auto& opt = session.optimizer();
  GradSync* sync = session.sync();
  const bool local_sgd = o.sync_every > 0;

  const Fingerprint fingerprint = checkpoint_fingerprint(o, env.world);  // Note [Checkpoint fingerprint]
  int64_t start_step = 0;
  if (o.resume) {
    std::string warning;
    start_step = load_checkpoint(o.checkpoint_dir, env.rank, model, opt, fingerprint, &warning);
    if (start_step < 0) throw UsageError("--resume: no checkpoint for rank " + std::to_string(env.rank) +
                                                 " in " + o.checkpoint_dir);
    if (leader && !warning.empty()) std::fprintf(stderr, "memcomm-train: warning: %s\n", warning.c_str());
    // A finished run has nothing left to do: running "0 steps" would print a loss of a step never taken.
    if (start_step >= o.steps)
      throw UsageError("--resume: the checkpoint in " + o.checkpoint_dir + " is at step " + std::to_string(start_step) +
                       ", and --steps is " + std::to_string(o.steps) + ": nothing is left to run; give --steps above " +
                       std::to_string(start_step));
    if (leader) fmt::print("resumed from step {} ({})\n", start_step, o.checkpoint_dir);
  }

  DistributedSampler sampler(train_set->size(), env.rank, env.world, true, o.seed, o.tail == Tail::Pad);
  const int64_t per_epoch = sampler.per_rank() / o.batch_size;
  if (per_epoch < 1)
    throw UsageError("--batch-size " + std::to_string(o.batch_size) + " is larger than this rank's shard of " +
                     std::to_string(sampler.per_rank()) + " samples");
  const int64_t unused_per_epoch = sampler.per_rank() % o.batch_size;  // Note [Partial batches]
  if (leader) {
    fmt::print("memcomm-train: {} ({} parameters) on {} | {} rank(s) via {}, backend {}, device {}\n", to_string(o.model),
               parameter_count(model), train_set->describe(), env.world, env.launcher, comm.backend(), dev.str());
    if (!session.dp_devices().empty()) {
      std::string names;
      for (const auto& d : session.dp_devices()) names += (names.empty() ? "" : ", ") + d.str();
      fmt::print("  --mode dp: data_parallel splits each batch of {} across {} device(s): {}{}\n", o.batch_size,
                 session.dp_devices().size(), names,
                 session.dp_devices().size() == 1 ? " (one device: the same as plain training)" : "");
    }
    // Two different tails: the sampler's, which evens the shards across ranks (--tail), and each
    // shard's partial last batch, which training leaves out (Note [Partial batches] in data.hpp).
    const int64_t adj = sampler.tail_adjust();
    const std::string shards =
        adj > 0   ? fmt::format("--tail pad repeated {} sample(s) so the {} ranks get equal shards", adj, env.world)
        : adj < 0 ? fmt::format("--tail drop left out {} sample(s) so the {} ranks get equal shards", -adj, env.world)
                  : fmt::format("the dataset splits evenly over {} rank(s)", env.world);
    const std::string partial =
        unused_per_epoch > 0
            ? fmt::format("the last {} sample(s) of each rank's epoch are unused (partial batch dropped)", unused_per_epoch)
            : std::string("no partial batch");
    fmt::print("  per rank: {} samples/epoch, {} batches of {}; {}; {}\n", sampler.per_rank(), per_epoch,
               o.batch_size, shards, partial);
    std::fflush(stdout);
  }

  RunSummary s;
  s.model = to_string(o.model);
  s.dataset = to_string(resolved_dataset(o));
  s.backend = comm.backend();
  s.device = dev.str();
  s.mode = local_sgd ? "local-sgd" : to_string(o.mode);
  s.world = env.world;
  s.accum = o.accum;
  s.micro_batch = o.batch_size;
  s.global_batch = o.batch_size * o.accum * env.world;
  s.buckets = sync ? sync->num_buckets() : 0;
  s.samples_per_rank_epoch = sampler.per_rank();
  s.batches_per_epoch = per_epoch;
  s.tail_adjust = sampler.tail_adjust();
  s.unused_per_epoch = unused_per_epoch;

  // Note [Clearing the cache]: the tutorials' torch.cuda.empty_cache(): --empty-cache N gives the
  // allocator's free cached segments back every N steps and before evaluation (memcomm's on the CPU,
  // PyTorch's on a GPU; LibTorch's own CPU allocator keeps no cache). It fights fragmentation at
  // the price of fresh system allocations afterwards; the bytes released go to the trace as the
  // counter mem.cache_released (with the allocator's segment frees) and to the summary.
  const auto clear_cache = [&] {
    const MemoryFigures before = memory_figures(dev, cpu_alloc);
    release_cached_memory(dev, cpu_alloc);
    const MemoryFigures after = memory_figures(dev, cpu_alloc);
    ++s.cache_clears;
    if (before.reserved >= 0 && after.reserved >= 0) {
      s.cache_released += before.reserved - after.reserved;
      profiler.counter("mem.cache_released", double(before.reserved - after.reserved));
    }
  };
  const bool tty = leader && ::isatty(STDOUT_FILENO);
  std::vector<double> step_ms;
  double interval_loss = 0;
  int64_t interval_steps = 0;
  std::unique_ptr<BatchLoader> loader;
  int64_t loader_epoch = -1;
  int64_t m = start_step * o.accum;  // Note [Micro-batch position]
  const int64_t t_start = monotonic_ns();
  StepTiming timing;
  // Note [Micro-batch position]: the loader follows the global micro-batch counter m.
  const TrainSession::NextBatch next_batch = [&](int64_t& waited) {
    const int64_t epoch = m / per_epoch, batch = m % per_epoch;
    if (!loader || loader_epoch != epoch) {
      sampler.set_epoch(epoch);
      auto idx = sampler.indices();
      idx.erase(idx.begin(), idx.begin() + batch * o.batch_size);  // resume mid-epoch
      loader.reset();
      LoaderOptions lo;
      if (o.augment) lo.augment_seed = augment_seed(o.seed, epoch);  // Note [Seeded augmentation]
      loader = std::make_unique<BatchLoader>(train_set, std::move(idx), o.batch_size, o.workers, o.prefetch,
                                             dev.is_cuda(), lo);
      loader_epoch = epoch;
    }
    Batch b;
    if (!loader->next(b, &waited)) throw std::logic_error("loader ran dry inside an epoch");
    ++m;
    return b;
  };

  for (int64_t step = start_step; step < o.steps; ++step) {
    prof::PhaseScope step_scope(prof::Phase::Step, static_cast<uint64_t>(step + 1));
    const int64_t t_step = monotonic_ns();
    session.set_lr(lr_at(o, step));
    const double step_loss = session.step(o.accum, m, next_batch, timing);
    if (local_sgd && (step + 1) % o.sync_every == 0) {
      prof::PhaseScope comm_scope(prof::Phase::Comm);
      average_parameters(params, comm);
      ++s.param_syncs;
    }
    profiler.counter(prof::kCounterLoss, step_loss);
    profiler.counter(prof::kCounterLearningRate, lr_at(o, step));
    step_ms.push_back(static_cast<double>(monotonic_ns() - t_step) / 1e6);
    if (step == start_step) s.first_loss = step_loss;
    s.final_loss = step_loss;
    interval_loss += step_loss;
    ++interval_steps;
    if (o.print_checksums) fmt::print("checksum step {} rank {} {:016x}\n", step + 1, env.rank, parameter_checksum(params));
    if (!o.checkpoint_dir.empty() && o.checkpoint_every > 0 && (step + 1) % o.checkpoint_every == 0) {
      prof::PhaseScope ckpt_scope(prof::Phase::Checkpoint);
      MemoryCategoryScope cat(prof::MemCategory::Temporary);
      save_checkpoint(o.checkpoint_dir, env.rank, step + 1, model, opt, fingerprint);
    }
    if (o.empty_cache > 0 && (step + 1) % o.empty_cache == 0) clear_cache();
    const bool log_now = (step + 1) % o.log_interval == 0 || step + 1 == o.steps;
    if (leader && (log_now || tty)) {
      const double el = static_cast<double>(monotonic_ns() - t_start) / 1e9;
      const double sps = static_cast<double>((step + 1 - start_step) * s.global_batch) / std::max(el, 1e-9);
      profiler.counter(prof::kCounterSamplesPerSec, sps);
      // The epoch of the step just done (m has moved past its last micro-batch).
      std::string line = fmt::format("epoch {} step {}/{} loss {:.4f} lr {:.6g} {:.0f} samples/s", (m - 1) / per_epoch,
                                     step + 1, o.steps, interval_loss / interval_steps, lr_at(o, step), sps);
      // Note [Peak memory in the log]: the allocator that serves the training device (memcomm's on
      // the CPU, PyTorch's CUDA allocator on a GPU); with LibTorch's CPU allocator, which keeps no
      // statistics, the process's peak resident set stands in, and says so.
      const MemoryFigures mf = memory_figures(dev, cpu_alloc);
      if (mf.peak_reserved >= 0)
        line += fmt::format(" peak reserved {:.1f} MiB", double(mf.peak_reserved) / (1 << 20));
      else
        line += fmt::format(" peak rss {:.1f} MiB", double(peak_rss_bytes()) / (1 << 20));
      if (log_now) {
        fmt::print("{}{}\n", tty ? "\r\033[K" : "", line);
        interval_loss = 0;
        interval_steps = 0;
      } else {
        const int width = 30, done = static_cast<int>(width * (step + 1) / o.steps);
        fmt::print("\r\033[K[{}{}] {}", std::string(static_cast<size_t>(done), '#'),
                   std::string(static_cast<size_t>(width - done), '.'), line);
      }
      std::fflush(stdout);
    }
  }
  loader.reset();
  s.wall_s = static_cast<double>(monotonic_ns() - t_start) / 1e9;
  s.steps = o.steps - start_step;
  if (o.empty_cache > 0) clear_cache();  // before evaluation (Note [Clearing the cache])

  EvalResult e;
  {
    prof::PhaseScope eval_scope(prof::Phase::Eval);
    e = evaluate(model, o, env, comm, dev);
  }
  s.eval_loss = e.loss;
  s.eval_accuracy = e.accuracy;
  s.eval_samples = e.samples;
  s.samples_per_s = static_cast<double>(s.steps * s.global_batch) / std::max(s.wall_s, 1e-9);
  if (!step_ms.empty()) {
    s.step_ms_mean = std::accumulate(step_ms.begin(), step_ms.end(), 0.0) / static_cast<double>(step_ms.size());
    s.step_ms_p50 = percentile(step_ms, 0.5);
    s.step_ms_p95 = percentile(step_ms, 0.95);
  }
  s.data_wait_ms = static_cast<double>(timing.data_wait_ns) / 1e6;
  s.backward_ms = static_cast<double>(timing.backward_ns) / 1e6;
  if (sync) {
    const auto& st = sync->stats();
    s.allreduce_calls = st.allreduce_calls;
    s.comm_ms = static_cast<double>(st.comm_ns) / 1e6;
    s.exposed_comm_ms = static_cast<double>(st.exposed_ns) / 1e6;
    s.bytes_on_wire = st.bytes;
    s.overlap_pct = st.comm_ns > 0 ? 100.0 * std::max(0.0, 1.0 - double(st.exposed_ns) / double(st.comm_ns)) : 0;
  }
  if (!o.dump_params.empty() && leader) {
    std::ofstream f(o.dump_params, std::ios::binary);
    for (const auto& p : params) {
      auto c = p.detach().to(torch::kCPU, torch::kFloat32).contiguous();
      f.write(static_cast<const char*>(c.data_ptr()), static_cast<std::streamsize>(c.numel() * 4));
    }
    if (!f) throw std::runtime_error("cannot write --dump-params file " + o.dump_params);
  }
  const MemoryFigures mf = memory_figures(dev, cpu_alloc);
  s.allocator = mf.allocator;
  const auto [events, drops] = profiler.finish();
  comm.on_collective = nullptr;  // the recorder has stopped
  // Note [Run-wide figures]: the summary speaks for the job, not rank 0: peaks (memory, resident
  // set, fragmentation) are the largest over the ranks, counts (trace events and drops, bytes the
  // cache gave back, the profiler threads' CPU) their sum. The two all-reduces also stand for the closing barrier: every rank
  // has finished before rank 0 reports and its store goes away.
  auto peaks = torch::tensor({double(mf.peak_allocated), double(mf.peak_reserved), mf.fragmentation,
                              double(peak_rss_bytes())}, torch::kFloat64);
  comm.allreduce(peaks, -1, Reduce::Max);
  auto sums = torch::tensor({double(events), double(drops), double(s.cache_released),
                             double(profiler.collector_cpu_ns()) / 1e6}, torch::kFloat64);
  comm.allreduce(sums);
  s.peak_allocated = static_cast<int64_t>(peaks[0].item<double>());
  s.peak_reserved = static_cast<int64_t>(peaks[1].item<double>());
  s.fragmentation = peaks[2].item<double>();
  s.peak_rss = static_cast<int64_t>(peaks[3].item<double>());
  s.trace_events = static_cast<int64_t>(sums[0].item<double>());
  s.trace_drops = static_cast<int64_t>(sums[1].item<double>());
  s.cache_released = static_cast<int64_t>(sums[2].item<double>());
  s.trace_collector_cpu_ms = sums[3].item<double>();
  if (leader) {
    print_summary(s);
    if (!o.trace.empty()) {
      // Every rank's file, as a shell glob when there are several; the viewer beside this binary.
      std::string files = prof::rank_trace_path(o.trace, 0);
      if (env.world > 1) files.replace(files.rfind("0.mct"), 1, "*");
      fmt::print("trace: one file per rank; open them with: {} {}\n", viewer_command(), files);
    }
    if (!o.summary_json.empty()) write_summary_json(s, o.summary_json);
  }
  return 0;
}

}  // namespace memcomm::train
