// Builds the Snapshot model from a decoded pickle document. See Note [Snapshot shape] and
// Note [Interned frames] in snapshot.hpp.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>
#include <unordered_set>

#include <fmt/format.h>

#include "memcomm/common/input_file.hpp"
#include "memcomm/snapshot/pickle.hpp"
#include "memcomm/snapshot/snapshot.hpp"

namespace memcomm::snapshot {
namespace {

using pickle::Container;
using pickle::Document;
using pickle::Kind;
using pickle::Value;

std::uint64_t mix(std::uint64_t h, std::uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  return h;
}

using prof::EventKind;

// The `snapshot` marker and unknown actions are EventKind::Invalid (Note [Snapshot actions]).
EventKind parse_action(std::string_view a) {
  switch (a.size()) {
    case 3: if (a == "oom") return EventKind::Oom; break;
    case 5: if (a == "alloc") return EventKind::Alloc; break;
    case 11: if (a == "segment_map") return EventKind::SegmentMap; break;
    case 12: if (a == "segment_free") return EventKind::SegmentFree; break;
    case 13:
      if (a == "segment_alloc") return EventKind::SegmentAlloc;
      if (a == "segment_unmap") return EventKind::SegmentUnmap;
      break;
    case 14:
      if (a == "free_requested") return EventKind::FreeRequested;
      if (a == "free_completed") return EventKind::FreeCompleted;
      break;
    default: break;
  }
  return EventKind::Invalid;
}

BlockState parse_state(std::string_view s) {
  if (s == "active_allocated") return BlockState::active_allocated;
  if (s == "active_pending_free") return BlockState::active_pending_free;
  if (s == "inactive") return BlockState::inactive;
  return BlockState::other;
}

// Checked conversions whose error text (`what()`, a callable) is only built when the check fails:
// formatting a field path for each of a million fields would dominate the load time.
template <class What>
std::int64_t get_int(const Document& doc, const Value& v, What&& what) {
  if (v.kind == Kind::integer || v.kind == Kind::boolean) return v.i;
  return doc.as_int(v, what());  // throws with the message
}
// A value from 2^63 to 2^64 - 1, which pickle writes as a 9-byte LONG1 (its last byte a 0x00 sign
// byte) and the reader keeps as a big_int: an address in the upper half of the space, as memory_viz
// reads it. Nothing for a negative or wider value.
std::optional<std::uint64_t> unsigned_from_big_int(std::string_view little_endian) {
  if (little_endian.empty() || (static_cast<std::uint8_t>(little_endian.back()) & 0x80) != 0) return std::nullopt;
  while (!little_endian.empty() && little_endian.back() == '\0') little_endian.remove_suffix(1);
  if (little_endian.size() > 8) return std::nullopt;
  std::uint64_t u = 0;
  for (std::size_t k = little_endian.size(); k-- > 0;) u = (u << 8) | static_cast<std::uint8_t>(little_endian[k]);
  return u;
}

// Addresses and sizes are non-negative 64-bit values; a negative one means a corrupt file.
template <class What>
std::uint64_t get_u64(const Document& doc, const Value& v, What&& what) {
  if (v.kind == Kind::big_int)
    if (const auto u = unsigned_from_big_int(doc.text(v))) return *u;
  std::int64_t i = get_int(doc, v, what);
  if (i < 0) throw ReadError(doc.source(), kNoOffset, fmt::format("{}: negative value {}", what(), i));
  return static_cast<std::uint64_t>(i);
}
// Note [Values no real snapshot holds]: a byte count beyond 2^57 (the largest virtual address space
// any CPU or GPU has, five-level paging's) or a block that wraps past the top of the address space
// cannot come from an allocator (addresses themselves may lie anywhere: tagged or sign-extended
// pointers sit in the upper half); nor can a time_us whose nanoseconds overflow 64 bits (the year
// 2262), a device number below 0, or 255 devices and more (device 255 is host memory in every
// memcomm tool, prof::kHostDevice); nor a segment whose blocks hold more than its total_size, or an
// allocated block whose requested bytes exceed its size. Read as they are, they wrap sums and clocks
// into figures that look right (a segment of 10 bytes holding 2 MiB read as fragmentation -511);
// the file is refused as corrupt instead.
constexpr std::uint64_t kMaxBytes = std::uint64_t{1} << 57;
constexpr std::int64_t kMaxTimeUs = std::numeric_limits<std::int64_t>::max() / 1000;
constexpr std::int64_t kMaxDevices = prof::kHostDevice;

template <class What>
std::uint64_t checked_bytes(const Document& doc, std::uint64_t n, What&& what) {
  if (n > kMaxBytes)
    throw ReadError(doc.source(), kNoOffset, fmt::format("{}: {} bytes, more than any address space holds", what(), n));
  return n;
}
template <class What>
std::uint64_t get_bytes(const Document& doc, const Value& v, What&& what) {
  return checked_bytes(doc, get_u64(doc, v, what), what);
}
template <class What>
std::string_view get_str(const Document& doc, const Value& v, What&& what) {
  if (v.kind == Kind::string) return doc.text(v);
  return doc.as_string(v, what());  // throws with the message
}

class Builder {
 public:
  // `input_bytes` bounds the model's size; see Note [Expansion budget].
  Builder(const Document& doc, Snapshot& snap, const ParseOptions& opts, std::uint64_t input_bytes)
      : doc_(doc), snap_(snap), opts_(opts),
        frame_of_container_(opts.keep_frames ? doc.container_count() : 0, kUnset),
        stack_of_container_(opts.keep_frames ? doc.container_count() : 0, kUnset),
        budget_(input_bytes + 4096) {}

