#include "base/phase_profile.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace strata::profile {
namespace {

const PhaseTotals* find(const std::vector<PhaseTotals>& v, const std::string& name) {
  for (const auto& t : v)
    if (t.name == name) return &t;
  return nullptr;
}
// A pointer into a temporary snapshot would dangle: keep the snapshot in a variable.
const PhaseTotals* find(std::vector<PhaseTotals>&& v, const std::string& name) = delete;

// Disabled: scopes record nothing. Enabled: calls, bytes and time per name; a scope inside
// another counts as part of the outer one only; reset() zeroes the totals.
TEST(PhaseProfile, CountsOutermostScopesOnlyWhenEnabled) {
  set_enabled(false);
  reset();
  { PhaseScope s("test: off", 100); }
  const auto before = snapshot();
  const auto* off = find(before, "test: off");
  EXPECT_TRUE(off == nullptr || off->calls == 0);

  set_enabled(true);
  for (int i = 0; i < 3; ++i) {
    PhaseScope outer("test: outer", 10);
    PhaseScope inner("test: inner", 1000);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  set_enabled(false);
  const auto snap = snapshot();
  const auto* outer = find(snap, "test: outer");
  ASSERT_NE(outer, nullptr);
  EXPECT_EQ(outer->calls, 3);
  EXPECT_EQ(outer->bytes, 30.0);
  EXPECT_GE(outer->seconds, 0.006);
  const auto* inner = find(snap, "test: inner");
  EXPECT_TRUE(inner == nullptr || inner->calls == 0);

  reset();
  const auto after = snapshot();
  const auto* zeroed = find(after, "test: outer");
  ASSERT_NE(zeroed, nullptr);
  EXPECT_EQ(zeroed->calls, 0);
  EXPECT_EQ(zeroed->seconds, 0.0);
}

// Each thread has its own nesting depth: a scope open on one thread does not hide another
// thread's scopes. A scope opened while profiling was off stays uncounted after it is
// switched on, and leaves the depth balanced.
TEST(PhaseProfile, ThreadsAreIndependentAndToggleIsBalanced) {
  set_enabled(true);
  reset();
  {
    PhaseScope a("test: thread a");
    std::thread t([] { PhaseScope b("test: thread b", 5); });
    t.join();
  }
  set_enabled(false);
  {
    PhaseScope off("test: opened while off");
    set_enabled(true);
  }
  { PhaseScope after("test: after toggle"); }
  set_enabled(false);
  const auto snap = snapshot();
  ASSERT_NE(find(snap, "test: thread a"), nullptr);
  EXPECT_EQ(find(snap, "test: thread a")->calls, 1);
  ASSERT_NE(find(snap, "test: thread b"), nullptr);
  EXPECT_EQ(find(snap, "test: thread b")->calls, 1);
  EXPECT_EQ(find(snap, "test: thread b")->bytes, 5.0);
  EXPECT_EQ(find(snap, "test: opened while off"), nullptr);
  ASSERT_NE(find(snap, "test: after toggle"), nullptr);
  EXPECT_EQ(find(snap, "test: after toggle")->calls, 1);
}

// Untimed: scopes inside it are not counted; after it closes, scopes count again.
TEST(PhaseProfile, UntimedHidesTheScopesInsideIt) {
  set_enabled(true);
  reset();
  {
    Untimed u;
    PhaseScope hidden("test: under untimed", 5);
  }
  { PhaseScope shown("test: after untimed", 7); }
  set_enabled(false);
  const auto snap = snapshot();
  const auto* hidden = find(snap, "test: under untimed");
  EXPECT_TRUE(hidden == nullptr || hidden->calls == 0);
  const auto* shown = find(snap, "test: after untimed");
  ASSERT_NE(shown, nullptr);
  EXPECT_EQ(shown->calls, 1);
  EXPECT_EQ(shown->bytes, 7.0);
}

}  // namespace
}  // namespace strata::profile
