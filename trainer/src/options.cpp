#include "options.hpp"

#include <CLI/CLI.hpp>
#include <memcomm/common/cli_size.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace memcomm::train {

namespace {

// CLI11 reports parse errors itself; we keep its message but use exit code 2 for every usage error.
[[noreturn]] void usage_error(const char* program, const std::string& msg) {
  std::fprintf(stderr, "%s: %s\nRun '%s --help' for the flags.\n", program, msg.c_str(), program);
  std::exit(2);
}

}  // namespace

void parse_or_exit(CLI::App& app, int argc, char** argv, const char* program) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    std::exit(app.exit(e));
  } catch (const CLI::CallForAllHelp& e) {
    std::exit(app.exit(e));
  } catch (const CLI::ParseError& e) {
    usage_error(program, e.what());
  }
}

void check_train_options(const TrainOptions& o, const char* program) {
  const auto usage_error = [program](const std::string& msg) { memcomm::train::usage_error(program, msg); };
  if (o.nproc < 1) usage_error("--nproc must be at least 1");
  if (o.mode == "dp" && o.nproc > 1)
    usage_error("--mode dp is one process driving every device: use it without --nproc (or --mode ddp)");
  if (o.mode == "dp" && o.sync_every > 0) usage_error("--mode dp has one model: --sync-every needs --mode ddp");
  // Autocast is per thread, and LibTorch's parallel_apply runs the replicas on threads of its own.
  if (o.mode == "dp" && o.amp != "none") usage_error("--amp does not reach --mode dp's replica threads: use --mode ddp");
  if (o.batch_size < 1) usage_error("--batch-size must be at least 1");
  if (o.accum < 1) usage_error("--accum must be at least 1");
  if (o.steps < 1) usage_error("--steps must be at least 1");
  if (o.workers < 0) usage_error("--workers must be 0 or more");
  if (o.prefetch < 1) usage_error("--prefetch must be at least 1");
  // Note [Range checks before LibTorch]: every numeric flag is checked here, so a bad value is a usage
  // error (exit 2) naming the flag, not LibTorch's message deep inside an optimizer (exit 1) or, worse,
  // a silently odd run. `!(x >= 0)` style comparisons also reject NaN.
  if (!(o.lr > 0) || !std::isfinite(o.lr)) usage_error("--lr must be a positive number");
  if (!(o.momentum >= 0 && o.momentum < 1)) usage_error("--momentum must be at least 0 and below 1");
  if (!(o.weight_decay >= 0) || !std::isfinite(o.weight_decay)) usage_error("--weight-decay must be 0 or more");
  if (!(o.bucket_mb > 0) || !std::isfinite(o.bucket_mb)) usage_error("--bucket-mb must be positive");
  if (!(o.timeout_s > 0) || !std::isfinite(o.timeout_s)) usage_error("--timeout must be a positive number of seconds");
  if (o.threads < 0) usage_error("--threads must be 0 (cores divided among local ranks) or more");
  if (o.eval_batches < 0) usage_error("--eval-batches must be 0 (the whole test split) or more");
  if (o.checkpoint_every < 0) usage_error("--checkpoint-every must be 0 (never) or more");
  if (o.empty_cache < 0) usage_error("--empty-cache must be 0 (never) or more");
  if (o.synthetic_size < 1) usage_error("--synthetic-size must be at least 1");
  if (resolved_dataset(o) != "fashion-mnist" && o.synthetic_size < o.nproc && o.tail == "drop")
    usage_error("--synthetic-size " + std::to_string(o.synthetic_size) + " gives some of the " +
                std::to_string(o.nproc) + " ranks no sample with --tail drop");
  if (o.sync_every < 0) usage_error("--sync-every must be 0 (synchronous) or more");
  if (o.sync_every > 0 && o.accum > 1) usage_error("--sync-every (local SGD) and --accum cannot be combined");
  if (o.model == "transformer" && (o.width % o.heads) != 0)
    usage_error("--width must be a multiple of --heads for the transformer");
  if (o.memory_limit < 0) usage_error("--memory-limit must not be negative");
  if (o.memory_limit > 0 && o.allocator != "memcomm" && o.device != "cuda")
    usage_error("--memory-limit on the CPU needs --allocator memcomm (its cap makes the limit real)");
  if (o.cupti == "on" && o.trace.empty() && o.live.empty())
    usage_error("--cupti on records into the trace or the live stream: give --trace FILE or --live HOST:PORT");
  if (o.checkpoint_every > 0 && o.checkpoint_dir.empty()) usage_error("--checkpoint-every needs --checkpoint-dir");
  if (o.resume && o.checkpoint_dir.empty()) usage_error("--resume needs --checkpoint-dir");
  const auto ds = resolved_dataset(o);
  if (o.model == "transformer" && ds != "tokens") usage_error("the transformer trains on --dataset tokens");
  if (o.model != "transformer" && ds == "tokens") usage_error("--dataset tokens needs --model transformer");
  if (o.augment && ds != "fashion-mnist") usage_error("--augment flips images: it needs --dataset fashion-mnist");
}

