// The one exception type of the trace library: the message names the file and, where it applies,
// the chunk and byte offset that were wrong.
#pragma once

#include <stdexcept>
#include <string>

namespace memcomm::prof {

class TraceError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace memcomm::prof
