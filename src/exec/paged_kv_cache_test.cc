#include "exec/paged_kv_cache.h"

#include <gtest/gtest.h>

namespace strata {
namespace {

TEST(PagedKvCacheTest, ReserveShrinkReleaseAndViews) {
  PagedKvCache kv(/*layers=*/2, /*kv_dim=*/3, /*max_context=*/40, /*capacity=*/32, /*bs=*/8);
  ASSERT_TRUE(kv.add(SeqId{1}).ok());
  EXPECT_FALSE(kv.add(SeqId{1}).ok());
  ASSERT_TRUE(kv.add(SeqId{2}).ok());
  EXPECT_EQ(kv.capacity_left(SeqId{1}), 32);
  ASSERT_TRUE(kv.reserve(SeqId{1}, 20).ok());  // 3 blocks
  EXPECT_EQ(kv.reserve(SeqId{2}, 9).code(), StatusCode::kResourceExhausted);  // needs 2, 1 free
  EXPECT_EQ(kv.reserve(SeqId{2}, 41).code(), StatusCode::kOutOfRange);
  for (int64_t p = 0; p < 20; ++p) {
    kv.k_row(SeqId{1}, 1, p)[2] = static_cast<float>(p);
    kv.v_row(SeqId{1}, 0, p)[0] = static_cast<float>(-p);
  }
  kv.set_length(SeqId{1}, 20);
  auto view1 = kv.view(SeqId{1}, 1);
  auto view0 = kv.view(SeqId{1}, 0);
  for (int64_t p = 0; p < 20; ++p) {
    EXPECT_EQ(view1.k(p, 0, 3)[2], static_cast<float>(p));
    EXPECT_EQ(view0.v(p, 0, 3)[0], static_cast<float>(-p));
  }
  EXPECT_EQ(kv.usage().used_bytes, 3 * 2 * 2 * 8 * 3 * 4);
  kv.shrink(SeqId{1});  // 20 positions still need 3 blocks
  EXPECT_EQ(kv.usage().used_bytes, 3 * 2 * 2 * 8 * 3 * 4);
  EXPECT_EQ(kv.capacity_left(SeqId{1}), 12);
  kv.release(SeqId{1});
  EXPECT_EQ(kv.usage().used_bytes, 0);
  EXPECT_TRUE(kv.reserve(SeqId{2}, 32).ok());
}

}  // namespace
}  // namespace strata
