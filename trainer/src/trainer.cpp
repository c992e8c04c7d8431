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
//
// run_training builds the rank's pieces in the order they need each other (device, memory before
// the first tensor, profiler, communicator, data, session); TrainingRun then runs the stages: resume,
// plan the epochs and say so, the steps, evaluation, and the run-wide summary.
#include <memcomm/train/trainer.hpp>

#include "checkpoint.hpp"
#include "summary.hpp"

#include <memcomm/train/device_memory.hpp>
#include <memcomm/train/errors.hpp>
#include <memcomm/train/evaluate.hpp>
#include <memcomm/train/profiling.hpp>
#include <memcomm/train/rank_device.hpp>
#include <memcomm/train/session.hpp>

#include <fmt/core.h>
#include <memcomm/common/bytes.hpp>
#include <memcomm/common/percentile.hpp>
#include <memcomm/common/termination.hpp>
#include <memcomm/profiler/recorder.hpp>
#include <memcomm/profiler/sink.hpp>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <utility>
#include <memcomm/common/replacing_file.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>

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

// Samples per rank per epoch, in whole batches (Note [Partial batches] in data.hpp).
struct EpochPlan {
  int64_t per_epoch = 0;         // batches per epoch
  int64_t unused_per_epoch = 0;  // samples of each rank's epoch that no batch takes
};

// The pieces of one rank's run, built by run_training in the order the run needs them.
struct RunParts {
  const TrainOptions& o;
  const DistEnv& env;
  DeviceMemory& memory;
  RunProfiler& profiler;
  Communicator& comm;
  std::shared_ptr<Dataset> train_set;
  TrainSession& session;
};

// One rank's run after setup: its stages, and the state they pass along (the summary, the loader's
// place in the data stream, the step times).
class TrainingRun {
 public:
  explicit TrainingRun(const RunParts& parts)
      : p_(parts), o_(parts.o), leader_(parts.env.rank == 0), dev_(parts.memory.device()),
        fingerprint_(checkpoint_fingerprint(o_, parts.env.world)),  // Note [Checkpoint fingerprint]
        sampler_(parts.train_set->size(), parts.env.rank, parts.env.world, true, o_.seed, o_.tail == Tail::Pad) {}

  int run() {
    const int64_t start_step = o_.resume || restart_resumes() ? resume() : 0;
    const EpochPlan plan = plan_epochs();
    if (leader_) print_plan(plan);
    start_summary(plan);
    train_steps(start_step, plan);
    evaluate_and_report();
    return 0;  // a trace the disk did not take is said, not a failed run: training does not depend on it
  }

 private:
  int64_t resume();
  bool restart_resumes();
  static constexpr int64_t kUnreadable = -2, kRefused = -3;  // a rank's failed resume (-1: no file)
  std::pair<int64_t, int64_t> agree_range(int64_t value);
  void refuse_unusable(int64_t lowest) const;
  int64_t load_agreed(const std::string& path);
  void average_now();
  double interval_loss();
  double rank_interval_loss() const;
  void bookkeeping_allreduce(torch::Tensor& t, Reduce op = Reduce::Sum);
  void save_checkpoint(int64_t step);
  EpochPlan plan_epochs() const;
  void print_plan(const EpochPlan& plan) const;
  void start_summary(const EpochPlan& plan);
  void train_steps(int64_t start_step, const EpochPlan& plan);
  Batch next_batch(int64_t& waited);
  void after_step(int64_t step, int64_t start_step, double step_loss);
  void log_step(int64_t step, int64_t start_step, bool log_now);
  void clear_cache();
  void evaluate_and_report();
  void report() const;
  void dump_params() const;
  void gather_run_wide_figures();

  const RunParts p_;
  const TrainOptions& o_;
  const bool leader_;
  const torch::Device dev_;
  const Fingerprint fingerprint_;
  DistributedSampler sampler_;
  RunSummary s_;
  StepTiming timing_;
  std::vector<double> step_ms_;
  double interval_loss_ = 0;
  double logged_loss_ = 0;  // the last log line's, job-wide
  int64_t interval_steps_ = 0;
  std::unique_ptr<BatchLoader> loader_;
  int64_t loader_epoch_ = -1;
  int64_t m_ = 0;  // the global micro-batch counter (Note [Micro-batch position])
  int64_t per_epoch_ = 1;
  int64_t t_start_ = 0;
  int64_t traces_failed_ = 0;  // ranks whose trace file could not be written whole
  GradSyncStats averages_;     // local SGD's parameter averages
  bool tty_ = false;
};

