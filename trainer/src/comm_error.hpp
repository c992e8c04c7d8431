// The error a rank raises when a collective fails or times out; free of LibTorch.
#pragma once

#include <stdexcept>

namespace memcomm::train {

// Its message names the rank(s) that went missing (Note [Naming the lost rank] in comm.hpp).
class CommError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace memcomm::train
