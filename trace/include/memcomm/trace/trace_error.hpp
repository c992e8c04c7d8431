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

// A trace file another process is writing (Note [One writer per trace file] in trace_writer.hpp).
class TraceFileBusy : public TraceError {
 public:
  using TraceError::TraceError;
};

}  // namespace memcomm::prof
