// Note [Collectives from communication kernels]
// A torch.profiler trace has no collective records of its own: the collective is the NCCL (or
// RCCL, DeepEP, NVSHMEM) kernel. Each communication kernel becomes CollStart at the kernel's start
// and CollEnd at its end, plus CollEnqueue at the start of the host call that launched it (same
// correlation id) when the trace has it. What the kernel's args say (torch 2.x writes
// "Collective name", "In/Out msg nelems", "dtype", "Group size", "Process Group Name/Ranks") gives
// op, bytes and the communicator; without them the op and dtype come from the kernel's name
// (ncclKernel_AllReduce_RING_LL_Sum_float, ncclDevKernel_AllGather_RING_LL) and the bytes are 0
// (unknown). bytes = max(in, out) elements x dtype size, which is nccl-tests' "size" for every op
// (the gathered total for all_gather, the input for reduce_scatter).
// The communicator is the process group when named, else the kernel's stream id; its CommInfo hash is
// a hash of that name, so the same group matches across ranks whatever order each rank met its
// groups in. The sequence number is the kernel's place, in start order, among its communicator's
// kernels in this file. Ranks profiled over the same steps therefore agree; windows that start at
// different collectives on different ranks do not, and their matches are off by the difference.
#pragma once

#include <cstdint>
#include <vector>

#include "interner.hpp"
#include "memcomm/trace/event.hpp"

namespace memcomm::prof::kineto {

// The stream id of host collectives (Gloo's, Note [Phases a torch.profiler trace names]): one
// communicator for all of them, apart from every GPU stream's.
inline constexpr int64_t kHostCollectiveStream = -2;

struct CommKernel {
  int64_t begin, end;
  uint32_t corr;
  StringId kernel, collective, dtype, pg_name, pg_ranks;
  int64_t in_nelems, out_nelems, group_size;
  int64_t stream_id;  // Kineto's stream id (the same on every rank for the same role)
  uint8_t device, stream;
};

// Appends the collectives' events and their communicators' CommInfo. `events` is also searched
// for the Launch events that enqueued them.
void emit_collectives(const std::vector<CommKernel>& kernels, const Interner& strings, uint32_t rank,
                      uint32_t world_size, std::vector<Event>& events);

CollOp collective_op(std::string_view collective_arg, std::string_view kernel_name);
// The element type: the host annotation's dtype argument, else a reduction kernel's name.
DType collective_dtype(std::string_view dtype_arg, std::string_view kernel_name, CollOp op);

}  // namespace memcomm::prof::kineto
