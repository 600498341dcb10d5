// Kernels of MLA's non-absorbed extend/prefill path, around the cuBLAS decompression GEMM and
// the 192/128 attention of the unified kernel:
//  * gather: the latent rows of one pass, from the paged cache into a contiguous workspace
//    (c_kv, widened but unscaled, as the GEMM input), while k_pe (times the fp8 scale) is
//    broadcast into dims 128..191 of every head of K. Grid: one block per (workspace row,
//    segment); rows past a segment's end up to the next multiple of 64 are zeroed.
//  * merge_parts: one pass's partial states folded into the running state of each token it
//    covered, or on a token's last part written out as bf16 output and natural LSE
//    (shared/DESIGN.md section 5; -inf parts weigh nothing, all empty gives 0 and -inf).
//    Grid: one warp per (token, head) row, 4 dims a lane; a block of 8 rows, grid.y = range.
// Tests: tests/gpu/test_gpu_mla.cpp (extend, prefill, chunked contexts).
#include <type_traits>

#include "common/device_math.cuh"
#include "mla/mla.h"

namespace tripath::kernels {
namespace {

// Eight elements of a latent row as bf16: widened exactly (scale 1) or times `scale`.
template <typename CacheT>
__device__ __forceinline__ uint4 load8_bf16(const CacheT* src, float scale, bool scaled) {
  if constexpr (std::is_same_v<CacheT, fp8>) {
    const uint2 raw = *reinterpret_cast<const uint2*>(src);
    if (!scaled) return fp8x8_to<bf16>(raw);  // e4m3 values are exact in bf16
    // Pairs of e4m3 bytes through the exact fp8 -> f16 conversion (no type punning).
    const uint32_t words[2] = {raw.x, raw.y};
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const __nv_fp8x2_storage_t pair =
          static_cast<__nv_fp8x2_storage_t>((words[i / 2] >> (16 * (i % 2))) & 0xFFFFu);
      const float2 f = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(pair, __NV_E4M3)));
      w[i] = pack2<bf16>(f.x * scale, f.y * scale);
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
  } else {
    return *reinterpret_cast<const uint4*>(src);
  }
}

template <typename CacheT>
__global__ void mla_gather_kernel(const __grid_constant__ MlaGatherParams p) {
  const MlaGatherSegment seg = p.segments[blockIdx.y];
  const int r = blockIdx.x;
  if (r >= (seg.len + 63) / 64 * 64) return;
  const int64_t ws_row = int64_t(seg.ws_row) + r;
  const bool valid = r < seg.len;
  int64_t src_row = 0;
  if (valid) {
    const int key = seg.key_begin + r;
    const int32_t* table = p.block_table + int64_t(seg.request) * p.max_blocks_per_request;
    src_row = int64_t(table[key / p.block_size]) * p.block_size + key % p.block_size;
  }
  const CacheT* src = static_cast<const CacheT*>(p.cache) + src_row * kMlaEntry;
  bf16* latent = static_cast<bf16*>(p.latent_ws) + ws_row * kMlaLatent;
  bf16* k = static_cast<bf16*>(p.k_ws) + ws_row * p.num_heads * kMlaQk;
  constexpr int kLatentChunks = kMlaLatent / 8, kRopeChunks = kMlaRope / 8;
  const uint4 zero = make_uint4(0, 0, 0, 0);
  for (int idx = threadIdx.x; idx < kLatentChunks + kRopeChunks * p.num_heads; idx += blockDim.x) {
    if (idx < kLatentChunks) {
      *reinterpret_cast<uint4*>(latent + idx * 8) =
          valid ? load8_bf16(src + idx * 8, 1.0f, false) : zero;
    } else {
      const int h = (idx - kLatentChunks) / kRopeChunks, c = (idx - kLatentChunks) % kRopeChunks;
      *reinterpret_cast<uint4*>(k + h * kMlaQk + kMlaNope + c * 8) =
          valid ? load8_bf16(src + kMlaLatent + c * 8, p.scale, true) : zero;
    }
  }
}

__global__ void mla_merge_parts_kernel(const __grid_constant__ MlaMergePartsParams p) {
  constexpr float kNegInf = -INFINITY;
  const MlaMergeRange rg = p.ranges[blockIdx.y];
  const int64_t row = int64_t(rg.token_begin) * p.num_heads +
                      int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= int64_t(rg.token_end) * p.num_heads) return;
  const int d = (threadIdx.x % 32) * 4;
  const bool first = (rg.flags & kMlaFirstPart) != 0, last = (rg.flags & kMlaLastPart) != 0;
  const float lp = p.part_lse[row];
  const float4 op = *reinterpret_cast<const float4*>(p.part_out + row * kMlaV + d);
  float la = kNegInf;
  float4 oa = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  if (!first) {
    la = p.acc_lse[row];
    oa = *reinterpret_cast<const float4*>(p.acc_out + row * kMlaV + d);
  }
  const float m = fmaxf(la, lp);
  float4 res = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  float lse = kNegInf;
  if (m != kNegInf) {
    // A NaN part is not hidden: its weight poisons the result, as in the reference merge.
    const float wa = la == kNegInf ? 0.0f : expf(la - m);
    const float wp = lp == kNegInf ? 0.0f : expf(lp - m);
    const float inv = 1.0f / (wa + wp);
    res.x = ((wa != 0.0f ? wa * oa.x : 0.0f) + (wp != 0.0f ? wp * op.x : 0.0f)) * inv;
    res.y = ((wa != 0.0f ? wa * oa.y : 0.0f) + (wp != 0.0f ? wp * op.y : 0.0f)) * inv;
    res.z = ((wa != 0.0f ? wa * oa.z : 0.0f) + (wp != 0.0f ? wp * op.z : 0.0f)) * inv;
    res.w = ((wa != 0.0f ? wa * oa.w : 0.0f) + (wp != 0.0f ? wp * op.w : 0.0f)) * inv;
    lse = m + logf(wa + wp);
  }
  __syncwarp();  // every lane has read the running LSE before lane 0 overwrites it
  if (last) {
    bf16* out = static_cast<bf16*>(p.out) + row * kMlaV + d;
    *reinterpret_cast<uint2*>(out) =
        make_uint2(pack2<bf16>(res.x, res.y), pack2<bf16>(res.z, res.w));
    if (threadIdx.x % 32 == 0 && p.lse != nullptr) p.lse[row] = lse;
  } else {
    *reinterpret_cast<float4*>(p.acc_out + row * kMlaV + d) = res;
    if (threadIdx.x % 32 == 0) p.acc_lse[row] = lse;
  }
}

}  // namespace

cudaError_t launch_mla_gather(const MlaGatherParams& p, DType cache, cudaStream_t stream) {
  if (p.num_segments == 0 || p.max_rows == 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned>(p.max_rows), static_cast<unsigned>(p.num_segments));
  switch (cache) {
    case DType::kBF16:
      mla_gather_kernel<bf16><<<grid, 128, 0, stream>>>(p);
      break;
    case DType::kFP8E4M3:
      mla_gather_kernel<fp8><<<grid, 128, 0, stream>>>(p);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t launch_mla_merge_parts(const MlaMergePartsParams& p, cudaStream_t stream) {
  if (p.num_ranges == 0 || p.max_range_tokens == 0) return cudaSuccess;
  constexpr int kRowsPerBlock = 8;
  const int64_t rows = int64_t(p.max_range_tokens) * p.num_heads;
  const dim3 grid(static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock),
                  static_cast<unsigned>(p.num_ranges));
  mla_merge_parts_kernel<<<grid, kRowsPerBlock * 32, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace tripath::kernels
