// Record-by-record conversion; see Note [CUPTI record mapping] in cupti_convert.hpp.
#include "memcomm/profiler/cupti_convert.hpp"

#include <cxxabi.h>

#include <cstdlib>
#include <cstring>
#include <string>

namespace memcomm::prof {
namespace {

// A record's fields are read through memcpy: CUPTI buffers are 8-byte aligned, but the hand-made
// records of the tests need not be, and this keeps the compiler from assuming more.
template <class T>
T view(const CUpti_Activity& r) {
  T out;
  std::memcpy(&out, &r, sizeof(T));
  return out;
}

constexpr size_t kMaxExternal = 1u << 16;
constexpr const char* kNvtxOwnDomain = "memcomm";  // the NVTX bridge's domain (profiler/nvtx)

}  // namespace

std::string demangle(const char* name) {
  if (!name) return {};
  if (name[0] != '_' || name[1] != 'Z') return name;
  int status = 0;
  char* d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  if (status != 0 || !d) return name;
  std::string out(d);
  std::free(d);
  return out;
}

CopyKind copy_kind_from_cupti(uint32_t k) {
  switch (k) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD:
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOA: return CopyKind::HtoD;
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH:
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOH: return CopyKind::DtoH;
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD:
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOA:
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOD:
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOA: return CopyKind::DtoD;
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH: return CopyKind::HtoH;
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP: return CopyKind::PtoP;
    default: return CopyKind::Unknown;
  }
}

const char* sync_type_name(uint32_t t) {
  switch (t) {
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE: return "cudaEventSynchronize";
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT: return "cudaStreamWaitEvent";
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE: return "cudaStreamSynchronize";
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE: return "cudaDeviceSynchronize";
    default: return "cuda sync";
  }
}

ActivityConverter::ActivityConverter(Intern intern, int64_t clock_offset_ns)
    : intern_(std::move(intern)), clock_offset_ns_(clock_offset_ns) {}

void ActivityConverter::reset() {
  kernel_names_.clear();
  streams_.clear();
  marker_threads_.clear();
  open_markers_.clear();
  external_.clear();
  waiting_.clear();
  sync_names_ = {};
  sync_thread_named_ = false;
  devices_seen_ = 0;
}

uint8_t ActivityConverter::stream_index(uint32_t device, uint32_t stream, std::vector<Event>& out, size_t& n) {
  if (device < 64) devices_seen_ |= uint64_t(1) << device;
  const uint64_t key = (uint64_t(device) << 32) | stream;
  auto it = streams_.find(key);
  if (it != streams_.end()) return it->second;
  // Indices are 8-bit: past 255 streams, the rest share the last index (the name says so).
  const auto index = uint8_t(streams_.size() < 255 ? streams_.size() : 255);
  streams_.emplace(key, index);
  if (streams_.size() <= 256) {
    const std::string name = index == 255 ? "cuda streams 255+"
                                          : "cuda stream " + std::to_string(stream) + " (device " +
                                                std::to_string(device) + ")";
    out.push_back(Event::from(make_meta(0, MetaKey::StreamName, int64_t(device), intern_(name), index)));
    ++n;
  }
  return index;
}

uint16_t ActivityConverter::marker_thread(uint32_t tid, std::vector<Event>& out, size_t& n) {
  auto it = marker_threads_.find(tid);
  if (it != marker_threads_.end()) return it->second;
  const auto t = uint16_t(kNvtxThreadBase | (tid & 0x7FFF));
  marker_threads_.emplace(tid, t);
  out.push_back(Event::from(
      make_meta(0, MetaKey::ThreadName, int64_t(tid), intern_("nvtx tid " + std::to_string(tid)), t)));
  ++n;
  return t;
}

// Note [Spans before their correlation]: CUPTI writes a launch's EXTERNAL_CORRELATION record into
// the launching thread's buffer, beside its API record, while the kernel's record goes to the
// device's buffer when the kernel ends; the two buffers complete in either order. So a span whose
// correlation id has no external id yet waits (summed per id) until that record comes, and counts as
// unattributed only while it still waits: launched outside any phase, or its record lost.
void ActivityConverter::attribute(uint32_t corr, uint64_t dur_ns) {
  auto it = external_.find(corr);
  if (it != external_.end()) {
    charge(it->second, dur_ns, 1);
    return;
  }
  if (waiting_.size() >= kMaxExternal) {  // bounded, as external_ is: these will never be charged
    for (const auto& [id, w] : waiting_) attribution_.unattributed_spans += w.spans;
    waiting_.clear();
  }
  Waiting& w = waiting_[corr];
  w.gpu_ns += dur_ns;
  ++w.spans;
}

