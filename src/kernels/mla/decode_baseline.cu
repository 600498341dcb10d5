// Baseline MLA absorbed decode, stage 1 of 2 (the analog of peers' Triton MLA decode): each
// thread block computes one split's partial state for 16 packed (token, head) rows; the merge
// kernel (src/kernels/merge) is stage 2.
//
// Grid: one block of 4 warps per MlaDecodeWorkItem = (request, split, 16-row block), so a
// request with 128 heads reads every latent tile 8 times (once per row block; the L2 absorbs
// most of it). Keys stream through shared memory in tiles of 32 with a single buffer (load,
// wait, compute): QK^T over 576 dims on tensor cores (mma.sync m16n8k16, each warp 8 keys),
// scores through shared memory, the online softmax by one warp per 4 rows (base 2), then PV
// over the first 512 dims with each warp owning 128 value dims. fp8 tiles land raw and are
// widened in shared memory; the cache scale multiplies the scores and the outputs.
// Specializations: cache bf16 and fp8 e4m3 (q bf16). Tests: tests/gpu/test_gpu_mla.cpp;
// benchmark: `tripath bench --mla-backend=mla_baseline --workload=mla-decode-4k`.
#include <type_traits>

#include "common/device_math.cuh"
#include "mla/decode_item.cuh"
#include "mla/mla.h"

