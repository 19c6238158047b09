// report.html of `strata validate matrix`: one self-contained page (inline CSS and SVG, no
// scripts, no external assets): the steps' table (status, equality, latency, hit rate,
// transfer, collectives), then SVG plots -- TTFT and TPOT CDFs per step, occupancy over time
// per state kind for each step, bytes per kind per handoff (PD), hit rate per tier.
// Thread safety: pure.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools/matrix_record.h"

namespace strata::tools {

std::string render_matrix_html(const nlohmann::json& doc, const std::vector<StepRun>& runs);

}  // namespace strata::tools
