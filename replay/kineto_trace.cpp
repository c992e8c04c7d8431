// Reading torch.profiler memory profiles: the trace layer's Kineto reader turns each [memory]
// event into an Alloc, or a FreeRequested + FreeCompleted, plus Allocated and Reserved samples
// (Note [Kineto events as memcomm events] in kineto.hpp); those become requests as a snapshot's do.
//
// Note [Replaying a torch.profiler memory profile]
// A memory profile starts wherever profiling started, usually with the model and optimizer state
// already allocated, and it records no end state. Each [memory] event carries the allocator's
// "Total Allocated" after it, so the bytes live before the first event are known in total, not
// block by block. Blocks the trace frees without having allocated them predate it (Note
// [Rebuilding requests]); whatever the total holds beyond those stayed live through the whole
// trace and becomes one block allocated first and never freed (RequestBuilder::untraced_live).
// The replay's peak live then equals the trace's largest Total Allocated, and every later sample
// is checked against live bytes (a note says where they disagree). Events are replayed in
// timestamp order (Kineto writes them out of order; equal timestamps keep file order).
// The `recorded` policy has no segment events to go on: its peak reserved is the largest "Total
// Reserved", its start the first one (reserved after the first event), and its source calls count
// the samples where Total Reserved grew or shrank (each is at least one cudaMalloc or cudaFree).
#include "kineto_trace.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <utility>

#include "memcomm/common/bytes.hpp"
#include "memcomm/snapshot/error.hpp"
#include "memcomm/trace/event_sort.hpp"
#include "memcomm/trace/kineto.hpp"
#include "request_builder.hpp"

namespace memcomm::replay {
namespace {

// One device's pass over the events.
struct DeviceFold {
  explicit DeviceFold(int rank, int device) : builder(rank, device) {}
  RequestBuilder builder;
  std::int64_t net = 0;                // traced bytes allocated minus freed so far
  bool sampled = false;                // a Total Allocated sample was seen
  std::int64_t live_before = 0;        // Total Allocated before the first event
  std::uint64_t max_allocated = 0;     // largest Total Allocated
  std::uint64_t samples = 0, mismatches = 0;
  std::uint64_t reserved_samples = 0, reserved_first = 0, reserved_last = 0, reserved_peak = 0;
  std::uint64_t reserved_grows = 0, reserved_shrinks = 0;

