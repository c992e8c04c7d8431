// memcomm traces (.mct) into the viewer model (Note [Reader seams] in loader.cpp).
//
// Events are taken chunk by chunk from prof::TraceReader straight into the TimelineBuilder, which
// sorts per lane anyway: going through prof::TraceSet would first copy and sort every event of
// the file (measured: 10 M events read in 0.35 s, TraceSet::load 3.9 s). Per-thread ranges and
// (comm, seq) collectives are paired here; rank clock offsets (MetaKey::ClockOffset) are applied
// unless the file is already merged, as TraceSet does.
#pragma once

#include <memcomm/profiler/event.hpp>
#include <memcomm/view/builder.hpp>

#include <atomic>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace memcomm::view {

// Turns profiler events of any number of ranks into builder calls. Also the seam for live streams:
// a receiver hands decoded batches to add().
class TraceIngest {
 public:
  explicit TraceIngest(TimelineBuilder& b) : b_(b) {}
  // `strings` resolves the batch's StringIds; `apply_offsets` is false for merged files.
  template <class Strings>
  void add(const prof::Event* ev, std::size_t n, std::uint32_t rank, const Strings& strings, bool apply_offsets);

 private:
  struct RangeOpen {
    std::int64_t ts;
    prof::Phase phase;
    std::uint32_t name;  // builder string id
    std::uint64_t id;
  };
  struct RankState {
    std::int64_t offset = 0;
    std::map<std::uint16_t, std::vector<RangeOpen>> open;        // per thread, LIFO
    std::unordered_map<std::uint64_t, prof::CollectiveEvent> colls;  // (comm, seq) -> start/enqueue
    std::map<std::uint8_t, std::uint16_t> comm_size;
    std::unordered_map<prof::StringId, std::uint32_t> ids;        // trace string id -> builder id
  };
  void add_one(const prof::Event& e, RankState& rs, std::uint32_t rank, std::string_view (*)(const void*, prof::StringId),
               const void* ctx);

  TimelineBuilder& b_;
  std::map<std::uint32_t, RankState> ranks_;
  std::uint32_t phase_ids_[static_cast<int>(prof::Phase::Count)] = {};
  bool phases_interned_ = false;
};

template <class Strings>
void TraceIngest::add(const prof::Event* ev, std::size_t n, std::uint32_t rank, const Strings& strings, bool apply_offsets) {
  RankState& rs = ranks_[rank];
  if (!apply_offsets) rs.offset = 0;
  const auto resolve = [](const void* ctx, prof::StringId id) -> std::string_view {
    return (*static_cast<const Strings*>(ctx))(id);
  };
  for (std::size_t i = 0; i < n; ++i) {
    if (apply_offsets && ev[i].kind == prof::EventKind::Meta) {
      const auto m = ev[i].as<prof::MetaEvent>();
      if (m.key == prof::MetaKey::ClockOffset) rs.offset = m.value;
    }
    add_one(ev[i], rs, rank, resolve, &strings);
  }
}

bool ingest_trace(const std::string& path, Timeline& out, std::string& error, std::atomic<double>* progress);

}  // namespace memcomm::view
