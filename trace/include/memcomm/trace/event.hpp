// The memcomm event model: the data contract between producers (trainer, allocator observers,
// CUPTI capture) and consumers (trace files, memcomm-trace, the viewer, the tuner).
//
// Note [Fixed 24-byte records]
// Every event is one 24-byte record: an int64 timestamp (ns, CLOCK_MONOTONIC of the recording
// process), a kind byte, and 15 bytes whose meaning depends on the kind. A fixed size keeps the
// per-thread rings, the file chunks and the reader's iteration trivial (an array of Event), and
// meets the "<= 24 B/event before compression" target exactly. Variable-length data (names) lives
// in a string table: records carry a 32-bit StringId. Per-kind views (AllocEvent, KernelEvent...)
// are packed structs of exactly 24 bytes with the same first 9 bytes; convert with Event::as<T>()
// and Event::from(view). Never reorder fields or renumber enums: bump kEventModelVersion instead.
//
// Note [Merging ranks]
// Timestamps are the local CLOCK_MONOTONIC of each rank. A MetaKey::ClockOffset record gives the
// nanoseconds to ADD to that rank's timestamps to put them on the reference timeline (rank 0's
// clock); ranks that read one clock record 0 (Note [One clock per host] in clock.hpp), others a
// rendezvous estimate (Note [Clock offset from round trips]). Collectives carry a communicator
// index and a per-communicator sequence number, so the same collective is found on every rank by
// (comm, seq) — the key used for cross-rank flows, skew and straggler analysis.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <type_traits>

