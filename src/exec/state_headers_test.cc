// The state module's and the runner contract's sequence types are distinct names: both
// headers compile together in one translation unit, and a runner's SeqId maps to the
// manager's CacheSeqId through SeqId::value (issue 3, item B).
#include <gtest/gtest.h>

#include <type_traits>

#include "exec/model_runner.h"
#include "state/cache_manager.h"

namespace strata {
namespace {

TEST(StateHeaders, RunnerAndCacheTypesCoexist) {
  static_assert(!std::is_same_v<SeqId, CacheSeqId>);
  static_assert(!std::is_same_v<StepItem, CacheStepItem>);
  const SeqId runner_id{42};
  const CacheStepItem item{runner_id.value, 7};
  EXPECT_EQ(item.seq, 42);
  EXPECT_EQ(item.max_tokens, 7);
  StepItem step;
  step.seq = runner_id;
  EXPECT_EQ(step.seq.value, item.seq);
}

}  // namespace
}  // namespace strata