// Note [Ranks resume from one step]: each rank saves and loads its own file, so a folder can hold files
// at different steps: saves are agreed (Note [Checkpoints saved together]) and cut short ones leave a
// step every rank holds (Note [A save cut short]), but files are copied. Resumed so, the ranks'
// collectives went out of step and Gloo aborted one of them ("collective mismatch"). So the ranks agree
// on the step they load before they train, and every rank refuses the same way (exit 2) when one of
// them has no checkpoint or no step is held by all.
// A rank whose own file failed tells the others how (a corrupt file exits 1, one from another run 2),
// so that every rank exits alike: the launcher passes on whichever exits first.
//
// Note [A save cut short]
// A save renames each rank's new file into place once all are written, but the renames are not one
// act: SIGTERM (how Slurm and torchrun end a job) or a kill between two ranks' renames left rank 0 at
// step 156 and rank 1 at 155 (1 in 8 tries), a folder no resume could use, all progress lost. So a
// rank's last file stays, as ckpt.rankR.prev.pt, until every rank has renamed its new one (a second
// agreement); then it goes. Whenever a save stops, each rank holds the old step (newest or previous
// file) or the new one and the old one, or all hold the new one: resume takes the highest step every
// rank holds, and says when a newer save did not complete. A folder holds one file per rank between
// saves, and up to three (the temporary, the new file, the previous) during one.
int64_t TrainingRun::resume() {
  std::exception_ptr failed;  // raised after the agreements, so that no rank waits for this one
  CheckpointSteps mine;
  try {
    mine = checkpoint_steps(o_.checkpoint_dir, p_.env.rank);
  } catch (...) {
    failed = std::current_exception();
  }
  const auto [lowest, highest] = agree_range(failed ? kUnreadable : mine.latest());
  if (failed) std::rethrow_exception(failed);
  if (mine.latest() < 0) throw UsageError(no_checkpoint_message({p_.env.rank}, o_.checkpoint_dir));
  refuse_unusable(lowest);
  auto missing = torch::tensor({mine.has(lowest) ? 0.0 : 1.0}, torch::kFloat64);
  bookkeeping_allreduce(missing, Reduce::Max);
  if (missing.item<double>() > 0)
    throw UsageError(fmt::format("--resume: no step is held by every rank's checkpoint in {} (steps {} to {}): the "
                                 "files come from different saves; resume from a folder whose files are at one step",
                                 o_.checkpoint_dir, lowest, highest));
  const int64_t start_step = load_agreed(mine.path_of(o_.checkpoint_dir, p_.env.rank, lowest));
  // A finished run has nothing left to do: running "0 steps" would print a loss of a step never taken.
  if (start_step >= o_.steps)
    throw UsageError("--resume: the checkpoint in " + o_.checkpoint_dir + " is at step " + std::to_string(start_step) +
                     ", and --steps is " + std::to_string(o_.steps) + ": nothing is left to run; give --steps above " +
                     std::to_string(start_step));
  if (leader_) {
    fmt::print("resumed from step {} ({})\n", start_step, o_.checkpoint_dir);
    if (highest > lowest)
      fmt::print(stderr, "memcomm-train: note: the save of step {} did not complete on every rank (the run ended "
                         "during it): resumed from step {}, which every rank holds\n", highest, lowest);
  }
  return start_step;
}

// Note [Checkpoints a run would replace] (options.hpp): a group torchrun restarted after a rank failed
// resumes from --checkpoint-dir when every rank has a checkpoint there. It trained again from step 0
// and its first saves replaced the step-2100 files with step 100's: the progress the checkpoints were
// kept for was lost, and --resume on the command line made the first attempt fail for want of files.
// Agreed, so that every rank decides alike even where they see different folders.
bool TrainingRun::restart_resumes() {
  if (p_.env.attempt == 0 || o_.checkpoint_dir.empty()) return false;
  const bool all = int(ranks_with_checkpoints(o_.checkpoint_dir, p_.env.world).size()) == p_.env.world;
  auto none_missing = torch::tensor({all ? 0.0 : 1.0}, torch::kFloat64);
  bookkeeping_allreduce(none_missing, Reduce::Max);
  const bool resumes = none_missing.item<double>() == 0;
  if (leader_)
    fmt::print(stderr, "memcomm-train: restart {}: {}\n", p_.env.attempt,
               resumes ? "resuming from " + o_.checkpoint_dir : "no checkpoint of every rank in " + o_.checkpoint_dir +
                                                                   ": training from the start");
  return resumes;
}