namespace memcomm::prof {

// Version of the event record layouts (and of the enums below). Readers refuse other versions.
// Version 2 codes ComputeEvent durations (Note [Durations in 32 bits]); readers take version 1 files and
// re-code their durations as they read them (TraceReader).
inline constexpr uint16_t kEventModelVersion = 2;
inline constexpr uint16_t kFirstEventModelVersion = 1;  // the oldest that TraceReader reads

// Index into the trace's string table; 0 is the empty string / "no name".
using StringId = uint32_t;
inline constexpr StringId kNoString = 0;

enum class EventKind : uint8_t {
  Invalid = 0,
  // --- memory (MemBlockEvent unless noted) ---
  Alloc = 1,            // a block handed to the user
  FreeRequested = 2,    // the user released a block (it may still be in use by a stream)
  FreeCompleted = 3,    // the block is really reusable (stream events completed)
  SegmentAlloc = 4,     // the allocator got memory from the driver (cudaMalloc, pool growth)
  SegmentFree = 5,      // ... and gave it back
  SegmentMap = 6,       // expandable segments: pages mapped into a reserved range
  SegmentUnmap = 7,     // ... and unmapped
  Oom = 8,              // OomEvent: an allocation failed
  MemSample = 9,        // MemSampleEvent: periodic allocator statistics, one metric per record
  // --- communication (CollectiveEvent) ---
  CollEnqueue = 16,     // the host issued the collective (e.g. from a DDP bucket hook)
  CollStart = 17,       // it began executing (GPU: NCCL kernel start; CPU/Gloo: work started)
  CollEnd = 18,         // it finished
  // --- compute (ComputeEvent: complete spans with a duration) ---
  Kernel = 32,          // arg = kernel name StringId
  Memcpy = 33,          // arg = bytes (see encode_bytes32), sub = CopyKind
  Memset = 34,          // arg = bytes (see encode_bytes32)
  Launch = 35,          // host-side API call that launched work; corr links it to the GPU span
  Sync = 36,            // host/stream synchronization wait; arg = name StringId
  // --- ranges (RangeEvent) ---
  RangeBegin = 48,      // NVTX push or a Phase scope opening
  RangeEnd = 49,        // the matching pop (LIFO per thread)
  // --- counters (CounterEvent) ---
  Counter = 64,         // a named double value (loss, samples/s, ...)
  // --- metadata and bookkeeping ---
  Meta = 80,            // MetaEvent: rank, world size, host, clock offset, thread names...
  CommInfo = 81,        // CommInfoEvent: a communicator's size and this rank's place in it
  Drops = 82,           // DropEvent: events lost because a thread's ring was full
};

// Broad families of kinds; handy for per-kind counts and filtering.
enum class EventFamily : uint8_t { Invalid, Memory, Communication, Compute, Range, Counter, Metadata };

constexpr EventFamily family_of(EventKind k) {
  const auto v = static_cast<uint8_t>(k);
  if (v >= 1 && v <= 9) return EventFamily::Memory;
  if (v >= 16 && v <= 18) return EventFamily::Communication;
  if (v >= 32 && v <= 36) return EventFamily::Compute;
  if (v == 48 || v == 49) return EventFamily::Range;
  if (v == 64) return EventFamily::Counter;
  if (v >= 80 && v <= 82) return EventFamily::Metadata;
  return EventFamily::Invalid;
}
constexpr bool is_known_kind(EventKind k) { return family_of(k) != EventFamily::Invalid; }
// The kinds a MemBlockEvent describes (Alloc ... SegmentUnmap), and of those the segment ones.
constexpr bool is_mem_block_kind(EventKind k) { return k >= EventKind::Alloc && k <= EventKind::SegmentUnmap; }
constexpr bool is_segment_kind(EventKind k) { return k >= EventKind::SegmentAlloc && k <= EventKind::SegmentUnmap; }
const char* kind_name(EventKind k);      // "alloc", "coll_end", ... ("unknown" otherwise)
const char* family_name(EventFamily f);  // "memory", "communication", ...

// Training phases. Scopes of these kinds are also NVTX ranges (through the range hooks).
enum class Phase : uint8_t {
  Custom = 0,      // a plain NVTX range / user range: the name says what it is
  Step = 1,        // one optimizer step (id = global step number)
  MicroStep = 2,   // one micro-batch inside a step with gradient accumulation
  Forward = 3,
  Backward = 4,
  Optimizer = 5,
  DataWait = 6,    // waiting for the data loader
  Eval = 7,
  Checkpoint = 8,
  Comm = 9,        // host-side time spent driving communication (e.g. a blocking Gloo call)
  Annotation = 10, // a label put around code (torch.profiler's record_function): no work of its own
  Count
};
const char* phase_name(Phase p);
// The phase a range's name says (phase_name's inverse, any case, '-' for '_', and the short forms
// people give their own ranges: fwd, bwd, optim, data); Custom for any other name.
Phase phase_from_name(std::string_view name);

enum class CollOp : uint8_t {
  AllReduce = 0, Broadcast = 1, Reduce = 2, AllGather = 3, ReduceScatter = 4, AllToAll = 5,
  Send = 6, Recv = 7, Barrier = 8, Gather = 9, Scatter = 10, Unknown = 255
};
const char* coll_op_name(CollOp op);

enum class DType : uint8_t {
  Unknown = 0, F32 = 1, F16 = 2, BF16 = 3, F64 = 4, I8 = 5, U8 = 6, I32 = 7, I64 = 8, F8E4M3 = 9, F8E5M2 = 10
};
const char* dtype_name(DType d);
int dtype_size(DType d);  // bytes per element, 0 when unknown

// NCCL's algorithm and protocol when known (CollectiveEvent::algo_proto packs both).
enum class CollAlgo : uint8_t { Unknown = 0, Ring = 1, Tree = 2, CollNet = 3, Nvls = 4, NvlsTree = 5, Pat = 6 };
enum class CollProto : uint8_t { Unknown = 0, Simple = 1, LL = 2, LL128 = 3 };

enum class CopyKind : uint8_t { Unknown = 0, HtoD = 1, DtoH = 2, DtoD = 3, HtoH = 4, PtoP = 5 };
const char* copy_kind_name(CopyKind c);

// Allocator statistics carried by MemSampleEvent.
enum class MemMetric : uint8_t {
  Allocated = 0,       // bytes in blocks handed to users
  Reserved = 1,        // bytes in segments obtained from the driver
  Active = 2,          // allocated + freed-but-not-yet-reusable (stream-ordered frees pending)
  LargestFree = 3,     // largest free block, bytes
  Fragmentation = 4,   // parts per million: 1 - largest_free / (reserved - allocated)
  InactiveSplit = 5,   // bytes in free blocks split off larger segments
  DeviceTotal = 6,     // device capacity, bytes
  Count
};
const char* mem_metric_name(MemMetric m);

// Well-known keys of MetaEvent. Values go in `value`, or in `str` for text.
enum class MetaKey : uint8_t {
  Rank = 0, WorldSize = 1, LocalRank = 2, Device = 3,   // value
  Host = 4, ProcessName = 5,                             // str
  Pid = 6,                                               // value
  ClockOffset = 7,     // value: ns to add to this rank's timestamps (Note [Merging ranks])
  ThreadName = 8,      // thread = thread index, str = name
  StreamName = 9,      // thread = stream index, str = name
  DeviceName = 10,     // thread = device index, str = name
  Tag = 11,            // str = "key=value" free-form run annotation
  StartTime = 12,      // value: CLOCK_REALTIME ns, read at this event's ts (recording start); a
                       // torch.profiler trace's is its timestamps' origin (wall_minus_timeline)
  Count
};
const char* meta_key_name(MetaKey k);

// Stream/device/thread sentinels.
inline constexpr uint8_t kHostDevice = 0xFF;   // "device" fields: host memory / CPU
inline constexpr uint16_t kNoBucket = 0xFFFF;

#pragma pack(push, 1)

// The generic record. Consumers switch on `kind` and view the payload through as<T>().
struct Event {
  int64_t ts;         // ns, CLOCK_MONOTONIC of the recording rank (Note [Merging ranks])
  EventKind kind;     // which view below applies
  uint8_t payload[15];  // kind-specific; never read directly

