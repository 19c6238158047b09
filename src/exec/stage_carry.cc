// Pipeline stage boundary; see stage_carry.h.
#include "exec/stage_carry.h"

#include <algorithm>
#include <type_traits>

namespace strata {
namespace {

// Vectors nested to any depth: a count per level, the innermost as ByteMsg spans.
template <class T>
struct IsVector : std::false_type {};
template <class T>
struct IsVector<std::vector<T>> : std::true_type {};

template <class T>
void put_nested(ByteMsg* m, const std::vector<T>& v) {
  if constexpr (IsVector<T>::value) {
    m->put<int64_t>(static_cast<int64_t>(v.size()));
    for (const T& r : v) put_nested(m, r);
  } else {
    m->put_vec(v);
  }
}
template <class V>
V get_nested(ByteMsg* m) {
  using T = typename V::value_type;
  if constexpr (IsVector<T>::value) {
    const int64_t n = m->get<int64_t>();
    STRATA_CHECK(n >= 0 && static_cast<uint64_t>(n) <= m->b.size());
    V v(static_cast<size_t>(n));
    for (T& r : v) r = get_nested<T>(m);
    return v;
  } else {
    return m->get_vec<T>();
  }
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
  put_nested(m, candidates);
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
    put_nested(m, routes.moe);
    put_nested(m, routes.index);
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
    t.rows = get_nested<std::vector<std::vector<int32_t>>>(m);
  }
  c.candidates = get_nested<std::vector<std::vector<uint8_t>>>(m);
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
    c.routes.moe = get_nested<decltype(c.routes.moe)>(m);
    c.routes.index = get_nested<decltype(c.routes.index)>(m);
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
