// RunnerOptions::prefix_restore reaches the V4.1 runner's cache (the `strata serve
// --prefix-restore` path): "stored" keeps boundary snapshots, "replay" / "replay-exact" store
// none and replay one window / the window dependency cone; anything else is rejected.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "exec/deepseek_v41/deepseek_v41_runner.h"
#include "exec/runner_factory.h"

namespace strata {
namespace {

std::string tiny_v41() {
  const char* e = std::getenv("STRATA_SOURCE_DIR");
  return std::string(e ? e : STRATA_SOURCE_DIR) + "/models/deepseek-v41-tiny";
}

TEST(PrefixRestoreOption, ReachesTheV41Runner) {
  for (const char* name : {"stored", "replay", "replay-exact"}) {
    RunnerOptions o;
    o.prefix_restore = name;
    auto r = make_model_runner(tiny_v41(), o);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    auto* v41 = dynamic_cast<DeepseekV41Runner*>(r->get());
    ASSERT_NE(v41, nullptr);
    V41SharedCache& c = v41->shared_cache();
    EXPECT_STREQ(v41_prefix_restore_name(c.restore()), name);
    // Tiny V4.1: window 16, 12 backbone layers (16 + 11 x 15 = 181, even -> 182).
    if (std::string(name) == "stored") {
      EXPECT_GT(c.boundary_snapshot_bytes(), 0);
    } else {
      EXPECT_EQ(c.boundary_snapshot_bytes(), 0);
      EXPECT_EQ(c.replay_tokens(), std::string(name) == "replay" ? 16 : 182);
    }
  }
  RunnerOptions bad;
  bad.prefix_restore = "snapshot";
  auto r = make_model_runner(tiny_v41(), bad);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace strata
