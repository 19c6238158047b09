// Speculative decoding configuration and proposers (see spec_decode.h).
#include "sched/spec_decode.h"

#include <nlohmann/json.hpp>

namespace strata {

StatusOr<SpeculativeConfig> parse_speculative_config(const std::string& text) {
  SpeculativeConfig c;
  if (text.empty()) return c;
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded())
    return invalid_argument("--speculative-config is not valid JSON: '{}' (expected e.g. "
                            "'{{\"method\": \"ngram\", \"num_speculative_tokens\": 4}}')", text);
  if (!j.is_object())
    return invalid_argument("--speculative-config must be a JSON object, e.g. "
                            "'{{\"method\": \"ngram\", \"num_speculative_tokens\": 4}}'");
  if (j.empty()) return c;
  auto int_field = [&](const char* name, int* out, int lo, int hi) -> Status {
    if (!j.contains(name)) return ok_status();
    if (!j[name].is_number_integer())
      return invalid_argument("--speculative-config: '{}' must be an integer", name);
    const int64_t v = j[name].get<int64_t>();
    if (v < lo || v > hi)
      return invalid_argument("--speculative-config: '{}' = {} is outside [{}, {}]", name, v, lo, hi);
    *out = static_cast<int>(v);
    return ok_status();
  };
  for (auto it = j.begin(); it != j.end(); ++it) {
    static const char* kKnown[] = {"method", "num_speculative_tokens", "prompt_lookup_max",
                                   "prompt_lookup_min", "confidence_threshold"};
    if (std::find(std::begin(kKnown), std::end(kKnown), it.key()) == std::end(kKnown))
      return invalid_argument("--speculative-config: unknown field '{}'", it.key());
  }
  if (!j.contains("method") || !j["method"].is_string())
    return invalid_argument("--speculative-config: 'method' (a string) is required");
  c.method = j["method"].get<std::string>();
  if (c.method != "ngram" && c.method != "dspark" && c.method != "mtp")
    return invalid_argument(
        "--speculative-config: unknown method '{}' (available: ngram, dspark, mtp)", c.method);
  if (c.method != "ngram")
    for (const char* f : {"prompt_lookup_max", "prompt_lookup_min"})
      if (j.contains(f))
        return invalid_argument("--speculative-config: '{}' applies to method 'ngram' only", f);
  if (j.contains("confidence_threshold")) {
    if (c.method == "ngram")
      return invalid_argument("--speculative-config: 'confidence_threshold' applies to methods "
                              "'dspark' and 'mtp' only");
    const auto& v = j["confidence_threshold"];
    if (!v.is_number() || v.get<double>() < 0 || v.get<double>() > 1)
      return invalid_argument("--speculative-config: 'confidence_threshold' must be a number in "
                              "[0, 1]");
    c.confidence_threshold = v.get<double>();
  }
  if (!j.contains("num_speculative_tokens"))
    return invalid_argument("--speculative-config: 'num_speculative_tokens' is required");
  STRATA_RETURN_IF_ERROR(int_field("num_speculative_tokens", &c.num_speculative_tokens, 1,
                                   kMaxSpeculativeTokens));
  STRATA_RETURN_IF_ERROR(int_field("prompt_lookup_max", &c.prompt_lookup_max, 1, 64));
  if (j.contains("prompt_lookup_max") && !j.contains("prompt_lookup_min"))
    c.prompt_lookup_min = std::min(c.prompt_lookup_min, c.prompt_lookup_max);
  STRATA_RETURN_IF_ERROR(int_field("prompt_lookup_min", &c.prompt_lookup_min, 1, 64));
  if (c.prompt_lookup_min > c.prompt_lookup_max)
    return invalid_argument("--speculative-config: prompt_lookup_min {} > prompt_lookup_max {}",
                            c.prompt_lookup_min, c.prompt_lookup_max);
  return c;
}

Status check_speculative_config(const SpeculativeConfig& c, const ModelRunner& runner) {
  if (c.method != "dspark" && c.method != "mtp") return ok_status();
  const bool dspark = c.method == "dspark";
  const int block = runner.draft_block_size();
  if (runner.drafter_method() != c.method || block <= 0)
    return failed_precondition(
        "--speculative-config: method '{}' needs {}; this model ({}) has {}", c.method,
        dspark ? "a DeepSeek-V4.1 checkpoint with DSpark stages"
               : "a DeepSeek-V4 checkpoint with an MTP layer (mtp.0.*)",
        runner.info().architecture,
        runner.drafter_method().empty() ? std::string("no drafter")
                                        : "the '" + runner.drafter_method() + "' drafter");
  if (c.num_speculative_tokens > block)
    return invalid_argument("--speculative-config: num_speculative_tokens {} exceeds the {} {} "
                            "of this model", c.num_speculative_tokens,
                            dspark ? "DSpark block size" : "MTP draft chain limit", block);
  return ok_status();
}

std::vector<int32_t> ModelDraftProposer::propose(SeqId seq, std::span<const int32_t> tokens,
                                                 int max_k) const {
  if (tokens.empty() || max_k <= 0) return {};
  std::vector<float> conf;
  StatusOr<std::vector<int32_t>> d =
      runner_->draft_tokens(seq, tokens.back(), max_k, threshold_ > 0 ? &conf : nullptr);
  if (!d.ok()) return {};
  std::vector<int32_t> out = std::move(d).value();
  if (static_cast<int64_t>(out.size()) > max_k) out.resize(static_cast<size_t>(max_k));
  if (threshold_ > 0) {
    size_t keep = 0;
    while (keep < out.size() && keep < conf.size() && conf[keep] >= threshold_) ++keep;
    out.resize(keep);
  }
  return out;
}

std::vector<int32_t> NgramProposer::propose(SeqId, std::span<const int32_t> tokens,
                                            int max_k) const {
  const int64_t len = static_cast<int64_t>(tokens.size());
  for (int n = max_n_; n >= min_n_; --n) {
    if (len <= n) continue;
    const std::span<const int32_t> suffix = tokens.last(static_cast<size_t>(n));
    // Most recent earlier occurrence: start positions len-n-1 down to 0.
    for (int64_t start = len - n - 1; start >= 0; --start) {
      if (!std::equal(suffix.begin(), suffix.end(), tokens.begin() + start)) continue;
      const int64_t from = start + n;
      const int64_t k = std::min<int64_t>(max_k, len - from);
      return std::vector<int32_t>(tokens.begin() + from, tokens.begin() + from + k);
    }
  }
  return {};
}

std::unique_ptr<DraftProposer> make_proposer(const SpeculativeConfig& config, ModelRunner* runner) {
  if (config.method == "ngram")
    return std::make_unique<NgramProposer>(config.prompt_lookup_min, config.prompt_lookup_max);
  if ((config.method == "dspark" || config.method == "mtp") && runner != nullptr &&
      runner->drafter_method() == config.method && runner->draft_block_size() > 0)
    return std::make_unique<ModelDraftProposer>(runner, config.confidence_threshold);
  return nullptr;
}

}  // namespace strata
