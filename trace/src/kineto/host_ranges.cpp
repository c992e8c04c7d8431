#include "host_ranges.hpp"

#include <algorithm>

namespace memcomm::prof::kineto {
namespace {

void emit(std::vector<Event>& out, EventKind kind, int64_t ts, const HostSpan& s) {
  out.push_back(Event::from(make_range(kind, ts, s.phase, s.name, s.id, s.thread)));
}

}  // namespace

void emit_nested_ranges(std::vector<HostSpan>& spans, std::vector<Event>& out, uint64_t& clamped) {
  // Parents first: by thread, then start, then the longer span (ties keep file order).
  std::stable_sort(spans.begin(), spans.end(), [](const HostSpan& a, const HostSpan& b) {
    if (a.thread != b.thread) return a.thread < b.thread;
    if (a.begin != b.begin) return a.begin < b.begin;
    return a.end > b.end;
  });
  out.reserve(out.size() + 2 * spans.size());
  std::vector<HostSpan> open;
  auto close_until = [&](int64_t t) {
    while (!open.empty() && open.back().end <= t) {
      emit(out, EventKind::RangeEnd, open.back().end, open.back());
      open.pop_back();
    }
  };
  for (size_t i = 0; i < spans.size(); ++i) {
    HostSpan s = spans[i];
    if (i > 0 && spans[i - 1].thread != s.thread) close_until(INT64_MAX);
    close_until(s.begin);
    if (s.phase == Phase::Step) {  // the parents it outlives end where it begins
      while (!open.empty() && s.end > open.back().end) {
        emit(out, EventKind::RangeEnd, s.begin, open.back());
        open.pop_back();
        ++clamped;
      }
    }
    if (!open.empty() && s.end > open.back().end) {
      s.end = open.back().end;
      ++clamped;
    }
    emit(out, EventKind::RangeBegin, s.begin, s);
    open.push_back(s);
  }
  close_until(INT64_MAX);
}

}  // namespace memcomm::prof::kineto
