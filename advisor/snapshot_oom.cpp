// The OOM rule: for every `oom` event of a snapshot, the allocator's state at that moment (live,
// reserved, the largest free block: Note [Rewinding to an OOM]) and a verdict. PyTorch gives up
// only after it has released the cached segments it could, so
//   - free in the cache (reserved - live) >= the request while the largest free block < the request:
//     enough memory was free, in pieces: fragmentation, which expandable segments (or memcomm's
//     allocator) remove;
//   - the request alone is more than the process could have held (reserved plus the device's free
//     bytes, the event's device_free): no smaller batch fixes a 256 TiB request; its size is wrong;
//   - otherwise the memory was really full: what is live must shrink.
// Each piece of advice names the stack of the allocation that failed.
#include "snapshot_rules.hpp"

#include <fmt/format.h>
#include <memcomm/common/bytes.hpp>

#include <algorithm>
#include <optional>

#include "memcomm/snapshot/memory_rewind.hpp"

namespace memcomm::advise::detail {

using snapshot::MemoryLevels;
using snapshot::MemoryRewind;

namespace {

struct OomAt {
  std::size_t index;  // in the device's trace
  MemoryLevels levels;
  std::uint64_t contradictions;  // undo contradictions so far (Note [Rewinding to an OOM])
};

// The state before each `oom` event of one device, in trace order.
std::vector<OomAt> ooms_of(const snapshot::Snapshot& snap, int device) {
  const auto& events = snap.device_traces[std::size_t(device)];
  MemoryRewind rewind(snap, device);
  std::vector<OomAt> out;
  for (std::size_t i = events.size(); i-- > 0;) {
    if (events[i].kind == prof::EventKind::Oom) out.push_back(OomAt{i, rewind.levels(), rewind.contradictions()});
    rewind.undo(events[i]);
  }
  std::reverse(out.begin(), out.end());  // found from the last event back
  return out;
}

std::string when(const std::vector<snapshot::Event>& events, std::size_t i) {
  if (!events[i].has_time() || !events.front().has_time()) return fmt::format("event {}", i);
  return fmt::format("event {} ({:.3f} s into the trace)", i, double(events[i].time_us - events.front().time_us) / 1e6);
}

// What to change where enough memory was free in pieces. memcomm's allocator serves no private pool
// (CUDA graphs, MemPool), so a run with one is not told to use it.
std::string fragmented_change(const snapshot::Snapshot& snap) {
  const bool memcomm_fits = !snap.has_private_pools();
  if (snap.expandable_segments())
    return memcomm_fits ? "enough memory was free, in pieces, even with expandable segments: use memcomm's caching "
                          "allocator (install_torch_cuda_allocator), or allocate the large buffers early"
                        : "enough memory was free, in pieces, even with expandable segments: allocate the large "
                          "buffers early (memcomm's allocator serves no CUDA graph or MemPool pool, which this run has)";
  return std::string("enough memory was free, in pieces (fragmentation): set PYTORCH_CUDA_ALLOC_CONF="
                     "expandable_segments:True") +
         (memcomm_fits ? ", or use memcomm's caching allocator" : "");
}

Advice oom_advice(const snapshot::Snapshot& snap, int device, const OomAt& at) {
  const auto& e = snap.device_traces[std::size_t(device)][at.index];
  const MemoryLevels& m = at.levels;
  const std::uint64_t cached_free = m.reserved > m.live ? m.reserved - m.live : 0;
  const bool fragmented = cached_free >= e.size && m.largest_free < e.size;
  const std::optional<std::uint64_t> device_free = e.device_free();
  const bool beyond_device = !fragmented && device_free && e.size > m.reserved + *device_free;
  Advice adv;
  adv.topic = Topic::Oom;
  adv.saving_unit = "bytes";
  if (beyond_device)
    adv.change = fmt::format("the request alone is more than this process could hold ({} reserved and {} free on the "
                             "device): check the size of the allocation that failed (a shape or dtype computed "
                             "wrong), not the batch",
                             format_bytes(m.reserved), format_bytes(*device_free));
  else if (!fragmented)
    adv.change = "the memory was really full: shrink what is live at this point (a smaller micro-batch, activation "
                 "checkpointing, freeing tensors sooner) or use a device with more memory";
  else
    adv.change = fragmented_change(snap);
  if (fragmented) adv.saving = double(e.size);  // the request would have fit in what was already reserved
  adv.evidence = fmt::format("device {}: out of memory at {} asking for {}: in blocks {}, reserved {} ({} free in the "
                             "cache), largest free block {}",
                             device, when(snap.device_traces[std::size_t(device)], at.index), format_bytes(e.size),
                             format_bytes(m.live), format_bytes(m.reserved), format_bytes(cached_free),
                             format_bytes(m.largest_free));
  if (device_free) adv.evidence += fmt::format(", {} free on the device", format_bytes(*device_free));
  if (at.contradictions)
    adv.evidence += fmt::format(" (approximate: {} later events disagree with the end state)", at.contradictions);
  adv.evidence += "; the allocation that failed: " + oom_stack_text(snap, e.stack);
  return adv;
}

}  // namespace

void oom_rule(const snapshot::Snapshot& snap, std::vector<Advice>& out) {
  for (std::size_t d = 0; d < snap.device_traces.size(); ++d)
    for (const OomAt& at : ooms_of(snap, int(d))) out.push_back(oom_advice(snap, int(d), at));
}

}  // namespace memcomm::advise::detail