// The lowest and highest of the ranks' `value`s.
std::pair<int64_t, int64_t> TrainingRun::agree_range(int64_t value) {
  auto span = torch::tensor({double(value), -double(value)}, torch::kFloat64);
  bookkeeping_allreduce(span, Reduce::Max);
  return {static_cast<int64_t>(-span[1].item<double>()), static_cast<int64_t>(span[0].item<double>())};
}

// The refusal every rank makes when the lowest of the ranks' results (`lowest`: a step, or a failure
// below 0) says another rank cannot resume.
void TrainingRun::refuse_unusable(int64_t lowest) const {
  if (lowest == kRefused) throw UsageError("--resume: another rank's checkpoint in " + o_.checkpoint_dir + " does not fit this run");
  if (lowest == kUnreadable) throw std::runtime_error("--resume: another rank could not read its checkpoint in " + o_.checkpoint_dir);
  if (lowest < 0) throw UsageError("--resume: another rank has no checkpoint in " + o_.checkpoint_dir);
}

// Loads this rank's file `path`, at the step the ranks agreed on; every rank fails alike when one does.
// Note [A schedule resumed]: --lr, --schedule and --steps may change on resume (a longer run, a lower
// rate), and are no part of the fingerprint. But the rate a step gets comes from all three: a cosine
// schedule resumed with more --steps jumped back up, and nothing said so. A checkpoint records the
// rate its run would have given the next step; resuming with another one says both.
int64_t TrainingRun::load_agreed(const std::string& path) {
  std::string warning;
  std::exception_ptr failed;
  int64_t step = kUnreadable;
  std::optional<double> saved_lr;
  try {
    step = load_checkpoint(path, p_.env.rank, p_.session.model(), p_.session.optimizer(), fingerprint_, &warning,
                           &saved_lr);
  } catch (const UsageError&) {
    failed = std::current_exception();
    step = kRefused;
  } catch (...) {
    failed = std::current_exception();
  }
  const auto [lowest, highest] = agree_range(step);
  if (failed) std::rethrow_exception(failed);
  refuse_unusable(lowest);
  if (lowest != highest)  // the headers said one step: a file replaced since
    throw UsageError(fmt::format("--resume: the ranks' checkpoints in {} are at different steps ({} to {}): the files "
                                 "come from different saves; resume from a folder whose files are at one step",
                                 o_.checkpoint_dir, lowest, highest));
  if (leader_ && !warning.empty()) std::fprintf(stderr, "memcomm-train: warning: %s\n", warning.c_str());
  if (const double lr = lr_at(o_, step); leader_ && saved_lr && std::abs(*saved_lr - lr) > 1e-9 * std::abs(*saved_lr))
    std::fprintf(stderr, "%s", fmt::format("memcomm-train: note: step {} resumes at a learning rate of {:.6g}, where the "
                                           "run that saved the checkpoint would have gone on at {:.6g} (its --lr, "
                                           "--schedule or --steps differ from this run's)\n",
                                           step + 1, lr, *saved_lr).c_str());
  return step;
}

EpochPlan TrainingRun::plan_epochs() const {
  EpochPlan plan;
  plan.per_epoch = sampler_.per_rank() / o_.batch_size;
  if (plan.per_epoch < 1)
    throw UsageError("--batch-size " + std::to_string(o_.batch_size) + " is larger than this rank's shard of " +
                     std::to_string(sampler_.per_rank()) + " samples");
  plan.unused_per_epoch = sampler_.per_rank() % o_.batch_size;  // Note [Partial batches]
  return plan;
}

void TrainingRun::print_plan(const EpochPlan& plan) const {
  const auto& dp = p_.session.dp_devices();
  fmt::print("memcomm-train: {} ({} parameters) on {} | {} rank(s) via {}, backend {}, device {}\n",
             to_string(o_.model), parameter_count(p_.session.model()), p_.train_set->describe(), p_.env.world,
             p_.env.launcher, p_.comm.backend(), dev_.str());
  if (!dp.empty()) {
    std::string names;
    for (const auto& d : dp) names += (names.empty() ? "" : ", ") + d.str();
    fmt::print("  --mode dp: data_parallel splits each batch of {} across {} device(s): {}{}\n", o_.batch_size,
               dp.size(), names, dp.size() == 1 ? " (one device: the same as plain training)" : "");
  }
  // Two different tails: the sampler's, which evens the shards across ranks (--tail), and each
  // shard's partial last batch, which training leaves out (Note [Partial batches] in data.hpp).
  const int64_t adj = sampler_.tail_adjust();
  const int world = p_.env.world;
  const std::string shards =
      adj > 0   ? fmt::format("--tail pad repeated {} sample(s) so the {} ranks get equal shards", adj, world)
      : adj < 0 ? fmt::format("--tail drop left out {} sample(s) so the {} ranks get equal shards", -adj, world)
                : fmt::format("the dataset splits evenly over {} rank(s)", world);
  const std::string partial =
      plan.unused_per_epoch > 0
          ? fmt::format("the last {} sample(s) of each rank's epoch are unused (partial batch dropped)",
                        plan.unused_per_epoch)
          : std::string("no partial batch");
  fmt::print("  per rank: {} samples/epoch, {} batches of {}; {}; {}\n", sampler_.per_rank(), plan.per_epoch,
             o_.batch_size, shards, partial);
  std::fflush(stdout);
}

