// Unit tests of the disagg module: wire codec, contract comparison, fault specs, the ZeroMQ
// transport (tcp and ipc) and the sender / receiver lifecycle (lease, fetch once, ack once,
// expiry, forged handles, handshake mismatch, damaged frames) on a small hand-built graph.
#include <gtest/gtest.h>
#include <unistd.h>

#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "disagg/contract.h"
#include "disagg/kv_transfer.h"
#include "disagg/transport.h"
#include "disagg/wire.h"

namespace strata {
namespace {

StateGraph small_graph() {
  LlamaStateDesc d;
  d.n_layers = 2;
  d.n_kv_heads = 1;
  d.head_dim = 4;
  return StateGraph::from_llama(d).value();
}

// A valid state of n positions for `g`: the rows handoff_rows() lists, random bytes.
HandoffState synthetic(const StateGraph& g, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  HandoffState st;
  st.num_tokens = n;
  for (int64_t i = 0; i < n; ++i) st.token_ids.push_back(static_cast<int32_t>(rng() % 500));
  for (const HandoffRowRange& r : handoff_rows(g, n)) {
    HandoffRun run;
    run.owner = r.owner;
    run.kind = g.owner(r.owner).kind;
    run.row0 = r.row0;
    run.n_rows = r.n_rows;
    run.row_bytes = g.owner(r.owner).spec.row_bytes;
    run.bytes.resize(static_cast<size_t>(r.n_rows * run.row_bytes));
    for (auto& b : run.bytes) b = static_cast<uint8_t>(rng());
    run.checksum = handoff_checksum(run.bytes.data(), run.bytes.size());
    st.runs.push_back(std::move(run));
  }
  return st;
}

HandoffContract contract(const std::string& weights = "w1") {
  HandoffContract c;
  c.fields = {{"protocol_version", kPdProtocolVersion}, {"architecture", "llama"},
              {"weight_hash", weights}};
  return c;
}

TEST(Wire, RoundTripAndDamage) {
  const StateGraph g = small_graph();
  const HandoffState st = synthetic(g, 21, 1);
  ASSERT_TRUE(verify_handoff(g, st).ok());
  const Frames f = encode_handoff_frames(st);
  EXPECT_EQ(f.size(), st.runs.size() + 2);  // header, ids, one frame per run
  auto back = decode_handoff_frames(f);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->token_ids, st.token_ids);
  ASSERT_EQ(back->runs.size(), st.runs.size());
  for (size_t i = 0; i < st.runs.size(); ++i) EXPECT_EQ(back->runs[i].bytes, st.runs[i].bytes);
  EXPECT_TRUE(verify_handoff(g, *back).ok());

  Frames missing = f;
  missing.pop_back();
  EXPECT_EQ(decode_handoff_frames(missing).status().code(), StatusCode::kDataLoss);
  Frames cut = f;
  cut.back().pop_back();
  EXPECT_EQ(decode_handoff_frames(cut).status().code(), StatusCode::kDataLoss);
  Frames ids = f;
  ids[1].push_back('x');
  EXPECT_EQ(decode_handoff_frames(ids).status().code(), StatusCode::kDataLoss);
  Frames junk = f;
  junk[0] = "{not json";
  EXPECT_EQ(decode_handoff_frames(junk).status().code(), StatusCode::kDataLoss);
  Frames flipped = f;
  flipped[2][3] ^= 1;  // decodes, but the checksum no longer matches
  auto fl = decode_handoff_frames(flipped);
  ASSERT_TRUE(fl.ok());
  EXPECT_EQ(verify_handoff(g, *fl).code(), StatusCode::kDataLoss);
}

TEST(Contract, ComparisonNamesTheField) {
  EXPECT_TRUE(compare_handoff_contracts(contract(), contract()).ok());
  Status s = compare_handoff_contracts(contract("w1"), contract("w2"));
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("'weight_hash'"), std::string::npos) << s.message();
  HandoffContract less = contract();
  less.fields.pop_back();
  EXPECT_NE(compare_handoff_contracts(contract(), less).message().find("(missing)"),
            std::string::npos);
  auto rt = HandoffContract::from_json(contract().to_json());
  ASSERT_TRUE(rt.ok());
  EXPECT_TRUE(compare_handoff_contracts(contract(), *rt).ok());
  EXPECT_EQ(HandoffContract::from_json("[1,2").status().code(), StatusCode::kDataLoss);
}

TEST(Transport, FaultSpecs) {
  auto f = parse_fault_spec("drop,corrupt:p=0.25:seed=9:delay_ms=5");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->kinds, (std::vector<std::string>{"drop", "corrupt"}));
  EXPECT_EQ(f->probability, 0.25);
  EXPECT_EQ(f->seed, 9u);
  EXPECT_EQ(f->delay_ms, 5);
  EXPECT_FALSE(parse_fault_spec("explode").ok());
  EXPECT_FALSE(parse_fault_spec("drop:p=2").ok());
  EXPECT_FALSE(parse_fault_spec("drop:q=1").ok());
}

