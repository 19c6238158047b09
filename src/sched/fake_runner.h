// FakeRunner: a deterministic ModelRunner for scheduler / engine / server tests.
//
// "Logits" are a pure function of the sequence's whole token history (fake_logits below),
// so any batching, chunking or preemption schedule must reproduce the solo output; tests
// compute expected outputs by calling fake_logits directly. Capacity: a shared pool of
// `pool_tokens` token slots over all sequences (ResourceExhausted when exceeded, nothing
// advanced), `max_context` positions per sequence. Optional prefix cache with block size
// `prefix_block` (0 = none): every block-aligned prefix that was ever computed can be
// attached later. Knobs for fault injection: fail_next_step, nan_logits_seq.
//
// Header-only; for tests. Not thread-safe (like every runner).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <set>
#include <span>
#include <vector>

#include "exec/model_runner.h"

namespace strata {

// Deterministic logits for the next token after `history`.
inline std::vector<float> fake_logits(std::span<const int32_t> history, int32_t vocab) {
  uint64_t h = 1469598103934665603ull;
  for (int32_t t : history) {
    h ^= static_cast<uint64_t>(t) + 0x9E3779B97F4A7C15ull;
    h *= 1099511628211ull;
  }
  std::vector<float> out(vocab);
  for (int32_t v = 0; v < vocab; ++v) {
    uint64_t x = h ^ (static_cast<uint64_t>(v) * 0xBF58476D1CE4E5B9ull);
    x ^= x >> 31;
    x *= 0x94D049BB133111EBull;
    x ^= x >> 29;
    out[v] = static_cast<float>(x % 10000) / 1000.0f;  // [0, 10)
  }
  return out;
}

struct FakeRunnerOptions {
  int32_t vocab = 64;
  int64_t max_context = 128;
  int64_t pool_tokens = 1 << 20;
  int64_t prefix_block = 0;
  int32_t eos_id = -1;
  int32_t bos_id = -1;
  int64_t max_seqs = 1 << 20;   // add_sequence fails with ResourceExhausted beyond this
};

class FakeRunner : public ModelRunner {
 public:
  explicit FakeRunner(FakeRunnerOptions o = {}) : o_(o) {
    info_.name = "fake";
    info_.architecture = "llama";
    info_.vocab_size = o.vocab;
    info_.max_context = o.max_context;
    info_.eos_id = o.eos_id;
    info_.bos_id = o.bos_id;
  }
  const ModelInfo& info() const override { return info_; }

  Status add_sequence(SeqId seq) override {
    if (seqs_.count(seq.value)) return Status(StatusCode::kInternal, "duplicate seq");
    if (static_cast<int64_t>(seqs_.size()) >= o_.max_seqs) {
      return Status(StatusCode::kResourceExhausted, "no sequence slots");
    }
    seqs_[seq.value];
    return ok_status();
  }
  void release_sequence(SeqId seq) override { seqs_.erase(seq.value); }
  int64_t sequence_length(SeqId seq) const override {
    auto it = seqs_.find(seq.value);
    return it == seqs_.end() ? 0 : static_cast<int64_t>(it->second.size());
  }
  int64_t token_capacity_left(SeqId seq) const override {
    return std::max<int64_t>(
        0, std::min(o_.max_context - sequence_length(seq), o_.pool_tokens - used_tokens()));
  }
  Status step(std::span<const StepItem> items, std::vector<float>* logits) override {
    ++steps_;
    if (fail_next_step) {
      fail_next_step = false;
      return Status(StatusCode::kInternal, "injected failure");
    }
    int64_t add = 0;
    std::set<int64_t> seen;
    for (const StepItem& it : items) {
      if (!seqs_.count(it.seq.value)) return Status(StatusCode::kInternal, "unknown seq");
      if (!seen.insert(it.seq.value).second) return Status(StatusCode::kInternal, "seq twice");
      if (it.tokens.empty()) return Status(StatusCode::kInternal, "empty item");
      if (sequence_length(it.seq) + static_cast<int64_t>(it.tokens.size()) > o_.max_context) {
        return Status(StatusCode::kOutOfRange, "context exceeded");
      }
      add += static_cast<int64_t>(it.tokens.size());
    }
    if (used_tokens() + add > o_.pool_tokens) {
      return Status(StatusCode::kResourceExhausted, "pool full");
    }
    max_batch_items_ = std::max<int64_t>(max_batch_items_, items.size());
    logits->clear();
    for (const StepItem& it : items) {
      auto& h = seqs_[it.seq.value];
      h.insert(h.end(), it.tokens.begin(), it.tokens.end());
      if (o_.prefix_block > 0) {
        for (size_t n = o_.prefix_block; n <= h.size(); n += o_.prefix_block) {
          cached_.insert(std::vector<int32_t>(h.begin(), h.begin() + n));
        }
      }
      if (it.want_logits) {
        const size_t n = it.all_logits ? it.tokens.size() : 1;
        for (size_t r = n; r-- > 0;) {
          auto row = fake_logits(std::span<const int32_t>(h).first(h.size() - r), o_.vocab);
          if (it.seq.value == nan_logits_seq) row[row.size() / 2] = std::nanf("");
          logits->insert(logits->end(), row.begin(), row.end());
        }
      }
    }
    return ok_status();
  }
  // Speculative rollback (unless rollback_unsupported: the scheduler then recomputes).
  Status truncate_sequence(SeqId seq, int64_t new_len) override {
    if (rollback_unsupported) return ModelRunner::truncate_sequence(seq, new_len);
    auto it = seqs_.find(seq.value);
    if (it == seqs_.end() || new_len <= 0 || new_len > static_cast<int64_t>(it->second.size()))
      return invalid_argument("truncate: bad length {}", new_len);
    it->second.resize(static_cast<size_t>(new_len));
    return ok_status();
  }
  std::vector<CacheUsage> cache_usage() const override {
    return {{"kv", "host", used_tokens() * 16, o_.pool_tokens * 16}};
  }
  int64_t attach_cached_prefix(SeqId seq, std::span<const int32_t> tokens) override {
    if (o_.prefix_block <= 0) return 0;
    int64_t best = 0;
    for (int64_t n = o_.prefix_block; n < static_cast<int64_t>(tokens.size()); n += o_.prefix_block) {
      if (!cached_.count(std::vector<int32_t>(tokens.begin(), tokens.begin() + n))) break;
      best = n;
    }
    auto& h = seqs_[seq.value];
    h.assign(tokens.begin(), tokens.begin() + best);
    return best;
  }
  int64_t prefix_alignment() const override { return o_.prefix_block; }

  int64_t used_tokens() const {
    int64_t n = 0;
    for (auto& [id, h] : seqs_) n += static_cast<int64_t>(h.size());
    return n;
  }
  int64_t live_sequences() const { return static_cast<int64_t>(seqs_.size()); }
  int64_t steps() const { return steps_; }
  int64_t max_batch_items() const { return max_batch_items_; }
  bool fail_next_step = false;
  int64_t nan_logits_seq = -1;  // this sequence's logits rows get a NaN
  bool rollback_unsupported = false;  // truncate_sequence answers Unimplemented

 private:
  FakeRunnerOptions o_;
  ModelInfo info_;
  std::map<int64_t, std::vector<int32_t>> seqs_;
  std::set<std::vector<int32_t>> cached_;
  int64_t steps_ = 0;
  int64_t max_batch_items_ = 0;
};

}  // namespace strata