void TrainingRun::start_summary(const EpochPlan& plan) {
  const GradSync* sync = p_.session.sync();
  s_.model = to_string(o_.model);
  s_.dataset = to_string(resolved_dataset(o_));
  s_.backend = p_.comm.backend();
  s_.device = dev_.str();
  s_.mode = o_.sync_every > 0 ? "local-sgd" : to_string(o_.mode);
  s_.world = p_.env.world;
  s_.accum = o_.accum;
  s_.micro_batch = o_.batch_size;
  s_.global_batch = o_.batch_size * o_.accum * p_.env.world;
  s_.buckets = sync ? sync->num_buckets() : 0;
  s_.samples_per_rank_epoch = sampler_.per_rank();
  s_.batches_per_epoch = plan.per_epoch;
  s_.tail_adjust = sampler_.tail_adjust();
  s_.unused_per_epoch = plan.unused_per_epoch;
}

// Note [Clearing the cache]: the tutorials' torch.cuda.empty_cache(): --empty-cache N gives the
// allocator's free cached segments back every N steps and before evaluation (memcomm's on the CPU,
// PyTorch's on a GPU; LibTorch's own CPU allocator keeps no cache). It fights fragmentation at
// the price of fresh system allocations afterwards; the bytes released go to the trace as the
// counter mem.cache_released (with the allocator's segment frees) and to the summary.
void TrainingRun::clear_cache() {
  const MemoryFigures before = p_.memory.figures();
  p_.memory.release_cache();
  const MemoryFigures after = p_.memory.figures();
  ++s_.cache_clears;
  if (before.reserved >= 0 && after.reserved >= 0) {
    s_.cache_released += before.reserved - after.reserved;
    p_.profiler.counter("mem.cache_released", double(before.reserved - after.reserved));
  }
}

// The loader follows the global micro-batch counter m (Note [Micro-batch position]).
Batch TrainingRun::next_batch(int64_t& waited) {
  const int64_t epoch = m_ / per_epoch_, batch = m_ % per_epoch_;
  if (!loader_ || loader_epoch_ != epoch) {
    sampler_.set_epoch(epoch);
    auto idx = sampler_.indices();
    idx.erase(idx.begin(), idx.begin() + batch * o_.batch_size);  // resume mid-epoch
    loader_.reset();
    LoaderOptions lo;
    if (o_.augment) lo.augment_seed = augment_seed(o_.seed, epoch);  // Note [Seeded augmentation]
    loader_ = std::make_unique<BatchLoader>(p_.train_set, std::move(idx), o_.batch_size, o_.workers, o_.prefetch,
                                            dev_.is_cuda(), lo);
    loader_epoch_ = epoch;
  }
  Batch b;
  if (!loader_->next(b, &waited)) throw std::logic_error("loader ran dry inside an epoch");
  ++m_;
  return b;
}