void ActivityConverter::charge(uint64_t external_id, uint64_t dur_ns, uint64_t spans) {
  const auto p = size_t(external_id_phase(external_id));
  attribution_.gpu_ns[p] += dur_ns;
  attribution_.spans[p] += spans;
}

PhaseAttribution ActivityConverter::attribution() const {
  PhaseAttribution a = attribution_;
  for (const auto& [id, w] : waiting_) a.unattributed_spans += w.spans;
  return a;
}

size_t ActivityConverter::span(EventKind k, uint64_t start, uint64_t end, uint32_t device, uint32_t stream,
                               uint32_t corr, uint32_t arg, uint8_t sub, std::vector<Event>& out) {
  if (start == 0 || end < start) {  // CUPTI leaves 0 in spans that had not completed at a forced flush
    ++stats_.incomplete;
    return 0;
  }
  size_t n = 0;
  const uint8_t s = stream_index(device, stream, out, n);
  out.push_back(Event::from(make_compute(k, ts(start), ts(end), s, arg, corr, uint8_t(device), sub)));
  attribute(corr, end - start);
  return n + 1;
}

size_t ActivityConverter::kernel(const CUpti_Activity& record, std::vector<Event>& out) {
  const auto k = view<CUpti_ActivityKernel10>(record);
  auto it = kernel_names_.find(k.name);
  if (it == kernel_names_.end()) {
    const std::string text = demangle(k.name);
    it = kernel_names_.emplace(k.name, KernelName{intern_(text), comm_kernels_.matches(text)}).first;
  }
  const size_t n = span(EventKind::Kernel, k.start, k.end, k.deviceId, k.streamId, k.correlationId, it->second.id,
                        it->second.comm ? 1 : 0, out);
  if (n && it->second.comm) ++stats_.comm_kernels;
  return n;
}

size_t ActivityConverter::memory(const CUpti_Activity& record, std::vector<Event>& out) {
  const auto m = view<CUpti_ActivityMemory4>(record);
  const bool alloc = m.memoryOperationType == CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION;
  const bool host = m.memoryKind == CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE || m.memoryKind == CUPTI_ACTIVITY_MEMORY_KIND_PINNED;
  if ((!alloc && m.memoryOperationType != CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE) ||
      m.memoryKind == CUPTI_ACTIVITY_MEMORY_KIND_DEVICE_STATIC ||
      m.memoryKind == CUPTI_ACTIVITY_MEMORY_KIND_MANAGED_STATIC ||  // Note [Module globals are not segments]
      (host && skip_host_memory_)) {
    ++stats_.ignored;
    return 0;
  }
  const bool pooled = m.memoryPoolConfig.memoryPoolType != CUPTI_ACTIVITY_MEMORY_POOL_TYPE_INVALID;
  const EventKind kind = pooled ? (alloc ? EventKind::Alloc : EventKind::FreeRequested)
                                : (alloc ? EventKind::SegmentAlloc : EventKind::SegmentFree);
  const uint8_t device = host ? kHostDevice : uint8_t(m.deviceId);
  size_t n = 0;
  // Synchronous driver calls report no stream; only stream-ordered (pool) ones name one.
  const uint8_t stream = m.isAsync ? stream_index(m.deviceId, m.streamId, out, n) : 0;
  out.push_back(Event::from(make_mem_block(kind, ts(m.timestamp), m.address, m.bytes, device, stream)));
  return n + 1;
}

