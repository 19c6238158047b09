// state_rows_json (see state_rows.h).
#include "serve/state_rows.h"

#include <fmt/format.h>

namespace strata {

nlohmann::json state_rows_json(const HandoffState& st, const StateGraph& graph) {
  nlohmann::json runs = nlohmann::json::array();
  for (const HandoffRun& r : st.runs) {
    const StateOwnerInfo& o = graph.owner(r.owner);
    const Granularity g = o.spec.granularity;
    const int64_t per_row = g == Granularity::kPerToken || g == Granularity::kPerCompressedRow
                                ? o.spec.ratio
                                : (g == Granularity::kRing ? 1 : 0);
    nlohmann::json hashes = nlohmann::json::array();
    for (int64_t i = 0; i < r.n_rows; ++i)
      hashes.push_back(fmt::format("{:016x}", handoff_checksum(r.bytes.data() + i * r.row_bytes,
                                                               static_cast<size_t>(r.row_bytes))));
    runs.push_back({{"owner", o.label},
                    {"kind", state_kind_name(o.kind)},
                    {"layer", o.layer},
                    {"granularity", granularity_name(g)},
                    {"row0", r.row0},
                    {"positions_per_row", per_row},
                    {"hashes", std::move(hashes)}});
  }
  return {{"num_tokens", st.num_tokens}, {"runs", std::move(runs)}};
}

}  // namespace strata
