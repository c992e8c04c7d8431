// See Note [Span merging]: narrow spans merge into counted marks, wide ones stay themselves, and the
// number of marks is bounded by the pixels, not by the spans.
#include "memcomm_test.hpp"

#include <memcomm/view/span_query.hpp>

using namespace memcomm::view;

namespace {
SpanRow regular_row(std::size_t n, TimeNs width, TimeNs period, TimeNs t0 = 0) {
  SpanRow row;
  for (std::size_t i = 0; i < n; ++i) {
    const TimeNs s = t0 + static_cast<TimeNs>(i) * period;
    row.push_back({s, s + width, 0, static_cast<std::uint32_t>(i)});
  }
  return row;
}
}  // namespace

TEST_CASE("wide spans are drawn one by one and culled to the view", "[unit][viewer]") {
  const auto row = regular_row(1000, 50, 100);  // [0,50) [100,150) ...
  std::vector<DrawSpan> out;
  query_spans(row, 1020, 2000, 10, out);  // 10 ns = 3 px: every span is wide
  REQUIRE(out.size() == 10);             // spans 10..19 (span 10 starts at 1000, ends 1050 > 1020)
  CHECK(out.front().first == 10);
  CHECK(out.back().first == 19);
  for (const auto& d : out) CHECK(d.count == 1);
}

TEST_CASE("narrow spans merge into marks whose counts add up to the visible spans", "[unit][viewer]") {
  const auto row = regular_row(1'000'000, 10, 20);  // 1 M spans, 20 ms in all
  std::vector<DrawSpan> out;
  const TimeNs t0 = 0, t1 = 20'000'000;
  const int pixels = 1920;
  const TimeNs min_ns = (t1 - t0) * 3 / pixels;
  query_spans(row, t0, t1, min_ns, out);
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < out.size(); ++i) {
    total += out[i].count;
    if (i) CHECK(out[i].first == out[i - 1].first + out[i - 1].count);  // contiguous, in order
    CHECK(out[i].end - out[i].start >= min_ns);
  }
  CHECK(total == row.size());
  CHECK(out.size() <= static_cast<std::size_t>(pixels));  // O(pixels), not O(spans)
}

TEST_CASE("a wide span between narrow clusters stays separate", "[unit][viewer]") {
  SpanRow row;
  for (int i = 0; i < 50; ++i) row.push_back({i * 10, i * 10 + 5, 0, 0});       // narrow cluster
  row.push_back({1000, 5000, 0, 0});                                            // wide
  for (int i = 0; i < 50; ++i) row.push_back({6000 + i * 10, 6005 + i * 10, 0, 0});  // narrow cluster
  std::vector<DrawSpan> out;
  query_spans(row, 0, 7000, 100, out);
  REQUIRE(out.size() == 3);
  CHECK(out[0].count == 50);
  CHECK((out[1].count == 1 && out[1].start == 1000 && out[1].end == 5000));
  CHECK(out[2].count == 50);
}

TEST_CASE("span_at finds the span under a time", "[unit][viewer]") {
  const auto row = regular_row(100, 50, 100);
  CHECK(span_at(row, 1025, 0) == 10);
  CHECK(span_at(row, 1075, 0) == -1);
  CHECK(span_at(row, 1055, 10) == 10);
}

TEST_CASE("a merged mark stops at the end of the view", "[unit][viewer]") {
  // Dense spans with small gaps merge into one mark; zoomed in on a small part of a long row, the
  // mark must not walk the rest of the row.
  const auto row = regular_row(2'000'000, 15, 20);
  std::vector<DrawSpan> out;
  query_spans(row, 1000, 3000, 100, out);
  REQUIRE(out.size() == 1);
  CHECK(out[0].first == 50);           // [1000, 1015): [980, 995) ends before the view
  CHECK(out[0].end >= 3000);
  CHECK(out[0].end < 3000 + 200);      // ... and the mark ends right after the view
  CHECK(out[0].count < 200);
}
