// Allocation lifetimes: each block a user held, from its alloc to its free, with the producer's
// stack id. The one model behind memory_viz-style views (issue 18): the viewer's allocation bands,
// "who holds memory at t" (live bytes by stack), the peak, and `memcomm-trace memory`.
//
// Algorithm: AllocationBuilder pairs, per (device, address), each Alloc with the next free of that
// address (FreeRequested; a FreeCompleted without a request closes it too, for producers that record
// only one free). Note [Allocations before the trace] covers blocks whose alloc the trace missed.
// live_by_stack(t) is one pass over the lifetimes (O(allocations)); peak_live() one sweep over
// the alloc and free times (O(n log n)).
//
// Note [Live means allocated]: an allocation is live at t when alloc_ns <= t < free_ns: the state
// after every event at or before t. Live bytes are the bytes the user asked for (a snapshot's
// `size` on alloc, a block's requested_size), the figure memory_viz's memory() prints for
// active_allocated blocks; the allocator's rounding is not a user's allocation. A block freed by the
// user but still in use by a stream (PyTorch's active_pending_free) is no longer live.
//
// Note [Allocations before the trace]: PyTorch keeps its history in a ring buffer, so a snapshot's
// trace often starts after many blocks were allocated. A free of an address the trace never
// allocated is such a block: its allocation is flagged before_trace, with the stack the free event
// carries (Note [A free's stack]). A completed free with no request before it in the trace depends
// on the producer. Where every free records its request first (PyTorch's snapshots, memcomm's
// allocator, torch.profiler traces as converted), the ring buffer cut between the two: the user had
// freed the block before the trace, and a block pending free is not live (Note [Live means
// allocated]), so it is no allocation of the trace at all (a snapshot whose one event completed
// such a free put it in a peak "before the trace's first event" that the viewer's curve, folded
// from the same start, did not have). A producer that records only completions closes blocks with
// them, so there it is a before_trace allocation like the others. The builder knows the first kind
// from its caller, or from any request among the events. A block the
// end state holds live that no event allocated
// (producers call live_at_end() for each) is one too, live to the end. Such allocations start 1 ns
// before the trace's first event: a block that event frees was live before it, and the state
// before the first event may be the peak (a ring buffer that starts with frees). So the end state
// the lifetimes give is the end state the producer recorded, and the peak counts memory held all
// along. Without any event (a snapshot's end state alone) there is no before: the blocks start at
// `begin`, the one moment the trace holds, so its peak, its end and any time in it are one state.
//
// Note [A free's stack]: what stack a free event carries depends on how the history was recorded.
// PyTorch's _record_memory_history(context="all"), its default, records where the block was freed;
// context="alloc" records on the free the stack the block was allocated with. A block allocated
// before the trace has only its free's stack, so charging it to that stack as if it were the
// allocation's says that the code which freed it holds the memory (a 1.5 GiB buffer reads as held
// by optimizer.step). Such allocations are flagged stack_of_free and shown as memory_viz shows them,
// under their own heading: allocation not recorded, the stack of its free. Unless the trace shows
// the stacks are allocation stacks: when every block the trace both allocates and frees carries
// its allocation's stack on its free (and at least one does), frees record allocation stacks, and
// the flags are cleared.
#pragma once

#include <cstdint>
#include <limits>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace memcomm::prof {

inline constexpr std::uint32_t kNoStackId = ~std::uint32_t{0};
inline constexpr std::int64_t kStillLive = std::numeric_limits<std::int64_t>::max();

struct Allocation {
  std::int64_t alloc_ns = 0;        // 1 ns before the trace's begin when before_trace
  std::int64_t free_ns = kStillLive;  // kStillLive: live at the trace's end
  std::uint64_t addr = 0;
  std::uint64_t size = 0;           // bytes requested (Note [Live means allocated])
  std::uint32_t stack = kNoStackId; // the producer's stack id (a snapshot's interned stack)
  std::uint16_t stream = 0;         // the producer's small stream index
  std::uint8_t device = 0;
  std::uint8_t category : 4;        // prof::MemCategory when the producer knows it (0: unknown)
  std::uint8_t before_trace : 1;    // Note [Allocations before the trace]
  std::uint8_t stack_of_free : 1;   // `stack` is the one its free recorded (Note [A free's stack])
  bool live_at(std::int64_t t) const { return alloc_ns <= t && t < free_ns; }
};
static_assert(sizeof(Allocation) == 40, "one Allocation per user block: part of the viewer's memory budget");

struct Allocations {
  std::vector<Allocation> list;  // sorted by alloc_ns (events' order within one time)
  std::int64_t begin = 0;        // first event's time
  std::int64_t end = 0;          // last event's time
  std::uint64_t unmatched = 0;   // allocs of an address already live (the earlier one is closed there)
  std::size_t memory_bytes() const { return list.capacity() * sizeof(Allocation); }
};

