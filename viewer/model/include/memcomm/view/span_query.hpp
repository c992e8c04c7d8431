// Visible spans of one lane row, with narrow spans merged (Tracy's zone merging).
//
// Note [Span merging]: a row is sorted and non-overlapping, so both starts and ends are sorted.
// The first visible span is a binary search on end. A span at least `min_ns` wide (3 px) is drawn
// as itself. A narrower one opens a merged mark, which swallows, by binary search, every following
// span that ends within `min_ns` of the mark's end, and any narrow span that starts within
// `min_ns` of it. Each extension advances the mark by at least min_ns every two steps, and a mark
// stops growing at the view's end, so a query costs O(visible pixels x log n), never O(spans).
#pragma once

#include <memcomm/view/timeline.hpp>

#include <vector>

namespace memcomm::view {

struct DrawSpan {
  TimeNs start = 0, end = 0;  // what to draw, ns
  std::uint32_t first = 0;  // index of the first span in the row
  std::uint32_t count = 1;  // spans it stands for (> 1: a merged mark)
};

// Appends to `out` what to draw of `row` over [t0, t1) where spans narrower than `min_ns` merge.
void query_spans(const SpanRow& row, TimeNs t0, TimeNs t1, TimeNs min_ns, std::vector<DrawSpan>& out);

// Index of the span under time t in a row (within `slop` ns), or -1.
std::int64_t span_at(const SpanRow& row, TimeNs t, TimeNs slop);

}  // namespace memcomm::view
