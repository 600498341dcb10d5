// Device helpers shared by the two paged decode kernels: widening vector loads from the KV cache
// or q, warp reductions, and the base-2 constants (scores are kept in log2 units inside the
// kernels and converted to natural-log LSE in exactly one place each).
#pragma once

#include <cuda_runtime.h>

#include "common/device_math.cuh"
#include "common/kv_layout.h"

namespace tripath::kernels::paged_decode {

inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kLn2 = 0.6931471805599453f;

// Two adjacent elements of E, given as their raw bits (low element in the low bits), widened.
template <typename E>
__device__ __forceinline__ float2 pair_to_float2(uint32_t bits);
template <>
__device__ __forceinline__ float2 pair_to_float2<bf16>(uint32_t bits) {
  return make_float2(__uint_as_float(bits << 16), __uint_as_float(bits & 0xFFFF0000u));
}
template <>
__device__ __forceinline__ float2 pair_to_float2<fp16>(uint32_t bits) {
  return __half22float2(*reinterpret_cast<const __half2*>(&bits));
}
template <>
__device__ __forceinline__ float2 pair_to_float2<fp8>(uint32_t bits) {
  const __half2_raw h =
      __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(bits), __NV_E4M3);
  return __half22float2(*reinterpret_cast<const __half2*>(&h));
}

// N (even) consecutive elements, read with one aligned N * sizeof(E)-byte load (2..16 bytes),
// widened to float. Raw integer loads keep everything in registers. The caller guarantees the
// alignment, i.e. that the elements never cross a 16-byte chunk.
template <typename E, int N>
__device__ __forceinline__ void load_as_float(const E* src, float (&dst)[N]) {
  constexpr int kBytes = N * static_cast<int>(sizeof(E));
  static_assert(N % 2 == 0 && kBytes >= 2 && kBytes <= 16 && (kBytes & (kBytes - 1)) == 0,
                "one aligned vector load of 2..16 bytes");
  constexpr int kWords = kBytes >= 4 ? kBytes / 4 : 1;
  uint32_t w[kWords];
  if constexpr (kBytes == 16) {
    const uint4 v = *reinterpret_cast<const uint4*>(src);
    w[0] = v.x, w[1] = v.y, w[2] = v.z, w[3] = v.w;
  } else if constexpr (kBytes == 8) {
    const uint2 v = *reinterpret_cast<const uint2*>(src);
    w[0] = v.x, w[1] = v.y;
  } else if constexpr (kBytes == 4) {
    w[0] = *reinterpret_cast<const uint32_t*>(src);
  } else {
    w[0] = *reinterpret_cast<const uint16_t*>(src);
  }
  constexpr int kPairBits = 16 * static_cast<int>(sizeof(E));
#pragma unroll
  for (int i = 0; i < N / 2; ++i) {
    const uint32_t bits = kPairBits == 32 ? w[i] : (w[i / 2] >> (16 * (i % 2))) & 0xFFFFu;
    const float2 f = pair_to_float2<E>(bits);
    dst[2 * i] = f.x;
    dst[2 * i + 1] = f.y;
  }
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o >= 1; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o >= 1; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Score post-processing shared by both paths: scale (already including k_scale), optional
// soft-cap cap * tanh(s / cap), then conversion to log2 units.
__device__ __forceinline__ float score_log2(float dot, float scale, float softcap) {
  float s = dot * scale;
  if (softcap > 0.0f) s = softcap * tanhf(s / softcap);
  return s * kLog2e;
}

}  // namespace tripath::kernels::paged_decode