void TrainingRun::train_steps(int64_t start_step, const EpochPlan& plan) {
  tty_ = leader_ && ::isatty(STDOUT_FILENO);
  per_epoch_ = plan.per_epoch;
  m_ = start_step * o_.accum;  // Note [Micro-batch position]
  t_start_ = monotonic_ns();
  const TrainSession::NextBatch next = [this](int64_t& waited) { return next_batch(waited); };
  for (int64_t step = start_step; step < o_.steps; ++step) {
    prof::PhaseScope step_scope(prof::Phase::Step, static_cast<uint64_t>(step + 1));
    const int64_t t_step = monotonic_ns();
    p_.session.set_lr(lr_at(o_, step));
    const double step_loss = p_.session.step(o_.accum, m_, next, timing_);
    if (o_.sync_every > 0 && (step + 1) % o_.sync_every == 0) average_now();  // local SGD
    p_.profiler.counter(prof::kCounterLoss, step_loss);
    p_.profiler.counter(prof::kCounterLearningRate, lr_at(o_, step));
    step_ms_.push_back(static_cast<double>(monotonic_ns() - t_step) / 1e6);
    after_step(step, start_step, step_loss);
  }
  // Local SGD's ranks end with one model: the one evaluated, saved by --dump-params and resumed from.
  if (o_.sync_every > 0 && o_.steps % o_.sync_every != 0) average_now();
  loader_.reset();
  s_.wall_s = static_cast<double>(monotonic_ns() - t_start_) / 1e9;
  s_.steps = o_.steps - start_step;
  if (o_.empty_cache > 0) clear_cache();  // before evaluation (Note [Clearing the cache])
}

// Local SGD's parameter average: one blocking all-reduce, so all its time is exposed; the summary counts
// it with DDP's bucket all-reduces (it read "0 all-reduces, 0 B" for a run that averaged).
void TrainingRun::average_now() {
  prof::PhaseScope comm_scope(prof::Phase::Comm);
  const int64_t t0 = monotonic_ns();
  average_parameters(p_.session.params(), p_.comm);
  ++s_.param_syncs;
  if (p_.env.world == 1) return;  // nothing went on the wire
  const int64_t ns = monotonic_ns() - t0;
  ++averages_.allreduce_calls;
  averages_.comm_ns += ns;
  averages_.exposed_ns += ns;
  for (const auto& p : p_.session.params()) averages_.bytes += p.numel() * static_cast<int64_t>(p.element_size());
}

// What follows a step: the loss figures, checksums, a checkpoint, clearing the cache, the log.
void TrainingRun::after_step(int64_t step, int64_t start_step, double step_loss) {
  if (step == start_step) s_.first_loss = step_loss;
  s_.final_loss = step_loss;
  interval_loss_ += step_loss;
  ++interval_steps_;
  if (o_.print_checksums)
    fmt::print("checksum step {} rank {} {:016x}\n", step + 1, p_.env.rank, parameter_checksum(p_.session.params()));
  if (!o_.checkpoint_dir.empty() && o_.checkpoint_every > 0 && (step + 1) % o_.checkpoint_every == 0) {
    prof::PhaseScope ckpt_scope(prof::Phase::Checkpoint);
    MemoryCategoryScope cat(prof::MemCategory::Temporary);
    save_checkpoint(step + 1);
  }
  if (o_.empty_cache > 0 && (step + 1) % o_.empty_cache == 0) clear_cache();
  const bool log_now = (step + 1) % o_.log_interval == 0 || step + 1 == o_.steps;
  if (log_now) logged_loss_ = interval_loss();  // every rank joins
  if (leader_ && (log_now || tty_)) log_step(step, start_step, log_now);
  if (log_now) {
    interval_loss_ = 0;
    interval_steps_ = 0;
  }
}

// The training loss since the last log line, this rank's.
double TrainingRun::rank_interval_loss() const {
  return interval_loss_ / double(std::max<int64_t>(interval_steps_, 1));
}

// The same over every rank's micro-batches: the global batch's, as one rank trains it (Note [Run-wide
// figures]), by a bookkeeping all-reduce.
double TrainingRun::interval_loss() {
  if (p_.env.world == 1) return rank_interval_loss();
  auto t = torch::tensor({interval_loss_, double(interval_steps_)}, torch::kFloat64);
  bookkeeping_allreduce(t);
  return t[0].item<double>() / std::max(1.0, t[1].item<double>());
}

// An all-reduce of the run's own bookkeeping, left out of the trace: it is no part of the training
// the trace shows.
void TrainingRun::bookkeeping_allreduce(torch::Tensor& t, Reduce op) {
  struct Unrecorded {  // the trace's callback back whatever the all-reduce throws (a lost rank)
    Communicator& comm;
    std::function<void(const CollectiveRecord&)> record = std::exchange(comm.on_collective, nullptr);
    ~Unrecorded() { comm.on_collective = std::move(record); }
  } unrecorded{p_.comm};
  p_.comm.allreduce(t, -1, op);
}

