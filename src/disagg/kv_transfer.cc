#include "disagg/kv_transfer.h"

#include <random>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>
#include <xxhash.h>

namespace strata {

namespace {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

std::string digest(const HandoffContract& c) {
  // Only the compared fields count (info is informational).
  HandoffContract f;
  f.fields = c.fields;
  const std::string j = f.to_json();
  return fmt::format("{:016x}", XXH3_64bits(j.data(), j.size()));
}

Frames reply_error(const std::string& reason, const std::string& msg) {
  return {Json{{"ok", false}, {"reason", reason}, {"error", msg}}.dump()};
}

// The leased state from `from`: growing runs lose their rows below from/ratio.
HandoffState slice_from(const StateGraph& g, const HandoffState& st, int64_t from) {
  HandoffState out;
  out.num_tokens = st.num_tokens;
  out.from_pos = from;
  out.token_ids = st.token_ids;
  for (const HandoffRun& r : st.runs) {
    const StateSpec& s = g.owner(r.owner).spec;
    if (!s.grows() || from == 0) {
      out.runs.push_back(r);
      continue;
    }
    const int64_t first = from / s.ratio;
    if (first >= r.row0 + r.n_rows) continue;
    HandoffRun c = r;
    const int64_t skip = std::max<int64_t>(0, first - r.row0);
    c.row0 = r.row0 + skip;
    c.n_rows = r.n_rows - skip;
    c.bytes.assign(r.bytes.begin() + skip * r.row_bytes, r.bytes.end());
    c.checksum = handoff_checksum(c.bytes.data(), c.bytes.size());
    out.runs.push_back(std::move(c));
  }
  return out;
}

std::string render_counters(const std::string& prefix, const std::map<std::string, int64_t>& bytes,
                            const std::map<std::string, int64_t>& failures) {
  std::string s;
  s += fmt::format("# TYPE strata:kv_transfer_{}_bytes_total counter\n", prefix);
  for (const auto& [k, v] : bytes)
    s += fmt::format("strata:kv_transfer_{}_bytes_total{{kind=\"{}\"}} {}\n", prefix, k, v);
  s += fmt::format("# TYPE strata:kv_transfer_{}_failures_total counter\n", prefix);
  for (const auto& [k, v] : failures)
    s += fmt::format("strata:kv_transfer_{}_failures_total{{reason=\"{}\"}} {}\n", prefix, k, v);
  return s;
}

}  // namespace

// ------------------------------------------------------------------ sender

KvTransferSender::KvTransferSender(HandoffContract contract, const StateGraph& graph,
                                   const KvTransferOptions& o)
    : contract_(std::move(contract)), digest_(digest(contract_)), graph_(graph), o_(o) {
  std::random_device rd;
  secret_ = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^
            static_cast<uint64_t>(Clock::now().time_since_epoch().count());
}

StatusOr<std::unique_ptr<KvTransferSender>> KvTransferSender::start(HandoffContract contract,
                                                                     const StateGraph& graph,
                                                                     const KvTransferOptions& o) {
  std::unique_ptr<KvTransferSender> s(new KvTransferSender(std::move(contract), graph, o));
  KvTransferSender* self = s.get();
  STRATA_ASSIGN_OR_RETURN(s->server_,
                          start_zmq_server(o.endpoint, [self](const Frames& m) { return self->handle(m); }));
  s->reaper_ = std::thread([self] { self->reap(); });
  return s;
}

KvTransferSender::~KvTransferSender() { stop(); }

void KvTransferSender::stop() {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  cv_.notify_all();
  if (reaper_.joinable()) reaper_.join();
  if (server_) server_->stop();
}

const std::string& KvTransferSender::endpoint() const { return server_->endpoint(); }

std::string KvTransferSender::lease(std::shared_ptr<const HandoffState> st) {
  std::lock_guard lock(mu_);
  const uint64_t n = next_++;
  const std::string h = fmt::format("{:016x}{:08x}", XXH3_64bits_withSeed(&n, sizeof(n), secret_),
                                    static_cast<uint32_t>(n));
  leases_[h] = Lease{std::move(st), Clock::now() + std::chrono::milliseconds(o_.lease_ms), false};
  ++leased_;
  return h;
}

int64_t KvTransferSender::active_leases() const {
  std::lock_guard lock(mu_);
  return static_cast<int64_t>(leases_.size());
}

void KvTransferSender::reap() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    cv_.wait_for(lock, std::chrono::milliseconds(20));
    const auto now = Clock::now();
    for (auto it = leases_.begin(); it != leases_.end();) {
      if (it->second.deadline <= now) {
        ++expired_;
        it = leases_.erase(it);
      } else {
        ++it;
      }
    }
  }
}

