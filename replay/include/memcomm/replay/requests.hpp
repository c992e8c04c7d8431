// The request sequence a replay feeds to an allocator policy, rebuilt from a trace file.
//
// Note [Rebuilding requests]: a PyTorch snapshot's trace is a ring buffer, so it often starts in the
// middle of a run. Per device we therefore:
//  * turn `alloc` into an allocation and `free_completed` into its free (free_requested only marks
//    the user's free; the block is reusable once free_completed happens);
//  * treat a free of an address the trace never allocated as a block that predates the trace: it is
//    allocated (with the freed event's size) before the first traced request;
//  * treat an end-state block that is still active, at an address no alloc/free event of the trace
//    touches, as predating the trace too: allocated up front and never freed;
//  * skip `oom` (a failed request; PyTorch gave nothing), `snapshot` markers, unknown actions and the
//    segment_* events, which describe PyTorch's own decisions and only feed the `recorded` figures.
// Pre-trace blocks are allocated in address order, which is the order a fresh caching allocator
// would most likely have handed them out.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "memcomm/snapshot/snapshot.hpp"

namespace memcomm::replay {

struct Request {
  enum class Op : std::uint8_t {
    alloc,  // allocate `size` bytes on `stream`; `block` names it for the free
    free,   // free block `block`
  };
  std::uint64_t size = 0;   // requested bytes (alloc only)
  std::int64_t stream = 0;  // stream of the allocation
  std::uint32_t block = 0;  // dense block id, 0..DeviceRequests::block_count-1
  Op op = Op::alloc;
};

// What the traced allocator itself did on this device (PyTorch's in a snapshot, memcomm's in an
// .mct trace), from segment events and the end state. Reserved bytes are backed bytes: an
// expandable segment's virtual reservation counts for nothing, its maps do (Note [Reserved bytes of
// expandable segments] in request_builder.cpp).
struct RecordedReserved {
  bool known = false;                  // end-state segments or segment events exist for the device
  std::uint64_t at_start = 0;          // reserved bytes before the first event (end minus net segment changes)
  std::uint64_t peak = 0;              // largest reserved bytes during the trace
  std::uint64_t at_end = 0;            // end-state segment bytes
  std::uint64_t source_allocs = 0;     // segment_alloc + segment_map events (virtual reservations excluded)
  std::uint64_t source_frees = 0;      // segment_free + segment_unmap events (virtual releases excluded)
  bool expandable = false;             // the device used expandable segments
  // The segments never held the live blocks (Note [Segments that cannot hold the blocks] in
  // requests.cpp): no `recorded` figures for the device.
  bool contradicted = false;
  bool starts_empty() const { return known && at_start == 0; }
};

// DeviceRequests::rank of a trace format that records no rank (PyTorch snapshots).
inline constexpr int kNoRank = -1;

struct DeviceRequests {
  int rank = kNoRank;                    // the rank whose device this is (.mct traces); kNoRank if unknown
  int device = 0;                        // device index (prof::kHostDevice = host memory)
  std::vector<Request> requests;         // pre-trace allocations first, then the trace in order
  std::uint32_t block_count = 0;         // distinct blocks (ids are 0..block_count-1)
  std::uint64_t preexisting_blocks = 0;  // blocks that predate the trace (Note [Rebuilding requests])
  std::uint64_t preexisting_bytes = 0;   // their requested bytes
  std::uint64_t peak_live = 0;           // largest sum of live requested bytes, pre-trace blocks included
  std::uint64_t trace_events = 0;        // events of this device in the file (all actions)
  std::uint64_t trace_ooms = 0;          // `oom` events in the file
  std::uint64_t anomalies = 0;           // events that contradict each other (alloc over a live address...)
  RecordedReserved recorded;
  // `recorded` is a torch.profiler memory profile's Total Reserved (a .json trace, or an .mct that
  // memcomm-trace convert made of one), not the segment events of the allocator that wrote the file.
  bool recorded_from_profile = false;

  // Allocations the trace itself made, pre-trace blocks not counted. Without any (an end state alone,
  // or a trace of frees) a replay only packs the live blocks in an order the run never had: the
  // policies cannot be compared on it.
  std::uint64_t traced_allocs() const;
};

struct TraceRequests {
  std::string file;
  std::string format;                    // "pytorch-snapshot", "mct" or "torch-profiler"
  snapshot::AllocatorSettings settings;  // as recorded (defaults when absent)
  std::vector<DeviceRequests> devices;   // devices with at least one event or end-state segment, by (rank, device)
  double load_seconds = 0;               // reading + decoding the file
  // Non-empty when the file was cut short (a killed writer) and read up to its last complete part:
  // what was recovered and what was ignored, in the reader's words. Not an error.
  std::string recovery;
  // What the replay had to assume, one line per device, e.g. a torch.profiler trace's bytes live
  // before its first event (Note [Replaying a torch.profiler memory profile] in kineto_trace.cpp).
  std::vector<std::string> notes;
};

// Rebuilds every device's request sequence from a decoded snapshot.
TraceRequests build_requests(const snapshot::Snapshot& snap);

struct LoadProgress {
  // Called while a large file is decoded: (bytes done, bytes total).
  void (*callback)(std::uint64_t done, std::uint64_t total, void* user) = nullptr;
  void* user = nullptr;
};

// Reads a trace file of any supported format, recognised by its first bytes:
//  * PyTorch memory snapshot pickle (starts with the PROTO opcode 0x80);
//  * memcomm's own .mct trace (magic "MEMCTRC\x1A"), when the build has the profiler library; each
//    device then carries its rank;
//  * a torch.profiler (Kineto) trace recorded with profile_memory=True (gzip, or JSON starting with
//    '{'): its [memory] events; each device carries the trace's rank.
// See Note [Trace formats] in requests.cpp.
// Throws snapshot::ReadError (file + byte offset) on bad or unsupported input.
TraceRequests load_trace(const std::string& path, const LoadProgress& progress = {});

}  // namespace memcomm::replay
