// Handoff: the minimal recoverable state set of one sequence, as it crosses from a prefill
// process to a decode process (PD disaggregation; ../shared/docs/pd-dcp-ep.md §0, §1.5-1.6).
//
// Shape ("N = T-1", vLLM-like): the sender computed positions [0, num_tokens) of a prompt of
// T = num_tokens + 1 tokens; the receiver writes the rows into its own slots and computes
// position T-1 itself, so its first logits equal a colocated run's (canonical numeric form,
// issue 22). Rows are addressed by the graph's owners, each physical owner once (never per
// consumer), and by absolute row index -- so the wire format depends on neither side's block
// size, pool layout or ring placement:
//   growing owners (kPerToken / kPerCompressedRow): rows g in [from_pos/ratio, floor(N/ratio))
//     (row g covers positions [g*ratio, (g+1)*ratio)); rows below from_pos the receiver
//     already holds from its own prefix cache and are not sent;
//   ring owners (window KV): the rows of positions [max(0, N-W), N), keyed by position;
//   compressor partial state (fixed slots, StateSpec::ratio = group size m, g0 = floor(N/m)*m):
//     only the slots later positions read -- the open group's positions [g0, N) and, for an
//     overlapping compressor (2m slots), the previous complete group when g0 >= m; slot
//     indices map to absolute positions by the layout the contract fixes (so N = 4096 on
//     V4.1 moves no compressor bytes at all); other fixed owners: every slot;
//   owners with policy rebuild (Engram history) or transients (top-k, candidates): nothing;
//     the receiver rebuilds them from the token ids, which travel with the state.
// One HandoffRun per (owner, contiguous row range) -- one frame on the wire -- with an XXH3-64
// checksum of its bytes. A ring run that wraps is still one run (absolute rows are
// contiguous).
//
// Errors: export of rows the sequence does not hold is a CHECK (the caller exports what it
// computed); verify_handoff returns DataLoss naming the owner for a missing, duplicated,
// mis-sized or corrupt run. Thread safety: plain values; the CacheManager calls follow its
// own (single-threaded) rules.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "state/cache_manager.h"
#include "state/state_graph.h"

namespace strata {

// One owner's contiguous absolute row range.
struct HandoffRowRange {
  OwnerId owner = -1;
  int64_t row0 = 0;
  int64_t n_rows = 0;
};

struct HandoffRun {
  OwnerId owner = -1;
  StateKind kind = StateKind::kWindowKv;
  int64_t row0 = 0;
  int64_t n_rows = 0;
  int64_t row_bytes = 0;
  uint64_t checksum = 0;       // XXH3-64 of bytes
  std::vector<uint8_t> bytes;  // n_rows x row_bytes, serving format (StateSpec layout)
};

struct HandoffState {
  int64_t num_tokens = 0;          // positions [0, num_tokens) are final on the sender
  int64_t from_pos = 0;            // growing rows below it are not included
  std::vector<int32_t> token_ids;  // ids of positions [0, num_tokens)
  std::vector<HandoffRun> runs;
  int64_t payload_bytes() const;   // sum of run bytes (token ids not counted)
};

// The row ranges a handoff of `num_tokens` positions from `from_pos` carries, in owner order.
// from_pos must be a multiple of every growth ratio (a prefix-cache boundary) and
// <= num_tokens; CHECKs otherwise.
std::vector<HandoffRowRange> handoff_rows(const StateGraph& g, int64_t num_tokens,
                                          int64_t from_pos = 0);

// Analytic bytes of such a handoff, per state kind (kind name -> bytes, kinds with 0 bytes
// included when the graph has them) and in total (sum of rows x row_bytes).
struct HandoffBytes {
  std::vector<std::pair<std::string, int64_t>> per_kind;
  int64_t total = 0;
  int64_t token_id_bytes = 0;  // 4 x num_tokens, carried in the header
};
HandoffBytes handoff_bytes(const StateGraph& g, int64_t num_tokens, int64_t from_pos = 0);

uint64_t handoff_checksum(const uint8_t* data, size_t n);

// Copies the rows of handoff_rows(graph, num_tokens, from_pos) of `seq` out of `cm` (its
// num_computed(seq) must be >= num_tokens... exactly num_tokens, so ring rows and fixed state
// are as of num_tokens; CHECK) with checksums; token_ids are the caller's.
HandoffState export_handoff_rows(const CacheManager& cm, CacheSeqId seq, int64_t from_pos,
                                 std::vector<int32_t> token_ids);

// The receiver's check of a state against the request it arrived for: num_tokens <
// tokens.size() (the last prompt token is computed by the receiver) and token_ids equal
// tokens' first num_tokens. InvalidArgument naming the first differing position otherwise.
Status check_handoff_ids(std::span<const int32_t> tokens, const HandoffState& st);

// Checks a received state against the graph: the runs are exactly handoff_rows(g, N, from)
// (each once, right kind and row size), every checksum matches, token_ids has num_tokens
// ids. DataLoss (naming the owner label and what is wrong) otherwise.
Status verify_handoff(const StateGraph& g, const HandoffState& st);

// Writes a verified state's rows into `seq` of `cm`, whose rows for positions
// [0, num_tokens) must already be allocated (the caller planned and committed the step that
// covers [held, num_tokens)). Growing rows below `held` (the receiver's own prefix hit,
// shared and immutable) are skipped; every other run is written raw.
void write_handoff_rows(CacheManager& cm, CacheSeqId seq, const HandoffState& st, int64_t held);

}  // namespace strata