// Note [Checkpoints saved together]
// Each rank saves its own file (its optimizer state is its own). Replaced one by one, a save that
// failed on some ranks only (a full disk, a quota) left the folder with files at different steps,
// which resume can only refuse (Note [Ranks resume from one step]): the run's last good checkpoint
// was lost. So a save has two phases. Every rank writes its file under a temporary name and syncs it
// to disk; the ranks agree whether every one succeeded (a bookkeeping all-reduce); only then does
// each rename its file into place. When one failed, every rank drops its temporary and the run
// fails, each rank's previous checkpoint kept: the folder stays at one step. What is left to fail
// after the agreement is a rename, which needs no space; should one fail, that rank ends with the
// error, the others with a lost rank at their next collective, and resume names the mixed steps.
void TrainingRun::save_checkpoint(int64_t step) {
  std::unique_ptr<ReplacingStream> written;
  std::exception_ptr failed;
  try {
    written = write_checkpoint(o_.checkpoint_dir, p_.env.rank, step, p_.session.model(), p_.session.optimizer(),
                               fingerprint_, lr_at(o_, step));
  } catch (...) {
    failed = std::current_exception();  // raised after the agreement, so that no rank waits for this one
  }
  auto failures = torch::tensor({failed ? 1.0 : 0.0}, torch::kFloat64);
  if (p_.env.world > 1) bookkeeping_allreduce(failures);
  if (failed) std::rethrow_exception(failed);
  if (failures.item<double>() > 0) {
    // At a run's first save there is nothing to keep: saying so would send a user looking for it.
    std::error_code ec;
    const bool had_one = std::filesystem::exists(checkpoint_path(o_.checkpoint_dir, p_.env.rank), ec);
    throw std::runtime_error(fmt::format("the checkpoint of step {} was not saved: another rank could not write its file; {}",
                                         step, had_one ? "every rank's previous checkpoint in " + o_.checkpoint_dir + " is kept"
                                                       : o_.checkpoint_dir + " holds no checkpoint yet"));
  }
  keep_previous(o_.checkpoint_dir, p_.env.rank);  // Note [A save cut short]
  written->commit();
  auto committed = torch::tensor({1.0}, torch::kFloat64);
  if (p_.env.world > 1) bookkeeping_allreduce(committed);
  drop_previous(o_.checkpoint_dir, p_.env.rank);
}

// A log line every --log-interval steps, and on a terminal a progress bar in between.
void TrainingRun::log_step(int64_t step, int64_t start_step, bool log_now) {
  const double el = static_cast<double>(monotonic_ns() - t_start_) / 1e9;
  const double sps = static_cast<double>((step + 1 - start_step) * s_.global_batch) / std::max(el, 1e-9);
  p_.profiler.counter(prof::kCounterSamplesPerSec, sps);
  // Between log lines (a terminal's progress bar) the loss so far is rank 0's.
  const double loss = log_now ? logged_loss_ : rank_interval_loss();
  // The epoch of the step just done (m has moved past its last micro-batch).
  std::string line = fmt::format("epoch {} step {}/{} loss {:.4f} lr {:.6g} {:.0f} samples/s", (m_ - 1) / per_epoch_,
                                 step + 1, o_.steps, loss, lr_at(o_, step), sps);
  // Note [Peak memory in the log]: the allocator that serves the training device (memcomm's on
  // the CPU, PyTorch's CUDA allocator on a GPU); with LibTorch's CPU allocator, which keeps no
  // statistics, the process's peak resident set stands in, and says so.
  const MemoryFigures mf = p_.memory.figures();
  if (mf.peak_reserved >= 0)
    line += fmt::format(" peak reserved {} MiB", format_mib(static_cast<std::uint64_t>(mf.peak_reserved)));
  else
    line += fmt::format(" peak rss {} MiB", format_mib(static_cast<std::uint64_t>(std::max<int64_t>(0, peak_rss_bytes()))));
  if (log_now) {
    fmt::print("{}{}\n", tty_ ? "\r\033[K" : "", line);
  } else {
    const int width = 30, done = static_cast<int>(width * (step + 1) / o_.steps);
    fmt::print("\r\033[K[{}{}] {}", std::string(static_cast<size_t>(done), '#'),
               std::string(static_cast<size_t>(width - done), '.'), line);
  }
  std::fflush(stdout);
}