std::string resolved_dataset(const TrainOptions& o) {
  if (o.dataset != "auto") return o.dataset;
  return o.model == "transformer" ? "tokens" : "fashion-mnist";
}

void add_train_options(CLI::App& app, TrainOptions& o) {
  // A flag given twice takes its last value, so scripts can append overrides to a base command.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);

  auto* g = app.add_option_group("Launch");
  g->add_option("--mode", o.mode,
                "ddp: one process per rank, gradients all-reduced (DistributedDataParallel); dp: one process "
                "splits each batch across all visible GPUs with LibTorch's data_parallel (DataParallel; one "
                "device on a CPU-only machine)")
      ->check(CLI::IsMember({"ddp", "dp"}))->capture_default_str();
  g->add_option("--nproc", o.nproc, "Local ranks to spawn (ignored under torchrun/Slurm, which set the ranks)")
      ->capture_default_str();
  g->add_option("--backend", o.backend, "Collective backend: auto (NCCL when each rank has its own GPU, else Gloo)")
      ->check(CLI::IsMember({"auto", "gloo", "nccl"}))->capture_default_str();
  g->add_option("--device", o.device, "auto (a GPU when there is one, else CPU), cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))->capture_default_str();
  g->add_option("--timeout", o.timeout_s, "Seconds a collective may take before the run ends, naming the missing ranks")
      ->capture_default_str();
  g->add_option("--threads", o.threads, "Intra-op threads per rank (0: cores divided among local ranks)")
      ->capture_default_str();

  g = app.add_option_group("Data");
  g->add_option("--dataset", o.dataset, "fashion-mnist, tabular (synthetic) or tokens (synthetic LM stream); auto picks by model")
      ->check(CLI::IsMember({"auto", "fashion-mnist", "tabular", "tokens"}))->capture_default_str();
  g->add_option("--data-dir", o.data_dir, "Folder with the Fashion-MNIST IDX .gz files")->capture_default_str();
  g->add_option("--workers", o.workers, "Loader worker threads per rank (0 loads on the training thread)")
      ->capture_default_str();
  g->add_option("--prefetch", o.prefetch, "Batches each rank's loader prepares ahead")->capture_default_str();
  g->add_option("--tail", o.tail,
                "Dataset size not a multiple of the ranks: pad (repeat samples) or drop the remainder, so every rank "
                "gets as many; each rank's last partial batch of an epoch is then left out (the run says how many)")
      ->check(CLI::IsMember({"pad", "drop"}))->capture_default_str();
  g->add_option("--synthetic-size", o.synthetic_size,
                "Samples in the synthetic training sets (their test split has a sixth as many)")->capture_default_str();
  g->add_flag("--augment", o.augment,
              "Flip Fashion-MNIST images horizontally at random, drawn per (seed, epoch, sample) so that results "
              "do not depend on --workers");

  g = app.add_option_group("Model");
  g->add_option("--model", o.model, "mlp, cnn or transformer (decoder-only LM)")
      ->check(CLI::IsMember({"mlp", "cnn", "transformer"}))->capture_default_str();
  g->add_option("--hidden", o.hidden, "MLP hidden width")->capture_default_str()->check(CLI::PositiveNumber);
  g->add_option("--layers", o.layers, "Transformer layers")->capture_default_str()->check(CLI::PositiveNumber);
  g->add_option("--width", o.width, "Transformer model width")->capture_default_str()->check(CLI::PositiveNumber);
  g->add_option("--heads", o.heads, "Transformer attention heads")->capture_default_str()->check(CLI::PositiveNumber);
  g->add_option("--seq-len", o.seq_len, "Transformer sequence length")->capture_default_str()->check(CLI::PositiveNumber);
  g->add_option("--vocab", o.vocab, "Token vocabulary size")->capture_default_str()->check(CLI::Range(2, 1 << 20));

  g = app.add_option_group("Optimisation");
  g->add_option("--batch-size", o.batch_size, "Micro-batch per rank")->capture_default_str();
  g->add_option("--accum", o.accum, "Micro-batches per optimizer step; gradients are all-reduced on the last only")
      ->capture_default_str();
  g->add_option("--steps", o.steps, "Optimizer steps to run")->capture_default_str();
  g->add_option("--optimizer", o.optimizer, "sgd (with momentum), adam or adamw; each rank keeps its own state")
      ->check(CLI::IsMember({"sgd", "adam", "adamw"}))->capture_default_str();
  g->add_option("--lr", o.lr, "Peak learning rate")->capture_default_str();
  g->add_option("--momentum", o.momentum, "SGD momentum")->capture_default_str();
  g->add_option("--weight-decay", o.weight_decay, "Weight decay")->capture_default_str();
  g->add_option("--schedule", o.schedule, "Learning-rate schedule: none, step (x0.1 at 50% and 75%) or cosine")
      ->check(CLI::IsMember({"none", "step", "cosine"}))->capture_default_str();
  g->add_option("--sync-every", o.sync_every,
                "Local SGD: ranks step independently and average parameters every K steps (0: synchronous)")
      ->capture_default_str();
  g->add_option("--bucket-mb", o.bucket_mb, "Gradient bucket size in MiB (the first bucket is 1 MiB)")
      ->capture_default_str();
  g->add_flag("!--no-overlap", o.overlap, "All-reduce after backward instead of from autograd hooks during it");
  g->add_option("--grad-compression", o.grad_compression, "Gradients on the wire: none, bf16 or fp16")
      ->check(CLI::IsMember({"none", "bf16", "fp16"}))->capture_default_str();
  g->add_option("--amp", o.amp, "Mixed precision on GPU: none or bf16")
      ->check(CLI::IsMember({"none", "bf16"}))->capture_default_str();
  g->add_option("--seed", o.seed, "Seed for initialisation, sampling and synthetic data")->capture_default_str();

  g = app.add_option_group("Observation");
  g->add_option("--log-interval", o.log_interval, "Log every N optimizer steps")->capture_default_str()
      ->check(CLI::PositiveNumber);
  g->add_option("--eval-batches", o.eval_batches,
                "Evaluation batches per rank on the test split (0: all of it, every sample once, the last short "
                "batch included)")
      ->capture_default_str();
  g->add_option("--summary-json", o.summary_json, "Write the end-of-run summary as JSON to FILE");
  g->add_option("--trace", o.trace,
                "Record phases, collectives, counters and allocator events to FILE (one FILE.rankR.mct per rank)");
  g->add_option("--live", o.live, "Stream the same events to a viewer listening at HOST:PORT (memcomm-view --listen)");
  g->add_option("--cupti", o.cupti,
                "GPU kernels, copies, memsets, driver memory and NVTX ranges (CUPTI) in the trace/stream: auto "
                "(when recording a run on a GPU), on (also when the run is on the CPU) or off; where CUPTI "
                "cannot start, one warning line and host events go on")
      ->check(CLI::IsMember({"auto", "on", "off"}))->capture_default_str();
  g->add_option("--allocator", o.allocator,
                "CPU tensor allocator: memcomm (caching allocator with stats) or torch (LibTorch's own)")
      ->check(CLI::IsMember({"memcomm", "torch"}))->capture_default_str();
  g->add_option("--memory-limit", o.memory_limit,
                "Cap on the bytes tensors may reserve (e.g. 512MiB, 1.5GiB, 2GB = 2e9 bytes): memcomm's CPU allocator on the CPU, "
                "PyTorch's CUDA allocator on a GPU (each GPU under --mode dp); past it, an allocation fails as out of memory (0: none)")
      ->transform(size_transform())->capture_default_str();
  g->add_option("--empty-cache", o.empty_cache,
                "Give the allocator's cached memory back every N steps and before evaluation, as "
                "torch.cuda.empty_cache() (0: never); the trace and the summary show what was released")
      ->capture_default_str();

  g = app.add_option_group("Checkpoints");
  g->add_option("--checkpoint-dir", o.checkpoint_dir, "Folder for checkpoints (checked writable before training)");
  g->add_option("--checkpoint-every", o.checkpoint_every, "Write a checkpoint every S steps (atomic: temp, fsync, rename)")
      ->capture_default_str();
  g->add_flag("--resume", o.resume,
              "Continue from --checkpoint-dir: each rank reads its own file (ckpt.rankR.pt, the last one written)");

  app.add_flag("--print-checksums", o.print_checksums, "Print a parameter checksum after every step (for tests)")
      ->group("");  // hidden: a test hook, not a user feature
  app.add_option("--dump-params", o.dump_params, "Write the final parameters as raw float32 (for tests)")->group("");
  app.add_flag("--test-perturb-init", o.test_perturb_init,
               "Ranks other than 0 perturb their initial parameters before the broadcast (for tests)")
      ->group("");
}

TrainOptions parse_train_options(int argc, char** argv) {
  TrainOptions o;
  CLI::App app{
      "memcomm-train: data-parallel training on LibTorch with real collectives (Gloo on CPU, NCCL on GPUs).\n"
      "Runs by itself (--nproc N spawns N local ranks), under 'torchrun --no-python', or under Slurm (srun)."};
  app.get_formatter()->column_width(34);
  app.footer(
      "Launch environments:\n"
      "  standalone   memcomm-train --nproc N ...: spawns N local ranks (rendezvous on 127.0.0.1, a free port)\n"
      "  torchrun     torchrun --nproc-per-node N --no-python memcomm-train ...: reads RANK, WORLD_SIZE,\n"
      "               LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT\n"
      "  Slurm        srun memcomm-train ...: reads SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID; MASTER_ADDR\n"
      "               defaults to the first host of SLURM_STEP_NODELIST, MASTER_PORT to 29500\n"
      "Exit codes:\n"
      "  0  success\n"
      "  1  a runtime error (bad data, a corrupt checkpoint, out of memory); with --nproc, a rank that failed\n"
      "  2  a usage error: a bad flag or value, a missing dataset, an unwritable --checkpoint-dir, a GPU-only\n"
      "     flag on the CPU\n"
      "  3  a collective failed or took longer than --timeout; the message names the lost rank(s)");
  add_train_options(app, o);
  parse_or_exit(app, argc, argv, "memcomm-train");
  check_train_options(o, "memcomm-train");
  return o;
}

}  // namespace memcomm::train
