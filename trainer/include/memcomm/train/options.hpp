// memcomm-train's options: parsed from the command line with no LibTorch in the way, so this
// translation unit (and --help) stays cheap. The meaning of each flag is documented in --help.
#pragma once

#include <memcomm/train/choices.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace memcomm::train {

struct TrainOptions {
  // --- launch ---
  int nproc = 1;                   // local ranks to spawn (--nproc); 1 runs in this process
  Backend backend = Backend::Auto;
  DeviceKind device = DeviceKind::Auto;
  double timeout_s = 300;          // a collective slower than this ends the run, naming missing ranks
  int threads = 0;                 // intra-op threads per rank; 0 = cores / local ranks
  Mode mode = Mode::Ddp;           // ddp (one process per rank) | dp (one process, LibTorch's data_parallel)

  // --- data ---
  DatasetKind dataset = DatasetKind::Auto;  // auto picks one for the model (resolved_dataset)
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  int workers = 2;                 // loader worker threads per rank
  int prefetch = 4;                // batches queued ahead per rank
  Tail tail = Tail::Pad;           // how uneven shards are balanced
  int64_t synthetic_size = 60000;  // samples in the synthetic sets
  bool augment = false;            // random horizontal flips of the images (Note [Seeded augmentation])

  // --- model ---
  ModelKind model = ModelKind::Cnn;
  int layers = 2, width = 128, heads = 4, seq_len = 64, vocab = 256;  // transformer shape
  int hidden = 256;                // mlp hidden width

  // --- optimisation ---
  int64_t batch_size = 64;         // per-rank micro-batch
  int accum = 1;                   // micro-batches per optimizer step
  int64_t steps = 300;             // optimizer steps
  OptimizerKind optimizer = OptimizerKind::Sgd;
  double lr = 0.05, momentum = 0.9, weight_decay = 0.0;
  Schedule schedule = Schedule::None;
  int sync_every = 0;              // >0: local SGD, average parameters every K steps
  double bucket_mb = 25;           // gradient bucket size after the first 1 MiB bucket
  bool overlap = true;             // launch bucket all-reduces from autograd hooks
  GradCompression grad_compression = GradCompression::None;
  Amp amp = Amp::None;             // bf16 on a GPU only
  uint64_t seed = 0;

  // --- observation ---
  int64_t log_interval = 50;
  int64_t eval_batches = 0;        // 0 = the whole test split
  std::string summary_json;        // --summary-json FILE
  std::string trace;               // --trace FILE (per-rank files NAME.rankR.mct)
  std::string live;                // --live HOST:PORT
  Cupti cupti = Cupti::Auto;       // GPU activity (CUPTI) in the trace/stream
  AllocatorKind allocator = AllocatorKind::Memcomm;
  int64_t memory_limit = 0;        // bytes tensors may reserve (CPU: memcomm's cap; GPU: PyTorch's); 0 = none
  int64_t empty_cache = 0;         // >0: give cached memory back every N steps and before evaluation

  // --- checkpoints ---
  std::string checkpoint_dir;
  int64_t checkpoint_every = 0;
  bool resume = false;

  // Test hook: print a parameter checksum after every step (consistency tests read it).
  bool print_checksums = false;
  // Test hook: write the final parameters as raw float32, in parameter order, to this file.
  std::string dump_params;
  // Test hook: ranks other than 0 perturb their freshly initialised parameters before the broadcast
  // from rank 0, so a broken broadcast shows as ranks that differ (and prints checksums of both).
  bool test_perturb_init = false;
};

}  // namespace memcomm::train

namespace CLI {
class App;
}

namespace memcomm::train {

// Adds every memcomm-train flag to `app`, in its groups, bound to `o` (memcomm-tune reuses them).
void add_train_options(CLI::App& app, TrainOptions& o);
// Parses argv into `app`: --help prints usage and exits 0; a parse error prints
// "PROGRAM: what is wrong" and exits 2.
void parse_or_exit(CLI::App& app, int argc, char** argv, const char* program);
// Checks combinations the flags alone cannot; prints "PROGRAM: what is wrong" and exits 2.
void check_train_options(const TrainOptions& o, const char* program);

// Parses argv. On --help prints usage and exits 0; on bad flags prints a clear message and exits 2.
TrainOptions parse_train_options(int argc, char** argv);

// Limits of check_train_options (Note [Caps on counts] in options.cpp).
constexpr int kMaxLocalRanks = 1024;
constexpr double kMinTimeoutS = 0.001, kMaxTimeoutS = 1e6;
constexpr double kMaxBucketMb = 1e6;
constexpr int64_t kMaxMemoryLimit = int64_t(1) << 47;  // 128 TiB

// Note [Outputs checked first] in options.cpp. FILE's folder must exist and take new files (the
// tools write FILE.tmp and rename it); `flag` starts the std::invalid_argument's message. Nothing
// is left behind.
void check_output_file(const std::string& flag, const std::string& file);
// The same for a file whose name the tool extends (--trace NAME.rankR.mct); with `create`, a
// missing folder is made, as --checkpoint-dir's is.
void check_output_dir(const std::string& flag, const std::string& file, bool create);

// Where a rank's checkpoint goes in --checkpoint-dir `dir` (ckpt.rankR.pt).
std::string checkpoint_path(const std::string& dir, int rank);
// The file a save in progress keeps the rank's last checkpoint as (Note [A save cut short]).
std::string previous_checkpoint_path(const std::string& dir, int rank);
// The ranks of `world` that have a checkpoint file (newest or previous) in `dir`.
std::vector<int> ranks_with_checkpoints(const std::string& dir, int world);
// Note [Checkpoints a run would replace]: a run without --resume refuses a --checkpoint-dir that
// holds checkpoints (its first save would start replacing them, whatever run they came from), unless
// it is a restart of the group that wrote them, which resumes from them (launch.hpp's attempt).
std::string replaced_checkpoints_message(const std::string& dir);
// The refusal of --resume when `ranks` (one or more) have no file in `dir`: said by --nproc's
// launcher before spawning and by a rank that finds its file missing. It names the ranks whose
// files the folder does hold, so a run with more ranks than the one that saved says so.
std::string no_checkpoint_message(const std::vector<int>& ranks, const std::string& dir);

// Note [Checkpoint fingerprint] in checkpoint.hpp: (flag, value) pairs for what a resumed run must
// share with the run that wrote the checkpoint. `world` is the number of ranks actually running.
std::vector<std::pair<std::string, std::string>> checkpoint_fingerprint(const TrainOptions& o, int world);

// The dataset actually used: --dataset, or when it is auto the one the model trains on (never Auto).
DatasetKind resolved_dataset(const TrainOptions& o);

}  // namespace memcomm::train
