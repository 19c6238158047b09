// SequenceCache. See sequence_cache.h.
#include "state/sequence_cache.h"

#include "base/check.h"

namespace strata {

StatusOr<std::unique_ptr<SequenceCache>> SequenceCache::create(const StateGraph& graph,
                                                               int64_t max_tokens, RowShard dcp,
                                                               StageLayers stage) {
  if (max_tokens <= 0) return invalid_argument("SequenceCache: max_tokens {} <= 0", max_tokens);
  auto sc = std::unique_ptr<SequenceCache>(new SequenceCache());
  CacheOptions o;
  o.max_seqs = 1;
  o.max_tokens = max_tokens;
  o.snapshot_slots = 0;
  o.prefix_cache = false;
  o.dcp = dcp;
  o.stage = stage;
  sc->cm_ = std::make_unique<CacheManager>(graph, o);
  sc->max_tokens_ = max_tokens;
  sc->cm_->add_sequence(sc->seq_, {});
  return sc;
}

Status SequenceCache::begin_step(const std::vector<int32_t>& ids) {
  STRATA_CHECK_MSG(!inflight_, "SequenceCache::begin_step twice without end_step");
  if (length() + static_cast<int64_t>(ids.size()) > max_tokens_)
    return Status(StatusCode::kResourceExhausted,
                  fmt::format("SequenceCache: {} + {} tokens exceed max_tokens {}", length(),
                              ids.size(), max_tokens_));
  cm_->append_tokens(seq_, ids);
  StepPlan p = cm_->plan_step({{seq_, static_cast<int64_t>(ids.size())}});
  if (p.outcome != PlanOutcome::kOk)
    return Status(StatusCode::kResourceExhausted, "SequenceCache: " + p.shortfall);
  cm_->commit(p);
  inflight_ = std::move(p);
  return ok_status();
}

void SequenceCache::end_step() {
  STRATA_CHECK_MSG(inflight_.has_value(), "SequenceCache::end_step without begin_step");
  cm_->finish_step(*inflight_);
  inflight_.reset();
}

void SequenceCache::reset() {
  if (inflight_) end_step();
  cm_->release(seq_);
  ++seq_;
  cm_->add_sequence(seq_, {});
}

int64_t SequenceCache::length() const { return cm_->num_computed(seq_); }

}  // namespace strata
