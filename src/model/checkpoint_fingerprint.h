// Checkpoint fingerprint: a 64-bit identity of a model directory's files, for the hash root of
// prefix-cache units that outlive the process (disk tier, shared pool): two servers on copies
// of the same checkpoint agree, another checkpoint with the same config does not.
//
// XXH3-64 over every regular file directly in `dir` (sorted by name): its name, its size and
// the XXH3-64 of its first and last MiB (the safetensors header, which names every tensor, its
// dtype and offsets, is in the first MiB; the last MiB covers the last tensor's bytes). Modify
// times are not used (a copy keeps the fingerprint). Reads at most 2 MiB per file.
// Errors: NotFound when `dir` is not a readable directory; DataLoss when a file cannot be read.
// Thread safety: a pure function of the files.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"

namespace strata {

StatusOr<uint64_t> checkpoint_fingerprint(const std::string& dir);

}  // namespace strata
