// Which failures are out-of-memory, told from their messages: the one list that the trainer's
// trial steps, memcomm-tune and the Python package's tuner share.
#pragma once

#include <string>

namespace memcomm {

// True for an out-of-memory message: memcomm's allocator ("out of memory"), PyTorch's CUDA caching
// allocator ("CUDA out of memory"), the CPU allocator ("can't allocate memory"), and the library
// failures that are out-of-memory in disguise: cuBLAS's CUBLAS_STATUS_ALLOC_FAILED, cuDNN's
// CUDNN_STATUS_ALLOC_FAILED and CUDNN_STATUS_NOT_SUPPORTED after an allocation failed (as
// Lightning's is_oom_error also counts them).
bool is_oom_message(const std::string& message);

}  // namespace memcomm
