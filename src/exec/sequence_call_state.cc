// SequenceCallState (see sequence_call_state.h).
#include "exec/sequence_call_state.h"

#include <vector>

#include "base/check.h"
#include "state/cache_manager.h"
#include "state/sequence_cache.h"

namespace strata {

SequenceCallState::SequenceCallState(CacheManager* cm, int64_t seq, int64_t length)
    : cm_(cm), seq_(seq), length_(length) {
  STRATA_CHECK(cm != nullptr);
}

SequenceCallState::~SequenceCallState() {
  if (owned_ && in_call_) owned_->end_step();
}

void SequenceCallState::adopt(std::unique_ptr<SequenceCache> owned) { owned_ = std::move(owned); }

Status SequenceCallState::begin_call(std::span<const int32_t> tokens) {
  STRATA_CHECK_MSG(!in_call_, "sequence state: begin_call twice");
  if (owned_) {
    STRATA_RETURN_IF_ERROR(owned_->begin_step(std::vector<int32_t>(tokens.begin(), tokens.end())));
  } else if (cm_) {
    STRATA_CHECK_MSG(cm_->num_computed(seq_) >= length_ + static_cast<int64_t>(tokens.size()),
                     "seq {}: rows for [{}, {}) not committed (computed {})", seq_, length_,
                     length_ + static_cast<int64_t>(tokens.size()), cm_->num_computed(seq_));
  }
  in_call_ = true;
  return ok_status();
}

void SequenceCallState::end_call(int64_t n_tokens) {
  STRATA_CHECK_MSG(in_call_, "sequence state: end_call without begin_call");
  if (owned_) owned_->end_step();
  in_call_ = false;
  length_ += n_tokens;
}

}  // namespace strata
