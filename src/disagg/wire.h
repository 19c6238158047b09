// Wire codec of a handoff state (state/handoff.h) on ZeroMQ message frames (protocol
// strata-pd/1): one JSON header frame, one frame of token ids (int32 little-endian), then one
// frame per run (the run's rows back to back in the serving format) -- one frame per
// (kind, owner, row range), never one per row (pd-dcp-ep.md §2.4).
// Header: {"num_tokens", "from_pos", "runs": [{"owner", "kind", "row0", "n_rows",
// "row_bytes", "checksum" (16 hex digits, XXH3-64 of the run frame)}]} plus any extra fields
// the caller merges in (`extra`, e.g. "ok": true).
// decode_handoff_frames: DataLoss for a malformed header, a wrong frame count or a frame of
// the wrong size; checksums are checked by verify_handoff (state/handoff.h).
// Thread safety: pure functions.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "state/handoff.h"

namespace strata {

using Frames = std::vector<std::string>;

Frames encode_handoff_frames(const HandoffState& st, const std::string& extra_json = "{}");
// `first` = index of the header frame in `frames`.
StatusOr<HandoffState> decode_handoff_frames(const Frames& frames, size_t first = 0);

}  // namespace strata
