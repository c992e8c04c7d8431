#include "memcomm/common/oom_message.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <string_view>

namespace memcomm {

bool is_oom_message(const std::string& message) {
  std::string m(message);
  std::transform(m.begin(), m.end(), m.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  static constexpr std::array<std::string_view, 6> kMarks = {
      "out of memory",                // memcomm's OutOfMemory, CUDA's cudaErrorMemoryAllocation text
      "can't allocate memory",        // c10's DefaultCPUAllocator
      "cublas_status_alloc_failed",   // cuBLAS could not get its workspace
      "cudnn_status_alloc_failed",    // cuDNN could not get its workspace
      "cudnn_status_not_supported",   // cuDNN found no algorithm that fits in the memory left
      "cuda_error_out_of_memory",     // driver API spelling
  };
  return std::any_of(kMarks.begin(), kMarks.end(), [&](std::string_view k) { return m.find(k) != std::string::npos; });
}

}  // namespace memcomm