  void build() {
    const Value& root = doc_.root();
    if (root.kind == Kind::list) return build_segments(root);  // torch.cuda.memory_snapshot(): Note [Snapshot shape]
    if (root.kind != Kind::dict) {
      throw ReadError(doc_.source(), kNoOffset,
                      fmt::format("not a PyTorch memory snapshot: the pickle holds a {}, not a dict", pickle::kind_name(root.kind)));
    }
    const Value* segs = doc_.find(root, "segments");
    const Value* traces = doc_.find(root, "device_traces");
    if (!segs && !traces) {
      throw ReadError(doc_.source(), kNoOffset, "not a PyTorch memory snapshot: neither 'segments' nor 'device_traces' is present");
    }
    if (segs) build_segments(*segs);
    if (traces) {
      const Container& devs = doc_.as_sequence(*traces, "device_traces");
      if (devs.items.size() > kMaxDevices)
        throw ReadError(doc_.source(), kNoOffset, fmt::format("device_traces: {} devices, more than the {} memcomm reads",
                                                              devs.items.size(), kMaxDevices));
      snap_.device_traces.resize(devs.items.size());
      for (std::size_t d = 0; d < devs.items.size(); ++d) {
        const Value& dv = devs.items[d];
        if (dv.is_none()) continue;
        const Container& evs = doc_.as_sequence(dv, fmt::format("device_traces[{}]", d));
        auto& out = snap_.device_traces[d];
        spend(evs.items.size(), "device_traces");
        out.reserve(evs.items.size());
        for (std::size_t k = 0; k < evs.items.size(); ++k) out.push_back(event(evs.items[k], d, k));
      }
    }
    if (const Value* s = doc_.find(root, "allocator_settings"); s && s->kind == Kind::dict) settings(*s);
    if (snap_.settings.host) place_host_memory();
  }

 private:
  static constexpr std::uint32_t kUnset = ~std::uint32_t{0} - 1;

  void build_segments(const Value& segs) {
    const Container& list = doc_.as_sequence(segs, "segments");
    snap_.has_segments = true;
    snap_.segments.reserve(list.items.size());
    spend(list.items.size(), "segments");
    for (std::size_t k = 0; k < list.items.size(); ++k) snap_.segments.push_back(segment(list.items[k], k));
  }

  // Note [Expansion budget]: the memo lets a small hostile pickle reference one list of 100,000
  // events from 100,000 devices (or one block list from every segment); copying that out would need
  // 10^10 model entries. Each event, block and segment of a genuine file takes many input bytes, so
  // the model may hold at most about one entry per input byte; beyond that the file is refused.
  void spend(std::size_t n, const char* what) {
    if (n > budget_) {
      throw ReadError(doc_.source(), kNoOffset,
                      fmt::format("{}: the file references more entries than it could hold (shared references "
                                  "expanding beyond {} entries); refusing it", what, budget_));
    }
    budget_ -= n;
  }

