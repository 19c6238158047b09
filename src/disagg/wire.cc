#include "disagg/wire.h"

#include <cstring>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace strata {

Frames encode_handoff_frames(const HandoffState& st, const std::string& extra_json) {
  nlohmann::json h = nlohmann::json::parse(extra_json);
  h["num_tokens"] = st.num_tokens;
  h["from_pos"] = st.from_pos;
  nlohmann::json runs = nlohmann::json::array();
  for (const HandoffRun& r : st.runs)
    runs.push_back({{"owner", r.owner},
                    {"kind", static_cast<int>(r.kind)},
                    {"row0", r.row0},
                    {"n_rows", r.n_rows},
                    {"row_bytes", r.row_bytes},
                    {"checksum", fmt::format("{:016x}", r.checksum)}});
  h["runs"] = runs;
  Frames f;
  f.push_back(h.dump());
  std::string ids(st.token_ids.size() * 4, '\0');
  for (size_t i = 0; i < st.token_ids.size(); ++i) {
    const uint32_t v = static_cast<uint32_t>(st.token_ids[i]);
    for (int b = 0; b < 4; ++b) ids[i * 4 + b] = static_cast<char>((v >> (8 * b)) & 0xff);
  }
  f.push_back(std::move(ids));
  for (const HandoffRun& r : st.runs)
    f.emplace_back(reinterpret_cast<const char*>(r.bytes.data()), r.bytes.size());
  return f;
}

StatusOr<HandoffState> decode_handoff_frames(const Frames& frames, size_t first) {
  if (frames.size() < first + 2)
    return data_loss("handoff message has {} frames, expected a header and token ids",
                     frames.size() - std::min(frames.size(), first));
  HandoffState st;
  try {
    const nlohmann::json h = nlohmann::json::parse(frames[first]);
    st.num_tokens = h.at("num_tokens").get<int64_t>();
    st.from_pos = h.at("from_pos").get<int64_t>();
    const auto& runs = h.at("runs");
    if (frames.size() != first + 2 + runs.size())
      return data_loss("handoff message has {} run frames, the header lists {}",
                       frames.size() - first - 2, runs.size());
    for (size_t i = 0; i < runs.size(); ++i) {
      const auto& j = runs[i];
      HandoffRun r;
      r.owner = j.at("owner").get<int>();
      r.kind = static_cast<StateKind>(j.at("kind").get<int>());
      r.row0 = j.at("row0").get<int64_t>();
      r.n_rows = j.at("n_rows").get<int64_t>();
      r.row_bytes = j.at("row_bytes").get<int64_t>();
      r.checksum = std::stoull(j.at("checksum").get<std::string>(), nullptr, 16);
      const std::string& b = frames[first + 2 + i];
      if (r.n_rows < 0 || r.row_bytes < 0 ||
          static_cast<int64_t>(b.size()) != r.n_rows * r.row_bytes)
        return data_loss("handoff run {}: frame of {} bytes for {} rows x {} B", i, b.size(),
                         r.n_rows, r.row_bytes);
      r.bytes.assign(b.begin(), b.end());
      st.runs.push_back(std::move(r));
    }
  } catch (const std::exception& e) {
    return data_loss("malformed handoff header: {}", e.what());
  }
  const std::string& ids = frames[first + 1];
  if (st.num_tokens < 0 || static_cast<int64_t>(ids.size()) != 4 * st.num_tokens)
    return data_loss("handoff token-id frame of {} bytes for {} positions", ids.size(),
                     st.num_tokens);
  st.token_ids.resize(static_cast<size_t>(st.num_tokens));
  for (size_t i = 0; i < st.token_ids.size(); ++i) {
    uint32_t v = 0;
    for (int b = 0; b < 4; ++b) v |= static_cast<uint32_t>(static_cast<uint8_t>(ids[i * 4 + b])) << (8 * b);
    st.token_ids[i] = static_cast<int32_t>(v);
  }
  return st;
}

}  // namespace strata
