// The PyTorch memory snapshot model (what torch.cuda.memory._dump_snapshot() writes), decoded from
// a data-only pickle (see pickle.hpp). Used by memcomm-replay and by the viewer; it depends on
// nothing of the allocator.
//
// Note [Snapshot shape]: the pickle is a dict with
//   segments:        end-state segments, each with its blocks (address, size, requested_size, state,
//                    frames). As torch's _memory_viz reads them: a block without requested_size
//                    asked for its size; a PyTorch 2.0 block has no frames but a history, whose
//                    first entry's frames and real_size are the block's stack and requested size.
//   device_traces:   one list of events per device: alloc, free_requested, free_completed,
//                    segment_alloc, segment_free, segment_map, segment_unmap, snapshot, oom
//                    (addr, size = requested unrounded size, stream, time_us (absent in old files),
//                    frames (absent on some events))
//   allocator_settings (absent in old files).
// A pickle that holds a list is torch.cuda.memory_snapshot()'s: the segments alone, as _memory_viz
// also takes them.
// An event's compile_context and user_metadata are kept as its EventNotes, an oom event's device_free
// in the event (Event::device_free); other keys (external_annotations...) are ignored.
// Note [Snapshot actions]: an event's action is the prof::EventKind of the same name (PyTorch's
// action names are kind_name()'s spellings), so the replay and the viewer read snapshots and
// memcomm traces in one vocabulary. `oom` may have no addr. Actions that are no allocator event,
// the `snapshot` marker (_snapshot() was taken here) and actions this reader does not know (a newer
// PyTorch), get EventKind::Invalid and keep their name (Snapshot::other_actions), so a newer file
// still loads and action_label() still names them; every consumer skips or counts them alike.
//
// Note [Interned frames]: events share stack traces heavily. Strings, frames and whole stacks are
// interned, so an event carries one 32-bit stack id and the viewer can show any frame cheaply.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "memcomm/trace/event.hpp"
#include "memcomm/snapshot/error.hpp"

namespace memcomm::snapshot {

inline constexpr std::uint32_t kNoStack = ~std::uint32_t{0};
inline constexpr std::int64_t kNoTime = INT64_MIN;

struct Event {
  std::uint64_t addr = 0;         // device address; 0 with has_addr() false for an `oom` without addr
  std::uint64_t size = 0;         // requested (unrounded) bytes for alloc/free; segment bytes for segment_*
  std::int64_t stream = 0;        // the cudaStream_t value as PyTorch printed it
  std::int64_t time_us = kNoTime; // kNoTime in files without time_us
  std::uint32_t stack = kNoStack; // interned stack (Snapshot::stack), kNoStack when the event has no frames
  prof::EventKind kind = prof::EventKind::Invalid;  // Note [Snapshot actions]
  std::uint8_t flags = 0;         // kHasAddr
  std::uint16_t other_name = 0;   // kind Invalid: index of the action's name in Snapshot::other_actions