size_t ActivityConverter::synchronization(const CUpti_Activity& record, std::vector<Event>& out) {
  const auto s = view<CUpti_ActivitySynchronization2>(record);
  if (s.start == 0 || s.end < s.start) {
    ++stats_.incomplete;
    return 0;
  }
  const uint32_t type = s.type < sync_names_.size() ? uint32_t(s.type) : 0;
  if (sync_names_[type] == kNoString) sync_names_[type] = intern_(sync_type_name(type));
  size_t n = 0;
  if (!sync_thread_named_) {
    sync_thread_named_ = true;
    out.push_back(Event::from(make_meta(0, MetaKey::ThreadName, 0, intern_("cuda sync"), kCudaSyncThread)));
    ++n;
  }
  out.push_back(Event::from(
      make_host_span(EventKind::Sync, ts(s.start), ts(s.end), kCudaSyncThread, sync_names_[type], s.correlationId)));
  return n + 1;
}

void ActivityConverter::external_correlation(const CUpti_Activity& record) {
  const auto x = view<CUpti_ActivityExternalCorrelation>(record);
  if (x.externalKind != CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0) {
    ++stats_.ignored;
    return;
  }
  // Bounded: launches whose spans never arrive must not grow the map for a whole run.
  // Entries stay after a charge: a graph launch has one correlation id for many spans.
  if (external_.size() >= kMaxExternal) external_.clear();
  external_[x.correlationId] = x.externalId;
  if (auto w = waiting_.find(x.correlationId); w != waiting_.end()) {  // Note [Spans before their correlation]
    charge(x.externalId, w->second.gpu_ns, w->second.spans);
    waiting_.erase(w);
  }
}

size_t ActivityConverter::marker(const CUpti_Activity& record, std::vector<Event>& out) {
  const auto m = view<CUpti_ActivityMarker2>(record);
  const bool start = m.flags & CUPTI_ACTIVITY_FLAG_MARKER_START;
  const bool end = m.flags & CUPTI_ACTIVITY_FLAG_MARKER_END;
  if (start && m.domain && std::strcmp(m.domain, kNvtxOwnDomain) == 0) {
    ++stats_.ignored;  // our own phase, already recorded; its END is skipped by the lookup below
    return 0;
  }
  size_t n = 0;
  if (start) {
    const uint16_t t = m.objectKind == CUPTI_ACTIVITY_OBJECT_THREAD ? marker_thread(m.objectId.pt.threadId, out, n)
                                                                   : kNvtxThreadBase;
    const StringId name = m.name ? intern_(m.name) : kNoString;
    open_markers_[m.id] = {name, t};
    out.push_back(Event::from(make_range(EventKind::RangeBegin, ts(m.timestamp), Phase::Custom, name, m.id, t)));
    return n + 1;
  }
  auto it = end ? open_markers_.find(m.id) : open_markers_.end();
  if (it == open_markers_.end()) {
    ++stats_.ignored;  // an end without its start, or an instantaneous mark (nvtxMark): no range to show
    return 0;
  }
  out.push_back(Event::from(
      make_range(EventKind::RangeEnd, ts(m.timestamp), Phase::Custom, it->second.name, m.id, it->second.thread)));
  open_markers_.erase(it);
  return 1;
}

size_t ActivityConverter::convert(const CUpti_Activity& record, std::vector<Event>& out) {
  ++stats_.records;
  size_t n = 0;
  switch (record.kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: n = kernel(record, out); break;
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
      const auto m = view<CUpti_ActivityMemcpy6>(record);
      n = span(EventKind::Memcpy, m.start, m.end, m.deviceId, m.streamId, m.correlationId, encode_bytes32(m.bytes),
               uint8_t(copy_kind_from_cupti(m.copyKind)), out);
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
      const auto m = view<CUpti_ActivityMemset4>(record);
      n = span(EventKind::Memset, m.start, m.end, m.deviceId, m.streamId, m.correlationId, encode_bytes32(m.bytes),
               0, out);
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMORY2: n = memory(record, out); break;
    case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: n = synchronization(record, out); break;
    case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: external_correlation(record); break;
    case CUPTI_ACTIVITY_KIND_RUNTIME:
    case CUPTI_ACTIVITY_KIND_DRIVER:
      break;  // enabled only so that CUPTI writes EXTERNAL_CORRELATION records (Note [Phase attribution])
    case CUPTI_ACTIVITY_KIND_MARKER: n = marker(record, out); break;
    default: ++stats_.ignored; break;
  }
  stats_.events += n;
  return n;
}

}  // namespace memcomm::prof
