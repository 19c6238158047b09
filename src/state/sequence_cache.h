// SequenceCache: one request's state over a private CacheManager -- the simplest way for a
// forward pass (generate, golden validation, tests) to keep its state in the serving format
// through the state graph, without a scheduler.
//
//   auto sc = SequenceCache::create(graph, /*max_tokens=*/512).value();
//   sc->begin_step(ids);          // appends ids; reserves rows for [length(), length()+n)
//   ... forward: sc->cache().write_window_row(sc->seq(), layer, pos, row); read_*(...) ...
//   sc->end_step();
//   sc->reset();                  // next request: fresh state (kv 0 / score -inf / no rows)
//
// Rows for positions before `length()` are readable; rows of the current step are writable.
// Errors: begin_step past max_tokens -> kResourceExhausted; begin_step twice without end_step
// or end_step without begin_step -> CHECK. Thread safety: one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "base/status.h"
#include "state/cache_manager.h"

namespace strata {

class SequenceCache {
 public:
  // `dcp`: this rank's share of the compressed-KV / index-key rows (CacheOptions::dcp);
  // `stage`: this rank's pipeline stage (CacheOptions::stage).
  static StatusOr<std::unique_ptr<SequenceCache>> create(const StateGraph& graph,
                                                         int64_t max_tokens, RowShard dcp = {},
                                                         StageLayers stage = {});
  Status begin_step(const std::vector<int32_t>& ids);
  void end_step();
  void reset();
  int64_t length() const;  // positions reserved (including the current step's)
  CacheSeqId seq() const { return seq_; }
  CacheManager& cache() { return *cm_; }
  const CacheManager& cache() const { return *cm_; }

 private:
  std::unique_ptr<CacheManager> cm_;
  int64_t max_tokens_ = 0;
  CacheSeqId seq_ = 1;
  std::optional<StepPlan> inflight_;
};

}  // namespace strata
