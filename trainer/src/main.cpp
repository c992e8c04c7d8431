// memcomm-train: see trainer.cpp for the loop and README.md for the launch story.
#include <memcomm/train/errors.hpp>
#include <memcomm/train/launch.hpp>
#include <memcomm/train/options.hpp>
#include <memcomm/train/trainer.hpp>

#include <c10/util/Exception.h>

#include <cstdio>
#include <exception>
#include <new>

int main(int argc, char** argv) {
  using namespace memcomm::train;
  const TrainOptions o = parse_train_options(argc, argv);
  if (o.nproc > 1 && !launched_externally()) return spawn_local_ranks(argc, argv, o.nproc, o.timeout_s + 15);
  const DistEnv env = detect_dist_env("memcomm-train");
  try {
    return run_training(o, env);
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
