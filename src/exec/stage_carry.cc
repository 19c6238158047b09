// Pipeline stage boundary; see stage_carry.h.
#include "exec/stage_carry.h"

#include <algorithm>

namespace strata {
namespace {

using Ids3 = std::vector<std::vector<std::vector<int32_t>>>;

void put_nested(ByteMsg* m, const std::vector<std::vector<int32_t>>& v) {
  m->put<int64_t>(static_cast<int64_t>(v.size()));
  for (const auto& r : v) m->put_vec(r);
}
std::vector<std::vector<int32_t>> get_nested(ByteMsg* m) {
  const int64_t n = m->get<int64_t>();
  STRATA_CHECK(n >= 0 && static_cast<uint64_t>(n) <= m->b.size());
  std::vector<std::vector<int32_t>> v(static_cast<size_t>(n));
  for (auto& r : v) r = m->get_vec<int32_t>();
  return v;
}
void put_ids3(ByteMsg* m, const Ids3& v) {
  m->put<int64_t>(static_cast<int64_t>(v.size()));
  for (const auto& r : v) put_nested(m, r);
}
Ids3 get_ids3(ByteMsg* m) {
  const int64_t n = m->get<int64_t>();
  STRATA_CHECK(n >= 0 && static_cast<uint64_t>(n) <= m->b.size());
  Ids3 v(static_cast<size_t>(n));
  for (auto& r : v) r = get_nested(m);
  return v;
}

}  // namespace

void StageCarry::encode(ByteMsg* m) const {
  m->put<int64_t>(s0);
  m->put<int64_t>(S);
  m->put<int32_t>(next_layer);
  m->put_vec(h);
  m->put_vec(pre);
  m->put_vec(taps);
  m->put<int32_t>(tap_slot);
  m->put<int64_t>(static_cast<int64_t>(topk.size()));
  for (const TopK& t : topk) {
    m->put<int64_t>(t.width);
    m->put_vec(t.row_width);
    put_nested(m, t.rows);
  }
  m->put<int64_t>(static_cast<int64_t>(candidates.size()));
  for (const auto& c : candidates) m->put_vec(c);
  m->put<int64_t>(static_cast<int64_t>(rows.size()));
  for (const Rows& r : rows) {
    m->put<int32_t>(r.layer);
    m->put<int32_t>(r.kind);
    m->put_vec(r.records);
    m->put_vec(r.values);
  }
  m->put<int32_t>(published_index_owner);
  m->put<uint8_t>(has_routes ? 1 : 0);
  if (has_routes) {
    put_ids3(m, routes.moe);
    put_ids3(m, routes.index);
  }
}

StageCarry StageCarry::decode(ByteMsg* m) {
  StageCarry c;
  c.s0 = m->get<int64_t>();
  c.S = m->get<int64_t>();
  c.next_layer = m->get<int32_t>();
  c.h = m->get_vec<float>();
  c.pre = m->get_vec<float>();
  c.taps = m->get_vec<float>();
  c.tap_slot = m->get<int32_t>();
  const int64_t nt = m->get<int64_t>();
  STRATA_CHECK(nt >= 0 && static_cast<uint64_t>(nt) <= m->b.size());
  c.topk.resize(static_cast<size_t>(nt));
  for (TopK& t : c.topk) {
    t.width = m->get<int64_t>();
    t.row_width = m->get_vec<int32_t>();
    t.rows = get_nested(m);
  }
  const int64_t nc = m->get<int64_t>();
  STRATA_CHECK(nc >= 0 && static_cast<uint64_t>(nc) <= m->b.size());
  c.candidates.resize(static_cast<size_t>(nc));
  for (auto& v : c.candidates) v = m->get_vec<uint8_t>();
  const int64_t nr = m->get<int64_t>();
  STRATA_CHECK(nr >= 0 && static_cast<uint64_t>(nr) <= m->b.size());
  c.rows.resize(static_cast<size_t>(nr));
  for (Rows& r : c.rows) {
    r.layer = m->get<int32_t>();
    r.kind = m->get<int32_t>();
    r.records = m->get_vec<int64_t>();
    r.values = m->get_vec<float>();
  }
  c.published_index_owner = m->get<int32_t>();
  c.has_routes = m->get<uint8_t>() != 0;
  if (c.has_routes) {
    c.routes.moe = get_ids3(m);
    c.routes.index = get_ids3(m);
  }
  STRATA_CHECK_MSG(m->done(), "pipeline stage boundary: {} trailing bytes", m->b.size() - m->at);
  return c;
}

void merge_routes(const V41Routes& part, int64_t row0, V41Routes* call) {
  STRATA_CHECK(part.moe.size() == call->moe.size() && part.index.size() == call->index.size());
  for (size_t l = 0; l < part.moe.size(); ++l)
    call->moe[l].insert(call->moe[l].end(), part.moe[l].begin(), part.moe[l].end());
  for (size_t j = 0; j < part.index.size(); ++j) {
    STRATA_CHECK(row0 + part.index[j].size() <= call->index[j].size());
    std::copy(part.index[j].begin(), part.index[j].end(), call->index[j].begin() + row0);
  }
}

StageCarry pipe_receive(PipeComm& comm) {
  ByteMsg m;
  m.b = comm.recv_prev();
  return StageCarry::decode(&m);
}

StageCarry pipe_pass(PipeComm& comm, const PipeStage& st, const StageCarry& mine) {
  ByteMsg m;
  mine.encode(&m);
  if (!st.last) comm.send_next(m.b);
  comm.bcast_from_last(&m.b);
  if (st.last) return mine;
  return StageCarry::decode(&m);
}

}  // namespace strata