// What a producer knows of one block event.
struct BlockInfo {
  std::uint8_t device = 0;
  std::uint64_t addr = 0;
  std::uint64_t size = 0;
  std::uint16_t stream = 0;
  std::uint32_t stack = kNoStackId;
  std::uint8_t category = 0;
};

class AllocationBuilder {
 public:
  // `requests_recorded`: the producer records a FreeRequested before every FreeCompleted, even when
  // the events hold none (Note [Allocations before the trace]).
  explicit AllocationBuilder(bool requests_recorded = false) : requests_told_(requests_recorded) {}
  // Events in time order (times may repeat). Other kinds than Alloc/free are the caller's to skip.
  void alloc(std::int64_t t, const BlockInfo& b);
  void free_requested(std::int64_t t, const BlockInfo& b);
  // A FreeCompleted closes a block still open (producers that record one free event); after a
  // FreeRequested it changes nothing; with neither, it ends a block allocated before the trace, or,
  // where requests are recorded, one freed before it (Note [Allocations before the trace]).
  void free_completed(std::int64_t t, const BlockInfo& b);
  // After the events: a block the end state holds live (Note [Allocations before the trace]).
  // Fills in the stack of an open allocation at that address when its alloc event had none.
  void live_at_end(const BlockInfo& b);
  // `begin`/`end`: the trace's time bounds (before_trace allocations start at `begin` - 1, or at
  // `begin` when no event came).
  Allocations finish(std::int64_t begin, std::int64_t end);

 private:
  static std::uint64_t key(const BlockInfo& b) { return b.addr ^ (std::uint64_t{b.device} << 56); }
  void close(std::int64_t t, const BlockInfo& b);
  void before_trace(std::int64_t free_ns, const BlockInfo& b);
  bool requests_told_ = false;  // by the caller
  bool requests_seen_ = false;  // in the events
  bool saw_event_ = false;      // any alloc or free (live_at_end is no event)
  std::vector<Allocation> list_;
  std::vector<std::size_t> lone_completions_;            // indices in list_: completions with no request
  std::unordered_map<std::uint64_t, std::size_t> open_;  // key -> index in list_
  std::unordered_set<std::uint64_t> requested_;          // keys freed, their completion not seen yet
  std::uint64_t unmatched_ = 0;
  std::uint64_t frees_with_alloc_stack_ = 0;  // Note [A free's stack]: paired frees whose stack is
  std::uint64_t frees_with_other_stack_ = 0;  // the allocation's, and those whose stack is not
};

// Live bytes and allocations of one stack id at a time.
struct StackBytes {
  std::uint32_t stack = kNoStackId;
  bool stack_of_free = false;       // Note [A free's stack]: folded apart from allocation stacks
  std::uint64_t bytes = 0;
  std::uint32_t count = 0;
};
// The allocations live at t (Note [Live means allocated]) folded by stack id and stack_of_free,
// most bytes first.
std::vector<StackBytes> live_by_stack(const Allocations& a, std::int64_t t);
std::uint64_t live_bytes(const Allocations& a, std::int64_t t);

// The allocations of `all` on one device, in the same order, with the same time bounds (a
// snapshot's devices, shown or reported one at a time).
Allocations allocations_of_device(const Allocations& all, std::uint8_t device);

// Note [Host memory beside a GPU's]: a torch.profiler trace records the CPU's [memory] events beside
// the GPU's, and their sum is no memory's figure: an OWLv2 trace's "peak" was 2.64 GiB at 1.09 s
// where the GPU's is 2.52 GiB at 0.13 s, beside a summary saying 2.52 GiB. So the figures that
// sum a rank's devices (memcomm-trace memory without --device, the viewer's bands and "who holds
// memory") leave the host out when a GPU is there, as the memory curves choose a GPU over the host
// (Note [Memory curves from block events]); the host's blocks are its own device (kHostDevice).
// Drops the host's allocations from `all` when it also holds a GPU's; returns whether it did.
bool leave_out_host_beside_gpu(Allocations& all);

// One reading of a device's allocated bytes, as the producer counted them.
struct LevelAt {
  std::int64_t t;
  std::uint8_t device;
  std::uint64_t value;
};
// Note [Bytes a memory profile never saw allocated] (allocations.cpp): what the readings (in time
// order) hold beyond the blocks `a` has live then becomes one before_trace allocation per device.
// For lifetimes whose block events start mid-run; rank_allocations() applies it to torch.profiler
// traces, the viewer to any rank whose blocks were cut.
void add_untraced_live(Allocations& a, const std::vector<LevelAt>& allocated);

struct RankTrace;
// A memcomm trace's (or a torch.profiler trace's) blocks on one rank, all devices. Its events carry
// no stacks: Allocation::stack stays kNoStackId and category is the producer's MemCategory.
Allocations rank_allocations(const RankTrace& rank);

struct LivePeak {
  std::int64_t t = 0;       // the first time live bytes reach the peak
  std::uint64_t bytes = 0;  // live bytes then
};
LivePeak peak_live(const Allocations& a);

}  // namespace memcomm::prof
