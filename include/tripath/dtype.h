// Element types of tripath tensors and caches, with exact host-side conversions.
// bf16 and f16 round to nearest even; fp8 is OCP e4m3 ("e4m3fn"): bias 7, no infinities, one NaN
// pattern per sign (S.1111.111), largest finite 448; conversion rounds to nearest even and
// saturates to +-448 (infinities too), NaN stays NaN.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tripath {

// Floating types carry attention data; the integer types only index (slot mappings, tables).
enum class DType : uint8_t { kF32, kF16, kBF16, kFP8E4M3, kI32, kI64 };

size_t dtype_size(DType t);
const char* dtype_name(DType t);  // "f32", "f16", "bf16", "fp8_e4m3", "i32", "i64"
DType parse_dtype(std::string_view name);  // throws tripath::Error listing the valid names

float bf16_to_float(uint16_t bits);
uint16_t float_to_bf16(float value);
float f16_to_float(uint16_t bits);
uint16_t float_to_f16(float value);
float fp8e4m3_to_float(uint8_t bits);
uint8_t float_to_fp8e4m3(float value);

// Element `index` of a contiguous buffer of type `t`, widened to float.
float load_float(const void* data, DType t, int64_t index);
// Rounds `value` to type `t` and stores it at element `index`.
void store_float(void* data, DType t, int64_t index, float value);
// The value `value` takes after a round trip through type `t`.
float round_to(DType t, float value);

}  // namespace tripath