  static constexpr std::uint8_t kHasAddr = 1;
  static constexpr std::uint8_t kHasDeviceFree = 2;  // an `oom` event's device_free, kept in addr
  bool has_addr() const noexcept { return flags & kHasAddr; }
  std::optional<std::uint64_t> device_free() const noexcept {
    return flags & kHasDeviceFree ? std::optional<std::uint64_t>(addr) : std::nullopt;
  }
  bool has_time() const noexcept { return time_us != kNoTime; }
};
static_assert(sizeof(Event) == 40, "Event is kept small: a trace holds tens of thousands");

// What memory_viz shows beside an event's stack, kept apart from Event (most events have neither):
// the torch.compile context the allocation ran in (_record_memory_history(compile_context=True);
// torch writes "N/A" without it, kept as none) and the user's metadata (torch.cuda.memory's
// _set_memory_metadata; "" when unset). String ids (Snapshot::str), or kNoNote.
inline constexpr std::uint32_t kNoNote = ~std::uint32_t{0};
struct EventNotes {
  std::uint32_t compile_context = kNoNote;
  std::uint32_t user_metadata = kNoNote;
  bool empty() const { return compile_context == kNoNote && user_metadata == kNoNote; }
};

enum class BlockState : std::uint8_t { active_allocated, active_pending_free, inactive, other };

struct Block {
  std::uint64_t address = 0;
  std::uint64_t size = 0;            // rounded bytes the block spans
  std::uint64_t requested_size = 0;  // what the user asked for (Note [Snapshot shape]; 0 when inactive in some files)
  std::uint32_t stack = kNoStack;
  BlockState state = BlockState::other;
  bool is_active() const noexcept {
    return state == BlockState::active_allocated || state == BlockState::active_pending_free;
  }
};

struct Segment {
  int device = 0;
  std::uint64_t address = 0;
  std::uint64_t total_size = 0;     // bytes reserved (mapped, for expandable segments)
  std::uint64_t allocated_size = 0;
  std::uint64_t active_size = 0;
  std::uint64_t requested_size = 0;
  std::int64_t stream = 0;
  bool is_small = false;            // segment_type == "small"
  bool is_expandable = false;
  std::pair<std::int64_t, std::int64_t> pool_id{0, 0};  // (0, 0) is the default pool, others are graph pools
  std::uint32_t stack = kNoStack;
  std::vector<Block> blocks;
};

struct AllocatorSettings {
  bool present = false;             // false for files that predate allocator_settings
  std::string alloc_conf;           // PYTORCH_CUDA_ALLOC_CONF as recorded
  std::int64_t max_split_size = -1; // -1: unlimited (PyTorch's default)
  double garbage_collection_threshold = 0.0;
  bool expandable_segments = false;
  // Written by memcomm's own allocator, not PyTorch's: memcomm.allocator.snapshot's host snapshots say
  // "memcomm": True (and "host": True), its CUDA adapter's PYTORCH_CUDA_ALLOC_CONF is "memcomm".
  bool memcomm = false;
  bool host = false;  // the host's memory (memcomm's CPU allocator), no CUDA device's
  // roundup_power2_divisions: (interval start in MiB, divisions); all zero by default.
  std::vector<std::pair<std::uint64_t, std::uint64_t>> roundup_power2_divisions;
};

struct Frame {
  std::uint32_t name = 0;      // string ids (Snapshot::str)
  std::uint32_t filename = 0;
  std::int32_t line = 0;
};

class Snapshot {
 public:
  std::string source;  // file name, for messages
  std::vector<Segment> segments;
  // The file lists its segments: the end state is known, an empty list too (nothing reserved at the
  // end, as after empty_cache()). False for a file of device_traces alone.
  bool has_segments = false;
  std::vector<std::vector<Event>> device_traces;  // index = device
  AllocatorSettings settings;
  std::vector<std::string> other_actions;          // names of the actions of kind Invalid (Note [Snapshot actions])

