// HandoffLog: the last few PD handoffs a server took part in, for the dashboard
// (GET /v1/dashboard/state, serve/dashboard_state.h). The prefill role records one "export"
// per leased state (the prompt positions it covers, its payload bytes per state kind, the
// milliseconds from submit to the state being ready); the decode role one "import" per fetch
// (bytes per kind received, fetch latency in ms, ok or the error). A fixed-size ring: the
// oldest record is dropped once `capacity` are held.
// Thread safety: record / recent / total are safe from any thread (one mutex).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace strata {

struct HandoffState;

struct HandoffRecord {
  int64_t seq = 0;            // 1, 2, ... in record order (set by HandoffLog::record)
  std::string direction;      // "export" (prefill role) or "import" (decode role)
  int64_t unix_ms = 0;        // wall clock when recorded (set by record when 0)
  int64_t num_tokens = 0;     // prompt positions the state covers
  int64_t from_pos = 0;       // import: growing rows below it were held locally, not sent
  int64_t payload_bytes = 0;  // sum of the state's row bytes (token ids not counted)
  std::vector<std::pair<std::string, int64_t>> bytes_per_kind;  // state kind name -> bytes
  double latency_ms = 0;      // export: submit -> state ready; import: the fetch
  bool ok = true;
  std::string error;          // when !ok
  std::string endpoint;       // the transfer endpoint (export: ours; import: the sender's)
};

// The payload bytes of `st` per state kind, kinds in first-seen run order.
std::vector<std::pair<std::string, int64_t>> handoff_bytes_per_kind(const HandoffState& st);

class HandoffLog {
 public:
  explicit HandoffLog(size_t capacity = 32) : capacity_(capacity) {}
  // Stores `r` with the next seq (and the current time when r.unix_ms is 0).
  void record(HandoffRecord r);
  // The held records, oldest first.
  std::vector<HandoffRecord> recent() const;
  // Records ever made (including those dropped from the ring).
  int64_t total() const;

 private:
  const size_t capacity_;
  mutable std::mutex mu_;
  std::deque<HandoffRecord> ring_;
  int64_t total_ = 0;
};

}  // namespace strata
