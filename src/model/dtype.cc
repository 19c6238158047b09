// Element type names, sizes and scalar decode rules (see dtype.h for the bit layouts).
#include "model/dtype.h"

#include <cmath>
#include <limits>

namespace strata {
namespace {

struct DTypeInfo {
  DType type;
  const char* name;  // safetensors spelling
  size_t size;
};

constexpr DTypeInfo kInfos[] = {
    {DType::kF32, "F32", 4},         {DType::kF16, "F16", 2},
    {DType::kBF16, "BF16", 2},       {DType::kF64, "F64", 8},
    {DType::kI64, "I64", 8},         {DType::kI32, "I32", 4},
    {DType::kI16, "I16", 2},         {DType::kI8, "I8", 1},
    {DType::kU8, "U8", 1},           {DType::kBool, "BOOL", 1},
    {DType::kF8_E4M3, "F8_E4M3", 1}, {DType::kF8_E5M2, "F8_E5M2", 1},
    {DType::kF8_E8M0, "F8_E8M0", 1},
};

const DTypeInfo* find_info(DType t) {
  for (const auto& i : kInfos) {
    if (i.type == t) return &i;
  }
  return nullptr;
}

}  // namespace

std::optional<DType> dtype_from_string(std::string_view s) {
  for (const auto& i : kInfos) {
    if (s == i.name) return i.type;
  }
  return std::nullopt;
}

const char* dtype_name(DType t) {
  const DTypeInfo* i = find_info(t);
  return i ? i->name : "UNKNOWN";
}

size_t dtype_size(DType t) {
  const DTypeInfo* i = find_info(t);
  return i ? i->size : 0;
}

// IEEE 754 binary16: 1 sign, 5 exponent (bias 15), 10 mantissa.
float f16_to_f32(uint16_t h) {
  const float sign = (h & 0x8000u) ? -1.0f : 1.0f;
  const int exp = (h >> 10) & 0x1f;
  const int mant = h & 0x3ff;
  if (exp == 0x1f) {
    return mant ? std::numeric_limits<float>::quiet_NaN()
                : sign * std::numeric_limits<float>::infinity();
  }
  if (exp == 0) return sign * std::ldexp(static_cast<float>(mant), -24);  // subnormal / zero
  return sign * std::ldexp(static_cast<float>(mant | 0x400), exp - 25);
}

// E4M3 "fn": 1 sign, 4 exponent (bias 7), 3 mantissa; exponent 15 is a normal binade except
// mantissa 7 (S.1111.111) which is NaN; no infinities. Max finite 448.
float fp8_e4m3_to_f32(uint8_t b) {
  const float sign = (b & 0x80u) ? -1.0f : 1.0f;
  const int exp = (b >> 3) & 0xf;
  const int mant = b & 0x7;
  if (exp == 0xf && mant == 0x7) return std::numeric_limits<float>::quiet_NaN();
  if (exp == 0) return sign * std::ldexp(static_cast<float>(mant), -9);  // mant/8 * 2^-6
  return sign * std::ldexp(static_cast<float>(mant | 0x8), exp - 10);   // 1.m * 2^(e-7)
}

float ue8m0_to_f32(uint8_t b) {
  if (b == 0xff) return std::numeric_limits<float>::quiet_NaN();
  return std::ldexp(1.0f, static_cast<int>(b) - 127);
}

// E2M1: 1 sign, 2 exponent (bias 1), 1 mantissa; exponent 0 is subnormal (0 or 0.5).
float fp4_e2m1_to_f32(uint8_t nibble) {
  const float sign = (nibble & 0x8u) ? -1.0f : 1.0f;
  const int exp = (nibble >> 1) & 0x3;
  const int mant = nibble & 0x1;
  if (exp == 0) return sign * 0.5f * static_cast<float>(mant);
  return sign * std::ldexp(static_cast<float>(2 | mant), exp - 2);  // 1.m * 2^(e-1)
}

namespace {
// Counts elements whose bits & mask == mask (little-endian words of W bytes).
template <class W>
int64_t count_all_ones(const uint8_t* data, size_t n_bytes, W mask) {
  int64_t c = 0;
  const size_t n = n_bytes / sizeof(W);
  for (size_t i = 0; i < n; ++i) {
    W w;
    std::memcpy(&w, data + i * sizeof(W), sizeof(W));
    c += (w & mask) == mask;
  }
  return c;
}
}  // namespace

int64_t count_nonfinite(DType t, const uint8_t* data, size_t n_bytes) {
  switch (t) {
    case DType::kF32: return count_all_ones<uint32_t>(data, n_bytes, 0x7f800000u);
    case DType::kF64: return count_all_ones<uint64_t>(data, n_bytes, 0x7ff0000000000000ull);
    case DType::kF16: return count_all_ones<uint16_t>(data, n_bytes, 0x7c00u);
    case DType::kBF16: return count_all_ones<uint16_t>(data, n_bytes, 0x7f80u);
    case DType::kF8_E4M3: return count_all_ones<uint8_t>(data, n_bytes, 0x7fu);
    case DType::kF8_E5M2: return count_all_ones<uint8_t>(data, n_bytes, 0x7cu);
    case DType::kF8_E8M0: return count_all_ones<uint8_t>(data, n_bytes, 0xffu);
    default: return 0;
  }
}

}  // namespace strata
