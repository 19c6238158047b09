// Golden parity validation against DeepSeek reference outputs (the V4.1-tiny golden cases:
// testdata/golden/v41-tiny/cases.safetensors + stats.json; schema and tolerance rules in its
// README.md; acceptance rules in issue 4 "Golden parity").
//
// For every case caseNN: reset the target, prefill the prompt (whole, or in chunks of
// chunk_size), then decode teacher-forced on caseNN.decode_tokens (token i at position L+i).
// The target reports, per forward call, the logits of the call's last token and the routes it
// chose: MoE expert ids per backbone layer per token, and the indexer selection per index
// source layer (in index_source_layers order) per token, as compressed positions with the
// window offset removed. Routes are compared with the golden route_* tensors as SETS after
// dropping negative entries (-1 unreachable, -2 padding), in execution order (prefill:
// layer-major, token by token; then each decode step layer by layer). The first mismatch is
// the case's divergence (step, layer, token, which set).
// Logits rows (prefill row, then decode rows 0..7) computed before any divergence are
// "strict": max|Δ| ≤ logit_tol (0.25), and argmax must agree wherever the golden top1-top2
// gap exceeds gap_tol (0.25). Rows at/after the first divergence must only be finite. A case
// fails if a strict row fails, a row is non-finite, the target errors, or a route diverges in
// a case not marked fragile in stats.json. max_abs_diff is over strict rows; route_divergent
// counts cases with a divergence.
//
// Thread safety: validate_golden runs one target sequentially; not thread-safe per target.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "exec/call_shape.h"