Frames KvTransferSender::handle(const Frames& msg) {
  Json req;
  try {
    req = Json::parse(msg.at(0));
  } catch (const std::exception& e) {
    std::lock_guard lock(mu_);
    ++failures_["bad_request"];
    return reply_error("bad_request", fmt::format("malformed request: {}", e.what()));
  }
  const std::string op = req.value("op", "");
  if (op == "hello") {
    auto peer = HandoffContract::from_json(req.value("contract", std::string()));
    Status s = peer.ok() ? compare_handoff_contracts(contract_, *peer) : peer.status();
    if (!s.ok()) {
      std::lock_guard lock(mu_);
      ++failures_["handshake"];
      return {Json{{"ok", false}, {"reason", "handshake"}, {"error", s.message()},
                   {"contract", contract_.to_json()}}
                  .dump()};
    }
    return {Json{{"ok", true}, {"contract", contract_.to_json()}}.dump()};
  }
  const std::string handle = req.value("handle", "");
  if (op == "ack") {
    std::lock_guard lock(mu_);
    const bool freed = leases_.erase(handle) > 0;
    if (freed) ++acks_;
    return {Json{{"ok", true}, {"freed", freed}}.dump()};
  }
  if (op != "fetch") {
    std::lock_guard lock(mu_);
    ++failures_["bad_request"];
    return reply_error("bad_request", fmt::format("unknown op '{}'", op));
  }
  std::shared_ptr<const HandoffState> st;
  int64_t from = 0;
  {
    std::lock_guard lock(mu_);
    if (req.value("contract", std::string()) != digest_) {
      ++failures_["contract"];
      return reply_error("contract", "the fetch's contract digest is not this sender's; "
                                     "repeat the hello handshake");
    }
    auto it = leases_.find(handle);
    if (it == leases_.end()) {
      ++failures_["unknown_handle"];
      return reply_error("unknown_handle",
                         fmt::format("no leased state '{}' (never leased, freed or expired)", handle));
    }
    if (it->second.deadline <= Clock::now()) {
      ++failures_["expired"];
      ++expired_;
      leases_.erase(it);
      return reply_error("expired", fmt::format("the lease of '{}' expired", handle));
    }
    if (it->second.consumed) {
      ++failures_["consumed"];
      return reply_error("consumed", fmt::format("state '{}' was already fetched", handle));
    }
    from = req.value("from_pos", int64_t{0});
    bool from_ok = from >= 0 && from <= it->second.state->num_tokens;
    for (int r : graph_.growth_ratios()) from_ok = from_ok && from % r == 0;
    if (!from_ok) {
      ++failures_["bad_request"];
      return reply_error("bad_request", fmt::format("from_pos {} is not a boundary within {} positions",
                                                    from, it->second.state->num_tokens));
    }
    it->second.consumed = true;
    st = it->second.state;
    ++fetches_;
  }
  const HandoffState sliced = slice_from(graph_, *st, from);
  {
    std::lock_guard lock(mu_);
    for (const HandoffRun& r : sliced.runs)
      bytes_by_kind_[state_kind_name(r.kind)] += static_cast<int64_t>(r.bytes.size());
  }
  return encode_handoff_frames(sliced, Json{{"ok", true}}.dump());
}

std::string KvTransferSender::metrics_text() const {
  std::lock_guard lock(mu_);
  std::string s = render_counters("sent", bytes_by_kind_, failures_);
  s += fmt::format("# TYPE strata:kv_transfer_leases_active gauge\nstrata:kv_transfer_leases_active {}\n",
                   leases_.size());
  s += fmt::format("# TYPE strata:kv_transfer_leases_total counter\nstrata:kv_transfer_leases_total {}\n", leased_);
  s += fmt::format("# TYPE strata:kv_transfer_leases_expired_total counter\nstrata:kv_transfer_leases_expired_total {}\n", expired_);
  s += fmt::format("# TYPE strata:kv_transfer_fetches_total counter\nstrata:kv_transfer_fetches_total {}\n", fetches_);
  s += fmt::format("# TYPE strata:kv_transfer_acks_total counter\nstrata:kv_transfer_acks_total {}\n", acks_);
  return s;
}

// ------------------------------------------------------------------ receiver

KvTransferReceiver::KvTransferReceiver(HandoffContract contract, const StateGraph& graph,
                                       std::unique_ptr<TransportClient> client,
                                       const KvTransferOptions& o)
    : contract_(std::move(contract)), digest_(digest(contract_)), graph_(graph),
      client_(std::move(client)), o_(o) {}

