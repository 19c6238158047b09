// HandoffContract: what a prefill and a decode process must agree on before any state byte
// moves between them (issue 23 item 4; ../shared/docs/pd-dcp-ep.md §0 rule 4). An ordered list
// of named fields, computed from the runner's state graph and the model directory:
//   protocol_version   "strata-pd/1" (this file's wire format, wire.h)
//   architecture       ModelInfo::architecture ("llama", "deepseek_v41", "deepseek_v4")
//   config_hash        XXH3-64 of config.json (hex)
//   weight_hash        XXH3-64 over every *.safetensors file's name and size plus its bytes
//                      (files up to 256 MiB whole; larger ones: the first and last 16 MiB,
//                      which hold the safetensors header with every tensor's dtype/shape/offset)
//   tokenizer_hash     XXH3-64 over the tokenizer files present (tokenizer.json,
//                      tokenizer.bin, tokenizer.model, tokenizer_config.json); "none" without
//   numeric_form       "canonical" (the serving form, exec/call_shape.h)
//   state_formats      per owner: kind, layer, granularity, ratio, rows, row elems, row format,
//                      scale block, rope elems, row bytes, handoff policy
//   compression_ratios the graph's growth ratios
//   window             ring rows of the window-KV owners (0 without)
//   owner_map          per layer: the owners it writes and reads (kv / index / candidate
//                      sources)
//   speculative_config "none": the prefill side never drafts (a decode server may run its
//                      own speculative decoding from the imported committed state)
// Not contract fields, because the wire format addresses rows by owner and absolute row and
// each side writes into its own slots (no converter is needed): block / page size, pool size,
// ring placement, threads, token budget, chunk size, max sequences. They are exchanged as
// `info` and logged.
// Thread safety: plain values.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "exec/model_runner.h"

namespace strata {

inline constexpr const char* kPdProtocolVersion = "strata-pd/1";

struct HandoffContract {
  std::vector<std::pair<std::string, std::string>> fields;
  std::vector<std::pair<std::string, std::string>> info;  // informational, not compared
  const std::string* find(const std::string& name) const;
  std::string to_json() const;
  static StatusOr<HandoffContract> from_json(const std::string& s);
};

// The contract of `runner` serving `model_dir`. `overrides` ("field=value") replace fields
// (test hook `--kv-transfer-contract-override`, to exercise each mismatch). FailedPrecondition
// when the runner cannot hand off state; InvalidArgument for an override of an unknown field.
StatusOr<HandoffContract> make_handoff_contract(const ModelRunner& runner,
                                                const std::string& model_dir,
                                                const std::vector<std::string>& overrides = {});

// OK when every field of `local` equals `remote`'s; otherwise FailedPrecondition naming the
// first differing (or missing) field with both values (long values abbreviated by their
// hash), e.g. "handoff contract field 'tokenizer_hash' differs: prefill 3f.. decode 9a..".
Status compare_handoff_contracts(const HandoffContract& prefill, const HandoffContract& decode);

}  // namespace strata