TEST(Transport, ZmqRequestReplyOverTcpAndIpc) {
  const std::string ipc = "ipc:///tmp/strata-disagg-test-" + std::to_string(getpid());
  for (const std::string& ep : {std::string("tcp://127.0.0.1:0"), ipc}) {
    auto server = start_zmq_server(ep, [](const Frames& m) {
      Frames r = m;
      r.push_back("echo");
      return r;
    });
    ASSERT_TRUE(server.ok()) << server.status().to_string();
    if (ep.rfind("tcp", 0) == 0) {
      EXPECT_EQ((*server)->endpoint().find(":0"), std::string::npos);
    }
    auto client = make_zmq_client();
    auto r = client->request((*server)->endpoint(), {"a", std::string(1 << 20, 'b')}, 2000);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    ASSERT_EQ(r->size(), 3u);
    EXPECT_EQ((*r)[1].size(), 1u << 20);
    EXPECT_EQ((*r)[2], "echo");
  }
  // Nobody listening: Unavailable after the timeout, not a hang.
  auto r = make_zmq_client()->request("tcp://127.0.0.1:1", {"x"}, 200);
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
}

struct Pair {
  StateGraph g = small_graph();
  std::unique_ptr<KvTransferSender> sender;
  std::unique_ptr<KvTransferReceiver> receiver;
  explicit Pair(int64_t lease_ms = 5000, const std::string& fault = "",
                HandoffContract dc = contract()) {
    KvTransferOptions o;
    o.lease_ms = lease_ms;
    o.timeout_ms = 1000;
    sender = KvTransferSender::start(contract(), g, o).value();
    std::unique_ptr<TransportClient> c = make_zmq_client();
    if (!fault.empty()) c = make_fault_client(std::move(c), parse_fault_spec(fault).value());
    receiver = std::make_unique<KvTransferReceiver>(std::move(dc), g, std::move(c), o);
  }
};

TEST(KvTransfer, FetchOnceAckOnce) {
  Pair p;
  const HandoffState st = synthetic(p.g, 33, 2);
  const std::string h = p.sender->lease(std::make_shared<HandoffState>(st));
  EXPECT_EQ(p.sender->active_leases(), 1);
  auto got = p.receiver->fetch(p.sender->endpoint(), h, 0);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ((*got)->token_ids, st.token_ids);
  EXPECT_EQ((*got)->payload_bytes(), handoff_bytes(p.g, 33).total);
  EXPECT_EQ(p.sender->active_leases(), 0);  // acked
  // The same handle again: refused (it was consumed and freed).
  EXPECT_EQ(p.receiver->fetch(p.sender->endpoint(), h, 0).status().code(), StatusCode::kNotFound);
  // A forged handle.
  EXPECT_EQ(p.receiver->fetch(p.sender->endpoint(), "0123456789abcdef01234567", 0).status().code(),
            StatusCode::kNotFound);
  // From a boundary: growing rows below it are left out, and the slice verifies.
  const std::string h2 = p.sender->lease(std::make_shared<HandoffState>(st));
  auto part = p.receiver->fetch(p.sender->endpoint(), h2, 16);
  ASSERT_TRUE(part.ok()) << part.status().to_string();
  EXPECT_EQ((*part)->payload_bytes(), handoff_bytes(p.g, 33, 16).total);
  const std::string m = p.sender->metrics_text();
  EXPECT_NE(m.find("strata:kv_transfer_acks_total 2"), std::string::npos) << m;
  EXPECT_NE(m.find("reason=\"unknown_handle\"} 2"), std::string::npos) << m;
}

TEST(KvTransfer, LeaseExpires) {
  Pair p(/*lease_ms=*/100);
  const std::string h = p.sender->lease(std::make_shared<HandoffState>(synthetic(p.g, 5, 3)));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(p.sender->active_leases(), 0);
  EXPECT_EQ(p.receiver->fetch(p.sender->endpoint(), h, 0).status().code(), StatusCode::kNotFound);
  EXPECT_NE(p.sender->metrics_text().find("strata:kv_transfer_leases_expired_total 1"),
            std::string::npos);
}

TEST(KvTransfer, HandshakeMismatchMovesNothing) {
  Pair p(5000, "", contract("other-weights"));
  const std::string h = p.sender->lease(std::make_shared<HandoffState>(synthetic(p.g, 9, 4)));
  auto r = p.receiver->fetch(p.sender->endpoint(), h, 0);
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("'weight_hash'"), std::string::npos);
  EXPECT_EQ(p.sender->active_leases(), 1);  // never fetched
  EXPECT_EQ(p.sender->metrics_text().find("sent_bytes_total{"), std::string::npos);
}

TEST(KvTransfer, DamagedFramesAreRefused) {
  for (const std::string kind : {"corrupt", "truncate", "duplicate", "reorder", "drop"}) {
    SCOPED_TRACE(kind);
    Pair p(5000, kind);
    const std::string h = p.sender->lease(std::make_shared<HandoffState>(synthetic(p.g, 40, 5)));
    auto r = p.receiver->fetch(p.sender->endpoint(), h, 0);
    EXPECT_FALSE(r.ok());
    EXPECT_NE(r.status().code(), StatusCode::kOk);
    EXPECT_EQ(p.sender->active_leases(), 1);  // no ack: the lease waits for its expiry
  }
}

}  // namespace
}  // namespace strata
