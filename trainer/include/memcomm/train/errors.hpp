// Errors that main() turns into one clear line and an exit code; free of LibTorch.
#pragma once

#include <stdexcept>

namespace memcomm::train {

// A collective failed or timed out. The message names the rank(s) that went missing
// (Note [Naming the lost rank] in comm.hpp). Exit code 3.
class CommError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The user asked for something that cannot work here: a missing dataset, an unwritable checkpoint
// folder, a GPU-only flag on the CPU. Exit code 2, like a bad flag.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace memcomm::train
