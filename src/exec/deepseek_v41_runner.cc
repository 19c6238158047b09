// DeepseekV41Runner and DeepseekV41GoldenTarget; see deepseek_v41_runner.h.
#include "exec/deepseek_v41_runner.h"

#include "base/check.h"
#include "exec/v41_sequence_state.h"
#include "model/engram_hash.h"
#include "model/tokenizer.h"

#include <algorithm>
#include <filesystem>

namespace strata {

StatusOr<std::unique_ptr<DeepseekV41Runner>> DeepseekV41Runner::create(
    const std::string& dir, const V41LoadOptions& options, std::string name,
    V41RunnerCacheOptions cache) {
  if (options.legacy_state)
    return invalid_argument("DeepseekV41Runner keeps state in the state module (no legacy_state)");
  std::unique_ptr<DeepseekV41Runner> r(new DeepseekV41Runner());
  STRATA_ASSIGN_OR_RETURN(r->model_, DeepseekV41Model::load(dir, options));
  const DeepseekConfig& c = r->model_->config();
  if (name.empty()) name = std::filesystem::path(dir).filename().string();
  if (name.empty()) name = std::filesystem::path(dir).parent_path().filename().string();
  r->info_.name = name;
  r->info_.architecture = "deepseek_v41";
  r->info_.vocab_size = static_cast<int32_t>(c.vocab_size);
  r->info_.max_context = r->model_->max_context();
  r->info_.bos_id = static_cast<int32_t>(c.bos_token_id);
  r->info_.eos_id = static_cast<int32_t>(c.eos_token_id);
  r->cache_opts_ = cache;
  r->cm_ = std::make_unique<V41SharedCache>(r->model_->state_graph(), cache,
                                            r->model_->state_max_tokens());
  if (cache.restore != V41PrefixRestore::kStoredState && !c.engram_layer_ids.empty() &&
      c.engram_max_ngram_size > 1) {
    // The Engram history at the replay start is rebuilt from ids: the same compressed-token
    // map DeepseekV41Model::load uses (injected, file, or built from the tokenizer).
    std::vector<int64_t> map = options.engram_token_map;
    if (map.empty() && !options.engram_token_map_path.empty()) {
      STRATA_ASSIGN_OR_RETURN(map, load_token_map(options.engram_token_map_path));
    }
    if (map.empty()) {
      STRATA_ASSIGN_OR_RETURN(auto tok, load_tokenizer_from_dir(dir));
      int64_t n = 0;
      STRATA_ASSIGN_OR_RETURN(map, build_compressed_token_map(*tok, &n));
    }
    r->engram_map_ = std::move(map);
  }
  return r;
}

DeepseekV41Runner::~DeepseekV41Runner() {
  for (auto& [id, s] : seqs_) s.state.reset();
}

Status DeepseekV41Runner::add_sequence(SeqId seq) {
  if (seqs_.count(seq)) return invalid_argument("sequence {} already exists", seq.value);
  if (static_cast<int>(seqs_.size()) >= cm_->max_seqs())
    return Status(StatusCode::kResourceExhausted,
                  fmt::format("V4.1 runner holds {} sequences (max_seqs)", seqs_.size()));
  seqs_[seq] = Seq{};
  return ok_status();
}

void DeepseekV41Runner::release_sequence(SeqId seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  const bool started = it->second.state != nullptr;
  seqs_.erase(it);
  if (started) cm_->release(seq.value);
}

void DeepseekV41Runner::start(SeqId seq, Seq& s, std::span<const int32_t> prompt, bool allow_hit) {
  STRATA_CHECK(!s.state);
  int64_t len = cm_->start(seq.value, prompt, allow_hit);
  if (len > 0 && cm_->restore() != V41PrefixRestore::kStoredState &&
      !replay(seq, s, prompt, len).ok()) {
    s.state.reset();
    cm_->release(seq.value);
    len = cm_->start(seq.value, prompt, /*allow_hit=*/false);
  }
  // (After a replay the state, at length len, keeps its published index owner.)
  if (!s.state)
    s.state = std::make_unique<V41SequenceState>(model_->config(), cm_->manager(), seq.value, len);
  s.pending.assign(prompt.begin() + len, prompt.end());
}

Status DeepseekV41Runner::replay(SeqId seq, Seq& s, std::span<const int32_t> prompt,
                                 int64_t hit) {
  const DeepseekConfig& c = model_->config();
  const int64_t r0 = std::max<int64_t>(0, hit - cm_->replay_tokens());
  // The manager holds [0, hit); the replay runs [r0, hit) on a state that starts at r0.
  s.state = std::make_unique<V41SequenceState>(c, cm_->manager(), seq.value, r0);
  V41SequenceState& st = *s.state;
  st.set_shared_prefix_end(hit);  // compressed rows / index keys of [0, hit) are the cache's
  st.set_window_floor(r0);        // fresh ring before r0
  if (!engram_map_.empty()) {
    // Mapped ids of the positions [r0 - h, r0), oldest first (fewer near the start).
    const int64_t h = c.engram_max_ngram_size - 1;
    std::vector<int64_t> hist;
    for (int64_t p = std::max<int64_t>(0, r0 - h); p < r0; ++p) {
      const int64_t t = prompt[static_cast<size_t>(p)];
      if (t < 0 || t >= static_cast<int64_t>(engram_map_.size()))
        return invalid_argument("token {} at {} outside the Engram map", t, p);
      hist.push_back(engram_map_[static_cast<size_t>(t)]);
    }
    st.set_engram_history(hist);
  }
  if (r0 == hit) {  // replay_tokens 0: measurement baseline, rings left empty
    st.set_shared_prefix_end(0);
    return ok_status();
  }
  // Canonical form, as step() computes every row: a replay from 0 (hit <= replay_tokens) is
  // exact.
  V41ForwardOptions opt;
  std::vector<float> row;
  STRATA_RETURN_IF_ERROR(model_->forward(&st, prompt.subspan(static_cast<size_t>(r0),
                                                            static_cast<size_t>(hit - r0)),
                                         opt, &row));
  STRATA_CHECK(st.length() == hit);
  st.set_shared_prefix_end(0);
  st.set_window_floor(0);
  return ok_status();
}

int64_t DeepseekV41Runner::attach_cached_prefix(SeqId seq, std::span<const int32_t> tokens) {
  auto it = seqs_.find(seq);
  STRATA_CHECK_MSG(it != seqs_.end(), "attach_cached_prefix: unknown sequence {}", seq.value);
  Seq& s = it->second;
  if (s.state || tokens.empty()) return length(s);
  start(seq, s, tokens, /*allow_hit=*/cm_->prefix_cache());
  return length(s);
}

int64_t DeepseekV41Runner::prefix_alignment() const {
  return cm_->prefix_cache() ? cm_->unit() : 0;
}

int64_t DeepseekV41Runner::sequence_length(SeqId seq) const {
  auto it = seqs_.find(seq);
  return it == seqs_.end() ? 0 : length(it->second);
}

int64_t DeepseekV41Runner::token_capacity_left(SeqId seq) const {
  auto it = seqs_.find(seq);
  const int64_t cap = std::min(model_->state_max_tokens(), model_->max_context());
  if (it == seqs_.end()) return cap;
  return std::max<int64_t>(0, cap - length(it->second));
}

Status DeepseekV41Runner::step(std::span<const StepItem> items, std::vector<float>* logits) {
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
    int64_t done = 0;
    while (done < n) {
      int64_t c = cm_->suggest_chunk(it.seq.value, n - done);
      if (c <= 0 || c > n - done) c = n - done;
      const int64_t pos = pos0 + done;
      // Canonical form (exec/call_shape.h): every row as a one-token decode step at its
      // position, prompt or generated, so splits, prefix hits and recompute change no bit.
      const V41ForwardOptions opt;
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
    }
    if (it.want_logits) logits->insert(logits->end(), row.begin(), row.end());
    ++advanced;
  }
  return ok_status();
}

