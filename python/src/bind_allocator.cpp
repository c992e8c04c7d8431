// memcomm._memcomm's allocator part: installing memcomm's caching allocator behind torch's CPU or
// CUDA tensors, and reading it back as PyTorch names it (memory_stats, snapshot segments, history).
// The option checks that give Python users their error messages live in memcomm/allocator.py; these
// functions check again, so a direct call cannot put the engine in a bad state.
//
// Device numbers: -1 is the CPU engine, 0.. are CUDA devices (engines exist once a device allocated).
#include "allocator_history.hpp"
#include "bindings.hpp"

#include <memcomm/allocator/torch_allocator.hpp>

#include <pybind11/stl.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

namespace memcomm::py {

namespace pyb = pybind11;

namespace {

// Note [Adapter lifetime] (torch_cpu_allocator.cpp): the engines are never destroyed, so neither is
// the observer they call.
// One history per adapter (the CPU one, and the CUDA one for every GPU), so that installing one never
// changes what the other keeps.
AllocatorHistory& history(int device) {
  static auto* cpu = new AllocatorHistory();
  static auto* cuda = new AllocatorHistory();
  return device < 0 ? *cpu : *cuda;
}

// The adapter's options; `history_of` is the adapter's history (its capacity is set once the
// install succeeded, so a failed install leaves it as it was).
alloc::TorchAllocatorOptions make_options(bool expandable, std::size_t capacity, double gc_threshold,
                                          AllocatorHistory& history_of) {
  if (gc_threshold < 0 || gc_threshold >= 1)
    throw std::invalid_argument("gc_threshold must be in [0, 1) (0 = off), got " + std::to_string(gc_threshold));
  if (gc_threshold > 0 && capacity == 0)
    throw std::invalid_argument("gc_threshold needs a memory_limit: it is a fraction of it");
  alloc::TorchAllocatorOptions o;
  o.config.expandable_segments = expandable;
  o.config.capacity = capacity;
  o.config.gc_threshold = gc_threshold;
  o.observer = &history_of;
  return o;
}

alloc::CachingAllocator* engine(int device) {
  if (device < 0) return alloc::torch_cpu_allocator();
#ifdef MEMCOMM_ALLOCATOR_TORCH_WITH_CUDA
  return alloc::torch_cuda_allocator(device);
#else
  return nullptr;
#endif
}

alloc::CachingAllocator& require_engine(int device) {
  if (auto* e = engine(device)) return *e;
  throw std::runtime_error(device < 0 ? std::string("memcomm's CPU allocator is not in use: call memcomm.use_allocator(\"cpu\") first")
                                      : "memcomm's CUDA allocator serves no memory on device " + std::to_string(device) +
                                            " (not installed, or nothing allocated there yet)");
}

void put_stat(pyb::dict& d, const char* name, const alloc::Stat& s) {
  const std::string base = std::string(name) + ".all.";
  d[pyb::str(base + "current")] = s.current;
  d[pyb::str(base + "peak")] = s.peak;
  d[pyb::str(base + "allocated")] = s.allocated;
  d[pyb::str(base + "freed")] = s.freed;
}

// torch.cuda.memory_stats()'s names ("allocated_bytes.all.current", "num_alloc_retries", ...) for
// the figures memcomm keeps (it has no small/large pool split of them), plus memcomm's own.
pyb::dict stats_dict(const alloc::CachingAllocator& e) {
  const alloc::DeviceStats s = e.stats();
  const alloc::MemorySummary m = e.memory_summary();
  pyb::dict d;
  put_stat(d, "allocation", s.allocation);
  put_stat(d, "segment", s.segment);
  put_stat(d, "active", s.active);
  put_stat(d, "inactive_split", s.inactive_split);
  put_stat(d, "allocated_bytes", s.allocated_bytes);
  put_stat(d, "reserved_bytes", s.reserved_bytes);
  put_stat(d, "active_bytes", s.active_bytes);
  put_stat(d, "inactive_split_bytes", s.inactive_split_bytes);
  put_stat(d, "requested_bytes", s.requested_bytes);
  put_stat(d, "oversize_allocations", s.oversize_allocations);
  put_stat(d, "oversize_segments", s.oversize_segments);
  d["num_alloc_retries"] = s.num_alloc_retries;
  d["num_ooms"] = s.num_ooms;
  d["num_sync_all_streams"] = s.num_sync_all_streams;
  d["num_device_alloc"] = s.num_device_alloc;
  d["num_device_free"] = s.num_device_free;
  d["memcomm.num_device_map"] = s.num_device_map;
  d["memcomm.num_device_unmap"] = s.num_device_unmap;
  d["memcomm.num_gc_releases"] = s.num_gc_releases;
  d["memcomm.num_cross_class_allocs"] = s.num_cross_class_allocs;
  d["memcomm.num_stream_syncs"] = s.num_stream_syncs;
  d["memcomm.fragmentation"] = s.fragmentation();
  d["memcomm.external_fragmentation"] = m.external_fragmentation();
  d["memcomm.largest_free_block"] = m.largest_free_block;
  d["memcomm.internal_waste"] = m.internal_waste;
  return d;
}

// One segment (a run of mapped blocks: alloc::mapped_runs) as torch.cuda.memory._snapshot() writes it.
pyb::dict segment_dict(const alloc::SegmentInfo& s, int device) {
  pyb::list blocks;
  std::uint64_t allocated = 0, active = 0, requested = 0;
  for (const alloc::BlockInfo& b : s.blocks) {
    const char* state = b.allocated ? "active_allocated" : b.pending ? "active_pending_free" : "inactive";
    if (b.allocated) allocated += b.size, requested += b.requested;
    if (b.allocated || b.pending) active += b.size;
    pyb::dict bd;
    bd["address"] = b.address;
    bd["size"] = b.size;
    bd["requested_size"] = b.requested;
    bd["state"] = state;
    bd["frames"] = pyb::list();
    blocks.append(bd);
  }
  pyb::dict d;
  d["device"] = device;
  d["address"] = s.base;
  d["total_size"] = s.size;
  d["allocated_size"] = allocated;
  d["active_size"] = active;
  d["requested_size"] = requested;
  d["stream"] = static_cast<std::uint64_t>(s.stream);
  d["segment_type"] = s.small_pool ? "small" : "large";
  d["segment_pool_id"] = pyb::make_tuple(0, 0);
  d["is_expandable"] = s.expandable;
  d["frames"] = pyb::list();
  d["blocks"] = blocks;
  return d;
}

pyb::list segments(int device) {
  pyb::list out;
  for (const alloc::SegmentInfo& s : alloc::mapped_runs(require_engine(device).snapshot()))
    out.append(segment_dict(s, device));
  return out;
}

// Bytes an event adds to reserved memory (a virtual range's reservation is none: Note [Virtual
// reservations] in trace/ virtual_reservations.hpp).
std::int64_t reserved_change(const alloc::AllocEvent& e) {
  const bool backed = !(e.flags & prof::kSegmentVirtualRange);
  switch (e.kind) {
    case alloc::EventKind::SegmentAlloc: return backed ? std::int64_t(e.size) : 0;
    case alloc::EventKind::SegmentFree: return backed ? -std::int64_t(e.size) : 0;
    case alloc::EventKind::SegmentMap: return std::int64_t(e.size);
    case alloc::EventKind::SegmentUnmap: return -std::int64_t(e.size);
    default: return 0;
  }
}

// One "device_traces" entry as PyTorch's allocator history writes it. An `oom` entry carries
// `device_free`, as PyTorch's does (memory_viz's trace reads it, and raised KeyError without it): the
// bytes left under the allocator's limit then, its reserved bytes got back from now through the
// history; 0 where there is no limit (the memory the source had left is not known).
pyb::list trace(int device) {
  const std::vector<alloc::AllocEvent> events = history(device).events(device);
  alloc::CachingAllocator& engine = require_engine(device);
  const std::size_t cap = engine.config().capacity ? engine.config().capacity : engine.source().capacity();
  std::vector<std::int64_t> reserved_after(events.size());
  std::int64_t reserved = engine.stats().reserved_bytes.current;
  for (std::size_t i = events.size(); i-- > 0;) {
    reserved_after[i] = reserved;
    reserved -= reserved_change(events[i]);
  }
  pyb::list out;
  for (std::size_t i = 0; i < events.size(); ++i) {
    const alloc::AllocEvent& e = events[i];
    // PyTorch writes no entry for an expandable segment's virtual range, only its maps.
    if (e.kind == alloc::EventKind::SegmentAlloc && (e.flags & prof::kSegmentVirtualRange)) continue;
    pyb::dict d;
    d["action"] = prof::kind_name(e.kind);
    d["addr"] = e.address;
    // A block's entries carry the bytes asked for, as PyTorch's do (its orig_size), not the rounded block:
    // 100 000 four-byte tensors read as 12.2 MiB live where 781 KiB were.
    const bool block = e.kind == alloc::EventKind::Alloc || e.kind == alloc::EventKind::FreeRequested ||
                       e.kind == alloc::EventKind::FreeCompleted;
    d["size"] = e.kind == alloc::EventKind::Oom || (block && e.requested != 0) ? e.requested : e.size;
    d["stream"] = static_cast<std::uint64_t>(e.stream);
    d["time_us"] = e.time_ns / 1000;
    d["frames"] = pyb::list();
    if (e.kind == alloc::EventKind::Oom)
      d["device_free"] = cap > 0 ? std::uint64_t(std::max<std::int64_t>(0, std::int64_t(cap) - reserved_after[i])) : 0;
    out.append(d);
  }
  return out;
}

}  // namespace

void bind_allocator(pyb::module_& m) {
  m.def("install_cpu_allocator",
        [](bool expandable, std::size_t capacity, double gc_threshold, std::size_t history_events) {
          if (alloc::torch_cpu_allocator()) throw std::runtime_error("memcomm's CPU allocator is already installed");
          alloc::install_torch_cpu_allocator(make_options(expandable, capacity, gc_threshold, history(-1)));
          history(-1).set_capacity(history_events);
        },
        pyb::arg("expandable"), pyb::arg("capacity"), pyb::arg("gc_threshold"), pyb::arg("history_events"),
        "Makes memcomm's caching allocator serve every CPU tensor allocated from now on.");
  m.def("install_cuda_allocator",
        [](bool expandable, std::size_t capacity, double gc_threshold, std::size_t history_events,
           const std::string& source) {
#ifdef MEMCOMM_ALLOCATOR_TORCH_WITH_CUDA
          alloc::TorchAllocatorOptions o = make_options(expandable, capacity, gc_threshold, history(0));
          o.cuda_source = source;
          alloc::install_torch_cuda_allocator(o);
          history(0).set_capacity(history_events);
#else
          (void)expandable, (void)capacity, (void)gc_threshold, (void)history_events, (void)source;
          throw std::runtime_error("this memcomm was built without CUDA: use_allocator(\"cuda\") is not available");
#endif
        },
        pyb::arg("expandable"), pyb::arg("capacity"), pyb::arg("gc_threshold"), pyb::arg("history_events"),
        pyb::arg("source"), "Installs memcomm's caching allocator as torch's CUDA allocator.");
  m.def("installed", [](int device) { return engine(device) != nullptr; }, pyb::arg("device"));
  m.def("memory_stats", [](int device) { return stats_dict(require_engine(device)); }, pyb::arg("device"));
  m.def("empty_cache", [](int device) { require_engine(device).empty_cache(); }, pyb::arg("device"),
        pyb::call_guard<pyb::gil_scoped_release>());
  m.def("reset_peak_memory_stats", [](int device) { require_engine(device).reset_peak_stats(); }, pyb::arg("device"));
  m.def("snapshot_segments", &segments, pyb::arg("device"));
  m.def("snapshot_trace", &trace, pyb::arg("device"));
  m.def("history_capacity", [](int device) { return history(device).capacity(); }, pyb::arg("device"));
}

}  // namespace memcomm::py
