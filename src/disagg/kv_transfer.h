// KvTransferSender / KvTransferReceiver: the two ends of the prefill -> decode handoff
// (issue 23), over a Transport (transport.h) with the wire codec (wire.h).
//
// Protocol strata-pd/1, one request/reply per operation, JSON in the first frame:
//   {"op":"hello","contract":C}          -> {"ok":true,"contract":P} | {"ok":false,"error":..}
//       Both ends compare (compare_handoff_contracts) and refuse a mismatch naming the field;
//       no state moves before a successful hello, and the receiver repeats it whenever it
//       meets an endpoint it has not verified.
//   {"op":"fetch","handle":H,"from_pos":F,"contract":digest}
//                                        -> {"ok":true,...} + wire.h frames | {"ok":false,
//                                           "reason":R,"error":..}
//       Sends the leased state from F (growing rows below F are left out: the receiver holds
//       them) and marks the handle consumed: a second fetch is refused (reason "consumed").
//       Reasons: unknown_handle (never leased, forged, or freed), consumed, expired,
//       contract (the digest is not the sender's), bad_request.
//   {"op":"ack","handle":H}              -> {"ok":true,"freed":bool}
//       Frees the lease; a late or duplicate ack frees nothing (freed false): every lease is
//       freed exactly once, by an ack or by expiry.
// Leases: lease() stores a copy of the request's exported state (the prefill request's pool
// blocks are released at once) for lease_ms; a reaper thread frees expired leases.
// Receiver.fetch(): handshake if needed, fetch, decode, verify_handoff (checksums, rows,
// sizes) and ack; returns the verified state, or an error (DataLoss, Unavailable,
// FailedPrecondition, NotFound) counted under a reason. It never returns a partial state.
// Metrics (Prometheus text, metrics_text()): strata:kv_transfer_bytes_total{kind}, fetches,
// acks, leases (active / expired), failures_total{reason}, handoff latency sum/count.
// Thread safety: every method is safe from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "base/status.h"
#include "disagg/contract.h"
#include "disagg/transport.h"
#include "state/handoff.h"
#include "state/state_graph.h"

namespace strata {

struct KvTransferOptions {
  std::string endpoint = "tcp://127.0.0.1:0";  // sender: where to bind
  int64_t lease_ms = 30000;                     // --kv-transfer-lease-ms
  int timeout_ms = 10000;                       // receiver: per request
};

class KvTransferSender {
 public:
  static StatusOr<std::unique_ptr<KvTransferSender>> start(HandoffContract contract,
                                                           const StateGraph& graph,
                                                           const KvTransferOptions& o);
  ~KvTransferSender();
  const std::string& endpoint() const;
  // Leases `st` (a whole exported state, from_pos 0); returns its handle (unguessable).
  std::string lease(std::shared_ptr<const HandoffState> st);
  int64_t active_leases() const;
  std::string metrics_text() const;
  void stop();

 private:
  KvTransferSender(HandoffContract contract, const StateGraph& graph, const KvTransferOptions& o);
  Frames handle(const Frames& msg);
  void reap();
  struct Lease {
    std::shared_ptr<const HandoffState> state;
    std::chrono::steady_clock::time_point deadline;
    bool consumed = false;
  };
  HandoffContract contract_;
  std::string digest_;
  const StateGraph& graph_;
  KvTransferOptions o_;
  std::unique_ptr<TransportServer> server_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread reaper_;
  std::map<std::string, Lease> leases_;
  uint64_t next_ = 1;
  uint64_t secret_ = 0;
  std::map<std::string, int64_t> bytes_by_kind_, failures_;
  int64_t leased_ = 0, fetches_ = 0, acks_ = 0, expired_ = 0;
};

class KvTransferReceiver {
 public:
  KvTransferReceiver(HandoffContract contract, const StateGraph& graph,
                     std::unique_ptr<TransportClient> client, const KvTransferOptions& o);
  // Verifies the contract with the sender at `endpoint` (cached once it succeeded).
  // FailedPrecondition naming the field on a mismatch, Unavailable if it does not answer.
  Status handshake(const std::string& endpoint);
  // Handshake if needed, then fetch + decode + verify + ack.
  StatusOr<std::shared_ptr<HandoffState>> fetch(const std::string& endpoint,
                                                const std::string& handle, int64_t from_pos);
  std::string metrics_text() const;

 private:
  Status fail(const std::string& reason, Status s);
  HandoffContract contract_;
  std::string digest_;
  const StateGraph& graph_;
  std::unique_ptr<TransportClient> client_;
  KvTransferOptions o_;
  mutable std::mutex mu_;
  std::set<std::string> verified_;
  std::map<std::string, int64_t> bytes_by_kind_, failures_;
  int64_t fetches_ = 0;
  double latency_sum_ = 0;
};

}  // namespace strata
