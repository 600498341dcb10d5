#include "tripath/dtype.h"

#include <cmath>
#include <cstring>

#include "tripath/error.h"

namespace tripath {
namespace {

uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Splits a finite a > 0 into (exponent e, significand s in [1, 2)): a = s * 2^e.
void split(float a, int& e, float& s) {
  int exp2;
  float frac = std::frexp(a, &exp2);  // a = frac * 2^exp2, frac in [0.5, 1)
  e = exp2 - 1;
  s = frac * 2.0f;
}

}  // namespace

size_t dtype_size(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kF16: return 2;
    case DType::kBF16: return 2;
    case DType::kFP8E4M3: return 1;
    case DType::kI32: return 4;
    case DType::kI64: return 8;
  }
  throw Error("dtype_size: unknown dtype");
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kFP8E4M3: return "fp8_e4m3";
    case DType::kI32: return "i32";
    case DType::kI64: return "i64";
  }
  return "unknown";
}

DType parse_dtype(std::string_view name) {
  if (name == "f32" || name == "float32") return DType::kF32;
  if (name == "f16" || name == "float16") return DType::kF16;
  if (name == "bf16" || name == "bfloat16") return DType::kBF16;
  if (name == "fp8_e4m3" || name == "fp8") return DType::kFP8E4M3;
  if (name == "i32" || name == "int32") return DType::kI32;
  if (name == "i64" || name == "int64") return DType::kI64;
  throw_arg_error("dtype", name, "one of f32, f16, bf16, fp8_e4m3, i32, i64");
}

float bf16_to_float(uint16_t bits) { return bits_float(static_cast<uint32_t>(bits) << 16); }

uint16_t float_to_bf16(float value) {
  uint32_t u = float_bits(value);
  if (std::isnan(value)) return static_cast<uint16_t>((u >> 16) | 0x0040);  // keep sign, quiet
  u += 0x7FFFu + ((u >> 16) & 1u);  // round to nearest even; overflow carries into inf
  return static_cast<uint16_t>(u >> 16);
}

float f16_to_float(uint16_t bits) {
  const uint32_t sign = (bits & 0x8000u) << 16;
  const int exp = (bits >> 10) & 0x1F;
  const uint32_t mant = bits & 0x3FFu;
  float mag;
  if (exp == 0) {
    mag = std::ldexp(static_cast<float>(mant), -24);
  } else if (exp == 31) {
    return bits_float(sign | 0x7F800000u | (mant << 13));
  } else {
    mag = std::ldexp(1.0f + static_cast<float>(mant) / 1024.0f, exp - 15);
  }
  return std::copysign(mag, sign ? -1.0f : 1.0f);
}

uint16_t float_to_f16(float value) {
  const uint16_t sign = std::signbit(value) ? 0x8000 : 0;
  if (std::isnan(value)) return sign | 0x7E00;
  const float a = std::fabs(value);
  if (a >= 65520.0f) return sign | 0x7C00;  // rounds past 65504: inf
  if (a < 0x1p-14f) {                       // subnormal (1024 lands on the smallest normal)
    return sign | static_cast<uint16_t>(std::nearbyint(a * 0x1p24f));
  }
  int e;
  float s;
  split(a, e, s);
  int mant = static_cast<int>(std::nearbyint((s - 1.0f) * 1024.0f));  // exact product; RNE
  if (mant == 1024) {
    mant = 0;
    ++e;
  }
  return sign | static_cast<uint16_t>(((e + 15) << 10) | mant);
}

float fp8e4m3_to_float(uint8_t bits) {
  const bool neg = bits & 0x80;
  const int exp = (bits >> 3) & 0xF;
  const int mant = bits & 0x7;
  if (exp == 0xF && mant == 0x7) return std::copysign(NAN, neg ? -1.0f : 1.0f);
  const float mag = exp == 0 ? std::ldexp(static_cast<float>(mant), -9)
                             : std::ldexp(1.0f + static_cast<float>(mant) / 8.0f, exp - 7);
  return neg ? -mag : mag;
}

uint8_t float_to_fp8e4m3(float value) {
  const uint8_t sign = std::signbit(value) ? 0x80 : 0;
  if (std::isnan(value)) return sign | 0x7F;
  const float a = std::fabs(value);
  if (a >= 448.0f) return sign | 0x7E;  // saturate (infinities too): e4m3 has no inf
  if (a < 0x1p-6f) {                    // subnormal: multiples of 2^-9 (8 lands on 2^-6)
    return sign | static_cast<uint8_t>(std::nearbyint(a * 512.0f));
  }
  int e;
  float s;
  split(a, e, s);
  int mant = static_cast<int>(std::nearbyint((s - 1.0f) * 8.0f));
  if (mant == 8) {
    mant = 0;
    ++e;
  }
  return sign | static_cast<uint8_t>(((e + 7) << 3) | mant);
}

float load_float(const void* data, DType t, int64_t index) {
  switch (t) {
    case DType::kF32: return static_cast<const float*>(data)[index];
    case DType::kF16: return f16_to_float(static_cast<const uint16_t*>(data)[index]);
    case DType::kBF16: return bf16_to_float(static_cast<const uint16_t*>(data)[index]);
    case DType::kFP8E4M3: return fp8e4m3_to_float(static_cast<const uint8_t*>(data)[index]);
    case DType::kI32: return static_cast<float>(static_cast<const int32_t*>(data)[index]);
    case DType::kI64: return static_cast<float>(static_cast<const int64_t*>(data)[index]);
  }
  return 0.0f;
}

void store_float(void* data, DType t, int64_t index, float value) {
  switch (t) {
    case DType::kF32: static_cast<float*>(data)[index] = value; return;
    case DType::kF16: static_cast<uint16_t*>(data)[index] = float_to_f16(value); return;
    case DType::kBF16: static_cast<uint16_t*>(data)[index] = float_to_bf16(value); return;
    case DType::kFP8E4M3: static_cast<uint8_t*>(data)[index] = float_to_fp8e4m3(value); return;
    case DType::kI32: static_cast<int32_t*>(data)[index] = static_cast<int32_t>(value); return;
    case DType::kI64: static_cast<int64_t*>(data)[index] = static_cast<int64_t>(value); return;
  }
}

float round_to(DType t, float value) {
  switch (t) {
    case DType::kF32: return value;
    case DType::kF16: return f16_to_float(float_to_f16(value));
    case DType::kBF16: return bf16_to_float(float_to_bf16(value));
    case DType::kFP8E4M3: return fp8e4m3_to_float(float_to_fp8e4m3(value));
    case DType::kI32: return static_cast<float>(static_cast<int32_t>(value));
    case DType::kI64: return static_cast<float>(static_cast<int64_t>(value));
  }
  return value;
}

}  // namespace tripath
