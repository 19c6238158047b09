#include "serve/handoff_log.h"

#include <chrono>

#include "state/handoff.h"

namespace strata {

std::vector<std::pair<std::string, int64_t>> handoff_bytes_per_kind(const HandoffState& st) {
  std::vector<std::pair<std::string, int64_t>> out;
  for (const HandoffRun& run : st.runs) {
    const std::string kind = state_kind_name(run.kind);
    auto it = out.begin();
    while (it != out.end() && it->first != kind) ++it;
    if (it == out.end()) it = out.insert(out.end(), {kind, 0});
    it->second += static_cast<int64_t>(run.bytes.size());
  }
  return out;
}

void HandoffLog::record(HandoffRecord r) {
  if (r.unix_ms == 0)
    r.unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::system_clock::now().time_since_epoch())
                    .count();
  std::lock_guard lock(mu_);
  r.seq = ++total_;
  ring_.push_back(std::move(r));
  while (ring_.size() > capacity_) ring_.pop_front();
}

std::vector<HandoffRecord> HandoffLog::recent() const {
  std::lock_guard lock(mu_);
  return {ring_.begin(), ring_.end()};
}

int64_t HandoffLog::total() const {
  std::lock_guard lock(mu_);
  return total_;
}

}  // namespace strata
