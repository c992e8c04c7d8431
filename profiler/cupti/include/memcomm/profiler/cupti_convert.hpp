// Conversion of CUPTI activity records into memcomm events.
//
// Kept apart from the capture (cupti_capture.hpp) so it is a deterministic function of the records
// it is fed: the unit tests hand it CUpti_Activity* structs built by hand, with no GPU and no CUPTI
// session. Only CUPTI's headers are needed here, not libcupti.
//
// Note [CUPTI record mapping]
//   CONCURRENT_KERNEL (CUpti_ActivityKernel10) -> ComputeEvent Kernel; arg = demangled name, sub = 1
//       for communication kernels (the trace layer's CommKernelRule, whose default pattern every
//       kernel reader shares: NCCL's ncclDevKernel_*, its one-rank reduction), so the analysis counts
//       them as communication.
//   MEMCPY (CUpti_ActivityMemcpy6)  -> ComputeEvent Memcpy; sub = CopyKind, arg = encode_bytes32.
//   MEMSET (CUpti_ActivityMemset4)  -> ComputeEvent Memset; arg = encode_bytes32.
//   MEMORY2 (CUpti_ActivityMemory4) -> MemBlockEvent. Plain driver allocations (cudaMalloc, cuMemAlloc,
//       pinned host memory) become SegmentAlloc / SegmentFree: memory the process took from the driver.
//       Allocations served from a memory pool (cudaMallocAsync) become Alloc / FreeCompleted: blocks
//       handed out of memory that is already reserved, and their release (cudaFreeAsync, at call
//       time) becomes FreeRequested: the stream has not reached the free yet. Host memory (pinned,
//       pageable) gets device = kHostDevice, or is skipped with set_skip_host_memory(true); the memory
//       curves fold one device per rank (Note [Memory curves from block events] in allocator_fold.hpp).
//       Module globals (DEVICE_STATIC, MANAGED_STATIC) are skipped: Note [Module globals are not
//       segments].
//   SYNCHRONIZATION (CUpti_ActivitySynchronization2) -> ComputeEvent Sync on the pseudo host thread
//       kCudaSyncThread, named after the call (cudaStreamSynchronize...).
//   EXTERNAL_CORRELATION -> no event. It maps a CUPTI correlation id to the external id that the
//       capture pushed for the innermost recorder phase (make_external_id). Kernels, memcpys and
//       memsets with that correlation id, before or after it (Note [Spans before their
//       correlation]), are charged to the phase in PhaseAttribution.
//   RUNTIME, DRIVER (API records) -> nothing: CUPTI writes EXTERNAL_CORRELATION records only beside
//       them (Note [Phase attribution] in cupti_capture.cpp).
//   MARKER (CUpti_ActivityMarker2, NVTX) -> RangeBegin / RangeEnd with Phase::Custom and the marker's
//       message, on thread kNvtxThreadBase | (OS tid & 0x7FFF). Markers in the "memcomm" NVTX domain
//       are skipped: they are our own phases, mirrored by the NVTX bridge, and are in the trace already.
//
// Note [Module globals are not segments]
// CUPTI reports the __device__ (and __managed__) variables of each module the driver loads as MEMORY2
// allocations of kind DEVICE_STATIC (MANAGED_STATIC). With lazy module loading that is a few more
// whenever a kernel runs for the first time, and they are never released. Nobody allocated them, and
// as segments they would count as calls to the driver and as reserved memory. The first GPU traces
// (bench/results/gpu-20261204-2) held 1,000-1,900 device "segments" of 1 to 150 bytes at 256-byte
// strides, none released, beside the allocator's few dozen, which fits: memcomm-trace info's memory
// events by device tells on the next GPU check.
// New device streams and marker threads first produce a MetaEvent (StreamName / ThreadName) naming
// them; the capture sends those through Recorder::record_rare so they are never dropped.
// Timestamps are used as they are: the capture registers now_ns() as CUPTI's timestamp callback
// (Note [CUPTI clock] in cupti_capture.cpp), and clock_offset_ns covers the fallback.
#pragma once

#include <cupti_activity.h>

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "memcomm/trace/comm_kernels.hpp"
#include "memcomm/trace/event.hpp"

