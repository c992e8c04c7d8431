#include <memcomm/train/options.hpp>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <memcomm/common/bytes.hpp>
#include <memcomm/common/cli_checks.hpp>
#include <memcomm/common/output_path.hpp>
#include <memcomm/common/replacing_file.hpp>
#include <memcomm/common/standard_output.hpp>

#include <memcomm/profiler/sink.hpp>
#include <memcomm/profiler/stream_protocol.hpp>

#include "idx_file.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <initializer_list>
#include <optional>
#include <stdexcept>

namespace memcomm::train {

namespace fs = std::filesystem;

namespace {

// The machine's physical memory in bytes (0 when unknown), which flags whose memory is known ahead are
// held to.
double machine_memory() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page_bytes = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page_bytes > 0 ? double(pages) * double(page_bytes) : 0.0;
}

// CLI11 reports parse errors itself; we keep its message but use exit code 2 for every usage error.
[[noreturn]] void usage_error(const char* program, const std::string& msg) {
  std::fprintf(stderr, "%s: %s\nRun '%s --help' for the flags.\n", program, msg.c_str(), program);
  std::exit(2);
}

// The rank's digits when `file` is where some rank's file goes, given rank 0's (its name, with 0 for
// the rank, ends in `suffix`): NAME.rankR.mct beside --trace NAME.mct, ckpt.rankR.pt in
// --checkpoint-dir; else none.
std::optional<std::string> rank_digits(const std::string& file, const std::string& rank0_path, const std::string& suffix) {
  std::error_code ec;
  const fs::path f = fs::weakly_canonical(file, ec), rank0 = fs::weakly_canonical(rank0_path, ec);
  if (ec || f.parent_path() != rank0.parent_path()) return std::nullopt;
  const std::string name = f.filename().string(), r0 = rank0.filename().string();
  const std::string prefix = r0.substr(0, r0.size() - ("0" + suffix).size());
  if (name.size() <= prefix.size() + suffix.size() || name.compare(0, prefix.size(), prefix) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
    return std::nullopt;
  std::string digits = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  if (digits.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  return digits;
}

bool is_rank_file(const std::string& file, const std::string& rank0_path, const std::string& suffix) {
  return rank_digits(file, rank0_path, suffix).has_value();
}

}  // namespace

std::string checkpoint_path(const std::string& dir, int rank) { return dir + "/ckpt.rank" + std::to_string(rank) + ".pt"; }
std::string previous_checkpoint_path(const std::string& dir, int rank) {
  return dir + "/ckpt.rank" + std::to_string(rank) + ".prev.pt";
}

std::vector<int> ranks_with_checkpoints(const std::string& dir, int world) {
  std::vector<int> found;
  std::error_code ec;
  for (int rank = 0; rank < world; ++rank)
    if (fs::exists(checkpoint_path(dir, rank), ec) || fs::exists(previous_checkpoint_path(dir, rank), ec))
      found.push_back(rank);
  return found;
}

namespace {

// Every rank with a checkpoint file (newest or previous) in `dir`, in order, whatever the world.
std::vector<int> saved_ranks(const std::string& dir) {
  std::vector<int> ranks;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string file = it->path().string();
    std::optional<std::string> digits = rank_digits(file, checkpoint_path(dir, 0), ".pt");
    if (!digits) digits = rank_digits(file, previous_checkpoint_path(dir, 0), ".prev.pt");
    if (digits && digits->size() < 7) ranks.push_back(std::stoi(*digits));
  }
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  return ranks;
}

}  // namespace

std::string replaced_checkpoints_message(const std::string& dir) {
  return "--checkpoint-dir " + dir + " holds checkpoints that this run's saves would replace: give --resume to "
         "continue them, or another --checkpoint-dir (or remove them first)";
}

std::string no_checkpoint_message(const std::vector<int>& ranks, const std::string& dir) {
  std::string message =
      fmt::format("--resume: no checkpoint for rank{} {} in {}", ranks.size() > 1 ? "s" : "", fmt::join(ranks, ", "), dir);
  const std::vector<int> held = saved_ranks(dir);
  if (held.empty()) return message;
  // "--nproc 3" on a 2-rank run's folder said only "no checkpoint for rank 2".
  const bool a_whole_run = held.back() == static_cast<int>(held.size()) - 1;
  const char* s = held.size() > 1 ? "s" : "";
  return message + fmt::format(" (it holds the checkpoint{} of rank{} {}{})", s, s, fmt::join(held, ", "),
                               a_whole_run ? fmt::format(": a run of {} rank{} saved them, and resumes with as many",
                                                         held.size(), s)
                                           : "");
}

void parse_or_exit(CLI::App& app, int argc, char** argv, const char* program) {
  memcomm::refuse_empty_values(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {  // Note [Output that was not written]: a help that was lost is no success
    std::exit(memcomm::stdout_checked(app.exit(e), program));
  } catch (const CLI::CallForAllHelp& e) {
    std::exit(memcomm::stdout_checked(app.exit(e), program));
  } catch (const CLI::ParseError& e) {
    usage_error(program, e.what());
  }
}

namespace {

// A usage error of the program (exit 2) naming what was wrong.
struct Refuse {
  const char* program;
  [[noreturn]] void operator()(const std::string& msg) const { memcomm::train::usage_error(program, msg); }
};

// Every count and number within its range (Notes [Caps on counts], [Range checks before LibTorch]).
void check_ranges(const TrainOptions& o, const Refuse& usage_error) {
  // Note [Caps on counts]: the upper bounds are far above any real run on one node but keep the
  // products the trainer forms (steps x accum, batch x accum x ranks, milliseconds from seconds,
  // bytes from MiB) well inside int64, so a typo is a usage error rather than a wrapped value.
  if (o.nproc < 1 || o.nproc > kMaxLocalRanks)
    usage_error("--nproc must be between 1 and " + std::to_string(kMaxLocalRanks));
  if (o.batch_size < 1 || o.batch_size > (int64_t(1) << 24)) usage_error("--batch-size must be between 1 and 16777216");
  if (o.accum < 1 || o.accum > (1 << 16)) usage_error("--accum must be between 1 and 65536");
  if (o.steps < 1 || o.steps > (int64_t(1) << 40)) usage_error("--steps must be between 1 and 2^40");
  if (o.workers < 0 || o.workers > 256) usage_error("--workers must be between 0 and 256");
  if (o.prefetch < 1 || o.prefetch > 4096) usage_error("--prefetch must be between 1 and 4096");
  // Note [Range checks before LibTorch]: every numeric flag is checked here, so a bad value is a usage
  // error (exit 2) naming the flag, not LibTorch's message deep inside an optimizer (exit 1) or, worse,
  // a silently odd run. `!(x >= 0)` style comparisons also reject NaN.
  if (!(o.lr > 0) || !std::isfinite(o.lr)) usage_error("--lr must be a positive number");
  if (!(o.momentum >= 0 && o.momentum < 1)) usage_error("--momentum must be at least 0 and below 1");
  if (!(o.weight_decay >= 0) || !std::isfinite(o.weight_decay)) usage_error("--weight-decay must be 0 or more");
  if (!(o.bucket_mb > 0 && o.bucket_mb <= kMaxBucketMb)) usage_error("--bucket-mb must be positive and at most 1e6 (MiB)");
  // The timeout becomes whole milliseconds (a std::chrono count); below 1 ms it would be 0.
  if (!(o.timeout_s >= kMinTimeoutS && o.timeout_s <= kMaxTimeoutS))
    usage_error("--timeout must be between 0.001 and 1e6 seconds");
  if (o.threads < 0 || o.threads > 1024) usage_error("--threads must be between 0 (cores divided among local ranks) and 1024");
  if (o.eval_batches < 0) usage_error("--eval-batches must be 0 (the whole test split) or more");
  if (o.checkpoint_every < 0) usage_error("--checkpoint-every must be 0 (never) or more");
  if (o.empty_cache < 0) usage_error("--empty-cache must be 0 (never) or more");
  if (o.synthetic_size < 1 || o.synthetic_size > (int64_t(1) << 31))
    usage_error("--synthetic-size must be between 1 and 2^31");
  if (o.sync_every < 0) usage_error("--sync-every must be 0 (synchronous) or more");
  if (o.memory_limit < 0 || o.memory_limit > kMaxMemoryLimit)
    usage_error("--memory-limit must be between 0 (none) and 128TiB");
}

// Flags that cannot go together, or that need another.
void check_combinations(const TrainOptions& o, const Refuse& usage_error) {
  if (o.mode == Mode::Dp && o.nproc > 1)
    usage_error("--mode dp is one process driving every device: use it without --nproc (or --mode ddp)");
  if (o.mode == Mode::Dp && o.sync_every > 0) usage_error("--mode dp has one model: --sync-every needs --mode ddp");
  // Autocast is per thread, and LibTorch's parallel_apply runs the replicas on threads of its own.
  if (o.mode == Mode::Dp && o.amp != Amp::None) usage_error("--amp does not reach --mode dp's replica threads: use --mode ddp");
  if (o.sync_every > 0 && o.accum > 1) usage_error("--sync-every (local SGD) and --accum cannot be combined");
  if (o.model == ModelKind::Transformer && (o.width % o.heads) != 0)
    usage_error("--width must be a multiple of --heads for the transformer");
  if (o.memory_limit > 0 && o.allocator != AllocatorKind::Memcomm && o.device != DeviceKind::Cuda)
    usage_error("--memory-limit on the CPU needs --allocator memcomm (its cap makes the limit real)");
  if (o.cupti == Cupti::On && o.trace.empty() && o.live.empty())
    usage_error("--cupti on records into the trace or the live stream: give --trace FILE or --live HOST:PORT");
  if (o.checkpoint_every > 0 && o.checkpoint_dir.empty()) usage_error("--checkpoint-every needs --checkpoint-dir");
  if (o.resume && o.checkpoint_dir.empty()) usage_error("--resume needs --checkpoint-dir");
  const auto ds = resolved_dataset(o);
  if (o.model == ModelKind::Transformer && ds != DatasetKind::Tokens) usage_error("the transformer trains on --dataset tokens");
  if (o.model != ModelKind::Transformer && ds == DatasetKind::Tokens) usage_error("--dataset tokens needs --model transformer");
  if (o.augment && ds != DatasetKind::FashionMnist) usage_error("--augment flips images: it needs --dataset fashion-mnist");
}

// A run this machine cannot hold is refused before it swaps: the sample order, the transformer's activations.
void check_memory_fits(const TrainOptions& o, const Refuse& usage_error) {
  if (resolved_dataset(o) != DatasetKind::FashionMnist) {
    // Each local rank draws every epoch's order of the whole set (16 bytes a sample) before its first
    // step: 2^31 samples took 17.6 GB and ran no step in a minute, on a machine of 23 GB.
    const double order = 16.0 * double(o.synthetic_size) * double(std::max(1, o.nproc));
    const double ram = machine_memory();
    if (ram > 0 && order > ram / 2)
      usage_error(fmt::format("--synthetic-size {} on {} local rank(s): each epoch's sample order alone needs {}, more "
                              "than half of this machine's {} of memory", o.synthetic_size, std::max(1, o.nproc),
                              format_bytes(uint64_t(order)), format_bytes(uint64_t(ram))));
  }
  if (resolved_dataset(o) != DatasetKind::FashionMnist && o.synthetic_size < o.nproc && o.tail == Tail::Drop)
    usage_error("--synthetic-size " + std::to_string(o.synthetic_size) + " gives some of the " +
                std::to_string(o.nproc) + " ranks no sample with --tail drop");
  if (o.model == ModelKind::Transformer && o.device != DeviceKind::Cuda) {
    // A lower bound on one micro-batch's memory in this model (models.cpp): its logits (batch x
    // seq_len x vocab floats) and, per block, what its linear layers and GELU keep for backward (11 x
    // width floats a token). The attention kernel (scaled_dot_product_attention) keeps no seq_len^2
    // scores, so they are not counted. More than the machine holds for its local ranks would only
    // swap until the kernel ends the run, silently.
    const double tokens = double(o.batch_size) * double(o.seq_len) * double(std::max(1, o.nproc));
    const double bound = 4.0 * tokens * (double(o.vocab) + 11.0 * double(o.layers) * double(o.width));
    const double ram = machine_memory();
    if (ram > 0 && bound > ram)
      usage_error(fmt::format("--seq-len {} with --batch-size {} on {} local rank(s): the logits and the activations "
                              "kept for backward alone need {}, more than this machine's {} of memory",
                              o.seq_len, o.batch_size, std::max(1, o.nproc), format_bytes(uint64_t(bound)),
                              format_bytes(uint64_t(ram))));
  }
}

// Note [Outputs checked first]: every file the run writes is checked before any work, so a typo in
// a path is a usage error now, not a run that finishes and then loses its results.
void check_outputs(const TrainOptions& o, const Refuse& usage_error) {
  if (!o.live.empty()) {
    try {
      (void)prof::parse_connect_endpoint(o.live);
    } catch (const std::exception& e) {
      usage_error(std::string("--live ") + o.live + ": " + e.what());
    }
  }
  try {
    if (!o.trace.empty()) {
      // The ranks' files are TRACE.rankR.mct: a folder would put them beside it, named after it.
      std::error_code unreadable;  // a path that cannot be looked at is check_output_dir's to name
      if (fs::is_directory(o.trace, unreadable))
        throw std::invalid_argument("--trace " + o.trace + " is a folder; name a file in it, such as " +
                                    (fs::path(o.trace) / "run").string() + " (rank 0 then writes " +
                                    prof::rank_trace_path((fs::path(o.trace) / "run").string(), 0) + ")");
      for (int r = 0; r < std::max(1, o.nproc); ++r)  // exit 1 at the first step where --help promises 2
        if (const std::string file = prof::rank_trace_path(o.trace, r); fs::is_directory(file, unreadable))
          throw std::invalid_argument("--trace " + o.trace + ": rank " + std::to_string(r) + "'s file, " + file + ", is a folder");
      check_output_dir("--trace", o.trace, /*create=*/true);
      const std::string widest = prof::rank_trace_path(o.trace, 99999);  // the rank number grows the name
      if (const std::string problem = memcomm::name_length_problem(widest); !problem.empty())
        throw std::invalid_argument("--trace " + o.trace + ": a rank's file, " + widest + ": " + problem);
    }
    if (!o.summary_json.empty()) check_output_file("--summary-json", o.summary_json);
    if (!o.dump_params.empty()) check_output_file("--dump-params", o.dump_params);
  } catch (const std::invalid_argument& e) {
    usage_error(e.what());
  }
}

// No output overwrites another output or an input.
void check_outputs_apart(const TrainOptions& o, const Refuse& usage_error) {
  // Outputs must not overwrite one another: the summary written last would replace a rank's trace or
  // checkpoint (which a later --resume then refused as corrupt). Nor an input (Note [Outputs that
  // would destroy data]): --summary-json in --data-dir replaced the labels with the summary, exit 0.
  std::vector<std::string> inputs;
  for (const char* split : {"train", "test"})
    for (const bool labels : {false, true}) inputs.push_back(fashion_mnist_path(o.data_dir, split, labels));
  for (const auto& [flag, file] : {std::pair{"--summary-json", o.summary_json}, std::pair{"--dump-params", o.dump_params}}) {
    if (const std::string conflict = file.empty() ? "" : memcomm::output_conflict(file, inputs, false); !conflict.empty())
      usage_error(std::string(flag) + ": " + conflict + " (a file of --data-dir " + o.data_dir + ")");
    if (!file.empty() && !o.trace.empty() && is_rank_file(file, prof::rank_trace_path(o.trace, 0), ".mct"))
      usage_error(std::string(flag) + " " + file + " is a rank's trace file of --trace " + o.trace);
    if (!file.empty() && !o.checkpoint_dir.empty() && is_rank_file(file, checkpoint_path(o.checkpoint_dir, 0), ".pt"))
      usage_error(std::string(flag) + " " + file + " is a rank's checkpoint in --checkpoint-dir " + o.checkpoint_dir);
  }
  std::error_code ec;
  if (!o.summary_json.empty() && !o.dump_params.empty() &&
      fs::weakly_canonical(o.summary_json, ec) == fs::weakly_canonical(o.dump_params, ec))
    usage_error("--summary-json and --dump-params name the same file " + o.summary_json);
}

}  // namespace

void check_train_options(const TrainOptions& o, const char* program) {
  const Refuse usage_error{program};
  check_ranges(o, usage_error);
  check_combinations(o, usage_error);
  check_memory_fits(o, usage_error);
  check_outputs(o, usage_error);
  check_outputs_apart(o, usage_error);
}

void check_output_file(const std::string& flag, const std::string& file) {
  // Written beside the file FILE leads to and renamed over it (Note [Outputs replaced whole]), so
  // that folder must take new files (FILE's own mode does not matter).
  if (const std::string problem = memcomm::replace_problem(file); !problem.empty())
    throw std::invalid_argument(flag + " " + file + ": " + problem);
}

void check_output_dir(const std::string& flag, const std::string& file, bool create) {
  const fs::path dir = memcomm::parent_folder(file);
  std::error_code ec;
  if (create && !fs::is_directory(dir, ec)) {
    fs::create_directories(dir, ec);
    if (ec) throw std::invalid_argument(flag + " " + file + ": the folder " + dir.string() + " cannot be created: " + ec.message());
  }
  if (!fs::is_directory(dir, ec))
    throw std::invalid_argument(flag + " " + file + ": the folder " + dir.string() + " does not exist");
  if (!memcomm::can_create_in(dir))
    throw std::invalid_argument(flag + " " + file + ": the folder " + dir.string() + " is not writable");
}

std::vector<std::pair<std::string, std::string>> checkpoint_fingerprint(const TrainOptions& o, int world) {
  // Only what changes the parameters' shapes, the optimizer state's layout, or where in the data
  // stream step s begins (Note [Micro-batch position] in trainer.cpp). Flags that a resumed run may
  // change freely (--steps, --lr, --workers, --threads, --bucket-mb, observation) are left out.
  const auto ds = resolved_dataset(o);
  std::vector<std::pair<std::string, std::string>> f = {
      {"--model", to_string(o.model)}, {"--dataset", to_string(ds)}, {"ranks (--nproc)", std::to_string(world)},
      {"--mode", to_string(o.mode)}, {"--seed", std::to_string(o.seed)}, {"--batch-size", std::to_string(o.batch_size)},
      {"--accum", std::to_string(o.accum)}, {"--optimizer", to_string(o.optimizer)}, {"--tail", to_string(o.tail)},
      {"--sync-every", std::to_string(o.sync_every)}, {"--augment", o.augment ? "on" : "off"}};
  if (o.model == ModelKind::Mlp) f.emplace_back("--hidden", std::to_string(o.hidden));
  if (o.model == ModelKind::Transformer)
    for (const auto& [k, v] : std::initializer_list<std::pair<const char*, int>>{
             {"--layers", o.layers}, {"--width", o.width}, {"--heads", o.heads}, {"--seq-len", o.seq_len}, {"--vocab", o.vocab}})
      f.emplace_back(k, std::to_string(v));
  if (ds != DatasetKind::FashionMnist) f.emplace_back("--synthetic-size", std::to_string(o.synthetic_size));
  return f;
}

DatasetKind resolved_dataset(const TrainOptions& o) {
  if (o.dataset != DatasetKind::Auto) return o.dataset;
  return o.model == ModelKind::Transformer ? DatasetKind::Tokens : DatasetKind::FashionMnist;
}

namespace {

// Note [Choices are parsed once] in choices.hpp: the name becomes the enum's number, which CLI11 then
// reads into the enum. Anything else is refused with CLI11's IsMember wording ("--model: resnet not in
// {mlp,cnn,transformer}"). CLI::CheckedTransformer would also accept the numbers themselves
// ("--model 0") and print its map in --help, so the names are checked here.
template <typename E>
CLI::Validator choice_of() {
  std::string set = "{";
  for (const char* name : ChoiceNames<E>::names) set += (set.size() > 1 ? "," : "") + std::string(name);
  set += "}";
  return CLI::Validator(
      [set](std::string& value) -> std::string {
        const std::optional<E> choice = choice_from_string<E>(value);
        if (!choice) return value + " not in " + set;
        value = std::to_string(static_cast<int>(*choice));
        return {};
      },
      set);
}

// A flag taking one of E's names, shown in --help as TEXT:{names} with the default's name.
template <typename E>
CLI::Option* add_choice(CLI::App& group, const std::string& flag, E& value, const std::string& help) {
  return group.add_option(flag, value, help)->transform(choice_of<E>())->type_name("TEXT")->default_str(to_string(value));
}

void add_launch_options(CLI::App& g, TrainOptions& o) {
  add_choice(g, "--mode", o.mode,
             "ddp: one process per rank, gradients all-reduced (DistributedDataParallel); dp: one process "
             "splits each batch across all visible GPUs with LibTorch's data_parallel (DataParallel; one "
             "device on a CPU-only machine)");
  g.add_option("--nproc", o.nproc, "Local ranks to spawn (ignored under torchrun/Slurm, which set the ranks)")
      ->capture_default_str();
  add_choice(g, "--backend", o.backend, "Collective backend: auto (NCCL when each rank has its own GPU, else Gloo)");
  add_choice(g, "--device", o.device, "auto (a GPU when there is one, else CPU), cpu or cuda");
  g.add_option("--timeout", o.timeout_s, "Seconds a collective may take before the run ends, naming the missing ranks (0.001 to 1e6)")
      ->capture_default_str();
  g.add_option("--threads", o.threads, "Intra-op threads per rank (0: cores divided among local ranks)")
      ->capture_default_str();
}

void add_data_options(CLI::App& g, TrainOptions& o) {
  add_choice(g, "--dataset", o.dataset,
             "fashion-mnist, tabular (synthetic) or tokens (synthetic LM stream); auto picks by model");
  g.add_option("--data-dir", o.data_dir, "Folder with the Fashion-MNIST IDX .gz files")->capture_default_str();
  g.add_option("--workers", o.workers, "Loader worker threads per rank (0 loads on the training thread)")
      ->capture_default_str();
  g.add_option("--prefetch", o.prefetch, "Batches each rank's loader prepares ahead")->capture_default_str();
  add_choice(g, "--tail", o.tail,
             "Dataset size not a multiple of the ranks: pad (repeat samples) or drop the remainder, so every rank "
             "gets as many; each rank's last partial batch of an epoch is then left out (the run says how many)");
  g.add_option("--synthetic-size", o.synthetic_size,
               "Samples in the synthetic training sets (their test split has a sixth as many)")->capture_default_str();
  g.add_flag("--augment", o.augment,
             "Flip Fashion-MNIST images horizontally at random, drawn per (seed, epoch, sample) so that results "
             "do not depend on --workers");
}

void add_model_options(CLI::App& g, TrainOptions& o) {
  add_choice(g, "--model", o.model, "mlp, cnn or transformer (decoder-only LM)");
  g.add_option("--hidden", o.hidden, "MLP hidden width")->capture_default_str()->check(memcomm::whole_number(1));
  g.add_option("--layers", o.layers, "Transformer layers")->capture_default_str()->check(memcomm::whole_number(1));
  g.add_option("--width", o.width, "Transformer model width")->capture_default_str()->check(memcomm::whole_number(1));
  g.add_option("--heads", o.heads, "Transformer attention heads")->capture_default_str()->check(memcomm::whole_number(1));
  g.add_option("--seq-len", o.seq_len, "Transformer sequence length")->capture_default_str()->check(memcomm::whole_number(1));
  g.add_option("--vocab", o.vocab, "Token vocabulary size")->capture_default_str()->check(CLI::Range(2, 1 << 20));
}

void add_optimisation_options(CLI::App& g, TrainOptions& o) {
  g.add_option("--batch-size", o.batch_size, "Micro-batch per rank")->capture_default_str();
  g.add_option("--accum", o.accum, "Micro-batches per optimizer step; gradients are all-reduced on the last only")
      ->capture_default_str();
  g.add_option("--steps", o.steps, "Optimizer steps to run")->capture_default_str();
  add_choice(g, "--optimizer", o.optimizer, "sgd (with momentum), adam or adamw; each rank keeps its own state");
  g.add_option("--lr", o.lr, "Peak learning rate")->capture_default_str();
  g.add_option("--momentum", o.momentum, "SGD momentum")->capture_default_str();
  g.add_option("--weight-decay", o.weight_decay, "Weight decay")->capture_default_str();
  add_choice(g, "--schedule", o.schedule, "Learning-rate schedule: none, step (x0.1 at 50% and 75%) or cosine");
  g.add_option("--sync-every", o.sync_every,
               "Local SGD: ranks step independently and average parameters every K steps, and after the last "
               "step (0: synchronous)")
      ->capture_default_str();
  g.add_option("--bucket-mb", o.bucket_mb, "Gradient bucket size in MiB (the first bucket is 1 MiB; at most 1e6)")
      ->capture_default_str();
  g.add_flag("!--no-overlap", o.overlap, "All-reduce after backward instead of from autograd hooks during it");
  add_choice(g, "--grad-compression", o.grad_compression, "Gradients on the wire: none, bf16 or fp16");
  add_choice(g, "--amp", o.amp, "Mixed precision on GPU: none or bf16");
  // CLI11 would otherwise read "-1" into the unsigned seed as 2^64-1.
  g.add_option("--seed", o.seed, "Seed for initialisation, sampling and synthetic data (0 or more)")
      ->capture_default_str()
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            if (v.find('-') != std::string::npos) return "must be 0 or more, not " + v;
            // Decimal digits up to 2^64-1: CLI11 reads 0x10 as 16 and saturates larger numbers.
            const bool digits = !v.empty() && v.find_first_not_of("0123456789") == std::string::npos;
            const std::string max = "18446744073709551615";
            const std::string trimmed = digits ? v.substr(std::min(v.find_first_not_of('0'), v.size() - 1)) : v;
            if (!digits || trimmed.size() > max.size() || (trimmed.size() == max.size() && trimmed > max))
              return "must be a whole number from 0 to " + max + ", not " + v;
            return std::string();
          },
          "UINT"));
}

