// Transport: request/reply of multipart messages between a decode process (client) and a
// prefill process (server), behind a small interface so a second engine (UCX) can be added
// beside ZeroMQ. Messages are Frames (wire.h); the framing is ZeroMQ's multipart message.
//
// ZeroMQ backend: the server binds a ROUTER socket (tcp://HOST:PORT, port 0 = any free port,
// or ipc://PATH) and answers each request on one thread with `handler`; the client opens a
// REQ socket per request (ZMQ_LINGER 0), so a timed-out request leaves nothing behind.
// ZeroMQ reports no delivery failure, so completion is the reply and failure is the timeout
// (pd-dcp-ep.md §2.4).
// Fault backend (tests; `--kv-transfer-backend fault`): wraps a client and, with a seeded
// spec, damages replies to "fetch" requests (or "hello" for handshake faults):
//   drop       the request is sent, its reply lost (Unavailable after the timeout)
//   corrupt    one byte of one run frame flipped
//   truncate   the last frame cut to half its length
//   duplicate  one frame repeated
//   reorder    two run frames swapped
//   delay      the request is sent after delay_ms (past a lease)
//   handshake  the hello reply carries a contract with a changed field
// Spec: "KIND[,KIND...][:p=PROB][:seed=N][:delay_ms=MS]" (p defaults to 1; with several
// kinds, each faulty request picks one kind uniformly).
// Errors: Unavailable (timeout, cannot connect/bind), InvalidArgument (bad endpoint / spec).
// Thread safety: a client may be used from many threads at once; the server's handler runs
// on the server thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "base/status.h"
#include "disagg/wire.h"

namespace strata {

class TransportClient {
 public:
  virtual ~TransportClient() = default;
  // Sends `msg` to the server at `endpoint`; waits up to timeout_ms for the reply.
  virtual StatusOr<Frames> request(const std::string& endpoint, const Frames& msg,
                                   int timeout_ms) = 0;
};

class TransportServer {
 public:
  virtual ~TransportServer() = default;
  // The bound endpoint (the real port when 0 was asked for).
  virtual const std::string& endpoint() const = 0;
  // Stops the server thread. Idempotent.
  virtual void stop() = 0;
};

using TransportHandler = std::function<Frames(const Frames&)>;

StatusOr<std::unique_ptr<TransportServer>> start_zmq_server(const std::string& endpoint,
                                                            TransportHandler handler);
std::unique_ptr<TransportClient> make_zmq_client();

struct FaultSpec {
  std::vector<std::string> kinds;
  double probability = 1.0;
  uint64_t seed = 1;
  int delay_ms = 0;
};
StatusOr<FaultSpec> parse_fault_spec(const std::string& spec);
std::unique_ptr<TransportClient> make_fault_client(std::unique_ptr<TransportClient> inner,
                                                   FaultSpec spec);

}  // namespace strata
