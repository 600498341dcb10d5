// KV-cache write: new K/V rows -> their cache slots, for every layout and cache dtype.
// Grid: one block per token; each thread moves 8 consecutive elements (one 16-byte load) of one
// head, converting to fp8 e4m3 with the per-tensor scale when the cache is fp8 (x / scale, the
// same division and rounding as the CPU reference, so the caches agree bit for bit). Slot -1
// skipped.
// Tests: tests/cpp/test_gpu_kernels.cpp.
#include "cache_write/cache_write.h"
#include "common/device_math.cuh"
#include "common/kv_layout.h"

namespace tripath::kernels {
namespace {

template <typename T, typename CacheT>
__global__ void cache_write_kernel(const __grid_constant__ CacheWriteParams p) {
  pdl_launch_dependents();  // a decode kernel launched as a dependent may start (and wait)
  const int64_t t = blockIdx.x;
  const int64_t slot = p.slot_mapping[t];
  if (slot < 0) return;
  const int64_t block = slot / p.block_size;
  const int offset = static_cast<int>(slot % p.block_size);
  const int groups = p.head_dim / 8;
  for (int idx = threadIdx.x; idx < p.num_kv_heads * groups; idx += blockDim.x) {
    const int head = idx / groups, g = idx % groups;
    const int64_t src = (t * p.num_kv_heads + head) * p.head_dim + g * 8;
    const uint4 kraw = *reinterpret_cast<const uint4*>(static_cast<const T*>(p.k) + src);
    const uint4 vraw = *reinterpret_cast<const uint4*>(static_cast<const T*>(p.v) + src);
    if constexpr (sizeof(CacheT) == sizeof(T)) {
      const int64_t dst = kv_chunk_offset(p.layout, block, offset, head, g, p.block_size,
                                          p.num_kv_heads, p.head_dim, 8);
      *reinterpret_cast<uint4*>(static_cast<T*>(p.k_cache) + dst) = kraw;
      *reinterpret_cast<uint4*>(static_cast<T*>(p.v_cache) + dst) = vraw;
    } else {
      // fp8: 8 elements are half of a 16-byte chunk of 16.
      const int64_t dst = kv_chunk_offset(p.layout, block, offset, head, g / 2, p.block_size,
                                          p.num_kv_heads, p.head_dim, 16) +
                          (g % 2) * 8;
      *reinterpret_cast<uint2*>(static_cast<uint8_t*>(p.k_cache) + dst) =
          fp8x8_from<T>(kraw, p.k_scale);
      *reinterpret_cast<uint2*>(static_cast<uint8_t*>(p.v_cache) + dst) =
          fp8x8_from<T>(vraw, p.v_scale);
    }
  }
}

template <typename T, typename CacheT>
cudaError_t launch(const CacheWriteParams& p, cudaStream_t stream) {
  if (p.num_tokens == 0) return cudaSuccess;
  const int work = p.num_kv_heads * p.head_dim / 8;
  const int threads = work >= 256 ? 256 : ((work + 31) / 32) * 32;
  cache_write_kernel<T, CacheT><<<static_cast<unsigned>(p.num_tokens), threads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_cache_write(const CacheWriteParams& p, DType input, DType cache,
                               cudaStream_t stream) {
  if (input == DType::kBF16 && cache == DType::kBF16) return launch<bf16, bf16>(p, stream);
  if (input == DType::kF16 && cache == DType::kF16) return launch<fp16, fp16>(p, stream);
  if (input == DType::kBF16 && cache == DType::kFP8E4M3) return launch<bf16, fp8>(p, stream);
  if (input == DType::kF16 && cache == DType::kFP8E4M3) return launch<fp16, fp8>(p, stream);
  return cudaErrorInvalidValue;  // the backend validates dtypes before launching
}

}  // namespace tripath::kernels