void add_observation_options(CLI::App& g, TrainOptions& o) {
  g.add_option("--log-interval", o.log_interval, "Log every N optimizer steps")->capture_default_str()
      ->check(memcomm::whole_number(1));
  g.add_option("--eval-batches", o.eval_batches,
               "Evaluation batches per rank on the test split (0: all of it, every sample once, the last short "
               "batch included)")
      ->capture_default_str();
  g.add_option("--summary-json", o.summary_json, "Write the end-of-run summary as JSON to FILE (its folder must exist)");
  g.add_option("--trace", o.trace,
               "Record phases, collectives, counters and allocator events to FILE (one FILE.rankR.mct per rank, "
               "FILE.restartN.rankR.mct in torchrun's N-th restart; a missing folder is created)");
  g.add_option("--live", o.live, "Stream the same events to a viewer listening at HOST:PORT (memcomm-view --listen; :PORT for this machine)");
  add_choice(g, "--cupti", o.cupti,
             "GPU kernels, copies, memsets, driver memory and NVTX ranges (CUPTI) in the trace/stream: auto "
             "(when recording a run on a GPU), on (also when the run is on the CPU) or off; where CUPTI "
             "cannot start, one warning line and host events go on");
  add_choice(g, "--allocator", o.allocator,
             "CPU tensor allocator: memcomm (caching allocator with stats) or torch (LibTorch's own)");
  g.add_option("--memory-limit", o.memory_limit,
               "Cap on the bytes tensors may reserve (e.g. 512MiB, 1.5GiB, 2GB = 2e9 bytes): memcomm's CPU allocator on the CPU, "
               "PyTorch's CUDA allocator on a GPU (each GPU under --mode dp); past it, an allocation fails as out of memory (0: none)")
      ->transform(size_transform())->capture_default_str();
  g.add_option("--empty-cache", o.empty_cache,
               "Give the allocator's cached memory back every N steps and before evaluation, as "
               "torch.cuda.empty_cache() (0: never); the trace and the summary show what was released")
      ->capture_default_str();
}