std::vector<CacheUsage> DeepseekV41Runner::cache_usage() const {
  std::vector<int64_t> lengths;
  for (const auto& [id, s] : seqs_)
    if (s.state) lengths.push_back(s.state->length());
  std::vector<CacheUsage> out;
  for (const V41KindUsage& u : cm_->usage(lengths))
    out.push_back(CacheUsage{u.kind, "host", u.used_bytes, u.capacity_bytes});
  return out;
}

StatusOr<GoldenStepOutput> DeepseekV41GoldenTarget::forward(std::span<const int32_t> tokens,
                                                            int64_t start_pos) {
  if (start_pos != seq_->length())
    return invalid_argument("golden forward at {} but the sequence holds {} tokens", start_pos,
                            seq_->length());
  GoldenStepOutput out;
  V41Routes routes;
  V41ForwardOptions opt;
  opt.routes = &routes;
  opt.call_shape = shape_;
  opt.decode_step = prompt_len_ >= 0 ? start_pos >= prompt_len_
                                     : (tokens.size() == 1 && start_pos > 0);
  if (!opt.decode_step && prompt_len_ >= 0) opt.prompt_len = prompt_len_;
  STRATA_RETURN_IF_ERROR(model_->forward(seq_.get(), tokens, opt, &out.logits));
  out.moe = std::move(routes.moe);
  out.index = std::move(routes.index);
  return out;
}

StatusOr<std::unique_ptr<GoldenTarget>> make_deepseek_v41_golden_target(const std::string& dir,
                                                                        int threads,
                                                                        CallShape shape) {
  V41LoadOptions load;
  load.threads = threads;
  STRATA_ASSIGN_OR_RETURN(auto model, DeepseekV41Model::load(dir, load));
  return std::unique_ptr<GoldenTarget>(new DeepseekV41GoldenTarget(std::move(model), shape));
}

}  // namespace strata