namespace tripath::kernels {
namespace {

template <typename CacheT>
struct BaselineConfig {
  static constexpr int kRows = kMlaBaselineRows;  // packed rows per block (one MMA tile)
  static constexpr int kN = 32;                   // keys per tile
  static constexpr int kThreads = 128;
  static constexpr int kStride = kMlaEntry + 8;  // +16 bytes a row: conflict-free ldmatrix
  static constexpr int kStrideS = kN + 1;
  static constexpr int kStrideP = kN + 8;
  static constexpr bool kFp8 = std::is_same_v<CacheT, fp8>;
  static constexpr size_t kSmemQ = size_t(kRows) * kStride * sizeof(bf16);
  static constexpr size_t kSmemK = size_t(kN) * kStride * sizeof(bf16);
  static constexpr size_t kSmemRaw = kFp8 ? size_t(kN) * kMlaEntry : 0;
  static constexpr size_t kSmemS = size_t(kRows) * kStrideS * sizeof(float);
  static constexpr size_t kSmemP = size_t(kRows) * kStrideP * sizeof(bf16);
  static constexpr size_t kSmemStats = size_t(3) * kRows * sizeof(float);
  static constexpr size_t kSmemBytes = kSmemQ + kSmemK + kSmemRaw + kSmemS + kSmemP + kSmemStats;
};

template <typename CacheT>
__global__ void __launch_bounds__(128)
    mla_decode_baseline_kernel(const __grid_constant__ MlaDecodeParams p) {
  using Cfg = BaselineConfig<CacheT>;
  constexpr int kRows = Cfg::kRows, kN = Cfg::kN, kStride = Cfg::kStride;
  constexpr int kStrideS = Cfg::kStrideS, kStrideP = Cfg::kStrideP;
  constexpr int kChunks = kMlaEntry / 8;  // 16-byte chunks of a bf16 row
  constexpr float kNegInf = -INFINITY;

  extern __shared__ __align__(128) unsigned char smem[];
  bf16* sQ = reinterpret_cast<bf16*>(smem);
  bf16* sK = reinterpret_cast<bf16*>(smem + Cfg::kSmemQ);
  unsigned char* sRaw = smem + Cfg::kSmemQ + Cfg::kSmemK;
  float* sS = reinterpret_cast<float*>(sRaw + Cfg::kSmemRaw);
  bf16* sP = reinterpret_cast<bf16*>(reinterpret_cast<unsigned char*>(sS) + Cfg::kSmemS);
  float* sM = reinterpret_cast<float*>(reinterpret_cast<unsigned char*>(sP) + Cfg::kSmemP);
  float* sL = sM + kRows;
  float* sAlpha = sL + kRows;

  const MlaDecodeWorkItem it = p.items[blockIdx.x];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int H = p.num_heads;
  const MlaItemSpan span = mla_item_span(p, it, kRows);

  mla_load_q_rows<kRows, Cfg::kThreads>(p, it, span,
                                        [&](int r, int c) { return sQ + r * kStride + c * 8; });
  cp_async_commit();
  if (tid < kRows) {
    sM[tid] = kNegInf;
    sL[tid] = 0.0f;
  }

  // The last key each score row this thread holds may see (-1: padding row).
  int limit[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int gr = it.row_begin + lane / 4 + 8 * i;
    limit[i] = gr < span.row_end ? min(span.key_hi - 1, span.ctx + gr / H) : -1;
  }

  float o[16][4];
#pragma unroll
  for (int dn = 0; dn < 16; ++dn) o[dn][0] = o[dn][1] = o[dn][2] = o[dn][3] = 0.0f;

  const int num_tiles = span.key_hi > span.key_lo ? (span.key_hi - span.key_lo + kN - 1) / kN : 0;
  for (int j = 0; j < num_tiles; ++j) {
    const int tile_start = span.key_lo + j * kN;
    if constexpr (Cfg::kFp8) {
      for (int idx = tid; idx < kN * (kMlaEntry / 16); idx += Cfg::kThreads) {
        const int key = idx / (kMlaEntry / 16), c = idx % (kMlaEntry / 16), kabs = tile_start + key;
        const bool valid = kabs < span.key_hi;
        const int64_t off = valid ? mla_latent_offset(p, span, kabs) + c * 16 : 0;
        cp_async_16(sRaw + key * kMlaEntry + c * 16, static_cast<const uint8_t*>(p.cache) + off,
                    valid);
      }
    } else {
      for (int idx = tid; idx < kN * kChunks; idx += Cfg::kThreads) {
        const int key = idx / kChunks, c = idx % kChunks, kabs = tile_start + key;
        const bool valid = kabs < span.key_hi;
        const int64_t off = valid ? mla_latent_offset(p, span, kabs) + c * 8 : 0;
        cp_async_16(sK + key * kStride + c * 8, static_cast<const bf16*>(p.cache) + off, valid);
      }
    }
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
    if constexpr (Cfg::kFp8) {
      for (int idx = tid; idx < kN * kChunks; idx += Cfg::kThreads) {
        const int key = idx / kChunks, c = idx % kChunks;
        *reinterpret_cast<uint4*>(sK + key * kStride + c * 8) =
            fp8x8_to<bf16>(*reinterpret_cast<const uint2*>(sRaw + key * kMlaEntry + c * 8));
      }
      __syncthreads();
    }

    // Scores of the 16 rows against this warp's 8 keys, two k-steps per B load.
    float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll 6
    for (int kc = 0; kc < kMlaEntry / 32; ++kc) {
      uint32_t b[4], a[4];
      ldmatrix_x4(b, sK + (warp * 8 + lane % 8) * kStride + kc * 32 + (lane / 8) * 8);
      ldmatrix_x4(a, sQ + (lane % 16) * kStride + kc * 32 + (lane / 16) * 8);
      mma_16816<bf16>(s, a, b[0], b[1]);
      ldmatrix_x4(a, sQ + (lane % 16) * kStride + kc * 32 + 16 + (lane / 16) * 8);
      mma_16816<bf16>(s, a, b[2], b[3]);
    }
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int col = warp * 8 + (lane % 4) * 2 + (e & 1);
      sS[(lane / 4 + 8 * (e / 2)) * kStrideS + col] =
          tile_start + col <= limit[e / 2] ? s[e] * p.scale_log2 : kNegInf;
    }
    __syncthreads();

    // Online softmax: warp w owns rows 4w..4w+3, one key per lane.
#pragma unroll
    for (int rr = 0; rr < kRows / 4; ++rr) {
      const int r = warp * (kRows / 4) + rr;
      const float x = sS[r * kStrideS + lane];
      float mx = x;
#pragma unroll
      for (int off = 16; off > 0; off /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
      const float m_old = sM[r];
      const float m_new = fmaxf(m_old, mx);
      const float base = m_new == kNegInf ? 0.0f : m_new;
      const float pr = exp2f(x - base);
      float sum = pr;
#pragma unroll
      for (int off = 16; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
      sP[r * kStrideP + lane] = __float2bfloat16_rn(pr);
      if (lane == 0) {
        const float alpha = exp2f(m_old - base);
        sAlpha[r] = alpha;
        sL[r] = sL[r] * alpha + sum;
        sM[r] = m_new;
      }
    }
    __syncthreads();

    // O = diag(alpha) O + P V; warp w owns value dims [128 w, 128 w + 128).
    const float a0 = sAlpha[lane / 4], a1 = sAlpha[lane / 4 + 8];
#pragma unroll
    for (int dn = 0; dn < 16; ++dn) {
      o[dn][0] *= a0;
      o[dn][1] *= a0;
      o[dn][2] *= a1;
      o[dn][3] *= a1;
    }
#pragma unroll
    for (int kk = 0; kk < kN / 16; ++kk) {
      uint32_t a[4];
      ldmatrix_x4(a, sP + (lane % 16) * kStrideP + kk * 16 + (lane / 16) * 8);
      const int key = kk * 16 + ((lane / 8) % 2) * 8 + lane % 8;
#pragma unroll
      for (int dp = 0; dp < 8; ++dp) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, sK + key * kStride + warp * 128 + dp * 16 + (lane / 16) * 8);
        mma_16816<bf16>(o[2 * dp], a, b[0], b[1]);
        mma_16816<bf16>(o[2 * dp + 1], a, b[2], b[3]);
      }
    }
    __syncthreads();  // the tile, scores and P are overwritten next
  }
  cp_async_wait<0>();
  __syncthreads();

