#include "base/scratch.h"

#include <gtest/gtest.h>

namespace strata {
namespace {

TEST(Scratch, ReusesOneBufferForRequestsThatFit) {
  Scratch<float> s;
  float* a = s.get(1000);
  ASSERT_NE(a, nullptr);
  a[999] = 3.0f;
  float* b = s.get(10);  // smaller: the same memory, contents left as they were
  EXPECT_EQ(a, b);
  EXPECT_EQ(s.get(1000), a);
  EXPECT_EQ(a[999], 3.0f);
  EXPECT_GE(s.capacity(), 1000u);
}

TEST(Scratch, GetZeroedClearsExactlyTheRequest) {
  Scratch<int> s;
  int* a = s.get(8);
  for (int i = 0; i < 8; ++i) a[i] = 7;
  int* z = s.get_zeroed(5);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(z[i], 0) << i;
  for (int i = 5; i < 8; ++i) EXPECT_EQ(z[i], 7) << i;
}

TEST(Scratch, ShrinksAfterARequestAboveTheKeepSize) {
  Scratch<double> s;
  const size_t keep = Scratch<double>::kKeepBytes / sizeof(double);
  s.get(keep + 1);  // a long prefill
  EXPECT_GE(s.capacity(), keep + 1);
  s.get(16);  // the next decode-sized request gives the large buffer back
  EXPECT_LE(s.capacity(), keep);
  EXPECT_GE(s.capacity(), 16u);
  s.get(keep);  // at the keep size: kept
  s.get(16);
  EXPECT_EQ(s.capacity(), keep);
}

}  // namespace
}  // namespace strata