  static bool is_block_action(EventKind k) {
    switch (k) {
      case EventKind::Alloc: case EventKind::FreeRequested: case EventKind::FreeCompleted:
      case EventKind::SegmentAlloc: case EventKind::SegmentFree: case EventKind::SegmentMap: case EventKind::SegmentUnmap:
        return true;
      default:
        return false;
    }
  }

  Event event(const Value& v, std::size_t dev, std::size_t idx) {
    if (v.kind != Kind::dict) throw_at(dev, idx, fmt::format("event is a {}, not a dict", pickle::kind_name(v.kind)));
    Event e;
    bool have_action = false, have_size = false;
    std::optional<std::uint64_t> device_free;
    EventNotes notes;
    const auto& items = doc_.container(v).items;
    for (std::size_t k = 0; k + 1 < items.size(); k += 2) {
      const Value& key = items[k];
      const Value& val = items[k + 1];
      if (key.kind != Kind::string)  // torch writes only string keys: a corrupt file, not a format to skip
        throw_at(dev, idx, fmt::format("event has a {} key, not a string", pickle::kind_name(key.kind)));
      std::string_view name = doc_.text(key);
      if (name == "action") {
        std::string_view a = get_str(doc_, val, [&] { return where(dev, idx, "action"); });
        e.kind = parse_action(a);
        if (e.kind == EventKind::Invalid) e.other_name = other_action(a);
        have_action = true;
      } else if (name == "addr") {
        if (!val.is_none()) {
          e.addr = get_u64(doc_, val, [&] { return where(dev, idx, "addr"); });
          e.flags |= Event::kHasAddr;
        }
      } else if (name == "device_free") {  // an oom event's: the device's free bytes then
        if (!val.is_none()) device_free = get_u64(doc_, val, [&] { return where(dev, idx, "device_free"); });
      } else if (name == "size") {  // checked below: an oom's request may be any size
        e.size = get_u64(doc_, val, [&] { return where(dev, idx, "size"); });
        have_size = true;
      } else if (name == "stream") {
        if (!val.is_none()) e.stream = get_int(doc_, val, [&] { return where(dev, idx, "stream"); });
      } else if (name == "time_us") {
        if (!val.is_none()) e.time_us = get_int(doc_, val, [&] { return where(dev, idx, "time_us"); });
        if (e.has_time() && (e.time_us > kMaxTimeUs || e.time_us < -kMaxTimeUs))
          throw_at(dev, idx, fmt::format("time_us {} is out of range", e.time_us));
      } else if (name == "frames") {
        if (opts_.keep_frames) e.stack = stack(val);
      } else if (name == "compile_context" || name == "user_metadata") {
        if (opts_.keep_frames) note(name, val, notes);
      }
    }
    if (!have_action) throw_at(dev, idx, "event has no 'action'");
    snap_.set_notes(dev, idx, notes);
    // The request an oom event records is what the script asked for, sane or not: a shape computed
    // wrong asks for petabytes, and that file is the one to read (advise says so). A block's size is
    // bounded as every other (kMaxBytes).
    if (e.kind != EventKind::Oom) checked_bytes(doc_, e.size, [&] { return where(dev, idx, "size"); });
    if (e.kind == EventKind::Oom && device_free && !e.has_addr()) {  // an oom names no block: addr carries it
      e.addr = *device_free;
      e.flags |= Event::kHasDeviceFree;
    }
    // PyTorch writes both for every event; without them a block or segment action says nothing, and
    // reading it as 0 bytes at address 0 would fold wrong figures silently.
    if (is_block_action(e.kind) && !have_size) throw_at(dev, idx, "event has no 'size'");
    if (is_block_action(e.kind) && !e.has_addr()) throw_at(dev, idx, "event has no 'addr'");
    if (e.kind != EventKind::Oom && e.addr + e.size < e.addr)  // an oom's addr is its device_free: no block
      throw_at(dev, idx, "its block wraps past the top of the address space");
    return e;
  }

