#include <memcomm/view/span_query.hpp>

#include <algorithm>

namespace memcomm::view {

namespace {
// First index >= from whose span ends at or after t. Galloping from `from`: the answer is usually a
// few spans away, so this touches O(log distance) cache lines instead of O(log n) across the row.
// The gallop runs on plain pointers inside the chunk of `from` (Note [Chunked arrays]); past that
// chunk's end it falls back to a search of the rest of the row.
std::size_t first_ending_at_or_after(const SpanRow& row, std::size_t from, TimeNs t) {
  const std::size_t n = row.size();
  if (from >= n) return n;
  const auto ends_before = [](const Span& s, TimeNs v) { return s.end < v; };
  const std::size_t base = from & ~SpanRow::kMask, lim = std::min(n, base + SpanRow::kChunk) - base;
  const Span* p = row.chunk_data(from >> SpanRow::kShift);  // p[i] is row[base + i] for i < lim
  const std::size_t f = from - base;
  std::size_t lo = f, step = 1;
  while (f + step < lim && p[f + step].end < t) {
    lo = f + step;
    step *= 2;
  }
  if (f + step >= lim && base + lim < n && p[lim - 1].end < t) return lower_bound_index(row, base + lim, n, t, ends_before);
  const std::size_t hi = std::min(lim, f + step + 1);
  return base + static_cast<std::size_t>(std::lower_bound(p + lo, p + hi, t, ends_before) - p);
}
}  // namespace

void query_spans(const SpanRow& row, TimeNs t0, TimeNs t1, TimeNs min_ns, std::vector<DrawSpan>& out) {
  if (row.empty() || t1 <= t0) return;
  min_ns = std::max<TimeNs>(min_ns, 1);
  const auto by_end = [](const Span& s, TimeNs t) { return s.end < t; };
  const auto n = row.size();
  std::size_t i = lower_bound_index(row, t0, by_end);
  while (i < n && row[i].start < t1) {
    const Span& s = row[i];
    if (s.end - s.start >= min_ns) {
      out.push_back({s.start, s.end, static_cast<std::uint32_t>(i), 1});
      ++i;
      continue;
    }
    // Note [Span merging] in span_query.hpp.
    std::size_t j = i;
    TimeNs mark_end = s.end;
    while (mark_end < t1) {  // past the view, the mark is clipped anyway: stop extending
      const std::size_t k = first_ending_at_or_after(row, j + 1, mark_end + min_ns);
      if (k > j + 1) {  // spans j+1..k-1 end within min_ns of the mark: they join it
        j = k - 1;
        mark_end = std::max(mark_end, row[j].end);
        continue;
      }
      if (k < n && row[k].end - row[k].start < min_ns && row[k].start - mark_end < min_ns) {
        j = k;  // a narrow neighbour close by joins too; its end is >= mark_end + min_ns
        mark_end = row[k].end;
        continue;
      }
      break;
    }
    out.push_back({s.start, std::max(mark_end, s.start + min_ns), static_cast<std::uint32_t>(i),
                   static_cast<std::uint32_t>(j - i + 1)});
    i = j + 1;
  }
}

std::int64_t span_at(const SpanRow& row, TimeNs t, TimeNs slop) {
  const auto by_end = [](const Span& s, TimeNs v) { return s.end < v; };
  auto it = row.begin() + static_cast<std::ptrdiff_t>(lower_bound_index(row, t - slop, by_end));
  std::int64_t best = -1;
  TimeNs best_d = slop + 1;
  for (; it != row.end() && it->start <= t + slop; ++it) {
    const TimeNs d = t < it->start ? it->start - t : (t > it->end ? t - it->end : 0);
    if (d < best_d) {
      best_d = d;
      best = it - row.begin();
    }
    if (d == 0) break;
  }
  return best;
}

}  // namespace memcomm::view
