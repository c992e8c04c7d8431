// memcomm-train: see trainer.cpp for the loop and README.md for the launch story.
#include "checkpoint.hpp"

#include <memcomm/train/data.hpp>
#include <memcomm/train/errors.hpp>
#include <memcomm/train/launch.hpp>
#include <memcomm/train/options.hpp>
#include <memcomm/train/trainer.hpp>

#include <memcomm/common/standard_output.hpp>

#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <new>
#include <string>

namespace {

using namespace memcomm::train;

// What each rank would find wrong at its start, whatever its rank, found once by --nproc's launcher:
// from the ranks, the same message came once per rank, then a line per rank that exited with code 2.
void check_before_spawning(const TrainOptions& o) {
  check_dataset_files(o, "train");
  check_dataset_files(o, "test");
  if (o.checkpoint_dir.empty()) return;
  ensure_writable_dir(o.checkpoint_dir);
  const std::vector<int> found = ranks_with_checkpoints(o.checkpoint_dir, o.nproc);
  if (!o.resume) {
    if (!found.empty()) throw UsageError(replaced_checkpoints_message(o.checkpoint_dir));  // Note [Checkpoints a run would replace]
    return;
  }
  std::vector<int> missing;
  for (int rank = 0; rank < o.nproc; ++rank)
    if (std::find(found.begin(), found.end(), rank) == found.end()) missing.push_back(rank);
  if (!missing.empty())
    throw UsageError(no_checkpoint_message(missing, o.checkpoint_dir));
}

int spawn_checked(int argc, char** argv, const TrainOptions& o) {
  try {
    check_before_spawning(o);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "memcomm-train: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {  // a path that cannot be looked at (filesystem_error), as a rank says it
    std::fprintf(stderr, "memcomm-train: %s\n", e.what());
    return 1;
  }
  return spawn_local_ranks(argc, argv, o.nproc, o.timeout_s + 15);
}

}  // namespace

int main(int argc, char** argv) {
  const TrainOptions o = parse_train_options(argc, argv);
  if (o.nproc > 1 && !launched_externally()) return spawn_checked(argc, argv, o);
  const DistEnv env = detect_dist_env("memcomm-train");
  warn_if_nproc_ignored(o.nproc, env, "memcomm-train");
  try {
    return memcomm::stdout_checked(run_training(o, env), "memcomm-train");  // Note [Output that was not written]
  } catch (const CommError& e) {
    std::fprintf(stderr, "memcomm-train: %s\n", e.what());
    return 3;
  } catch (const UsageError& e) {
    std::fprintf(stderr, "memcomm-train: %s\n", e.what());
    return 2;
  } catch (const c10::Error& e) {  // LibTorch's: the message without its C++ backtrace
    std::fprintf(stderr, "memcomm-train: rank %d: %s\n", env.rank, e.what_without_backtrace());
    return 1;
  } catch (const std::bad_alloc&) {  // the host's memory, not the device's (LibTorch says those in c10::Error)
    std::fprintf(stderr,
                 "memcomm-train: rank %d: out of host memory (std::bad_alloc): a smaller --synthetic-size (each epoch's "
                 "order takes 16 bytes a sample), --batch-size, --workers or --prefetch needs less\n",
                 env.rank);
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "memcomm-train: rank %d: %s\n", env.rank, e.what());
    return 1;
  }
}