  void allocated(std::uint64_t total) {
    ++samples;
    max_allocated = std::max(max_allocated, total);
    if (!sampled) {
      sampled = true;
      live_before = static_cast<std::int64_t>(total) - net;
      if (live_before < 0) ++mismatches, live_before = 0;
    } else if (static_cast<std::int64_t>(total) != live_before + net) {
      ++mismatches;
    }
  }
  void reserved(std::uint64_t total) {
    if (reserved_samples++ == 0) reserved_first = total;
    else if (total > reserved_last) ++reserved_grows;
    else if (total < reserved_last) ++reserved_shrinks;
    reserved_last = total;
    reserved_peak = std::max(reserved_peak, total);
  }
};

void feed(DeviceFold& d, const prof::Event& e) {
  switch (e.kind) {
    case prof::EventKind::Alloc: {
      const auto m = e.as<prof::MemBlockEvent>();
      d.builder.alloc(m.addr(), m.size(), 0);
      d.net += static_cast<std::int64_t>(m.size());
      break;
    }
    case prof::EventKind::FreeCompleted: {  // its FreeRequested, at the same time, adds nothing
      const auto m = e.as<prof::MemBlockEvent>();
      d.builder.free_completed(m.addr(), m.size(), 0);
      d.net -= static_cast<std::int64_t>(m.size());
      break;
    }
    case prof::EventKind::Oom: d.builder.oom(); break;
    case prof::EventKind::MemSample: {
      const auto s = e.as<prof::MemSampleEvent>();
      if (s.metric == prof::MemMetric::Allocated) d.allocated(s.value);
      if (s.metric == prof::MemMetric::Reserved) d.reserved(s.value);
      break;
    }
    default: break;
  }
}

int device_of(const prof::Event& e) {
  switch (e.kind) {
    case prof::EventKind::Alloc:
    case prof::EventKind::FreeRequested:
    case prof::EventKind::FreeCompleted: return e.as<prof::MemBlockEvent>().device;
    case prof::EventKind::Oom: return e.as<prof::OomEvent>().device;
    case prof::EventKind::MemSample:
      // DeviceTotal comes from deviceProperties, not from [memory] events
      return e.as<prof::MemSampleEvent>().metric == prof::MemMetric::DeviceTotal ? -1
                                                                                  : e.as<prof::MemSampleEvent>().device;
    default: return -1;
  }
}

std::string device_name(const DeviceRequests& d) {
  return d.device == prof::kHostDevice ? std::string("host memory") : fmt::format("device {}", d.device);
}

// The note for one device, "" when there is nothing to say.
std::string device_note(const DeviceFold& f, const DeviceRequests& d, std::uint64_t untraced) {
  if (f.samples == 0) return "";  // no Total Allocated to compare with
  std::string s;
  if (untraced)
    s += fmt::format("{} live before the first [memory] event and never freed in the trace (allocated before "
                     "profiling started) are replayed as one block allocated first; ",
                     format_bytes(untraced));
  if (f.mismatches)
    s += fmt::format("Total Allocated disagrees with the [memory] events' bytes at {} of {} events; ", f.mismatches,
                     f.samples);
  if (s.empty() && d.peak_live == f.max_allocated) return "";
  s += d.peak_live == f.max_allocated
           ? fmt::format("peak live {} = the trace's largest Total Allocated", format_bytes(d.peak_live))
           : fmt::format("peak live {} != the trace's largest Total Allocated {}", format_bytes(d.peak_live),
                         format_bytes(f.max_allocated));
  return device_name(d) + ": " + s;
}

}  // namespace

void fold_memory_profile(std::vector<prof::Event>& events, int rank, TraceRequests& out) {
  prof::sort_by_time(events);  // Note [Replaying a torch.profiler memory profile]
  std::map<int, DeviceFold> devices;
  for (const prof::Event& e : events) {
    const int device = device_of(e);
    if (device < 0) continue;
    feed(devices.try_emplace(device, rank, device).first->second, e);
  }
  for (auto& [device, f] : devices) {
    const std::uint64_t untraced = f.sampled ? f.builder.untraced_live(static_cast<std::uint64_t>(f.live_before)) : 0;
    DeviceRequests d = f.builder.finish();
    d.recorded_from_profile = true;
    if (f.reserved_peak > 0) {
      d.recorded.known = true;
      d.recorded.at_start = f.reserved_first;
      d.recorded.peak = f.reserved_peak;
      d.recorded.at_end = f.reserved_last;
      d.recorded.source_allocs = f.reserved_grows;
      d.recorded.source_frees = f.reserved_shrinks;
    }
    const std::string note = device_note(f, d, untraced);
    if (!note.empty()) out.notes.push_back(note);
    out.devices.push_back(std::move(d));
  }
}

TraceRequests read_kineto_trace(const std::string& path) {
  prof::KinetoTrace k;
  try {
    k = prof::read_kineto(path);
  } catch (const prof::TraceError& e) {
    std::string what = e.what();  // already names the file (and byte offset); do not repeat it
    if (what.rfind(path + ": ", 0) == 0) what.erase(0, path.size() + 2);
    throw snapshot::ReadError(path, snapshot::kNoOffset, what);
  }
  if (k.info.memory_events == 0)
    throw snapshot::ReadError(path, snapshot::kNoOffset,
                              "a torch.profiler trace without [memory] events: nothing to replay (record it with "
                              "torch.profiler.profile(profile_memory=True))");
  TraceRequests out;
  out.file = path;
  out.format = "torch-profiler";
  if (k.info.memory_events_without_addr)
    out.notes.push_back(fmt::format("{} [memory] events have no Addr (the 2021 schema): each free is paired with the "
                                    "latest live allocation of its size, so live bytes are exact but which of two "
                                    "same-size blocks was freed is a guess", k.info.memory_events_without_addr));
  if (k.info.truncated) {
    out.recovery = k.info.truncation;
    if (out.recovery.rfind(path + ": ", 0) == 0) out.recovery.erase(0, path.size() + 2);
  }
  fold_memory_profile(k.trace.events, static_cast<int>(k.trace.rank), out);
  return out;
}

}  // namespace memcomm::replay
