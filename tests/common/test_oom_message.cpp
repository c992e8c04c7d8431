// memcomm::is_oom_message: which failures the trainer's trial steps and both tuners treat as out of
// memory rather than as a bug.
#include <catch2/catch.hpp>

#include <memcomm/common/oom_message.hpp>

using memcomm::is_oom_message;

TEST_CASE("out-of-memory messages, including the library ones in disguise") {
  CHECK(is_oom_message("memcomm: out of memory allocating 2.0 MiB (requested 2097152 ..."));
  CHECK(is_oom_message("CUDA out of memory. Tried to allocate 20.00 MiB"));
  CHECK(is_oom_message("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"));
  CHECK(is_oom_message("cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a non-contiguous input."));
  CHECK(is_oom_message("DefaultCPUAllocator: can't allocate memory: you tried to allocate 123 bytes"));
  CHECK_FALSE(is_oom_message("mat1 and mat2 shapes cannot be multiplied (4x3 and 4x5)"));
  CHECK_FALSE(is_oom_message("CUDA error: an illegal memory access was encountered"));
}
