#include "sched/scheduler.h"

#include <gtest/gtest.h>

#include "sched/fake_runner.h"

namespace strata {
namespace {

std::vector<int32_t> iota_tokens(int n, int start = 1) {
  std::vector<int32_t> v(n);
  for (int i = 0; i < n; ++i) v[i] = (start + i) % 60 + 1;
  return v;
}

TEST(SchedulerTest, ChunkedPrefillAsksLogitsOnlyAtTheEnd) {
  FakeRunner runner;
  Scheduler s(&runner, {.max_num_seqs = 4, .max_num_batched_tokens = 100, .chunk_size = 4});
  s.add(SeqId{1}, iota_tokens(10));
  std::vector<int64_t> sizes;
  std::vector<bool> want;
  for (int i = 0; i < 3; ++i) {
    SchedulePlan p = s.plan();
    ASSERT_EQ(p.items.size(), 1u);
    sizes.push_back(p.items[0].tokens.size());
    want.push_back(p.items[0].want_logits);
    std::vector<float> logits;
    ASSERT_TRUE(runner.step(p.items, &logits).ok());
    s.commit(p);
    s.check_invariants();
  }
  EXPECT_EQ(sizes, (std::vector<int64_t>{4, 4, 2}));
  EXPECT_EQ(want, (std::vector<bool>{false, false, true}));
  EXPECT_EQ(runner.sequence_length(SeqId{1}), 10);
  // Nothing more to feed until a token is appended.
  EXPECT_TRUE(s.plan().items.empty());
  s.append_token(SeqId{1}, 7);
  SchedulePlan p = s.plan();
  ASSERT_EQ(p.items.size(), 1u);
  EXPECT_EQ(p.items[0].tokens.size(), 1u);
  EXPECT_EQ(p.items[0].tokens[0], 7);
  EXPECT_TRUE(p.items[0].want_logits);
}

TEST(SchedulerTest, MixesDecodeAndPrefillUnderTheTokenBudget) {
  FakeRunner runner;
  Scheduler s(&runner, {.max_num_seqs = 4, .max_num_batched_tokens = 6, .chunk_size = 100});
  s.add(SeqId{1}, iota_tokens(3));
  SchedulePlan p = s.plan();
  std::vector<float> logits;
  ASSERT_TRUE(runner.step(p.items, &logits).ok());
  s.commit(p);
  s.append_token(SeqId{1}, 5);  // seq 1 is now decoding
  s.add(SeqId{2}, iota_tokens(20));
  p = s.plan();
  ASSERT_EQ(p.items.size(), 2u);
  EXPECT_EQ(p.items[0].seq.value, 1);  // running first
  EXPECT_EQ(p.items[0].tokens.size(), 1u);
  EXPECT_EQ(p.items[1].seq.value, 2);
  EXPECT_EQ(p.items[1].tokens.size(), 5u);  // 6 - 1 decode token
  EXPECT_FALSE(p.items[1].want_logits);
  EXPECT_EQ(p.num_tokens, 6);
}

TEST(SchedulerTest, MaxNumSeqsLimitsAdmissionFcfs) {
  FakeRunner runner;
  Scheduler s(&runner, {.max_num_seqs = 2, .max_num_batched_tokens = 100, .chunk_size = 100});
  for (int i = 1; i <= 4; ++i) s.add(SeqId{i}, iota_tokens(3, i));
  SchedulePlan p = s.plan();
  ASSERT_EQ(p.items.size(), 2u);
  EXPECT_EQ(p.items[0].seq.value, 1);
  EXPECT_EQ(p.items[1].seq.value, 2);
  EXPECT_EQ(s.num_running(), 2);
  EXPECT_EQ(s.num_waiting(), 2);
  s.remove(SeqId{1});
  EXPECT_EQ(runner.live_sequences(), 1);
  p = s.plan();
  // seq 2 still has its prefill planned (not committed), seq 3 is admitted next.
  ASSERT_EQ(p.items.size(), 2u);
  EXPECT_EQ(p.items[1].seq.value, 3);
}

TEST(SchedulerTest, PriorityHookOrdersAdmission) {
  FakeRunner runner;
  Scheduler s(&runner, {.max_num_seqs = 1, .max_num_batched_tokens = 100, .chunk_size = 100});
  s.add(SeqId{1}, iota_tokens(3), /*priority=*/5);
  s.add(SeqId{2}, iota_tokens(3), /*priority=*/0);
  s.add(SeqId{3}, iota_tokens(3), /*priority=*/0);
  SchedulePlan p = s.plan();
  ASSERT_EQ(p.items.size(), 1u);
  EXPECT_EQ(p.items[0].seq.value, 2);
}

TEST(SchedulerTest, CapacityPreemptsTheYoungestAndRecomputes) {
  // Pool of 12 token slots; two requests of 5 prompt tokens each, then decode.
  FakeRunner runner({.pool_tokens = 12});
  Scheduler s(&runner, {.max_num_seqs = 4, .max_num_batched_tokens = 100, .chunk_size = 100});
  s.add(SeqId{1}, iota_tokens(5, 1));
  s.add(SeqId{2}, iota_tokens(5, 9));
  bool saw_preempt = false;
  int64_t generated1 = 0;
  for (int iter = 0; iter < 100 && s.contains(SeqId{1}); ++iter) {
    SchedulePlan p = s.plan();
    if (!p.preempted.empty()) {
      saw_preempt = true;
      EXPECT_EQ(p.preempted[0].value, 2);  // never the oldest
    }
    ASSERT_TRUE(p.failed.empty());
    std::vector<float> logits;
    Status st = runner.step(p.items, &logits);
    if (st.code() == StatusCode::kResourceExhausted) {
      EXPECT_TRUE(s.preempt_for_retry(p).empty());
      saw_preempt = true;
      continue;
    }
    ASSERT_TRUE(st.ok()) << st.to_string();
    s.commit(p);
    for (const StepItem& it : p.items) {
      if (!it.want_logits) continue;
      if (it.seq.value == 1 && ++generated1 == 6) {
        s.remove(it.seq);
      } else {
        s.append_token(it.seq, 3);
      }
    }
    s.check_invariants();
  }
  EXPECT_TRUE(saw_preempt);
  EXPECT_FALSE(s.contains(SeqId{1}));
  EXPECT_EQ(generated1, 6);
  EXPECT_GE(s.counters().preemptions, 1);
  // Recompute after preemption is not a new prefix-cache query: 5 + 5 prompt tokens.
  EXPECT_EQ(s.counters().prefix_cache_queries, 10);
}

TEST(SchedulerTest, RequestThatCanNeverFitFailsInsteadOfWaitingForever) {
  FakeRunner runner({.pool_tokens = 4});
  Scheduler s(&runner, {.max_num_seqs = 4, .max_num_batched_tokens = 100, .chunk_size = 100});
  s.add(SeqId{1}, iota_tokens(10));
  std::vector<FailedRequest> failed;
  for (int iter = 0; iter < 10 && s.has_work(); ++iter) {
    SchedulePlan p = s.plan();
    failed.insert(failed.end(), p.failed.begin(), p.failed.end());
    if (p.items.empty()) continue;
    std::vector<float> logits;
    Status st = runner.step(p.items, &logits);
    if (st.code() == StatusCode::kResourceExhausted) {
      auto f = s.preempt_for_retry(p);
      failed.insert(failed.end(), f.begin(), f.end());
      continue;
    }
    ASSERT_TRUE(st.ok());
    s.commit(p);
  }
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_EQ(failed[0].seq.value, 1);
  // Capacity that can never be met is the client's error (HTTP 400), not a retryable 429.
  EXPECT_EQ(failed[0].status.code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(s.has_work());
  EXPECT_EQ(runner.live_sequences(), 0);
}

TEST(SchedulerTest, AdmissionWaitsForSlotsWhileOthersRun) {
  FakeRunner runner({.max_seqs = 1});
  Scheduler s(&runner, {.max_num_seqs = 4, .max_num_batched_tokens = 100, .chunk_size = 100});
  s.add(SeqId{1}, iota_tokens(3));
  s.add(SeqId{2}, iota_tokens(3));
  SchedulePlan p = s.plan();
  EXPECT_EQ(p.items.size(), 1u);
  EXPECT_TRUE(p.failed.empty());
  EXPECT_EQ(s.num_waiting(), 1);
  s.remove(SeqId{1});
  p = s.plan();
  ASSERT_EQ(p.items.size(), 1u);
  EXPECT_EQ(p.items[0].seq.value, 2);
}

TEST(SchedulerTest, PrefixHitsAreCountedAndSkipComputation) {
  FakeRunner runner({.prefix_block = 4});
  Scheduler s(&runner, {.max_num_seqs = 4, .max_num_batched_tokens = 100, .chunk_size = 100});
  s.add(SeqId{1}, iota_tokens(10));
  SchedulePlan p = s.plan();
  std::vector<float> logits;
  ASSERT_TRUE(runner.step(p.items, &logits).ok());
  s.commit(p);
  s.remove(SeqId{1});
  // Same first 9 tokens: blocks [0,4) and [4,8) hit.
  auto prompt = iota_tokens(10);
  prompt[9] = 55;
  s.add(SeqId{2}, prompt);
  p = s.plan();
  ASSERT_EQ(p.items.size(), 1u);
  EXPECT_EQ(p.items[0].tokens.size(), 2u);
  EXPECT_EQ(s.counters().prefix_cache_queries, 20);
  EXPECT_EQ(s.counters().prefix_cache_hits, 8);
  EXPECT_EQ(s.cached_prompt_tokens(SeqId{2}), 8);
}

}  // namespace
}  // namespace strata
