#include "base/status.h"

#include <gtest/gtest.h>

namespace strata {
namespace {

StatusOr<int> parse_positive(int v) {
  if (v <= 0) return invalid_argument("value {} is not positive", v);
  return v;
}

Status use(int v, int* out) {
  STRATA_ASSIGN_OR_RETURN(int x, parse_positive(v));
  *out = x * 2;
  return ok_status();
}

TEST(StatusTest, OkAndErrorsCarryCodeAndMessage) {
  EXPECT_TRUE(ok_status().ok());
  Status s = not_found("tensor {} in {}", "w", "f.safetensors");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.to_string(), "NOT_FOUND: tensor w in f.safetensors");
  EXPECT_EQ(s.with_context("load").message(), "load: tensor w in f.safetensors");
}

TEST(StatusTest, AssignOrReturnPropagates) {
  int out = 0;
  EXPECT_TRUE(use(3, &out).ok());
  EXPECT_EQ(out, 6);
  Status s = use(-1, &out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(out, 6);
}

}  // namespace
}  // namespace strata
