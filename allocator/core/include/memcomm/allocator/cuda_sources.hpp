// CUDA memory sources and streams (library memcomm::allocator_cuda, built when CUDA is found).
// Without a GPU or driver every factory throws SourceError and cuda_device_count() returns 0.
#pragma once

#include <memory>

#include "memcomm/allocator/memory_source.hpp"
#include "memcomm/allocator/stream.hpp"

namespace memcomm::alloc {

// GPUs usable here; 0 when there is no driver (cudaErrorInsufficientDriver) or no device.
int cuda_device_count();
// cudaMalloc/cudaFree on options.device.
std::shared_ptr<MemorySource> make_cuda_source(const SourceOptions& options);
// cuMemAddressReserve/cuMemCreate/cuMemMap/cuMemSetAccess/cuMemUnmap, the driver loaded with
// dlopen("libcuda.so.1") at run time; granularity from cuMemGetAllocationGranularity.
std::shared_ptr<MemorySource> make_cuda_vmm_source(const SourceOptions& options);
// cudaEvent-based StreamModel (StreamId = cudaStream_t as an integer) on options.device.
std::shared_ptr<StreamModel> make_cuda_streams(int device);
// Makes "cuda" and "cuda-vmm" known to make_source (Note [Sources by name] in source_factory.cpp).
// Idempotent; call it before the first make_source of either name.
void register_cuda_sources();

}  // namespace memcomm::alloc