  template <class T>
  T as() const {
    static_assert(sizeof(T) == 24 && std::is_trivially_copyable_v<T>);
    T out;
    std::memcpy(&out, this, sizeof(T));
    return out;
  }
  template <class T>
  static Event from(const T& view) {
    static_assert(sizeof(T) == 24 && std::is_trivially_copyable_v<T>);
    Event e;
    std::memcpy(&e, &view, sizeof(T));
    return e;
  }
};

// Alloc, FreeRequested, FreeCompleted, SegmentAlloc/Free/Map/Unmap.
// Address and size are 48-bit (user-space and CUDA UVA addresses fit; sizes up to 256 TiB).
struct MemBlockEvent {
  int64_t ts;          // ns
  EventKind kind;      // one of the memory block kinds
  uint8_t device;      // device index, kHostDevice for host memory
  uint8_t stream;      // producer's small stream index (StreamName metadata names it)
  uint8_t category;    // blocks: MemCategory, when the producer knows it; segments: kSegment* flags
  uint32_t size_lo;    // low 32 bits of the size in bytes
  uint64_t addr_size_hi;  // bits 0..47: address; bits 48..63: size bits 32..47

  // A SegmentAlloc/SegmentFree of a reserved virtual range with no memory behind it (Note [Virtual
  // reservations] in virtual_reservations.hpp). False in traces from producers that do not flag it.
  bool virtual_range() const;