  Segment segment(const Value& v, std::size_t idx) {
    auto what = [idx] { return fmt::format("segments[{}]", idx); };
    auto field = [&](const char* f) { return [&what, f] { return what() + "." + f; }; };
    if (v.kind != Kind::dict) throw ReadError(doc_.source(), kNoOffset, what() + ": not a dict");
    Segment s;
    auto get = [&](std::string_view key) { return doc_.find(v, key); };
    auto req = [&](std::string_view key) -> const Value& {
      const Value* p = get(key);
      if (!p) throw ReadError(doc_.source(), kNoOffset, fmt::format("{}: missing '{}'", what(), key));
      return *p;
    };
    s.address = get_u64(doc_, req("address"), field("address"));
    s.total_size = get_bytes(doc_, req("total_size"), field("total_size"));
    if (const Value* p = get("device")) {
      const std::int64_t d = get_int(doc_, *p, field("device"));
      if (d < 0 || d >= kMaxDevices)
        throw ReadError(doc_.source(), kNoOffset, fmt::format("{}: device {} is out of range (0-{})", what(), d, kMaxDevices - 1));
      s.device = static_cast<int>(d);
    }
    if (const Value* p = get("allocated_size")) s.allocated_size = get_bytes(doc_, *p, field("allocated_size"));
    if (const Value* p = get("active_size")) s.active_size = get_bytes(doc_, *p, field("active_size"));
    if (const Value* p = get("requested_size")) s.requested_size = get_bytes(doc_, *p, field("requested_size"));
    if (const Value* p = get("stream"); p && !p->is_none()) s.stream = get_int(doc_, *p, field("stream"));
    if (const Value* p = get("segment_type"); p && p->kind == Kind::string) s.is_small = doc_.text(*p) == "small";
    if (const Value* p = get("is_expandable"); p && !p->is_none()) s.is_expandable = doc_.as_bool(*p, field("is_expandable")());
    if (const Value* p = get("segment_pool_id"); p && (p->kind == Kind::tuple || p->kind == Kind::list)) {
      const auto& t = doc_.container(*p).items;
      if (t.size() == 2 && t[0].kind == Kind::integer && t[1].kind == Kind::integer) s.pool_id = {t[0].i, t[1].i};
    }
    if (const Value* p = get("frames"); p && opts_.keep_frames) s.stack = stack(*p);
    if (const Value* p = get("blocks")) {
      const Container& blocks = p->kind == Kind::list ? doc_.container(*p) : doc_.as_sequence(*p, field("blocks")());
      spend(blocks.items.size(), "segment blocks");
      s.blocks.reserve(blocks.items.size());
      std::uint64_t next_addr = s.address;  // old files leave block addresses implicit
      std::uint64_t in_blocks = 0;
      for (std::size_t b = 0; b < blocks.items.size(); ++b) {
        const Value& bv = blocks.items[b];
        auto bwhat = [&what, b] { return fmt::format("{}.blocks[{}]", what(), b); };
        auto bfield = [&](const char* f) { return [&bwhat, f] { return bwhat() + "." + f; }; };
        if (bv.kind != Kind::dict) throw ReadError(doc_.source(), kNoOffset, bwhat() + ": not a dict");
        Block blk;
        const Value* size = doc_.find(bv, "size");
        if (!size) throw ReadError(doc_.source(), kNoOffset, bwhat() + ": missing 'size'");
        blk.size = get_bytes(doc_, *size, bfield("size"));
        const Value* addr = doc_.find(bv, "address");
        blk.address = addr ? get_u64(doc_, *addr, bfield("address")) : next_addr;
        next_addr = blk.address + blk.size;
        if (next_addr < blk.address) throw ReadError(doc_.source(), kNoOffset, bwhat() + ": wraps past the top of the address space");
        const Value* r = doc_.find(bv, "requested_size");
        blk.requested_size = r ? get_bytes(doc_, *r, bfield("requested_size")) : blk.size;
        if (const Value* st = doc_.find(bv, "state"); st && st->kind == Kind::string) blk.state = parse_state(doc_.text(*st));
        // (an inactive block keeps the requested_size of an earlier allocation: PyTorch's files hold
        // 9 MiB requested in a 2 MiB free block)
        if (blk.state == BlockState::active_allocated && blk.requested_size > blk.size)
          throw ReadError(doc_.source(), kNoOffset, fmt::format("{}: requested_size {} is more than its size {}",
                                                                bwhat(), blk.requested_size, blk.size));
        if (const Value* f = doc_.find(bv, "frames")) {
          if (opts_.keep_frames) blk.stack = stack(*f);
        } else if (const Value* h = doc_.find(bv, "history")) {
          first_history(*h, blk, bfield);
        }
        s.blocks.push_back(blk);
        in_blocks += blk.size;  // each at most 2^57: no wrap
      }
      if (in_blocks > s.total_size)
        throw ReadError(doc_.source(), kNoOffset, fmt::format("{}: its blocks hold {} bytes, more than its total_size {}",
                                                              what(), in_blocks, s.total_size));
    }
    return s;
  }