// An evaluation that fails (out of memory under a cap, a bad sample) fails on every rank together
// (Note [Evaluation fails together]): the training's figures are still summarised and written, and the
// run then ends with the evaluation's error, not with its results lost after the whole run.
void TrainingRun::evaluate_and_report() {
  EvalResult e;
  std::exception_ptr eval_failed;
  {
    prof::PhaseScope eval_scope(prof::Phase::Eval);
    try {
      e = evaluate(p_.session.model(), o_, p_.env, p_.comm, dev_);
    } catch (const CommError&) {
      throw;  // a lost peer: no summary to agree on
    } catch (const std::exception& err) {
      eval_failed = std::current_exception();
      s_.eval_error = err.what();
      if (const auto nl = s_.eval_error.find('\n'); nl != std::string::npos) s_.eval_error.resize(nl);
    }
  }
  s_.eval_loss = e.loss;
  s_.eval_accuracy = e.accuracy;
  s_.eval_samples = e.samples;
  s_.samples_per_s = static_cast<double>(s_.steps * s_.global_batch) / std::max(s_.wall_s, 1e-9);
  if (!step_ms_.empty()) {
    s_.step_ms_mean = std::accumulate(step_ms_.begin(), step_ms_.end(), 0.0) / static_cast<double>(step_ms_.size());
    s_.step_ms_p50 = memcomm::percentile(step_ms_, 0.5);  // Note [Nearest-rank percentile]
    s_.step_ms_p95 = memcomm::percentile(step_ms_, 0.95);
  }
  s_.data_wait_ms = static_cast<double>(timing_.data_wait_ns) / 1e6;
  s_.backward_ms = static_cast<double>(timing_.backward_ns) / 1e6;
  GradSyncStats st = averages_;  // local SGD's; DDP's buckets below
  if (const GradSync* sync = p_.session.sync()) {
    const auto& buckets = sync->stats();
    st.allreduce_calls += buckets.allreduce_calls;
    st.comm_ns += buckets.comm_ns;
    st.exposed_ns += buckets.exposed_ns;
    st.bytes += buckets.bytes;
  }
  s_.allreduce_calls = st.allreduce_calls;
  s_.comm_ms = static_cast<double>(st.comm_ns) / 1e6;
  s_.exposed_comm_ms = static_cast<double>(st.exposed_ns) / 1e6;
  s_.bytes_on_wire = st.bytes;
  s_.overlap_pct = st.comm_ns > 0 ? 100.0 * std::max(0.0, 1.0 - double(st.exposed_ns) / double(st.comm_ns)) : 0;
  if (!o_.dump_params.empty() && leader_) dump_params();
  gather_run_wide_figures();
  if (leader_) report();
  if (eval_failed) std::rethrow_exception(eval_failed);
}

void TrainingRun::report() const {
  print_summary(s_);
  if (!o_.trace.empty() && traces_failed_ > 0) {
    fmt::print("trace: {} of {} ranks could not write their trace file (said above: what each file still holds)\n",
               traces_failed_, p_.env.world);
  } else if (!o_.trace.empty()) {
    // Every rank's file, as a shell glob when there are several; the viewer beside this binary.
    std::string files = attempt_trace_file(o_.trace, p_.env, 0);
    if (p_.env.world > 1) files.replace(files.rfind("0.mct"), 1, "*");
    fmt::print("trace: one file per rank; open them with: {} {}\n", viewer_command(), files);
  }
  if (!o_.summary_json.empty()) write_summary_json(s_, o_.summary_json);
}

void TrainingRun::dump_params() const {
  std::string bytes;
  for (const auto& p : p_.session.params()) {
    auto c = p.detach().to(torch::kCPU, torch::kFloat32).contiguous();
    bytes.append(static_cast<const char*>(c.data_ptr()), static_cast<size_t>(c.numel()) * 4);
  }
  write_replacing(o_.dump_params, bytes);  // Note [Outputs replaced whole]
}