  // Partial state of each row: normalized output (cache scale applied) and natural LSE.
  const int64_t part_rows = int64_t(p.num_tokens) * H;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int lr = lane / 4 + 8 * i;
    if (it.row_begin + lr >= span.row_end) continue;
    const float l = sL[lr];
    const float inv = l > 0.0f ? p.out_scale / l : 0.0f;
    const int64_t prow = int64_t(it.split) * part_rows + span.row0 + lr;
    float* dst = p.partial_out + prow * kMlaLatent + warp * 128 + (lane % 4) * 2;
#pragma unroll
    for (int dn = 0; dn < 16; ++dn) {
      *reinterpret_cast<float2*>(dst + dn * 8) =
          make_float2(o[dn][2 * i] * inv, o[dn][2 * i + 1] * inv);
    }
    if (warp == 0 && lane % 4 == 0) {
      p.partial_lse[prow] = l > 0.0f ? (sM[lr] + log2f(l)) * 0.6931471805599453f : kNegInf;
    }
  }
}

template <typename CacheT>
cudaError_t launch(const MlaDecodeParams& p, cudaStream_t stream) {
  if (p.num_items == 0) return cudaSuccess;
  constexpr size_t kSmem = BaselineConfig<CacheT>::kSmemBytes;
  auto kernel = mla_decode_baseline_kernel<CacheT>;
  const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             static_cast<int>(kSmem));
  if (e != cudaSuccess) return e;
  kernel<<<p.num_items, BaselineConfig<CacheT>::kThreads, kSmem, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_mla_decode_baseline(const MlaDecodeParams& p, DType cache, cudaStream_t stream) {
  switch (cache) {
    case DType::kBF16:
      return launch<bf16>(p, stream);
    case DType::kFP8E4M3:
      return launch<fp8>(p, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace tripath::kernels