  // A PyTorch 2.0 block (no "frames"): its stack and requested size are its first history entry's
  // "frames" and "real_size" (Note [Snapshot shape]).
  template <class Field>
  void first_history(const Value& history, Block& blk, Field&& bfield) {
    if ((history.kind != Kind::list && history.kind != Kind::tuple) || doc_.container(history).items.empty()) return;
    const Value& h = doc_.container(history).items.front();
    if (h.kind != Kind::dict) return;
    if (const Value* r = doc_.find(h, "real_size")) blk.requested_size = get_bytes(doc_, *r, bfield("history[0].real_size"));
    if (const Value* f = doc_.find(h, "frames"); f && opts_.keep_frames) blk.stack = stack(*f);
  }

  void settings(const Value& v) {
    AllocatorSettings& out = snap_.settings;
    out.present = true;
    if (const Value* p = doc_.find(v, "PYTORCH_CUDA_ALLOC_CONF"); p && p->kind == Kind::string) out.alloc_conf = std::string(doc_.text(*p));
    if (const Value* p = doc_.find(v, "max_split_size"); p && p->kind == Kind::integer) out.max_split_size = p->i;
    if (const Value* p = doc_.find(v, "garbage_collection_threshold"); p && (p->kind == Kind::floating || p->kind == Kind::integer))
      out.garbage_collection_threshold = doc_.as_number(*p, "allocator_settings.garbage_collection_threshold");
    if (const Value* p = doc_.find(v, "expandable_segments"); p && (p->kind == Kind::boolean || p->kind == Kind::integer))
      out.expandable_segments = p->i != 0;
    if (const Value* p = doc_.find(v, "memcomm"); p && (p->kind == Kind::boolean || p->kind == Kind::integer))
      out.memcomm = p->i != 0;
    if (const Value* p = doc_.find(v, "host"); p && (p->kind == Kind::boolean || p->kind == Kind::integer))
      out.host = p->i != 0;
    if (out.alloc_conf == "memcomm") out.memcomm = true;  // the CUDA adapter's torch.cuda.memory._snapshot()
    if (const Value* p = doc_.find(v, "roundup_power2_divisions"); p && p->kind == Kind::dict) {
      const auto& items = doc_.container(*p).items;
      for (std::size_t k = 0; k + 1 < items.size(); k += 2) {
        if (items[k].kind != Kind::string || items[k + 1].kind != Kind::integer) continue;
        std::string key(doc_.text(items[k]));
        char* end = nullptr;
        unsigned long long mib = std::strtoull(key.c_str(), &end, 10);
        if (end == key.c_str() || items[k + 1].i < 0) continue;
        out.roundup_power2_divisions.emplace_back(mib, static_cast<std::uint64_t>(items[k + 1].i));
      }
    }
  }

  // Note [A host snapshot's device]: memcomm's CPU allocator writes its snapshots in PyTorch's
  // format, where the host's memory can only be device 0 (device_traces is a list by device, and
  // memory_viz reads it so); every memcomm tool calls the host's memory device 255
  // (prof::kHostDevice). A snapshot that says it is the host's (allocator_settings "host": True) is
  // read as device 255, so --device 255 picks it, its replays round as host memory does, and the
  // figures say host, not GPU 0.
  void place_host_memory() {
    if (snap_.device_traces.size() > 1) return;  // not one device: not what memcomm's CPU allocator writes
    for (const Segment& seg : snap_.segments)
      if (seg.device != 0) return;
    for (Segment& seg : snap_.segments) seg.device = prof::kHostDevice;
    if (snap_.device_traces.empty()) return;
    std::vector<Event> events = std::move(snap_.device_traces[0]);
    snap_.device_traces.assign(std::size_t{prof::kHostDevice} + 1, {});
    snap_.device_traces[prof::kHostDevice] = std::move(events);
    snap_.move_notes(0, prof::kHostDevice);
  }