  std::size_t event_count() const;
  // Whether the run used expandable segments: its recorded setting, or in a file from before
  // allocator_settings (torch < 2.3) an expandable segment or a page map in its trace.
  bool expandable_segments() const;
  // Note [A history without free requests]: PyTorch records each free's request (free_requested)
  // before its completion, unless _record_memory_history(skip_actions=["free_requested"]) left the
  // requests out. Then a completion is the free: a block allocated before the trace was live until
  // it, where with requests recorded a completion with no request before it was freed by the user
  // before the trace began (Note [Allocations before the trace] in allocations.hpp), and `memory`
  // lost every such block (17.7 of a real run's 21.3 GiB peak). The file does not say which; its
  // trace does: with requests recorded, no completion frees a block the trace allocated without a
  // request between them. A trace with neither requests nor such a completion keeps the default.
  // Reads the traces up to their first request (all of them in a file without): ask once per fold.
  bool free_requests_recorded() const;
  // Whether a segment is in a private pool (a CUDA graph's, a torch.cuda.MemPool's): pool_id not (0, 0).
  bool has_private_pools() const;
  // The devices the file knows: one per device_traces list, and those its segments are on (a host
  // snapshot's lists below 255 only place its own: Note [A host snapshot's device]).
  std::set<int> devices() const;
  std::string_view str(std::uint32_t id) const { return strings_[id]; }
  // The frames of an interned stack, innermost first (as PyTorch stores them).
  std::pair<const std::uint32_t*, std::size_t> stack(std::uint32_t id) const;
  const Frame& frame(std::uint32_t id) const { return frames_[id]; }
  std::size_t stack_count() const { return stacks_.size(); }
  // Bytes held by the interned strings, frames and stacks (Note [Interned frames]): what keeping
  // frames costs a consumer that holds the Snapshot for its stacks (the viewer's memory budget).
  std::size_t interned_bytes() const;
  // Drops the lookup tables that interning uses (a hash node per string, frame and stack), for a
  // consumer that keeps the Snapshot for its stacks only, and the tables' growth slack; the next
  // intern_*() rebuilds them.
  void release_interning();
  // The event's action as the file spells it ("alloc", "snapshot", "some_future_action").
  std::string_view action_label(const Event& e) const;
  // The notes of device_traces[device][index] (EventNotes), or nullptr where it has none.
  const EventNotes* notes_of(std::size_t device, std::size_t index) const;
  void set_notes(std::size_t device, std::size_t index, const EventNotes& notes);
  // Moves every note of `from`'s events to `to`'s (a host snapshot read as device 255).
  void move_notes(std::size_t from, std::size_t to);

  // Interning, used while building (and by tests that build snapshots by hand).
  std::uint32_t intern_string(std::string_view s);
  std::uint32_t intern_frame(const Frame& f);
  std::uint32_t intern_stack(const std::vector<std::uint32_t>& frame_ids);

 private:
  std::vector<std::string> strings_;
  std::unordered_map<std::string, std::uint32_t> string_ids_;
  std::vector<Frame> frames_;
  std::unordered_map<std::uint64_t, std::vector<std::uint32_t>> frame_buckets_;  // hash -> frame ids
  std::vector<std::uint32_t> stack_frames_;                                     // all stacks, back to back
  std::vector<std::pair<std::uint32_t, std::uint32_t>> stacks_;                 // (offset, count)
  std::unordered_map<std::uint64_t, std::vector<std::uint32_t>> stack_buckets_;  // hash -> stack ids
  bool released_ = false;  // release_interning() ran: the three maps above are to be rebuilt
  std::unordered_map<std::uint64_t, EventNotes> notes_;  // by note_key(device, index)
  static std::uint64_t note_key(std::size_t device, std::size_t index) {
    return std::uint64_t{device} << 48 | std::uint64_t{index};
  }
  void reindex();
};

struct ParseOptions {
  bool keep_frames = true;  // false skips frame interning (faster; replay does not need frames)
  void (*progress)(std::uint64_t done, std::uint64_t total, void* user) = nullptr;
  void* progress_user = nullptr;
};

// Decodes a snapshot from pickle bytes. Throws ReadError naming `source` (and a byte offset for
// pickle-level problems) on bad input.
Snapshot parse_snapshot(const void* data, std::size_t size, const std::string& source, const ParseOptions& opts = {});
// Reads and decodes a file.
Snapshot load_snapshot(const std::string& path, const ParseOptions& opts = {});
// Reads a whole file (ReadError when it cannot).
std::vector<std::uint8_t> read_file_bytes(const std::string& path);
// Whether `first` can begin a snapshot's pickle: PROTO (0x80; torch writes protocol 2 and later),
// or the MARK or EMPTY_DICT that a dict pickled with protocol 0 or 1 begins with (none of memcomm's
// other inputs starts so: .mct files with "MEMCTRC", JSON with '{', gzip with 0x1f).
bool is_pickle_start(std::uint8_t first);
// True when the file begins as a pickle (is_pickle_start); false for other files and for files
// that cannot be read (the loader then says why).
bool is_snapshot_file(const std::string& path);

}  // namespace memcomm::snapshot
