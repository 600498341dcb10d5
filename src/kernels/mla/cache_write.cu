// MLA latent cache write: new tokens' 576-wide rows (512 c_kv + 64 k_pe) -> their cache slots.
// Grid: one thread per (token, group of 8 elements), 72 groups per row; slot -1 skipped. fp8
// stores e4m3(x / scale) with a true division and round-to-nearest-even saturating conversion,
// exactly as reference::write_mla_cache, so the two caches agree bit for bit.
// Tests: tests/gpu/test_gpu_mla.cpp (GpuMlaCacheWrite).
#include <type_traits>

#include "common/device_math.cuh"
#include "mla/mla.h"

namespace tripath::kernels {
namespace {

constexpr int kGroups = kMlaEntry / 8;

template <typename InT>
__device__ __forceinline__ void load8(const InT* src, float (&x)[8]) {
  if constexpr (sizeof(InT) == 2) {
    const uint4 raw = *reinterpret_cast<const uint4*>(src);
    const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const unsigned short bits =
          static_cast<unsigned short>((words[i / 2] >> (16 * (i % 2))) & 0xFFFFu);
      if constexpr (std::is_same_v<InT, bf16>) {
        x[i] = __bfloat162float(__ushort_as_bfloat16(bits));
      } else {
        x[i] = __half2float(__ushort_as_half(bits));
      }
    }
  } else {
    const float4 a = reinterpret_cast<const float4*>(src)[0];
    const float4 b = reinterpret_cast<const float4*>(src)[1];
    x[0] = a.x;
    x[1] = a.y;
    x[2] = a.z;
    x[3] = a.w;
    x[4] = b.x;
    x[5] = b.y;
    x[6] = b.z;
    x[7] = b.w;
  }
}

template <typename InT, typename CacheT>
__global__ void mla_cache_write_kernel(const __grid_constant__ MlaCacheWriteParams p) {
  pdl_launch_dependents();  // a decode kernel launched as a dependent may start (and wait)
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t t = idx / kGroups;
  const int g = static_cast<int>(idx % kGroups);
  if (t >= p.num_tokens) return;
  const int64_t slot = p.slot_mapping[t];
  if (slot < 0) return;
  const InT* src = static_cast<const InT*>(p.latent) + t * kMlaEntry + g * 8;
  const int64_t dst = slot * kMlaEntry + g * 8;
  if constexpr (std::is_same_v<InT, CacheT>) {
    // Same 16-bit type: a bit copy (what a round trip through float gives, NaN payloads kept).
    *reinterpret_cast<uint4*>(static_cast<CacheT*>(p.cache) + dst) =
        *reinterpret_cast<const uint4*>(src);
  } else {
    float x[8];
    load8(src, x);
    if constexpr (std::is_same_v<CacheT, fp8>) {
      uint32_t w[2] = {0u, 0u};
#pragma unroll
      for (int i = 0; i < 8; ++i)
        w[i / 4] |= uint32_t(from_float<fp8>(x[i] / p.scale).__x) << (8 * (i % 4));
      *reinterpret_cast<uint2*>(static_cast<uint8_t*>(p.cache) + dst) = make_uint2(w[0], w[1]);
    } else {
      uint32_t w[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) w[i] = pack2<CacheT>(x[2 * i], x[2 * i + 1]);
      *reinterpret_cast<uint4*>(static_cast<CacheT*>(p.cache) + dst) =
          make_uint4(w[0], w[1], w[2], w[3]);
    }
  }
}

template <typename InT, typename CacheT>
cudaError_t launch(const MlaCacheWriteParams& p, cudaStream_t stream) {
  if (p.num_tokens == 0) return cudaSuccess;
  constexpr int kThreads = 256;
  const int64_t blocks = (p.num_tokens * kGroups + kThreads - 1) / kThreads;
  mla_cache_write_kernel<InT, CacheT><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

template <typename InT>
cudaError_t launch_for_cache(const MlaCacheWriteParams& p, DType cache, cudaStream_t stream) {
  switch (cache) {
    case DType::kBF16:
      return launch<InT, bf16>(p, stream);
    case DType::kF16:
      return launch<InT, fp16>(p, stream);
    case DType::kFP8E4M3:
      return launch<InT, fp8>(p, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace

cudaError_t launch_mla_cache_write(const MlaCacheWriteParams& p, DType latent, DType cache,
                                   cudaStream_t stream) {
  switch (latent) {
    case DType::kF32:
      return launch_for_cache<float>(p, cache, stream);
    case DType::kBF16:
      return launch_for_cache<bf16>(p, cache, stream);
    case DType::kF16:
      return launch_for_cache<fp16>(p, cache, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace tripath::kernels