  // Interns the stack behind a frames list; the same pickle list object maps to the same stack.
  // An event's compile_context or user_metadata (EventNotes): a string that says something, or none.
  void note(std::string_view name, const Value& v, EventNotes& notes) {
    if (v.kind != Kind::string) return;
    const std::string_view text = doc_.text(v);
    if (text.empty() || text == "N/A") return;
    (name == "compile_context" ? notes.compile_context : notes.user_metadata) = snap_.intern_string(text);
  }

  std::uint32_t stack(const Value& v) {
    if (v.kind != Kind::list && v.kind != Kind::tuple) return kNoStack;
    if (stack_of_container_[v.ref] != kUnset) return stack_of_container_[v.ref];
    const auto& items = doc_.container(v).items;
    scratch_.clear();
    for (const Value& f : items) {
      std::uint32_t id = frame(f);
      if (id != kNoStack) scratch_.push_back(id);
    }
    std::uint32_t id = scratch_.empty() ? kNoStack : snap_.intern_stack(scratch_);
    stack_of_container_[v.ref] = id;
    return id;
  }

  // A line number that does not fit an int32 (a corrupt file) reads as 0, "no line", not wrapped.
  static std::int32_t line_number(std::int64_t i) {
    return i >= 0 && i <= std::numeric_limits<std::int32_t>::max() ? static_cast<std::int32_t>(i) : 0;
  }

  std::uint32_t frame(const Value& v) {
    if (v.kind != Kind::dict) return kNoStack;
    if (frame_of_container_[v.ref] != kUnset) return frame_of_container_[v.ref];
    Frame f;
    bool named = false;  // a frame with neither a name nor a file name says nothing: dropped
    const auto& items = doc_.container(v).items;
    for (std::size_t k = 0; k + 1 < items.size(); k += 2) {
      if (items[k].kind != Kind::string) continue;
      std::string_view key = doc_.text(items[k]);
      const Value& val = items[k + 1];
      if (key == "name" && val.kind == Kind::string) f.name = snap_.intern_string(doc_.text(val)), named = true;
      else if (key == "filename" && val.kind == Kind::string) f.filename = snap_.intern_string(doc_.text(val)), named = true;
      else if (key == "line" && val.kind == Kind::integer) f.line = line_number(val.i);
    }
    std::uint32_t id = named ? snap_.intern_frame(f) : kNoStack;
    frame_of_container_[v.ref] = id;
    return id;
  }

  std::uint16_t other_action(std::string_view a) {
    for (std::size_t k = 0; k < snap_.other_actions.size(); ++k) {
      if (snap_.other_actions[k] == a) return static_cast<std::uint16_t>(k);
    }
    if (snap_.other_actions.size() >= std::numeric_limits<std::uint16_t>::max()) {
      throw ReadError(doc_.source(), kNoOffset, "too many distinct unknown event actions");
    }
    snap_.other_actions.emplace_back(a);
    return static_cast<std::uint16_t>(snap_.other_actions.size() - 1);
  }

  std::string where(std::size_t dev, std::size_t idx, std::string_view field) const {
    return fmt::format("device_traces[{}][{}].{}", dev, idx, field);
  }
  [[noreturn]] void throw_at(std::size_t dev, std::size_t idx, const std::string& what) const {
    throw ReadError(doc_.source(), kNoOffset, fmt::format("device_traces[{}][{}]: {}", dev, idx, what));
  }

