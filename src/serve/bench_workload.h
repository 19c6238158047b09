// Benchmark workloads for `strata bench serve`: timed requests with token-id prompts, from
// (a) random prompts, (b) shared-prefix groups, (c) Mooncake JSONL traces, (d) Azure LLM
// inference CSV traces.
//
// Prompts are token ids in [kFirstToken, vocab), sent as "prompt": [ids] (OpenAI and vLLM
// accept token-id prompts), so lengths are exact on any server with the same vocabulary.
//
// Mooncake (FAST'25 release; fields timestamp [ms], input_length, output_length, hash_ids
// of 512-token blocks): each hash id maps to one block of `block_tokens` tokens that is a
// pure function of (seed, hash id), so equal hash ids give equal token blocks and equal hash
// chains give equal prefixes. Every block is full, so a prompt has hash_ids.size() x B
// tokens (the trace's input_length scaled by B/512 and rounded up to whole blocks).
// Output length = max(1, round(output_length x length_scale)).
// Oracle prefix hit rate (infinite cache, block granularity): the fraction of replayed
// blocks whose whole hash chain (hash_ids[0..i]) appeared in an earlier replayed request.
//
// Azure (TIMESTAMP,ContextTokens,GeneratedTokens): lengths scaled by length_scale (>= 1);
// prompts random (seeded per request).
//
// Time: arrival = (trace time - first trace time) x time_scale (0.1 = ten times faster).
// Requests whose prompt + output exceeds max_context are skipped and counted.
// Errors: NotFound (file), DataLoss (unparsable line, with its number).
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace strata {

inline constexpr int32_t kFirstToken = 3;  // ids below are special in common vocabularies

struct BenchRequest {
  double arrival_s = 0;
  std::vector<int32_t> prompt;
  int64_t output_tokens = 1;
};

struct Workload {
  std::string name;                  // "mooncake", "azure", "random", "shared-prefix"
  std::vector<BenchRequest> requests;
  int64_t skipped_too_long = 0;      // trace requests that do not fit max_context
  double oracle_prefix_hit_rate = -1;  // Mooncake only
  int64_t oracle_blocks = 0;
};

struct WorkloadOptions {
  int32_t vocab = 512;
  int64_t max_context = 512;
  int64_t num_requests = -1;       // -1: all (traces); taken after skipping
  double time_scale = 1.0;
  double length_scale = 1.0;
  int64_t block_tokens = 16;       // Mooncake: tokens per 512-token hash block
  uint64_t seed = 0;
};

StatusOr<Workload> load_mooncake_trace(const std::string& path, const WorkloadOptions& o);
StatusOr<Workload> load_azure_trace(const std::string& path, const WorkloadOptions& o);

struct RandomLoadOptions {
  int64_t input_len = 64;
  int64_t output_len = 16;
  double range_ratio = 0.0;        // lengths uniform in [len x (1-r), len x (1+r)]
  double request_rate = 0;         // requests/s, Poisson arrivals; <= 0: all at t = 0
};
Workload make_random_workload(const WorkloadOptions& o, const RandomLoadOptions& r);

struct SharedPrefixOptions {
  int64_t num_groups = 4;
  int64_t prefix_len = 64;         // shared by every prompt of a group
  int64_t suffix_len = 16;         // random per prompt
  int64_t output_len = 16;
  double request_rate = 0;
};
// num_requests prompts, assigned round-robin to the groups.
Workload make_shared_prefix_workload(const WorkloadOptions& o, const SharedPrefixOptions& s);

}  // namespace strata
