#include "sched/stop_checker.h"

#include <gtest/gtest.h>

namespace strata {
namespace {

TEST(StopCheckerTest, HoldsBackPossibleStopPrefix) {
  StopChecker c({"END"});
  EXPECT_EQ(c.push("hello E"), "hello ");
  EXPECT_EQ(c.push("N"), "");
  EXPECT_EQ(c.push("x"), "ENx");  // not a stop after all
  EXPECT_FALSE(c.matched());
  EXPECT_EQ(c.push("abEND tail"), "ab");
  EXPECT_TRUE(c.matched());
  EXPECT_EQ(c.push("more"), "");
  EXPECT_EQ(c.flush(), "");
}

TEST(StopCheckerTest, EarliestOfSeveralStops) {
  StopChecker c({"cd", "b"});
  EXPECT_EQ(c.push("abcd"), "a");
  EXPECT_TRUE(c.matched());
}

TEST(StopCheckerTest, FlushReturnsHeldText) {
  StopChecker c({"xyz"});
  EXPECT_EQ(c.push("abx"), "ab");
  EXPECT_EQ(c.push("y"), "");
  EXPECT_EQ(c.flush(), "xy");
}

TEST(StopCheckerTest, NoStopsPassThrough) {
  StopChecker c({});
  EXPECT_EQ(c.push("abc"), "abc");
  EXPECT_EQ(c.flush(), "");
}

TEST(StopCheckerTest, MultiByteStop) {
  StopChecker c({"é!"});
  EXPECT_EQ(c.push("caf\xC3\xA9"), "caf");
  EXPECT_EQ(c.push("!"), "");
  EXPECT_TRUE(c.matched());
}

}  // namespace
}  // namespace strata
