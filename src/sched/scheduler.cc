#include "sched/scheduler.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "base/check.h"
#include "state/handoff.h"

namespace strata {

Scheduler::Scheduler(ModelRunner* runner, SchedulerOptions options)
    : runner_(runner), options_(options) {
  STRATA_CHECK(runner_ != nullptr);
  STRATA_CHECK(options_.max_num_seqs >= 1);
  STRATA_CHECK(options_.max_num_batched_tokens >= 1);
  STRATA_CHECK(options_.chunk_size >= 1);
}

Scheduler::~Scheduler() {
  for (auto& [id, r] : requests_) release(&r);
}

bool Scheduler::before(const Request& a, const Request& b) {
  if (a.priority != b.priority) return a.priority < b.priority;
  return a.arrival < b.arrival;
}

Scheduler::Request* Scheduler::find(SeqId seq) {
  auto it = requests_.find(seq.value);
  return it == requests_.end() ? nullptr : &it->second;
}
const Scheduler::Request* Scheduler::find(SeqId seq) const {
  auto it = requests_.find(seq.value);
  return it == requests_.end() ? nullptr : &it->second;
}

void Scheduler::insert_waiting(Request* r) {
  auto pos = std::upper_bound(waiting_.begin(), waiting_.end(), r,
                              [](const Request* a, const Request* b) { return before(*a, *b); });
  waiting_.insert(pos, r);
}

void Scheduler::add(SeqId seq, std::vector<int32_t> prompt, int32_t priority,
                    std::shared_ptr<const HandoffState> handoff, bool fail_on_import_error) {
  STRATA_CHECK_MSG(!contains(seq), "duplicate sequence id {}", seq.value);
  STRATA_CHECK(!prompt.empty());
  Request& r = requests_[seq.value];
  r.seq = seq;
  r.priority = priority;
  r.arrival = next_arrival_++;
  r.tokens = std::move(prompt);
  r.prompt_len = static_cast<int64_t>(r.tokens.size());
  r.handoff = std::move(handoff);
  r.fail_on_import_error = fail_on_import_error;
  insert_waiting(&r);
}

void Scheduler::release(Request* r) {
  if (r->in_runner) {
    runner_->release_sequence(r->seq);
    r->in_runner = false;
  }
  r->num_computed = 0;
  if (r->num_drafts > 0) drop_drafts(r);
}

void Scheduler::drop_drafts(Request* r) {
  r->tokens.resize(r->tokens.size() - static_cast<size_t>(r->num_drafts));
  r->num_drafts = 0;
}

bool Scheduler::set_drafts(SeqId seq, std::span<const int32_t> drafts) {
  Request* r = find(seq);
  if (r == nullptr || !r->in_runner || drafts.empty() || r->num_drafts > 0 ||
      r->num_computed + 1 != static_cast<int64_t>(r->tokens.size()))
    return false;
  r->tokens.insert(r->tokens.end(), drafts.begin(), drafts.end());
  r->num_drafts = static_cast<int64_t>(drafts.size());
  return true;
}

void Scheduler::resolve_drafts(SeqId seq, int64_t accepted) {
  Request* r = find(seq);
  STRATA_CHECK(r != nullptr && r->in_runner && r->num_drafts > 0);
  STRATA_CHECK(accepted >= 0 && accepted <= r->num_drafts);
  STRATA_CHECK(r->num_computed == static_cast<int64_t>(r->tokens.size()));
  const int64_t new_len = static_cast<int64_t>(r->tokens.size()) - r->num_drafts + accepted;
  r->tokens.resize(static_cast<size_t>(new_len));
  r->num_drafts = 0;
  if (r->num_computed == new_len) return;
  const Status cut = runner_->truncate_sequence(seq, new_len);
  if (cut.ok()) {
    r->num_computed = new_len;
    return;
  }
  spdlog::debug("speculative rollback of sequence {} to {} recomputes: {}", seq.value, new_len,
                cut.to_string());
  // The runner cannot cut its state back: start the sequence again from its prefix cache
  // and feed the rest (exact: a position's state depends only on the tokens before it).
  runner_->release_sequence(seq);
  if (!runner_->add_sequence(seq).ok()) {
    preempt(r);  // re-queued; recomputed at its next admission
    return;
  }
  const int64_t hit = runner_->attach_cached_prefix(seq, r->tokens);
  r->num_computed = hit;
  r->recomputing = true;
  ++counters_.spec_rollback_recomputes;
  counters_.spec_rollback_recomputed_tokens += new_len - hit;
}

void Scheduler::preempt(Request* r) {
  auto it = std::find(running_.begin(), running_.end(), r);
  STRATA_CHECK(it != running_.end());
  running_.erase(it);
  release(r);
  insert_waiting(r);
  ++counters_.preemptions;
}

void Scheduler::remove(SeqId seq) {
  Request* r = find(seq);
  if (r == nullptr) return;
  release(r);
  if (auto it = std::find(running_.begin(), running_.end(), r); it != running_.end()) {
    running_.erase(it);
  }
  if (auto it = std::find(waiting_.begin(), waiting_.end(), r); it != waiting_.end()) {
    waiting_.erase(it);
  }
  requests_.erase(seq.value);
}

void Scheduler::append_token(SeqId seq, int32_t token) {
  Request* r = find(seq);
  STRATA_CHECK(r != nullptr);
  STRATA_CHECK_MSG(r->num_computed == static_cast<int64_t>(r->tokens.size()) || !r->in_runner ||
                       r->recomputing,
                   "append_token on seq {} with unfed tokens", seq.value);
  STRATA_CHECK(r->num_drafts == 0);
  r->recomputing = false;
  r->tokens.push_back(token);
}

bool Scheduler::is_running(SeqId seq) const {
  const Request* r = find(seq);
  return r != nullptr && r->in_runner;
}

const std::vector<int32_t>& Scheduler::tokens(SeqId seq) const {
  const Request* r = find(seq);
  STRATA_CHECK(r != nullptr);
  return r->tokens;
}

int64_t Scheduler::num_computed(SeqId seq) const {
  const Request* r = find(seq);
  STRATA_CHECK(r != nullptr);
  return r->num_computed;
}

int64_t Scheduler::cached_prompt_tokens(SeqId seq) const {
  const Request* r = find(seq);
  STRATA_CHECK(r != nullptr);
  return r->cached_prompt_tokens;
}

PrefixRestoreInfo Scheduler::prefix_restore(SeqId seq) const {
  const Request* r = find(seq);
  STRATA_CHECK(r != nullptr);
  return r->restore;
}

SchedulePlan Scheduler::plan() {
  SchedulePlan plan;
  int64_t budget = options_.max_num_batched_tokens;
  auto schedule = [&](Request* r, int64_t n) {
    ScheduledItem item;
    item.seq = r->seq;
    item.begin = r->num_computed;
    item.num_tokens = n;
    item.want_logits = r->num_computed + n == static_cast<int64_t>(r->tokens.size());
    plan.scheduled.push_back(item);
    budget -= n;
    plan.num_tokens += n;
  };
  auto fail = [&](Request* r, Status st) {
    plan.failed.push_back({r->seq, std::move(st)});
    remove(r->seq);
  };

  // 1. Running requests, in priority order.
  size_t i = 0;
  while (i < running_.size() && budget > 0) {
    Request* r = running_[i];
    const int64_t need = static_cast<int64_t>(r->tokens.size()) - r->num_computed;
    if (need <= 0) {  // waiting for its sampled token (engine appends before next plan)
      ++i;
      continue;
    }
    // The runner's answer does not know about tokens already planned this step: with a
    // shared pool they are taken from it; a per-sequence limit is not touched by them (a
    // short shared pool then comes back as ResourceExhausted from step(), nothing advanced).
    const int64_t cap = runner_->token_capacity_left(r->seq) -
                        (runner_->token_capacity_is_shared() ? plan.num_tokens : 0);
    if (cap <= 0) {
      if (running_.size() == 1) {
        fail(r, Status(StatusCode::kInvalidArgument,  // a 400: retrying cannot help
                       fmt::format("the request needs more state than the runner can hold "
                                   "even when it runs alone ({} tokens in state); shorten the "
                                   "prompt or max_tokens, or raise --kv-cache-tokens",
                                   r->num_computed)));
        continue;
      }
      Request* victim = running_.back();  // the last in order; may be r itself
      plan.preempted.push_back(victim->seq);
      preempt(victim);
      continue;  // retry r (or stop, if r was the victim: i == size)
    }
    const int64_t fits = std::min({options_.chunk_size, budget, cap});
    if (r->num_drafts > 0 && need > fits) {  // a verify is all or nothing
      drop_drafts(r);
      schedule(r, 1);
    } else {
      schedule(r, std::min(need, fits));
      plan.scheduled.back().all_logits = r->num_drafts > 0;
    }
    ++i;
  }

  // 2. Admit waiting requests in priority order; never skip the head. Not right after a
  // ResourceExhausted retry: that step must run with the remaining running requests
  // only, so that they make progress instead of re-admitting the victim (no livelock).
  const bool admit = !hold_admission_;
  hold_admission_ = false;
  while (admit && budget > 0 && !waiting_.empty() &&
         static_cast<int64_t>(running_.size()) < options_.max_num_seqs) {
    Request* r = waiting_.front();
    Status st = runner_->add_sequence(r->seq);
    if (!st.ok()) {
      if (st.code() == StatusCode::kResourceExhausted && !running_.empty()) break;
      waiting_.pop_front();
      plan.failed.push_back({r->seq, st.with_context("admission")});
      requests_.erase(r->seq.value);
      continue;
    }
    r->in_runner = true;
    const int64_t size = static_cast<int64_t>(r->tokens.size());
    const int64_t cached = runner_->attach_cached_prefix(r->seq, r->tokens);
    STRATA_CHECK_MSG(cached >= 0 && cached < size, "attach_cached_prefix returned {} for {} tokens",
                     cached, size);
    if (!r->admitted_once) {  // re-admissions after preemption are not new queries
      counters_.prefix_cache_queries += size;
      counters_.prefix_cache_hits += cached;
      r->cached_prompt_tokens = cached;
      if (cached > 0) {
        r->restore = runner_->prefix_restore_info(r->seq);
        counters_.prefix_replayed_tokens += r->restore.replayed_tokens;
        counters_.prefix_approximate_restores += r->restore.approximate ? 1 : 0;
      }
    }
    int64_t computed = cached;
    if (r->handoff && !r->admitted_once) {
      const std::shared_ptr<const HandoffState> h = std::move(r->handoff);
      int64_t held = cached;
      Status is = runner_->import_handoff(r->seq, r->tokens, *h, &held);
      if (is.ok()) {
        ++counters_.handoff_imports;
        counters_.handoff_imported_tokens += held - cached;
        computed = held;
      } else if (is.code() == StatusCode::kResourceExhausted && !running_.empty()) {
        // The pool is short now: wait for running requests to free it, as admission does.
        r->handoff = h;
        release(r);
        break;
      } else {
        ++counters_.handoff_import_failures;
        // FailedPrecondition: the state is intact but starts past what the runner holds now
        // (its prefix hit was evicted since the fetch): computing locally is always right.
        if (r->fail_on_import_error && is.code() != StatusCode::kFailedPrecondition) {
          release(r);
          waiting_.pop_front();
          plan.failed.push_back({r->seq, is.with_context("state import")});
          requests_.erase(r->seq.value);
          continue;
        }
        // Recompute: the prompt is computed here from whatever the runner holds (the prefix
        // hit, or nothing if the import restarted the sequence).
        computed = runner_->sequence_length(r->seq);
        counters_.handoff_recomputed_tokens += std::max<int64_t>(0, h->num_tokens - computed);
      }
    }
    r->admitted_once = true;
    r->num_computed = computed;
    const int64_t cap = runner_->token_capacity_left(r->seq) -
                        (runner_->token_capacity_is_shared() ? plan.num_tokens : 0);
    if (cap <= 0) {
      release(r);
      if (running_.empty()) {
        waiting_.pop_front();
        plan.failed.push_back(
            {r->seq, Status(StatusCode::kInvalidArgument,  // a 400: retrying cannot help
                            "the request does not fit in the runner's state even when it runs "
                            "alone; shorten the prompt or max_tokens, or raise "
                            "--kv-cache-tokens")});
        requests_.erase(r->seq.value);
        continue;
      }
      break;  // wait until running requests free space
    }
    waiting_.pop_front();
    auto pos = std::upper_bound(running_.begin(), running_.end(), r,
                                [](const Request* a, const Request* b) { return before(*a, *b); });
    running_.insert(pos, r);
    schedule(r, std::min({size - computed, options_.chunk_size, budget, cap}));
  }

  plan.items.reserve(plan.scheduled.size());
  for (const ScheduledItem& s : plan.scheduled) {
    const Request* r = find(s.seq);
    STRATA_CHECK(r != nullptr && r->in_runner);
    plan.items.push_back(
        {s.seq, std::span<const int32_t>(r->tokens.data() + s.begin, s.num_tokens),
         s.want_logits, r->prompt_len, s.all_logits});
  }
  return plan;
}

void Scheduler::commit(const SchedulePlan& plan) {
  for (const ScheduledItem& s : plan.scheduled) {
    Request* r = find(s.seq);
    STRATA_CHECK(r != nullptr && r->in_runner && r->num_computed == s.begin);
    r->num_computed += s.num_tokens;
  }
}

std::vector<FailedRequest> Scheduler::preempt_for_retry(const SchedulePlan& plan) {
  std::vector<FailedRequest> failed;
  if (running_.empty()) return failed;
  if (running_.size() == 1) {
    Request* r = running_.front();
    failed.push_back({r->seq, Status(StatusCode::kInvalidArgument,  // a 400: retrying cannot help
                                     "the request does not fit in the runner's state even when "
                                     "it runs alone; shorten the prompt or max_tokens, or raise "
                                     "--kv-cache-tokens")});
    remove(r->seq);
    return failed;
  }
  preempt(running_.back());
  hold_admission_ = true;
  return failed;
}

void Scheduler::check_invariants() const {
  STRATA_CHECK(running_.size() + waiting_.size() == requests_.size());
  STRATA_CHECK(static_cast<int64_t>(running_.size()) <= options_.max_num_seqs);
  for (size_t i = 0; i < running_.size(); ++i) {
    STRATA_CHECK(running_[i]->in_runner);
    STRATA_CHECK(running_[i]->num_computed <= static_cast<int64_t>(running_[i]->tokens.size()));
    if (i > 0) STRATA_CHECK(!before(*running_[i], *running_[i - 1]));
  }
  for (size_t i = 0; i < waiting_.size(); ++i) {
    STRATA_CHECK(!waiting_[i]->in_runner && waiting_[i]->num_computed == 0);
    if (i > 0) STRATA_CHECK(!before(*waiting_[i], *waiting_[i - 1]));
  }
}

}  // namespace strata