Status KvTransferReceiver::fail(const std::string& reason, Status s) {
  std::lock_guard lock(mu_);
  ++failures_[reason];
  return s;
}

Status KvTransferReceiver::handshake(const std::string& endpoint) {
  {
    std::lock_guard lock(mu_);
    if (verified_.count(endpoint)) return ok_status();
  }
  auto r = client_->request(endpoint,
                            {Json{{"op", "hello"}, {"contract", contract_.to_json()}}.dump()},
                            o_.timeout_ms);
  if (!r.ok()) return fail("unreachable", r.status().with_context("handshake"));
  Json rep;
  try {
    rep = Json::parse(r->at(0));
  } catch (const std::exception& e) {
    return fail("malformed", data_loss("handshake with {}: malformed reply: {}", endpoint, e.what()));
  }
  if (!rep.value("ok", false))
    return fail("handshake", failed_precondition("handshake with {} refused: {}", endpoint,
                                                 rep.value("error", std::string("?"))));
  auto peer = HandoffContract::from_json(rep.value("contract", std::string()));
  if (!peer.ok()) return fail("malformed", peer.status());
  Status s = compare_handoff_contracts(*peer, contract_);
  if (!s.ok()) return fail("handshake", s.with_context(fmt::format("handshake with {}", endpoint)));
  // Informational differences (no converter is needed: rows travel by owner and absolute
  // row), logged by name.
  for (const auto& [k, v] : peer->info)
    for (const auto& [k2, v2] : contract_.info)
      if (k == k2 && v != v2)
        spdlog::info("kv transfer: {} differs from this decode server in {} ({} vs {}); "
                     "supported as is", endpoint, k, v, v2);
  std::lock_guard lock(mu_);
  verified_.insert(endpoint);
  return ok_status();
}

StatusOr<std::shared_ptr<HandoffState>> KvTransferReceiver::fetch(const std::string& endpoint,
                                                                  const std::string& handle,
                                                                  int64_t from_pos) {
  const auto t0 = Clock::now();
  STRATA_RETURN_IF_ERROR(handshake(endpoint));
  auto r = client_->request(endpoint,
                            {Json{{"op", "fetch"},
                                  {"handle", handle},
                                  {"from_pos", from_pos},
                                  {"contract", digest_}}
                                 .dump()},
                            o_.timeout_ms);
  if (!r.ok()) return fail("unreachable", r.status());
  Json head;
  try {
    head = Json::parse(r->at(0));
  } catch (const std::exception& e) {
    return fail("malformed", data_loss("fetch from {}: malformed reply: {}", endpoint, e.what()));
  }
  if (!head.value("ok", false)) {
    const std::string reason = head.value("reason", std::string("refused"));
    if (reason == "contract") {  // the sender restarted with another contract
      std::lock_guard lock(mu_);
      verified_.erase(endpoint);
    }
    return fail(reason, Status(reason == "unknown_handle" || reason == "consumed" ||
                                       reason == "expired"
                                   ? StatusCode::kNotFound
                                   : StatusCode::kFailedPrecondition,
                               fmt::format("fetch of state '{}' from {}: {}", handle, endpoint,
                                           head.value("error", std::string("?")))));
  }
  auto st = decode_handoff_frames(*r);
  if (!st.ok()) return fail("malformed", st.status());
  if (Status v = verify_handoff(graph_, *st); !v.ok()) return fail("corrupt", v);
  if (st->from_pos != from_pos)
    return fail("malformed", data_loss("fetch from {}: state starts at {}, asked {}", endpoint,
                                       st->from_pos, from_pos));
  // The state is complete and intact here: free the sender's lease (a lost ack only delays
  // that to the lease's expiry).
  (void)client_->request(endpoint, {Json{{"op", "ack"}, {"handle", handle}}.dump()}, o_.timeout_ms);
  std::lock_guard lock(mu_);
  ++fetches_;
  latency_sum_ += std::chrono::duration<double>(Clock::now() - t0).count();
  for (const HandoffRun& run : st->runs)
    bytes_by_kind_[state_kind_name(run.kind)] += static_cast<int64_t>(run.bytes.size());
  return std::make_shared<HandoffState>(std::move(st).value());
}

std::string KvTransferReceiver::metrics_text() const {
  std::lock_guard lock(mu_);
  std::string s = render_counters("received", bytes_by_kind_, failures_);
  s += fmt::format("# TYPE strata:kv_transfer_fetch_seconds summary\nstrata:kv_transfer_fetch_seconds_sum {}\n"
                   "strata:kv_transfer_fetch_seconds_count {}\n", latency_sum_, fetches_);
  return s;
}

}  // namespace strata