  uint64_t addr() const { return addr_size_hi & 0xFFFF'FFFF'FFFFull; }
  uint64_t size() const { return uint64_t(size_lo) | ((addr_size_hi >> 48) << 32); }
  void set_addr_size(uint64_t a, uint64_t s) {
    size_lo = uint32_t(s);
    addr_size_hi = (a & 0xFFFF'FFFF'FFFFull) | (((s >> 32) & 0xFFFF) << 48);
  }
};

// MemBlockEvent::category of segment events: flags. The range is a virtual reservation (an
// expandable segment's); its SegmentMap events carry the memory. The high bit,
// which no MemCategory uses, so a producer that labels a segment with a category is not misread.
inline constexpr uint8_t kSegmentVirtualRange = 0x80;
inline bool MemBlockEvent::virtual_range() const {
  return (kind == EventKind::SegmentAlloc || kind == EventKind::SegmentFree) && (category & kSegmentVirtualRange);
}

// What a block holds, when the producer knows (the viewer colours by it).
enum class MemCategory : uint8_t {
  Unknown = 0, Parameter = 1, Gradient = 2, OptimizerState = 3, Activation = 4, Temporary = 5,
  CommBuffer = 6, Input = 7
};
const char* mem_category_name(MemCategory c);

struct OomEvent {
  int64_t ts;
  EventKind kind;      // Oom
  uint8_t device;
  uint8_t stream;
  uint8_t pad;
  uint32_t pad2;
  uint64_t requested;  // bytes the failed request asked for
};

struct MemSampleEvent {
  int64_t ts;
  EventKind kind;      // MemSample
  uint8_t device;
  MemMetric metric;
  uint8_t pad;
  uint32_t pad2;
  uint64_t value;      // bytes, or ppm for Fragmentation
};

// CollEnqueue / CollStart / CollEnd. Matching key across ranks: (comm, seq).
struct CollectiveEvent {
  int64_t ts;
  EventKind kind;      // CollEnqueue, CollStart or CollEnd
  CollOp op;
  DType dtype;
  uint8_t algo_proto;  // low 4 bits CollAlgo, high 4 bits CollProto
  uint32_t seq;        // per-communicator sequence number, from 0 (same on every rank)
  uint8_t comm;        // communicator index (CommInfoEvent describes it)
  uint16_t bucket;     // DDP bucket id, kNoBucket when not a gradient bucket
  uint8_t bytes_hi;    // bits 32..39 of the message size
  uint32_t bytes_lo;   // bits 0..31: message size in bytes (nccl-tests' "size"), up to 1 TiB

