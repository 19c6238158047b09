// Checkpoint parameter counting (rules in checkpoint_summary.h).
#include "model/checkpoint_summary.h"

#include <fmt/format.h>

namespace strata {
namespace {

bool ends_with(const std::string& s, std::string_view suf) {
  return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}

// Name of the sibling scale: "X.weight" -> "X.scale", else name + ".scale".
std::string scale_name(const std::string& name) {
  if (ends_with(name, ".weight")) return name.substr(0, name.size() - 7) + ".scale";
  return name + ".scale";
}

std::string human_bytes(uint64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024.0 && u < 4) { v /= 1024.0; ++u; }
  return u == 0 ? fmt::format("{} B", b) : fmt::format("{:.2f} {}", v, units[u]);
}

}  // namespace

bool is_fp4_packed_weight(const SafetensorsCheckpoint& ckpt, const TensorView& w) {
  if (w.dtype != DType::kI8 && w.dtype != DType::kU8) return false;
  if (w.shape.size() != 2) return false;
  auto s = ckpt.get(scale_name(w.name));
  if (!s.ok() || s->dtype != DType::kF8_E8M0 || s->shape.size() != 2) return false;
  const int64_t rows = w.shape[0], cols = w.shape[1];
  if (s->shape[0] != rows) return false;
  if (w.num_bytes == static_cast<size_t>(rows * cols))  // packed [out, in/2]
    return s->shape[1] == (2 * cols + 31) / 32;
  if (w.num_bytes * 2 == static_cast<size_t>(rows * cols))  // logical [out, in]
    return s->shape[1] == (cols + 31) / 32;
  return false;
}

CheckpointSummary summarize_checkpoint(const SafetensorsCheckpoint& ckpt) {
  CheckpointSummary out;
  for (const std::string& name : ckpt.names()) {
    auto t = ckpt.get(name);
    if (!t.ok()) continue;  // cannot happen: names() lists indexed tensors
    std::string cat = dtype_name(t->dtype);
    int64_t params = t->numel();
    if (is_fp4_packed_weight(ckpt, *t)) {
      cat = "FP4_E2M1";
      params = static_cast<int64_t>(t->num_bytes) * 2;
    }
    DTypeCount& c = out.by_category[cat];
    c.tensors += 1;
    c.params += params;
    c.bytes += t->num_bytes;
    out.num_tensors += 1;
    out.total_params += params;
    out.total_bytes += t->num_bytes;
    if (const int64_t bad = count_nonfinite(t->dtype, t->data, t->num_bytes); bad > 0)
      out.nonfinite[name] = bad;
  }
  return out;
}

std::string format_checkpoint_summary(const CheckpointSummary& s) {
  std::string out = fmt::format("{:<10} {:>9} {:>16} {:>14}\n", "dtype", "tensors", "params",
                                "bytes");
  for (const auto& [cat, c] : s.by_category)
    out += fmt::format("{:<10} {:>9} {:>16} {:>14}\n", cat, c.tensors, c.params,
                       human_bytes(c.bytes));
  out += fmt::format("{:<10} {:>9} {:>16} {:>14}\n", "total", s.num_tensors, s.total_params,
                     human_bytes(s.total_bytes));
  int listed = 0;
  for (const auto& [name, n] : s.nonfinite) {
    if (listed++ == 20) {
      out += fmt::format("non-finite: ... and {} more tensors\n", s.nonfinite.size() - 20);
      break;
    }
    out += fmt::format("non-finite: tensor '{}' holds {} NaN/Inf value(s): the checkpoint is "
                       "corrupt\n", name, n);
  }
  return out;
}

}  // namespace strata