void add_checkpoint_options(CLI::App& g, TrainOptions& o) {
  g.add_option("--checkpoint-dir", o.checkpoint_dir,
               "Folder for checkpoints (checked writable before training; one that holds checkpoints needs --resume)");
  g.add_option("--checkpoint-every", o.checkpoint_every, "Write a checkpoint every S steps (atomic: temp, fsync, rename)")
      ->capture_default_str();
  g.add_flag("--resume", o.resume,
             "Continue from --checkpoint-dir: each rank reads its own file (ckpt.rankR.pt, the last one written; "
             "after a save cut short, the last step every rank holds)");
}

// Hidden from --help (group ""): test hooks, not user features.
void add_test_hooks(CLI::App& app, TrainOptions& o) {
  app.add_flag("--print-checksums", o.print_checksums, "Print a parameter checksum after every step (for tests)")
      ->group("");
  app.add_option("--dump-params", o.dump_params, "Write the final parameters as raw float32 (for tests)")->group("");
  app.add_flag("--test-perturb-init", o.test_perturb_init,
               "Ranks other than 0 perturb their initial parameters before the broadcast (for tests)")
      ->group("");
}

}  // namespace

void add_train_options(CLI::App& app, TrainOptions& o) {
  // A flag given twice takes its last value, so scripts can append overrides to a base command.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  add_launch_options(*app.add_option_group("Launch"), o);
  add_data_options(*app.add_option_group("Data"), o);
  add_model_options(*app.add_option_group("Model"), o);
  add_optimisation_options(*app.add_option_group("Optimisation"), o);
  add_observation_options(*app.add_option_group("Observation"), o);
  add_checkpoint_options(*app.add_option_group("Checkpoints"), o);
  add_test_hooks(app, o);
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
      "  Slurm        srun memcomm-train ...: reads SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NODEID and\n"
      "               SLURM_STEP_TASKS_PER_NODE; MASTER_ADDR defaults to the first host of SLURM_STEP_NODELIST,\n"
      "               MASTER_PORT to 29500\n"
      "Exit codes:\n"
      "  0  success\n"
      "  1  a runtime error (bad data, a corrupt checkpoint, out of memory, a full disk under a checkpoint;\n"
      "     a full disk under the trace is said, and the file keeps what was written before: the run goes on)\n"
      "  2  a usage error: a bad flag or value, a missing dataset, an unwritable --checkpoint-dir (or one that\n"
      "     holds checkpoints, without --resume), --trace or --summary-json, a --resume checkpoint of another\n"
      "     configuration, a GPU-only flag on the CPU\n"
      "  3  a collective failed or took longer than --timeout; the message names the lost rank(s)\n"
      "With --nproc the launcher exits with the code of the first rank to fail, or 1 when that rank was\n"
      "killed by a signal (the survivors then report the lost rank with 3).");
  add_train_options(app, o);
  parse_or_exit(app, argc, argv, "memcomm-train");
  check_train_options(o, "memcomm-train");
  return o;
}

}  // namespace memcomm::train
