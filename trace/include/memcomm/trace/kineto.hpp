// The torch.profiler (Kineto) Chrome-trace reader: `*.pt.trace.json[.gz]` into one RankTrace.
//
//   KinetoTrace k = read_kineto("rank0.pt.trace.json.gz");
//   k.trace.events ...        // memcomm events on the trace's own clock (ns)
//   k.info.categories ...     // what the file held, what was kept generic, what was skipped
//
// TraceSet::load() calls it for any gzip or JSON input (is_kineto_candidate), so every
// tool that opens traces opens these too.
//
// Note [Kineto events as memcomm events]
// A Kineto trace is converted once, on load, into the event model every tool already reads:
//   cpu_op, user_annotation, python_function, gpu_user_annotation and categories this reader does
//     not know  -> RangeBegin/RangeEnd (Phase::Custom; a user_annotation, record_function's label
//     around code, Phase::Annotation; "ProfilerStep#N" -> Phase::Step, id N).
//     Host ranges nest LIFO per (pid, tid) thread: Note [Host spans that overlap]. GPU annotations
//     live on threads kGpuAnnotationThreadBase | stream index.
//   cuda_runtime, cuda_driver (and the 2021 schema's "Runtime") -> Launch on the host thread, with
//     the correlation id; names with "Synchronize" -> Sync.
//   kernel, gpu_memcpy, gpu_memset, cuda_sync -> Kernel, Memcpy (CopyKind from the name), Memset and
//     Sync device spans, per (device, stream), with the correlation id; so does an event of a
//     category this reader does not know that carries a stream (MTIA's mtia_ccp_events -> Kernel;
//     KinetoInfo::device_generic counts them), the others becoming generic ranges. A kernel whose name matches
//     the communication-kernel pattern (KinetoOptions::comm_kernels) is flagged (ComputeEvent::sub
//     = 1) and also becomes a collective: Note [Collectives from communication kernels].
//   [memory] instant events -> Alloc (Bytes > 0) or FreeRequested + FreeCompleted (Bytes < 0) at
//     Addr on the device ("Device Type" 0 is the host), plus MemSample Allocated and Reserved
//     from "Total Allocated" / "Total Reserved". Events without Addr (the 2021 schema): Note
//     [Memory events without addresses] in src/kineto/size_pairing.hpp.
//   ph "C" counters -> Counter per numeric arg; flows (ac2g, fwdbwd) are counted, not stored: the
//     correlation id on both ends already links a launch to its GPU span.
//   distributedInfo -> Meta Rank and WorldSize (rank 0 when absent, as HTA does); deviceProperties
//     -> DeviceName and a DeviceTotal sample; process_name -> ProcessName; thread names, streams
//     and devices -> ThreadName/StreamName; baseTimeNanoseconds -> StartTime.
// Timestamps are microseconds in the file (floats in newer traces, relative to
// baseTimeNanoseconds; displayTimeUnit only says how to display them). They become integer
// nanoseconds as Note [Microseconds to nanoseconds] (src/kineto/raw_event.hpp) says.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "memcomm/trace/comm_kernels.hpp"
#include "memcomm/trace/trace_set.hpp"

namespace memcomm::prof {

// RangeEvent::thread of GPU-side annotation lanes (gpu_user_annotation): this bit | stream index.
inline constexpr uint16_t kGpuAnnotationThreadBase = 0x4000;
// RangeEvent::thread of the lanes of python_function frames (with_stack=True): this bit | lane
// index. They are the stack the operators ran under, not work of their own: a CPU trace's compute
// leaves them out (Note [Breakdown definitions]).
inline constexpr uint16_t kPythonFrameThreadBase = 0x8000;

// The MetaKey::Tag every converted trace carries. Such a trace starts mid-run (Note [Memory curves
// from block events] in allocator_fold.hpp): its [memory] totals, not the fold of its blocks, are
// its memory curves.
inline constexpr const char* kKinetoSourceTag = "source=torch.profiler";

struct KinetoOptions {
  std::string comm_kernels = kDefaultCommKernels;  // refused as comm_kernels_problem says
};

// What one file held and what became of it: `memcomm-trace info` prints it.
struct KinetoInfo {
  bool gzip = false;
  uint64_t json_bytes = 0;       // uncompressed JSON bytes consumed
  uint64_t trace_events = 0;     // elements of traceEvents read
  uint64_t converted = 0;        // memcomm events made from them
  std::map<std::string, uint64_t> categories;  // per "cat" ("<none>" without one)
  std::map<std::string, uint64_t> generic;     // categories not known here, kept as generic ranges
  std::map<std::string, uint64_t> device_generic;  // categories not known here whose events carry a stream:
                                                   // kept as kernels on it (MTIA's mtia_ccp_events)
  std::map<std::string, uint64_t> skipped;     // reason -> events not converted
  uint64_t flows = 0;            // flow events (ph s/t/f)
  uint64_t clamped_ranges = 0;   // host ranges cut to end inside their parent
  uint64_t saturated_durations = 0;  // spans longer than ComputeEvent can hold (kMaxDuration)
  uint64_t comm_kernels = 0;     // kernels that became collectives
  uint64_t host_collectives = 0; // host spans that became collectives (Gloo's "gloo:all_reduce")
  uint64_t data_waits = 0;       // DataLoader __next__ spans read as data wait
  uint64_t memory_events = 0;    // [memory] events converted
  uint64_t memory_events_without_addr = 0;  // of them, paired by size (Note [Memory events without addresses])
  bool float_timestamps = false; // sub-microsecond digits present
  std::string display_time_unit; // "ns", "ms", "" when absent
  int64_t base_time_ns = 0;      // baseTimeNanoseconds (0 when absent: timestamps are Unix us)
  int schema_version = 0;
  bool rank_given = false;       // distributedInfo named the rank (else the trace counts as rank 0)
  bool truncated = false;        // the file ended inside traceEvents
  uint64_t truncated_at = 0;     // JSON byte offset just after the last complete event
  std::string truncation;        // the warning, empty when not truncated
};

struct KinetoTrace {
  RankTrace trace;   // events unsorted (TraceSet::finish sorts), strings, rank, world size, source
  KinetoInfo info;
};

// Reads a .json or .json.gz torch.profiler trace (gzip is inflated on another thread). Throws
// TraceError naming the file: "not a torch.profiler trace" when the JSON is not one, or where the
// JSON or gzip stream is broken. A file cut short is not an error: info.truncated says where it
// stopped, and everything before that is kept.
KinetoTrace read_kineto(const std::string& path, const KinetoOptions& opt = {});
// The same over an uncompressed JSON buffer (fuzzing, tests); `name` is used in messages.
KinetoTrace read_kineto_buffer(std::string_view json, const std::string& name, const KinetoOptions& opt = {});

// True when the file is gzip or starts (after white space) with '{' or '[': JSON, handed to
// read_kineto, which says clearly when it is not a torch.profiler trace. Anything else (the .mct
// magic, an empty file, other bytes) goes to the .mct reader, which names what it found.
bool is_kineto_candidate(const std::string& path);

// One line per fact of `info`, for `memcomm-trace info`.
std::string kineto_info_text(const KinetoInfo& info);

}  // namespace memcomm::prof
