// memcomm-tune: see tune_run.cpp for the flow and memcomm/tuner/search.hpp for the search.
#include <memcomm/train/errors.hpp>
#include <memcomm/train/launch.hpp>

#include <memcomm/common/standard_output.hpp>
#include "tune_options.hpp"
#include "tune_run.hpp"

#include <cstdio>
#include <exception>

int main(int argc, char** argv) {
  using namespace memcomm;
  tune::TuneOptions t = tune::parse_tune_options(argc, argv);
  if (t.train.nproc > 1 && !train::launched_externally())
    return train::spawn_local_ranks(argc, argv, t.train.nproc, t.train.timeout_s + 15);
  const train::DistEnv env = train::detect_dist_env("memcomm-tune");
  train::warn_if_nproc_ignored(t.train.nproc, env, "memcomm-tune");
  try {
    return stdout_checked(tune::run_tuning(std::move(t), env), "memcomm-tune");  // Note [Output that was not written]
  } catch (const train::CommError& e) {
    std::fprintf(stderr, "memcomm-tune: %s\n", e.what());
    return 3;
  } catch (const train::UsageError& e) {
    if (env.world > 1) std::fprintf(stderr, "memcomm-tune: rank %d: %s\n", env.rank, e.what());
    else std::fprintf(stderr, "memcomm-tune: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "memcomm-tune: rank %d: %s\n", env.rank, e.what());
    return 1;
  }
}
