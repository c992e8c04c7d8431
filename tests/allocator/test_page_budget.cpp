// The page budget and its churn allowance, called directly (allocator/core/page_budget.hpp):
// Note [Lazy page release] in growth.cpp, Note [Release churn], Note [A slot that grows at the
// budget] and Note [A tensor that grows by concatenation] in expandable.cpp.
#include "page_budget.hpp"

#include "allocator_test_util.hpp"

using namespace memcomm::alloc;
using namespace memcomm::alloc::test;

TEST_CASE("the churn allowance keeps budget and allowance within slack + 1% of the high water",
          "[allocator][budget]") {
  PageBudget budget(0.02, 4 * MiB, kPage);
  const auto hw = std::int64_t(1000 * MiB);
  CHECK(budget.limit(hw) == std::size_t(1024 * MiB));  // 2% plus the 4 MiB floor
  ChurnRecord pool;
  budget.note_taken(pool, hw, 100 * MiB);
  budget.learn_regain(pool, hw, budget.limit(hw) + 50 * MiB);  // the first regain can be a phase change
  CHECK(budget.churn_allowance() == 0);
  budget.learn_regain(pool, hw, budget.limit(hw) + 50 * MiB);
  // 1% of hw would be 10 MiB, but the floor already took 4 of them.
  CHECK(budget.churn_allowance() == 6 * MiB);
  CHECK(double(budget.limit(hw)) <= 1.03 * double(hw));
}

TEST_CASE("the churn allowance is at least a page where the floor takes the whole 1%", "[allocator][budget]") {
  PageBudget budget(0.02, 4 * MiB, kPage);
  const auto hw = std::int64_t(100 * MiB);  // floor: one page, 2% of hw
  ChurnRecord pool;
  budget.note_taken(pool, hw, 10 * MiB);
  budget.learn_regain(pool, hw, budget.limit(hw) + kPage);
  budget.learn_regain(pool, hw, budget.limit(hw) + kPage);
  CHECK(budget.churn_allowance() == kPage);
}

TEST_CASE("a clipped medium-segment minimum teaches the allowance every second time, within the bound",
          "[allocator][budget]") {
  PageBudget budget(0.02, 4 * MiB, kPage);
  const auto hw = std::int64_t(1000 * MiB);
  ChurnRecord pool;
  budget.learn_clipped_granule(pool, hw, 3 * MiB);
  CHECK(budget.churn_allowance() == 0);
  budget.learn_clipped_granule(pool, hw, 3 * MiB);
  CHECK(budget.churn_allowance() == 4 * MiB);  // what was missing, in whole pages
  for (int i = 0; i < 10; ++i) budget.learn_clipped_granule(pool, hw, 18 * MiB);
  CHECK(budget.churn_allowance() == 6 * MiB);  // 1% of hw less the 4 MiB floor, as for churn
  CHECK(double(budget.limit(hw)) <= 1.03 * double(hw));
}

TEST_CASE("a growing tensor teaches the allowance at once what it misses, within the bound", "[allocator][budget]") {
  PageBudget budget(0.02, 4 * MiB, kPage);
  const auto hw = std::int64_t(1000 * MiB);
  budget.learn_growing_tensor(hw, budget.limit(hw));  // fits: nothing to learn
  CHECK(budget.churn_allowance() == 0);
  budget.learn_growing_tensor(hw, budget.limit(hw) + 3 * MiB);
  CHECK(budget.churn_allowance() == 4 * MiB);  // what was missing, in whole pages, the first time
  budget.learn_growing_tensor(hw, budget.limit(hw) + 50 * MiB);
  CHECK(budget.churn_allowance() == 6 * MiB);  // 1% of hw less the 4 MiB floor, as for churn
  CHECK(double(budget.limit(hw)) <= 1.03 * double(hw));
}
