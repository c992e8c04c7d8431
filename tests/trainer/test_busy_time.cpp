// Note [Communication time]: communication time is the union of the buckets' in-flight intervals.
#include <catch2/catch.hpp>

#include "busy_time.hpp"

using memcomm::train::busy_ns;

TEST_CASE("busy time is the union of the intervals") {
  CHECK(busy_ns({}) == 0);
  CHECK(busy_ns({{10, 20}}) == 10);
  CHECK(busy_ns({{10, 20}, {30, 35}}) == 15);                // apart
  CHECK(busy_ns({{10, 20}, {15, 30}}) == 20);                // overlapping
  CHECK(busy_ns({{10, 40}, {15, 20}, {25, 30}}) == 30);      // nested
  CHECK(busy_ns({{30, 35}, {10, 20}}) == 15);                // any order
  CHECK(busy_ns({{10, 10}, {20, 15}}) == 0);                 // empty and reversed count nothing
  // Buckets launched together and served one after another by the engine: the later ones' (end -
  // start) include their wait in the queue, which a plain sum would count again.
  CHECK(busy_ns({{0, 10}, {0, 20}, {0, 30}}) == 30);
}