namespace strata {

// What one forward call over tokens at positions [start_pos, start_pos + n) returns.
struct GoldenStepOutput {
  std::vector<float> logits;  // [vocab] logits of the LAST token of the call
  // moe[layer][t] = expert ids chosen for token t of this call (any order), layer over the
  // backbone layers 0..n_layers-1.
  std::vector<std::vector<std::vector<int32_t>>> moe;
  // index[slot][t] = compressed positions kept by index source layer #slot for token t (any
  // order; negatives are ignored). Empty when the model has no indexer.
  std::vector<std::vector<std::vector<int32_t>>> index;
};

// A speculative draft block (V4.1 DSpark forward_spec) after the state so far.
struct GoldenDraft {
  std::vector<int32_t> ids;        // [block + 1]: the input token, then the drafts
  std::vector<float> logits;       // [block, vocab]
  std::vector<float> confidence;   // [block]
};

// The model under test. Implemented by the forward pass (e.g. the V4.1 runner).
class GoldenTarget {
 public:
  virtual ~GoldenTarget() = default;
  virtual int32_t vocab_size() const = 0;
  // Drops all per-sequence state; the next forward starts at position 0.
  virtual Status reset() = 0;
  // Runs `tokens` at positions [start_pos, start_pos + tokens.size()); start_pos equals the
  // number of tokens fed since reset().
  virtual StatusOr<GoldenStepOutput> forward(std::span<const int32_t> tokens,
                                             int64_t start_pos) = 0;
  // Layer id of each index slot (index_source_layers), used to order MoE vs index routes in
  // execution order (layer l: its indexer, then its MoE). Empty = slot s counts as layer s.
  virtual std::vector<int> index_layer_ids() const { return {}; }
  // Called after reset() with the case's prompt length (a serving engine knows it at
  // admission). Targets that reproduce the reference's call-shape-dependent numerics use it
  // to compute prompt chunks as rows of one whole-prompt call. Default: ignored.
  virtual void set_prompt_length(int64_t prompt_len) { (void)prompt_len; }
  // Draft block after the tokens fed so far, `token` being the model's next token (cases
  // with dspark_* tensors). Default: the target has no drafter (those tensors are skipped).
  virtual bool has_draft() const { return false; }
  virtual StatusOr<GoldenDraft> draft(int32_t token) {
    (void)token;
    return Status(StatusCode::kUnimplemented, "this target has no drafter");
  }
};

struct GoldenOptions {
  int64_t chunk_size = 0;       // 0 = whole prompt in one call
  double logit_tol = 0.25;      // max |Δlogit| per strict row
  double gap_tol = 0.25;        // argmax must agree where golden top1-top2 gap > gap_tol
  std::string stats_path;       // stats.json (fragile flags); empty = "<cases dir>/stats.json" if present
  std::vector<std::string> only_cases;  // empty = all cases
  // Stable cases with a route divergence. false (`--call-shape reference`: a bit-faithful
  // engine): a divergence in a stable case fails it. true (`--call-shape canonical`): the
  // canonical form lays out every position as a one-token decode call at that position, so
  // an exact bf16 score tie in the indexer's top-k can resolve in another order than in the
  // reference's whole-prompt call (torch.topk's tie order depends on the row's width), and
  // decode steps do not reproduce the reference's shared index-key quirk
  // (docs/v41-parity.md "Canonical form"). Every case is then judged by the README's
  // route-aware rule: rows before the first divergence strict, rows from it on finite only.
  // The divergence is reported and counted (route_divergent) either way.
  bool allow_stable_divergence = false;
};

struct RouteDivergence {
  int step = -1;            // -1 = prefill, else decode step
  int layer = -1;           // backbone layer (moe) or index slot (index)
  int64_t token = -1;       // token index within the step (prompt position for prefill)
  std::string which;        // "moe" or "index"
  std::vector<int32_t> golden, got;  // the two sets (sorted)
  // e.g. "prefill moe L9 token 0: golden {4,7} got {3,4}", "decode7 index#3 token 0: ..."
  std::string describe() const;
};

struct GoldenCaseResult {
  std::string name;
  bool fragile = false;
  bool passed = false;
  int64_t prompt_len = 0;
  int rows_strict = 0;          // logits rows compared strictly
  int rows_exact = 0;           // strict rows bit-identical to the golden
  int rows_total = 0;
  double max_abs_diff = 0.0;    // over strict rows
  int argmax_checked = 0, argmax_agree = 0;
  std::optional<RouteDivergence> divergence;
  bool divergence_allowed = false;  // fragile, or GoldenOptions::allow_stable_divergence
  // Draft blocks (cases with dspark_draft_ids, targets with a drafter): after decode step i
  // the target drafts from the golden's entry-0 token. Steps before the main routes' first
  // divergence are strict: per row until the first draft id that differs, max |dlogit| <=
  // logit_tol, and a draft id may differ only where the golden row's top1-top2 gap <=
  // gap_tol; later steps must be finite.
  int dspark_steps = 0;
  int dspark_ids_differ = 0;    // draft ids (entries 1..block) unequal to the golden's
  double dspark_max_abs_diff = 0.0;  // over strictly compared rows
  std::string error;            // target error or failure reason(s)
  // XXH3-64 chain over the bytes of every logits row the target produced for the case, in
  // order (checked or not): equal digests = bit-identical logits (e.g. one rank vs several).
  uint64_t logits_digest = 0;
  std::string summary() const;  // the one line printed per case
};

struct GoldenReport {
  std::vector<GoldenCaseResult> cases;
  int passed = 0, failed = 0, route_divergent = 0;
  double max_abs_diff = 0.0;
  int dspark_cases = 0, dspark_steps = 0, dspark_ids_differ = 0;
  // "dspark: C cases, S steps, D draft ids differ" (empty when no case had drafts).
  std::string dspark_line() const;
  // "logits digest: X" over every case's logits_digest in order.
  std::string digest_line() const;
  // "golden: N passed, M failed, max_abs_diff=X, route_divergent=R"; X is "n/a" when no
  // logits row was strictly compared in any case.
  std::string last_line() const;
};

// One golden case as read from cases.safetensors.
struct GoldenCase {
  std::string name;
  std::vector<int32_t> prompt;
  std::vector<float> prefill_logits;               // [V]
  std::vector<int32_t> decode_tokens;              // [S]
  std::vector<std::vector<float>> decode_logits;   // [S][V]
  // route_prefill_moe [n_layers][L][k], route_prefill_index [n_idx][L][topk]
  std::vector<std::vector<std::vector<int32_t>>> prefill_moe, prefill_index;
  // route_decode_moe [S][n_layers][k], route_decode_index [S][n_idx][topk]
  std::vector<std::vector<std::vector<int32_t>>> decode_moe, decode_index;
  bool fragile = false;
  // dspark_draft_ids [steps][block+1], dspark_logits [steps][block * V], dspark_confidence
  // [steps][block]; empty when the case has none.
  std::vector<std::vector<int32_t>> dspark_ids;
  std::vector<std::vector<float>> dspark_logits, dspark_confidence;
};

// Loads every caseNN from cases.safetensors (sorted by name) and marks fragile ones from
// stats_path ("" = none). Errors name the file/tensor.
StatusOr<std::vector<GoldenCase>> load_golden_cases(const std::string& cases_path,
                                                    const std::string& stats_path);

// Compares one logits row. Returns max |Δ|; sets *argmax_checked / *argmax_ok.
double compare_logits_row(std::span<const float> golden, std::span<const float> got,
                          double gap_tol, bool* argmax_checked, bool* argmax_ok);
// Finds the first route divergence of one forward step, in execution order: key (layer,
// index-before-moe, token). golden_* follow the golden layouts for this step: [layer][t][k]
// and [slot][t][k]; index_layer_ids maps slots to layer ids (empty: slot s -> layer s).
std::optional<RouteDivergence> compare_routes(
    const std::vector<std::vector<std::vector<int32_t>>>& golden_moe,
    const std::vector<std::vector<std::vector<int32_t>>>& golden_index,
    const GoldenStepOutput& got_routes, int step, const std::vector<int>& index_layer_ids = {});

// Runs one case against the target.
GoldenCaseResult run_golden_case(GoldenTarget& target, const GoldenCase& c,
                                 const GoldenOptions& opt);
// Runs all cases; `on_case` (may be null) is called after each case (for streaming output).
GoldenReport run_golden(GoldenTarget& target, const std::vector<GoldenCase>& cases,
                        const GoldenOptions& opt,
                        const std::function<void(const GoldenCaseResult&)>& on_case = nullptr);

// How `strata validate golden` builds a target from a model directory. The forward pass
// registers one (call register_golden_target_factory from code that is linked into the
// binary, e.g. the engine's composition root). `threads` 0 = default; `shape`: the numeric
// form the target computes (exec/call_shape.h; `--call-shape`).
using GoldenTargetFactory =
    std::function<StatusOr<std::unique_ptr<GoldenTarget>>(const std::string& model_dir,
                                                          int threads, CallShape shape)>;
void register_golden_target_factory(GoldenTargetFactory factory);
// NotFound when nobody registered a factory.
StatusOr<std::unique_ptr<GoldenTarget>> make_golden_target(
    const std::string& model_dir, int threads, CallShape shape = CallShape::kCanonical);

}  // namespace strata