namespace memcomm::prof {

// Host pseudo-threads for events that CUPTI reports without a recorder thread.
inline constexpr uint16_t kCudaSyncThread = 0xFFFE;   // Sync spans
inline constexpr uint16_t kNvtxThreadBase = 0x8000;   // NVTX markers: kNvtxThreadBase | (tid & 0x7FFF)

// External correlation ids pushed for recorder phases: top byte = Phase, low 56 bits = the range id
// (the step number for Step/MicroStep).
inline uint64_t make_external_id(Phase p, uint64_t id) {
  return (uint64_t(p) << 56) | (id & 0x00FF'FFFF'FFFF'FFFFull);
}
inline Phase external_id_phase(uint64_t ext) {
  const auto p = uint8_t(ext >> 56);
  return p < uint8_t(Phase::Count) ? Phase(p) : Phase::Custom;
}
inline uint64_t external_id_range(uint64_t ext) { return ext & 0x00FF'FFFF'FFFF'FFFFull; }

// "_Z..." names demangled; anything else returned unchanged.
std::string demangle(const char* name);
CopyKind copy_kind_from_cupti(uint32_t cupti_memcpy_kind);
const char* sync_type_name(uint32_t cupti_sync_type);

// GPU work charged to the recorder phase that was innermost when it was launched.
struct PhaseAttribution {
  std::array<uint64_t, size_t(Phase::Count)> gpu_ns{};   // summed kernel/memcpy/memset durations
  std::array<uint64_t, size_t(Phase::Count)> spans{};    // how many spans
  uint64_t unattributed_spans = 0;                       // launched outside any phase
};

struct ConvertStats {
  uint64_t records = 0;      // records fed to convert()
  uint64_t events = 0;       // events produced (metadata included)
  uint64_t ignored = 0;      // kinds we do not convert, and our own NVTX markers
  uint64_t incomplete = 0;   // spans with no valid timestamps (forced flush before completion)
  uint64_t comm_kernels = 0; // kernels flagged as communication (CommKernelRule)
};

class ActivityConverter {
 public:
  using Intern = std::function<StringId(std::string_view)>;
  // `intern` turns names into StringIds (the capture passes Recorder::intern).
  explicit ActivityConverter(Intern intern, int64_t clock_offset_ns = 0);

  // Appends the events for one record to `out` (none, one, or a metadata record then one).
  // Returns the number appended.
  size_t convert(const CUpti_Activity& record, std::vector<Event>& out);

  // Added to every CUPTI timestamp (0 when CUPTI uses our clock).
  void set_clock_offset(int64_t ns) { clock_offset_ns_ = ns; }
  // Drop MEMORY2 records of host memory (counted as ignored).
  void set_skip_host_memory(bool skip) { skip_host_memory_ = skip; }
  const ConvertStats& stats() const { return stats_; }
  // GPU time charged per phase so far; spans still waiting for their correlation are unattributed.
  PhaseAttribution attribution() const;
  // Bit d set: a span or pool allocation on device d (< 64) was seen since reset().
  uint64_t devices_seen() const { return devices_seen_; }
  // Forgets names, streams and correlations (CUPTI's name pointers die with cuptiFinalize).
  void reset();

 private:
  struct KernelName {
    StringId id;
    bool comm;  // a communication kernel (comm_kernels_)
  };
  struct OpenMarker {
    StringId name;
    uint16_t thread;
  };
  int64_t ts(uint64_t cupti_ts) const { return int64_t(cupti_ts) + clock_offset_ns_; }
  // One record kind each; they return the events appended (Note [CUPTI record mapping]).
  size_t kernel(const CUpti_Activity& record, std::vector<Event>& out);
  size_t memory(const CUpti_Activity& record, std::vector<Event>& out);
  size_t synchronization(const CUpti_Activity& record, std::vector<Event>& out);
  void external_correlation(const CUpti_Activity& record);
  size_t marker(const CUpti_Activity& record, std::vector<Event>& out);
  uint8_t stream_index(uint32_t device, uint32_t stream, std::vector<Event>& out, size_t& n);
  uint16_t marker_thread(uint32_t os_tid, std::vector<Event>& out, size_t& n);
  struct Waiting {  // spans of one correlation id that came before its external id
    uint64_t gpu_ns = 0, spans = 0;
  };
  void attribute(uint32_t corr, uint64_t dur_ns);
  void charge(uint64_t external_id, uint64_t dur_ns, uint64_t spans);
  size_t span(EventKind k, uint64_t start, uint64_t end, uint32_t device, uint32_t stream, uint32_t corr,
              uint32_t arg, uint8_t sub, std::vector<Event>& out);

  Intern intern_;
  CommKernelRule comm_kernels_;
  int64_t clock_offset_ns_;
  bool skip_host_memory_ = false;
  std::unordered_map<const char*, KernelName> kernel_names_;   // CUPTI shares one pointer per kernel
  std::unordered_map<uint64_t, uint8_t> streams_;              // (device << 32 | stream) -> index
  std::unordered_map<uint32_t, uint16_t> marker_threads_;      // OS tid -> pseudo thread
  std::unordered_map<uint32_t, OpenMarker> open_markers_;      // marker id -> its start
  std::unordered_map<uint32_t, uint64_t> external_;            // correlation id -> external id
  std::unordered_map<uint32_t, Waiting> waiting_;              // correlation id -> spans not charged yet
  std::array<StringId, 5> sync_names_{};
  bool sync_thread_named_ = false;
  uint64_t devices_seen_ = 0;
  ConvertStats stats_;
  PhaseAttribution attribution_;
};

}  // namespace memcomm::prof