  uint64_t bytes() const { return uint64_t(bytes_lo) | (uint64_t(bytes_hi) << 32); }
  void set_bytes(uint64_t b) { bytes_lo = uint32_t(b); bytes_hi = uint8_t(b >> 32); }
  CollAlgo algo() const { return CollAlgo(algo_proto & 0xF); }
  CollProto proto() const { return CollProto(algo_proto >> 4); }
  void set_algo_proto(CollAlgo a, CollProto p) { algo_proto = uint8_t(uint8_t(a) | (uint8_t(p) << 4)); }
};

// Note [Durations in 32 bits]
// A span's duration is exact to the nanosecond below 2^31 ns (2.1 s), where nearly every kernel, copy
// and launch lies. Longer spans are rare but the ones a user looks for: a host Sync waiting on a hung
// collective until the watchdog fires (10 minutes by default), or a torch.profiler CPU span over a
// checkpoint. They keep microseconds below 2^30 us (17.9 minutes) and milliseconds above, up to 2^30 ms
// (12.4 days, kMaxDuration), where they saturate; the top two bits say which unit (10: us, 11: ms).
// (encode_bytes32 codes sizes alike with one bit and rounds up: a copy is never smaller than it was.)
// A coded duration is rounded down, so a span never ends after it did (it stays inside its
// enclosing range): short by less than a unit, under 1e-6 of it.
inline constexpr int64_t kMaxDuration = int64_t((1u << 30) - 1) * 1'000'000;
inline uint32_t encode_duration32(int64_t ns) {
  if (ns <= 0) return 0u;
  if (ns < (int64_t(1) << 31)) return uint32_t(ns);
  if (const int64_t us = ns / 1000; us < (int64_t(1) << 30)) return 0x8000'0000u | uint32_t(us);
  return 0xC000'0000u | uint32_t(std::min(ns, kMaxDuration) / 1'000'000);
}
inline int64_t decode_duration32(uint32_t v) {
  if ((v & 0x8000'0000u) == 0) return int64_t(v);
  const int64_t unit = (v & 0x4000'0000u) ? 1'000'000 : 1000;
  return int64_t(v & 0x3FFF'FFFFu) * unit;
}

// Kernel, Memcpy, Memset, Launch, Sync: a complete span [ts, ts + duration()].
struct ComputeEvent {
  int64_t ts;          // start, ns
  EventKind kind;
  uint8_t device;      // device index (kHostDevice for Launch/Sync on the host)
  uint8_t stream;      // device spans: producer's stream index (StreamName metadata names it);
                       // host spans (Launch/Sync): low byte of the thread index
  uint8_t sub;         // Memcpy: CopyKind; Kernel: 1 if it is a communication kernel (NCCL);
                       // device Sync: kDeviceWideSync if on no stream (torch.profiler's stream -1);
                       // host spans: high byte of the thread index
  uint32_t dur;        // encode_duration32 of the duration (Note [Durations in 32 bits]); read duration()
  uint32_t corr;       // correlation id (links Launch -> Kernel/Memcpy/Memset)
  uint32_t arg;        // Kernel/Launch/Sync: name StringId; Memcpy/Memset: encode_bytes32(bytes)

  int64_t duration() const { return decode_duration32(dur); }
  int64_t end() const { return ts + duration(); }
  uint16_t thread() const { return uint16_t(stream | (sub << 8)); }  // host spans only
  void set_thread(uint16_t t) { stream = uint8_t(t); sub = uint8_t(t >> 8); }
  // A host span (thread() is its thread): a launch, or a Sync a runtime call made on the host. Every
  // other compute span is on a device stream, torch.profiler's cuda_sync rows among them.
  bool on_host(EventKind k) const { return k == EventKind::Launch || (k == EventKind::Sync && device == kHostDevice); }
};
// When an event ends: a compute span's end, any other event's timestamp.
inline int64_t event_end(const Event& e) {
  return family_of(e.kind) == EventFamily::Compute ? e.as<ComputeEvent>().end() : e.ts;
}
// Byte counts in 32 bits: exact below 2 GiB, KiB-granular above (top bit set), up to 2 TiB.
inline uint32_t encode_bytes32(uint64_t b) {
  if (b < (1ull << 31)) return uint32_t(b);
  const uint64_t kib = (b + 1023) >> 10;
  return 0x8000'0000u | uint32_t(kib > 0x7FFF'FFFFull ? 0x7FFF'FFFFull : kib);
}
inline uint64_t decode_bytes32(uint32_t v) {
  return (v & 0x8000'0000u) ? uint64_t(v & 0x7FFF'FFFFu) << 10 : uint64_t(v);
}

// RangeBegin / RangeEnd. Ranges nest LIFO per thread.
struct RangeEvent {
  int64_t ts;
  EventKind kind;      // RangeBegin or RangeEnd
  Phase phase;
  uint16_t thread;     // recorder thread index (or stream index when device == !kHostDevice)
  StringId name;       // range name (NVTX message); kNoString uses phase_name(phase)
  uint64_t id;         // Step/MicroStep: step number; Custom: NVTX payload or external correlation id
};

struct CounterEvent {
  int64_t ts;
  EventKind kind;      // Counter
  uint8_t pad;
  uint16_t pad2;
  StringId name;       // "loss", "samples_per_s", ... (kCounterLoss etc. are the usual names)
  double value;
};
inline constexpr const char* kCounterLoss = "loss";
inline constexpr const char* kCounterSamplesPerSec = "samples_per_s";
inline constexpr const char* kCounterLearningRate = "lr";

struct MetaEvent {
  int64_t ts;
  EventKind kind;      // Meta
  MetaKey key;
  uint16_t thread;     // ThreadName/StreamName/DeviceName: which one
  StringId str;        // text value (Host, ProcessName, ThreadName, Tag)
  int64_t value;       // numeric value
};

struct CommInfoEvent {
  int64_t ts;
  EventKind kind;      // CommInfo
  uint8_t comm;        // communicator index used by CollectiveEvent::comm
  uint16_t size;       // number of ranks in the communicator (the n of busbw)
  uint16_t rank;       // this rank's index in it
  uint16_t pad;
  uint64_t hash;       // identifies the communicator across ranks (e.g. NCCL commHash)
};

struct DropEvent {
  int64_t ts;          // when the collector noticed the drops
  EventKind kind;      // Drops
  uint8_t pad;
  uint16_t thread;     // recorder thread index whose ring overflowed
  uint32_t pad2;
  uint64_t count;      // events lost since the previous DropEvent of this thread
};

#pragma pack(pop)

static_assert(sizeof(Event) == 24);
static_assert(sizeof(MemBlockEvent) == 24);
static_assert(sizeof(OomEvent) == 24);
static_assert(sizeof(MemSampleEvent) == 24);
static_assert(sizeof(CollectiveEvent) == 24);
static_assert(sizeof(ComputeEvent) == 24);
static_assert(sizeof(RangeEvent) == 24);
static_assert(sizeof(CounterEvent) == 24);
static_assert(sizeof(MetaEvent) == 24);
static_assert(sizeof(CommInfoEvent) == 24);
static_assert(sizeof(DropEvent) == 24);
static_assert(std::is_trivially_copyable_v<Event>);

// --- small constructors for producers (all inline; no allocation) ---
inline MemBlockEvent make_mem_block(EventKind k, int64_t ts, uint64_t addr, uint64_t size, uint8_t device = 0,
                                    uint8_t stream = 0, MemCategory cat = MemCategory::Unknown) {
  MemBlockEvent e{};
  e.ts = ts; e.kind = k; e.device = device; e.stream = stream; e.category = uint8_t(cat);
  e.set_addr_size(addr, size);
  return e;
}
inline MemSampleEvent make_mem_sample(int64_t ts, MemMetric m, uint64_t value, uint8_t device = 0) {
  MemSampleEvent e{};
  e.ts = ts; e.kind = EventKind::MemSample; e.device = device; e.metric = m; e.value = value;
  return e;
}
inline CollectiveEvent make_collective(EventKind k, int64_t ts, CollOp op, DType dt, uint64_t bytes, uint8_t comm,
                                       uint32_t seq, uint16_t bucket = kNoBucket) {
  CollectiveEvent e{};
  e.ts = ts; e.kind = k; e.op = op; e.dtype = dt; e.comm = comm; e.seq = seq; e.bucket = bucket;
  e.set_bytes(bytes);
  return e;
}
inline ComputeEvent make_compute(EventKind k, int64_t start, int64_t end, uint8_t stream, uint32_t arg,
                                 uint32_t corr = 0, uint8_t device = 0, uint8_t sub = 0) {
  ComputeEvent e{};
  e.ts = start; e.kind = k; e.device = device; e.sub = sub; e.dur = encode_duration32(end - start);
  e.corr = corr; e.stream = stream; e.arg = arg;
  return e;
}
// ComputeEvent::sub of a device Sync that waits on no one stream ("Event Sync" and "Context Sync"
// at stream -1 in torch.profiler traces).
inline constexpr uint8_t kDeviceWideSync = 1;

// Launch/Sync on a host thread.
inline ComputeEvent make_host_span(EventKind k, int64_t start, int64_t end, uint16_t thread, StringId name,
                                   uint32_t corr = 0) {
  ComputeEvent e = make_compute(k, start, end, 0, name, corr, kHostDevice, 0);
  e.set_thread(thread);
  return e;
}
inline RangeEvent make_range(EventKind k, int64_t ts, Phase p, StringId name, uint64_t id, uint16_t thread) {
  RangeEvent e{};
  e.ts = ts; e.kind = k; e.phase = p; e.thread = thread; e.name = name; e.id = id;
  return e;
}
inline CounterEvent make_counter(int64_t ts, StringId name, double value) {
  CounterEvent e{};
  e.ts = ts; e.kind = EventKind::Counter; e.name = name; e.value = value;
  return e;
}
inline MetaEvent make_meta(int64_t ts, MetaKey key, int64_t value, StringId str = kNoString, uint16_t thread = 0) {
  MetaEvent e{};
  e.ts = ts; e.kind = EventKind::Meta; e.key = key; e.thread = thread; e.str = str; e.value = value;
  return e;
}
inline CommInfoEvent make_comm_info(int64_t ts, uint8_t comm, uint16_t size, uint16_t rank, uint64_t hash) {
  CommInfoEvent e{};
  e.ts = ts; e.kind = EventKind::CommInfo; e.comm = comm; e.size = size; e.rank = rank; e.hash = hash;
  return e;
}

}  // namespace memcomm::prof