// Note [Run-wide figures]: the summary speaks for the job, not rank 0: peaks (memory, resident
// set, fragmentation) are the largest over the ranks, counts (trace events and drops, bytes the
// cache gave back, the profiler threads' CPU, ranks whose trace file failed) their sum, the first
// and last step's training loss their mean (the global batch's, as the log's lines give it:
// interval_loss()). The two all-reduces also stand for the closing barrier: every rank has finished
// before rank 0 reports and its store goes away.
void TrainingRun::gather_run_wide_figures() {
  const MemoryFigures mf = p_.memory.figures();
  s_.allocator = mf.allocator;
  const auto [events, drops] = p_.profiler.finish();
  const std::string trace_error = p_.profiler.trace_error();
  if (!trace_error.empty()) std::fprintf(stderr, "memcomm-train: %s\n", trace_error.c_str());
  if (const std::string note = p_.profiler.live_note(); !note.empty())
    std::fprintf(stderr, "memcomm-train: rank %d: %s\n", p_.env.rank, note.c_str());
  p_.comm.on_collective = nullptr;  // the recorder has stopped
  auto peaks = torch::tensor({double(mf.peak_allocated), double(mf.peak_reserved), mf.fragmentation,
                              double(peak_rss_bytes())}, torch::kFloat64);
  p_.comm.allreduce(peaks, -1, Reduce::Max);
  auto sums = torch::tensor({double(events), double(drops), double(s_.cache_released),
                             double(p_.profiler.collector_cpu_ns()) / 1e6, trace_error.empty() ? 0.0 : 1.0,
                             s_.first_loss, s_.final_loss},
                            torch::kFloat64);
  p_.comm.allreduce(sums);
  s_.first_loss = sums[5].item<double>() / p_.env.world;
  s_.final_loss = sums[6].item<double>() / p_.env.world;
  s_.peak_allocated = static_cast<int64_t>(peaks[0].item<double>());
  s_.peak_reserved = static_cast<int64_t>(peaks[1].item<double>());
  s_.fragmentation = peaks[2].item<double>();
  s_.peak_rss = static_cast<int64_t>(peaks[3].item<double>());
  s_.trace_events = static_cast<int64_t>(sums[0].item<double>());
  s_.trace_drops = static_cast<int64_t>(sums[1].item<double>());
  s_.cache_released = static_cast<int64_t>(sums[2].item<double>());
  s_.trace_collector_cpu_ms = sums[3].item<double>();
  traces_failed_ = static_cast<int64_t>(sums[4].item<double>());
}

// While a rank trains, a SIGTERM (torchrun's, Slurm's or --nproc's launcher's, to the ranks left when
// one fails or a job's time runs out) flushes what the recorder holds before the rank ends by it
// (Note [Closing on SIGTERM]). Only the recorder is touched: it may be stopped beside running threads.
class TraceFlushedOnSigterm {
 public:
  // `profiler` outlives this watch (declared before it in run_training).
  TraceFlushedOnSigterm(int rank, const RunProfiler& profiler) {
    watch_termination(
        [rank, &profiler] {
          prof::Recorder::global().stop();
          std::fprintf(stderr, "memcomm-train: rank %d: SIGTERM: its trace flushed, ending\n", rank);
          // A viewer that missed events is said at the end of a run; a SIGTERM'd rank never gets there.
          if (const std::string note = profiler.live_note_now(); !note.empty())
            std::fprintf(stderr, "memcomm-train: rank %d: %s\n", rank, note.c_str());
        },
        std::chrono::seconds(5), fmt::format("memcomm-train: rank {}: SIGTERM: its trace not flushed within 5 s\n", rank));
  }
  ~TraceFlushedOnSigterm() { unwatch_termination(); }
  TraceFlushedOnSigterm(const TraceFlushedOnSigterm&) = delete;
  TraceFlushedOnSigterm& operator=(const TraceFlushedOnSigterm&) = delete;
};

}  // namespace

int run_training(const TrainOptions& o, const DistEnv& env) {
  const RankDevice rd = choose_device(o, env);  // creates no tensor
  // Before the first tensor, so that every CPU tensor of the run lives in memcomm's allocator.
  DeviceMemory memory(o, rd.device);
  if (!o.checkpoint_dir.empty()) {
    ensure_writable_dir(o.checkpoint_dir);
    if (!o.resume && env.attempt == 0 && !ranks_with_checkpoints(o.checkpoint_dir, env.world).empty())
      throw UsageError(replaced_checkpoints_message(o.checkpoint_dir));  // Note [Checkpoints a run would replace]
  }
  if (o.mode == Mode::Dp && env.world > 1)
    throw UsageError("--mode dp is one process driving every device, but the launcher started " +
                     std::to_string(env.world) + " ranks: use --mode ddp under torchrun/Slurm");
  RunProfiler profiler(o, env, memory.cpu_allocator(), rd.device.is_cuda());
  const TraceFlushedOnSigterm flushed_on_sigterm(env.rank, profiler);
  Communicator comm(env, rd.backend, o.timeout_s);
  comm.on_collective = [&profiler](const CollectiveRecord& r) { profiler.collective(r); };
  comm.set_device(rd.device);
  if (profiler.active()) profiler.clock_offset(comm.estimate_clock_offset());
  auto train_set = make_dataset(o, "train");
  check_dataset_files(o, "test");  // evaluated at the end
  TrainSession session(o, comm, rd.device, train_set->num_classes());
  return TrainingRun(RunParts{o, env, memory, profiler, comm, train_set, session}).run();
}

}  // namespace memcomm::train
