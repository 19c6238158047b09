// DeepseekCacheRunner: see deepseek_cache_runner.h.
#include "exec/deepseek_cache_runner.h"

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include "base/check.h"
#include "exec/deepseek_v41/v41_sequence_state.h"
#include "exec/deepseek_v4/v4_sequence_state.h"
#include "state/cache_manager.h"
#include "state/handoff.h"

namespace strata {

template <class Model, class State, class Options>
DeepseekCacheRunner<Model, State, Options>::~DeepseekCacheRunner() {
  for (auto& [id, s] : seqs_) s.state.reset();
}

template <class Model, class State, class Options>
void DeepseekCacheRunner<Model, State, Options>::init(const std::string& dir, std::string name,
                                                      const char* arch,
                                                      const V41RunnerCacheOptions& cache) {
  const DeepseekConfig& c = model_->config();
  if (name.empty()) name = std::filesystem::path(dir).filename().string();
  if (name.empty()) name = std::filesystem::path(dir).parent_path().filename().string();
  info_.name = name;
  info_.architecture = arch;
  info_.vocab_size = static_cast<int32_t>(c.vocab_size);
  info_.max_context = model_->max_context();
  info_.bos_id = static_cast<int32_t>(c.bos_token_id);
  info_.eos_id = static_cast<int32_t>(c.eos_token_id);
  cache_opts_ = cache;
  cache_opts_.stage = model_->stage_layers();
  cm_ = std::make_unique<V41SharedCache>(model_->state_graph(), cache_opts_, model_->state_max_tokens());
}

template <class Model, class State, class Options>
Status DeepseekCacheRunner<Model, State, Options>::replay(SeqId, Seq&, std::span<const int32_t>,
                                                          int64_t) {
  return unimplemented("{}: no replay restore", info_.architecture);
}

template <class Model, class State, class Options>
Status DeepseekCacheRunner<Model, State, Options>::add_sequence(SeqId seq) {
  if (seqs_.count(seq)) return invalid_argument("sequence {} already exists", seq.value);
  if (static_cast<int>(seqs_.size()) >= cm_->max_seqs())
    return Status(StatusCode::kResourceExhausted,
                  fmt::format("{} runner holds {} sequences (max_seqs)", info_.architecture, seqs_.size()));
  seqs_[seq] = Seq{};
  return ok_status();
}

template <class Model, class State, class Options>
void DeepseekCacheRunner<Model, State, Options>::release_sequence(SeqId seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  const bool started = it->second.state != nullptr;
  seqs_.erase(it);
  if (started) cm_->release(seq.value);
}

template <class Model, class State, class Options>
void DeepseekCacheRunner<Model, State, Options>::start(SeqId seq, Seq& s, std::span<const int32_t> prompt, bool allow_hit) {
  STRATA_CHECK(!s.state);
  int64_t len = cm_->start(seq.value, prompt, allow_hit);
  s.restore = {};
  if (len > 0 && cm_->restore() != V41PrefixRestore::kStoredState) {
    if (replay(seq, s, prompt, len).ok()) {
      // The replay recomputed [max(0, len - R), len); it is exact from position 0 or under
      // replay-exact, approximate otherwise (docs/state.md section 5).
      const int64_t r0 = std::max<int64_t>(0, len - cm_->replay_tokens());
      s.restore.replayed_tokens = len - r0;
      s.restore.approximate = r0 > 0 && cm_->restore() == V41PrefixRestore::kReplayWindow;
    } else {
      s.state.reset();
      cm_->release(seq.value);
      len = cm_->start(seq.value, prompt, /*allow_hit=*/false);
    }
  }
  if (!s.state)
    s.state = std::make_unique<State>(model_->config(), cm_->manager(), seq.value, len);
  s.pending.assign(prompt.begin() + len, prompt.end());
}


template <class Model, class State, class Options>
int64_t DeepseekCacheRunner<Model, State, Options>::attach_cached_prefix(SeqId seq, std::span<const int32_t> tokens) {
  auto it = seqs_.find(seq);
  STRATA_CHECK_MSG(it != seqs_.end(), "attach_cached_prefix: unknown sequence {}", seq.value);
  Seq& s = it->second;
  if (s.state || tokens.empty()) return length(s);
  start(seq, s, tokens, /*allow_hit=*/cm_->prefix_cache());
  return length(s);
}

template <class Model, class State, class Options>
void DeepseekCacheRunner<Model, State, Options>::prefetch_cached_prefix(
    std::span<const int32_t> tokens) {
  if (cm_->prefix_cache())
    cm_->manager()->prefetch(std::vector<int32_t>(tokens.begin(), tokens.end()));
}

template <class Model, class State, class Options>
int64_t DeepseekCacheRunner<Model, State, Options>::peek_cached_prefix(
    std::span<const int32_t> tokens) const {
  if (!cm_->prefix_cache()) return 0;
  return cm_->manager()->cached_prefix_tokens(std::vector<int32_t>(tokens.begin(), tokens.end()));
}

template <class Model, class State, class Options>
int64_t DeepseekCacheRunner<Model, State, Options>::prefix_alignment() const {
  return cm_->prefix_cache() ? cm_->unit() : 0;
}

template <class Model, class State, class Options>
int64_t DeepseekCacheRunner<Model, State, Options>::sequence_length(SeqId seq) const {
  auto it = seqs_.find(seq);
  return it == seqs_.end() ? 0 : length(it->second);
}

template <class Model, class State, class Options>
int64_t DeepseekCacheRunner<Model, State, Options>::token_capacity_left(SeqId seq) const {
  auto it = seqs_.find(seq);
  const int64_t cap = std::min(model_->state_max_tokens(), model_->max_context());
  if (it == seqs_.end()) return cap;
  return std::max<int64_t>(0, cap - length(it->second));
}

template <class Model, class State, class Options>
Status DeepseekCacheRunner<Model, State, Options>::step(std::span<const StepItem> items, std::vector<float>* logits) {
  const int64_t cap = std::min(model_->state_max_tokens(), model_->max_context());
  for (size_t i = 0; i < items.size(); ++i) {
    const StepItem& it = items[i];
    auto f = seqs_.find(it.seq);
    if (f == seqs_.end()) return invalid_argument("unknown sequence {}", it.seq.value);
    if (it.tokens.empty()) return invalid_argument("sequence {} has no tokens", it.seq.value);
    for (size_t j = 0; j < i; ++j)
      if (items[j].seq == it.seq) return invalid_argument("sequence {} appears twice", it.seq.value);
    const int64_t end = length(f->second) + static_cast<int64_t>(it.tokens.size());
    if (end > cap)
      return Status(StatusCode::kResourceExhausted,
                    fmt::format("sequence {} would hold {} positions; capacity {}", it.seq.value,
                                end, cap));
    // Ids given at admission (attach_cached_prefix) must agree with what is fed now.
    const Seq& s = f->second;
    const size_t m = std::min(s.pending.size(), it.tokens.size());
    if (!std::equal(s.pending.begin(), s.pending.begin() + m, it.tokens.begin()))
      return invalid_argument("sequence {}: tokens differ from the ones given at admission",
                              it.seq.value);
    for (int32_t t : it.tokens)
      if (t < 0 || t >= info_.vocab_size)
        return invalid_argument("sequence {}: token id {} out of range [0, {})", it.seq.value, t,
                                info_.vocab_size);
  }
  // All-or-nothing (model_runner.h): make the ids known to the manager (metadata only), then
  // check that the whole batch fits the pools together before any sequence advances. A
  // ResourceExhausted here leaves every sequence where it was, so the scheduler may preempt
  // one and retry the others (issue 22 item 2).
  std::vector<std::pair<int64_t, int64_t>> need;
  for (const StepItem& it : items) {
    Seq& s = seqs_.at(it.seq);
    if (!s.state) start(it.seq, s, {}, /*allow_hit=*/false);
    const int64_t n = static_cast<int64_t>(it.tokens.size());
    const int64_t have = static_cast<int64_t>(s.pending.size());
    if (have < n) {
      const std::span<const int32_t> extra = it.tokens.subspan(static_cast<size_t>(have));
      cm_->append(it.seq.value, extra);
      s.pending.insert(s.pending.end(), extra.begin(), extra.end());
    }
    need.emplace_back(it.seq.value, n);
  }
  STRATA_RETURN_IF_ERROR(cm_->check_fits(need));
  logits->clear();
  std::vector<float> row;
  size_t advanced = 0;
  for (const StepItem& it : items) {
    Seq& s = seqs_.at(it.seq);
    const int64_t n = static_cast<int64_t>(it.tokens.size());
    const int64_t pos0 = s.state->length();
    // A verify keeps the bytes its steps replace in ring / fixed rows (truncate_sequence).
    cm_->manager()->record_undo(it.seq.value, it.all_logits && it.want_logits);
    int64_t done = 0;
    while (done < n) {
      int64_t c = cm_->suggest_chunk(it.seq.value, n - done);
      if (c <= 0 || c > n - done) c = n - done;
      // Speculative verify: one row per position, each a one-token call (canonical form:
      // the same bits as decoding it).
      if (it.all_logits && it.want_logits) c = 1;
      const int64_t pos = pos0 + done;
      // Canonical form (exec/call_shape.h): every row as a one-token decode step at its
      // position, prompt or generated, so splits, prefix hits and recompute change no bit.
      const Options opt;
      int64_t start_pos = 0;
      Status st = cm_->begin(it.seq.value, c, &start_pos);
      if (st.ok()) {
        STRATA_CHECK_MSG(start_pos == pos, "seq {}: plan starts at {}, state at {}",
                         it.seq.value, start_pos, pos);
        st = model_->forward(s.state.get(), it.tokens.subspan(done, c), opt, &row);
        cm_->finish();
      }
      if (!st.ok()) {
        // Not expected after the checks above. Earlier items have advanced: not a
        // retryable capacity outcome, so the engine ends the step's requests.
        if (advanced == 0 && done == 0 && st.code() == StatusCode::kResourceExhausted) return st;
        return internal_error("sequence {} failed after {} of {} items advanced: {}",
                              it.seq.value, advanced, items.size(), st.to_string());
      }
      s.pending.erase(s.pending.begin(), s.pending.begin() + c);
      done += c;
      if (it.all_logits && it.want_logits) logits->insert(logits->end(), row.begin(), row.end());
    }
    if (it.want_logits && !it.all_logits) logits->insert(logits->end(), row.begin(), row.end());
    ++advanced;
  }
  return ok_status();
}

template <class Model, class State, class Options>
Status DeepseekCacheRunner<Model, State, Options>::truncate_sequence(SeqId seq, int64_t new_len) {
  auto f = seqs_.find(seq);
  if (f == seqs_.end()) return invalid_argument("unknown sequence {}", seq.value);
  Seq& s = f->second;
  if (!s.state || !s.pending.empty())
    return failed_precondition("sequence {} has tokens not yet computed", seq.value);
  if (new_len <= 0 || new_len > s.state->length())
    return invalid_argument("sequence {}: cannot truncate {} positions to {}", seq.value,
                            s.state->length(), new_len);
  if (new_len == s.state->length()) return ok_status();
  STRATA_RETURN_IF_ERROR(cm_->manager()->truncate(seq.value, new_len));
  s.state->truncate_length(new_len);
  return ok_status();
}

template <class Model, class State, class Options>
std::vector<CacheUsage> DeepseekCacheRunner<Model, State, Options>::cache_usage() const {
  std::vector<int64_t> lengths;
  for (const auto& [id, s] : seqs_)
    if (s.state) lengths.push_back(s.state->length());
  std::vector<CacheUsage> out;
  // "v41_prefix_cache" / "v4_prefix_cache": pool bytes held only by the prefix cache.
  const std::string prefix_kind =
      (info_.architecture == "deepseek_v4" ? std::string("v4") : std::string("v41")) + "_prefix_cache";
  for (const V41KindUsage& u : cm_->usage(lengths))
    out.push_back(CacheUsage{u.kind == "v41_prefix_cache" ? prefix_kind : u.kind, "host",
                             u.used_bytes, u.capacity_bytes});
  return out;
}


template <class Model, class State, class Options>
int64_t DeepseekCacheRunner<Model, State, Options>::prefix_cache_bytes_per_unit() const {
  if (!cm_->prefix_cache()) return 0;
  const double rows = static_cast<double>(cm_->unit()) * model_->state_graph().bytes_per_token();
  return static_cast<int64_t>(rows) + cm_->boundary_snapshot_bytes();
}

template <class Model, class State, class Options>
const StateGraph* DeepseekCacheRunner<Model, State, Options>::state_graph() const {
  return &model_->state_graph();
}

template <class Model, class State, class Options>
Status DeepseekCacheRunner<Model, State, Options>::export_handoff(SeqId seq, int64_t from_pos,
                                                                  std::span<const int32_t> ids,
                                                                  HandoffState* out) const {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return invalid_argument("export: unknown sequence {}", seq.value);
  const int64_t n = length(it->second);
  if (static_cast<int64_t>(ids.size()) != n)
    return invalid_argument("export: {} ids for {} positions", ids.size(), n);
  if (n == 0) {
    *out = HandoffState{};
    return ok_status();
  }
  *out = export_handoff_rows(*cm_->manager(), seq.value, from_pos,
                             std::vector<int32_t>(ids.begin(), ids.end()));
  return ok_status();
}

template <class Model, class State, class Options>
Status DeepseekCacheRunner<Model, State, Options>::import_handoff(SeqId seq,
                                                                  std::span<const int32_t> tokens,
                                                                  const HandoffState& st,
                                                                  int64_t* held) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return invalid_argument("import: unknown sequence {}", seq.value);
  Seq& s = it->second;
  const int64_t n = st.num_tokens;
  STRATA_RETURN_IF_ERROR(check_handoff_ids(tokens, st));
  if (!s.state) start(seq, s, tokens, /*allow_hit=*/false);
  const int64_t h = length(s);
  if (st.from_pos > h)
    return failed_precondition("import: the state starts at position {} but only {} are held",
                               st.from_pos, h);
  if (n <= h) {
    *held = h;
    return ok_status();
  }
  int64_t start_pos = 0;
  STRATA_RETURN_IF_ERROR(cm_->begin(seq.value, n - h, &start_pos));
  STRATA_CHECK(start_pos == h);
  write_handoff_rows(*cm_->manager(), seq.value, st, h);
  auto state = std::make_unique<State>(model_->config(), cm_->manager(), seq.value, n);
  Status rb = rebuild_from_ids(*state, tokens, n);
  cm_->finish();
  if (!rb.ok()) {  // the rows are written but Engram is not: the sequence restarts cold
    s.state.reset();
    cm_->release(seq.value);
    start(seq, s, tokens, /*allow_hit=*/false);
    *held = 0;
    return rb;
  }
  s.state = std::move(state);
  s.pending.assign(tokens.begin() + n, tokens.end());
  *held = n;
  return ok_status();
}

template class DeepseekCacheRunner<DeepseekV41Model, V41SequenceState, V41ForwardOptions>;
template class DeepseekCacheRunner<DeepseekV4Model, V4SequenceState, V4ForwardOptions>;

}  // namespace strata