  const Document& doc_;
  Snapshot& snap_;
  const ParseOptions& opts_;
  std::vector<std::uint32_t> frame_of_container_;
  std::vector<std::uint32_t> stack_of_container_;
  std::vector<std::uint32_t> scratch_;
  std::uint64_t budget_;  // model entries still allowed (Note [Expansion budget])
};

}  // namespace

std::set<int> Snapshot::devices() const {
  std::set<int> out;
  for (std::size_t d = 0; d < device_traces.size(); ++d)
    if (!settings.host || !device_traces[d].empty()) out.insert(static_cast<int>(d));
  for (const Segment& seg : segments) out.insert(seg.device);
  return out;
}

bool Snapshot::expandable_segments() const {
  if (settings.present) return settings.expandable_segments;
  const auto maps = [](const Event& e) { return e.kind == EventKind::SegmentMap || e.kind == EventKind::SegmentUnmap; };
  return std::any_of(segments.begin(), segments.end(), [](const Segment& s) { return s.is_expandable; }) ||
         std::any_of(device_traces.begin(), device_traces.end(),
                     [&](const std::vector<Event>& t) { return std::any_of(t.begin(), t.end(), maps); });
}

bool Snapshot::free_requests_recorded() const {  // Note [A history without free requests]
  for (const std::vector<Event>& trace : device_traces) {
    std::unordered_set<std::uint64_t> allocated;  // in the trace, no request since
    for (const Event& e : trace) {
      if (e.kind == EventKind::FreeRequested) return true;
      if (e.kind == EventKind::Alloc) allocated.insert(e.addr);
      else if (e.kind == EventKind::FreeCompleted && allocated.count(e.addr)) return false;
    }
  }
  return true;
}

const EventNotes* Snapshot::notes_of(std::size_t device, std::size_t index) const {
  const auto it = notes_.find(note_key(device, index));
  return it == notes_.end() ? nullptr : &it->second;
}

void Snapshot::set_notes(std::size_t device, std::size_t index, const EventNotes& notes) {
  if (!notes.empty()) notes_[note_key(device, index)] = notes;
}

void Snapshot::move_notes(std::size_t from, std::size_t to) {
  std::unordered_map<std::uint64_t, EventNotes> moved;
  for (const auto& [key, notes] : notes_)
    moved.emplace(key >> 48 == from ? note_key(to, key & ((std::uint64_t{1} << 48) - 1)) : key, notes);
  notes_ = std::move(moved);
}

bool Snapshot::has_private_pools() const {
  return std::any_of(segments.begin(), segments.end(),
                     [](const Segment& s) { return s.pool_id != std::pair<std::int64_t, std::int64_t>{0, 0}; });
}

std::size_t Snapshot::event_count() const {
  std::size_t n = 0;
  for (const auto& d : device_traces) n += d.size();
  return n;
}

std::size_t Snapshot::interned_bytes() const {
  // Hash maps: a bucket pointer each, and a node per entry (value, hash and next pointer).
  constexpr std::size_t kNode = 2 * sizeof(void*);
  std::size_t n = strings_.capacity() * sizeof(std::string) + frames_.capacity() * sizeof(Frame) +
                  stack_frames_.capacity() * sizeof(std::uint32_t) + stacks_.capacity() * sizeof(stacks_[0]);
  for (const std::string& s : strings_) n += s.capacity() > 15 ? s.capacity() + 1 : 0;  // beyond the SSO buffer
  n += string_ids_.bucket_count() * sizeof(void*) + string_ids_.size() * (kNode + sizeof(std::string) + 8);
  for (const auto* buckets : {&frame_buckets_, &stack_buckets_}) {
    n += buckets->bucket_count() * sizeof(void*);
    for (const auto& [hash, ids] : *buckets) n += kNode + sizeof(hash) + sizeof(ids) + ids.capacity() * sizeof(std::uint32_t);
  }
  return n;
}

std::pair<const std::uint32_t*, std::size_t> Snapshot::stack(std::uint32_t id) const {
  if (id >= stacks_.size()) return {nullptr, 0};
  return {stack_frames_.data() + stacks_[id].first, stacks_[id].second};
}

std::string_view Snapshot::action_label(const Event& e) const {
  if (e.kind != EventKind::Invalid) return prof::kind_name(e.kind);
  // Two returns, not a ?: whose std::string result would be a temporary the view outlives.
  if (e.other_name < other_actions.size()) return other_actions[e.other_name];
  return "other";
}

std::uint32_t Snapshot::intern_string(std::string_view s) {
  if (released_) reindex();
  if (strings_.empty()) {  // id 0 is always "" so a default Frame reads as empty
    strings_.emplace_back();
    string_ids_.emplace(std::string(), 0);
  }
  auto it = string_ids_.find(std::string(s));
  if (it != string_ids_.end()) return it->second;
  auto id = static_cast<std::uint32_t>(strings_.size());
  strings_.emplace_back(s);
  string_ids_.emplace(std::string(s), id);
  return id;
}

namespace {
std::uint64_t frame_hash(const Frame& f) { return mix(mix(mix(0, f.name), f.filename), static_cast<std::uint32_t>(f.line)); }
std::uint64_t stack_hash(const std::uint32_t* ids, std::size_t n) {
  std::uint64_t h = n;
  for (std::size_t k = 0; k < n; ++k) h = mix(h, ids[k]);
  return h;
}
}  // namespace

void Snapshot::release_interning() {
  string_ids_ = {};
  frame_buckets_ = {};
  stack_buckets_ = {};
  // The tables stop growing here: drop their growth slack too.
  strings_.shrink_to_fit();
  frames_.shrink_to_fit();
  stack_frames_.shrink_to_fit();
  stacks_.shrink_to_fit();
  released_ = true;
}

void Snapshot::reindex() {
  released_ = false;
  for (std::uint32_t i = 0; i < strings_.size(); ++i) string_ids_.emplace(strings_[i], i);
  for (std::uint32_t i = 0; i < frames_.size(); ++i) frame_buckets_[frame_hash(frames_[i])].push_back(i);
  for (std::uint32_t i = 0; i < stacks_.size(); ++i)
    stack_buckets_[stack_hash(stack_frames_.data() + stacks_[i].first, stacks_[i].second)].push_back(i);
}

std::uint32_t Snapshot::intern_frame(const Frame& f) {
  if (released_) reindex();
  if (strings_.empty()) intern_string("");
  auto& bucket = frame_buckets_[frame_hash(f)];
  for (std::uint32_t id : bucket) {
    const Frame& g = frames_[id];
    if (g.name == f.name && g.filename == f.filename && g.line == f.line) return id;
  }
  auto id = static_cast<std::uint32_t>(frames_.size());
  frames_.push_back(f);
  bucket.push_back(id);
  return id;
}

std::uint32_t Snapshot::intern_stack(const std::vector<std::uint32_t>& ids) {
  if (released_) reindex();
  auto& bucket = stack_buckets_[stack_hash(ids.data(), ids.size())];
  for (std::uint32_t sid : bucket) {
    const auto& [off, n] = stacks_[sid];
    if (n == ids.size() && std::equal(ids.begin(), ids.end(), stack_frames_.begin() + off)) return sid;
  }
  auto sid = static_cast<std::uint32_t>(stacks_.size());
  stacks_.emplace_back(static_cast<std::uint32_t>(stack_frames_.size()), static_cast<std::uint32_t>(ids.size()));
  stack_frames_.insert(stack_frames_.end(), ids.begin(), ids.end());
  bucket.push_back(sid);
  return sid;
}

Snapshot parse_snapshot(const void* data, std::size_t size, const std::string& source, const ParseOptions& opts) {
  pickle::LoadOptions lo;
  lo.progress = opts.progress;
  lo.progress_user = opts.progress_user;
  pickle::Document doc = pickle::load(data, size, source, lo);
  Snapshot snap;
  snap.source = source;
  Builder(doc, snap, opts, size).build();
  return snap;
}

std::vector<std::uint8_t> read_file_bytes(const std::string& path) {
  if (const std::string problem = input_file_problem(path); !problem.empty()) throw ReadError(path, kNoOffset, problem);
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw ReadError(path, kNoOffset, fmt::format("cannot open: {}", std::strerror(errno)));
  std::vector<std::uint8_t> bytes;
  std::uint8_t buf[1 << 16];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) bytes.insert(bytes.end(), buf, buf + n);
  const int err = std::ferror(f) ? (errno ? errno : EIO) : 0;
  std::fclose(f);
  if (err) throw ReadError(path, bytes.size(), fmt::format("read error: {}", std::strerror(err)));
  return bytes;
}

bool is_snapshot_file(const std::string& path) {
  if (!input_file_problem(path).empty()) return false;  // Note [Inputs are regular files]: the reader says why
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return false;
  const int first = std::fgetc(f);
  std::fclose(f);
  return first != EOF && is_pickle_start(static_cast<std::uint8_t>(first));
}

bool is_pickle_start(std::uint8_t first) { return first == 0x80 || first == '(' || first == '}'; }

Snapshot load_snapshot(const std::string& path, const ParseOptions& opts) {
  std::vector<std::uint8_t> bytes = read_file_bytes(path);
  return parse_snapshot(bytes.data(), bytes.size(), path, opts);
}

}  // namespace memcomm::snapshot
