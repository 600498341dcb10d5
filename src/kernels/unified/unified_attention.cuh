// Unified paged attention: one launch computes attention for every query token of a step,
// decode, extend and prefill alike, straight from the paged KV cache.
//
// Grid: one thread block (4 warps) per UnifiedWorkItem, i.e. per (request, KV head, tile of
// packed query rows, key range). Rows pack the query heads of a GQA group (row = token * group +
// head), so each K/V tile loaded from HBM serves the whole group. Keys stream through shared
// memory in tiles of 64 with a 2-stage cp.async pipeline (fp8 caches land raw and are widened in
// shared memory); QK^T and PV run on tensor cores (mma.sync m16n8k16, f32 accumulate) with an
// online softmax in base 2. Causal masking uses the context offset (query i of a request sees
// keys <= context_len + i), plus the left window; soft-cap is applied to the scaled scores.
// Tiles: kRows64 = 4 warps x 16 rows over the same keys (prefill/extend); kRows16 = 16 rows with
// the 4 warps splitting each key tile, combined through shared memory at the end (decode).
// Items with split >= 0 write (normalized output, natural LSE) partials that merge_states
// combines (and applies sinks to); others write the final output, sinks and LSE directly.
// Specializations: head dim x q dtype (bf16, f16) x KV dtype (q dtype, fp8 e4m3), generated from
// the table in src/kernels/CMakeLists.txt; plus q/k 192 with v 128 in bf16 for MLA's
// non-absorbed path (unified_mla.cu). Tests: tests/cpp/test_gpu_backends.cpp; benchmark:
// `tripath bench --backend=unified`.
#pragma once

#include <cuda_runtime.h>

#include <type_traits>

#include "common/device_math.cuh"
#include "common/kv_layout.h"
#include "unified/params.h"

namespace tripath::kernels {

template <int D, int DV, typename T, typename KvT, int kWarpsM>
struct UnifiedConfig {
  static constexpr int kThreads = 128;
  static constexpr int kWarpsN = 4 / kWarpsM;
  static constexpr int kM = 16 * kWarpsM;        // packed query rows per block
  static constexpr int kN = 64;                  // keys per tile
  static constexpr int kKeysPerWarp = kN / kWarpsN;
  static constexpr int kStride = D + 8;          // +16 bytes per row: conflict-free ldmatrix
  static constexpr int kStrideV = DV + 8;
  static constexpr bool kFp8 = std::is_same_v<KvT, fp8>;
  static constexpr int kStagesT = kFp8 ? 1 : 2;  // fp8: 2 raw stages, widened into 1 tile
  static constexpr bool kQInRegs = D <= 128;
  static constexpr size_t kSmemQ = size_t(kM) * kStride * sizeof(T);
  static constexpr size_t kSmemK = size_t(kStagesT) * kN * kStride * sizeof(T);
  static constexpr size_t kSmemV = size_t(kStagesT) * kN * kStrideV * sizeof(T);
  static constexpr size_t kSmemRawK = kFp8 ? size_t(2) * kN * D : 0;
  static constexpr size_t kSmemRawV = kFp8 ? size_t(2) * kN * DV : 0;
  static constexpr size_t kSmemTiles = kSmemK + kSmemV + kSmemRawK + kSmemRawV;
  static constexpr size_t kSmemReduce = size_t(kWarpsN) * 16 * (DV + 2) * sizeof(float);
  static constexpr size_t kSmemBytes =
      kSmemQ + (kSmemTiles > kSmemReduce ? kSmemTiles : kSmemReduce);
};

template <int D, int DV, typename T, typename KvT, int kWarpsM>
__global__ void __launch_bounds__(128)
    unified_attention_kernel(const __grid_constant__ UnifiedParams p) {
  using Cfg = UnifiedConfig<D, DV, T, KvT, kWarpsM>;
  constexpr int kM = Cfg::kM, kN = Cfg::kN, kStride = Cfg::kStride, kKW = Cfg::kKeysPerWarp;
  constexpr int kStrideV = Cfg::kStrideV;
  constexpr int kWarpsN = Cfg::kWarpsN;
  constexpr float kNegInf = -INFINITY;

  extern __shared__ __align__(128) unsigned char smem[];
  T* sQ = reinterpret_cast<T*>(smem);
  T* sK = reinterpret_cast<T*>(smem + Cfg::kSmemQ);
  T* sV = reinterpret_cast<T*>(smem + Cfg::kSmemQ + Cfg::kSmemK);
  unsigned char* sRawK = smem + Cfg::kSmemQ + Cfg::kSmemK + Cfg::kSmemV;
  unsigned char* sRawV = sRawK + Cfg::kSmemRawK;

  const UnifiedWorkItem it = p.items[blockIdx.x];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int wm = warp % kWarpsM, wn = warp / kWarpsM;
  const int tok0 = p.cu_seqlens_q[it.request];
  const int qlen = p.cu_seqlens_q[it.request + 1] - tok0;
  const int ctx = p.context_lens[it.request];
  const int rpt = p.rows_per_token;
  const int row_end = min(it.row_begin + kM, qlen * rpt);
  const int t_first = it.row_begin / rpt, t_last = (row_end - 1) / rpt;
  int key_lo = p.window_left >= 0 ? max(0, ctx + t_first - p.window_left) : 0;
  int key_hi = ctx + t_last + 1;
  key_lo = max(key_lo, it.kv_begin);
  key_hi = min(key_hi, it.kv_end);
  const int32_t* table = p.block_table + int64_t(it.request) * p.max_blocks_per_request;

  // Q tile: packed row r -> token (row_begin + r) / rpt, head q_head + (row_begin + r) % rpt.
  constexpr int kChunks = D / 8;  // 16-byte chunks per row of T
  for (int idx = tid; idx < kM * kChunks; idx += Cfg::kThreads) {
    const int r = idx / kChunks, c = idx % kChunks, gr = it.row_begin + r;
    const bool valid = gr < row_end;
    const T* src = static_cast<const T*>(p.q);
    if (valid) src += (int64_t(tok0 + gr / rpt) * p.num_q_heads + it.q_head + gr % rpt) * D + c * 8;
    cp_async_16(sQ + r * kStride + c * 8, src, valid);
  }
  cp_async_commit();

  auto load_tile = [&](int tile_start, int stage) {
    if constexpr (D == DV) {
      // K and V rows of one key share their address: one offset, two copies.
      if constexpr (Cfg::kFp8) {
        constexpr int kRawChunks = D / 16;
        for (int idx = tid; idx < kN * kRawChunks; idx += Cfg::kThreads) {
          const int key = idx / kRawChunks, c = idx % kRawChunks, kabs = tile_start + key;
          const bool valid = kabs < key_hi;
          int64_t off = 0;
          if (valid) {
            off = kv_chunk_offset(p.layout, table[kabs >> p.log2_block_size],
                                  kabs & (p.block_size - 1), it.kv_head, c, p.block_size,
                                  p.num_kv_heads, D, 16);
          }
          const int64_t dst = (int64_t(stage) * kN + key) * D + c * 16;
          cp_async_16(sRawK + dst, static_cast<const fp8*>(p.k_cache) + off, valid);
          cp_async_16(sRawV + dst, static_cast<const fp8*>(p.v_cache) + off, valid);
        }
      } else {
        for (int idx = tid; idx < kN * kChunks; idx += Cfg::kThreads) {
          const int key = idx / kChunks, c = idx % kChunks, kabs = tile_start + key;
          const bool valid = kabs < key_hi;
          int64_t off = 0;
          if (valid) {
            off = kv_chunk_offset(p.layout, table[kabs >> p.log2_block_size],
                                  kabs & (p.block_size - 1), it.kv_head, c, p.block_size,
                                  p.num_kv_heads, D, 8);
          }
          const int dst = (stage * kN + key) * kStride + c * 8;
          cp_async_16(sK + dst, static_cast<const T*>(p.k_cache) + off, valid);
          cp_async_16(sV + dst, static_cast<const T*>(p.v_cache) + off, valid);
        }
      }
    } else {
      // K rows hold D elements, V rows DV (MLA's non-absorbed 192/128); both addressed as
      // 16-byte chunks of their own row length.
      constexpr int kPer = Cfg::kFp8 ? 16 : 8;  // elements per 16-byte chunk
      constexpr int kChunksK = D / kPer, kChunksV = DV / kPer;
      for (int idx = tid; idx < kN * (kChunksK + kChunksV); idx += Cfg::kThreads) {
        const bool is_v = idx >= kN * kChunksK;
        const int local = is_v ? idx - kN * kChunksK : idx;
        const int chunks = is_v ? kChunksV : kChunksK;
        const int key = local / chunks, c = local % chunks, kabs = tile_start + key;
        const bool valid = kabs < key_hi;
        int64_t off = 0;
        if (valid) {
          off = kv_chunk_offset(p.layout, table[kabs >> p.log2_block_size],
                                kabs & (p.block_size - 1), it.kv_head, c, p.block_size,
                                p.num_kv_heads, is_v ? DV : D, kPer);
        }
        const void* src = is_v ? p.v_cache : p.k_cache;
        if constexpr (Cfg::kFp8) {
          unsigned char* dst = is_v ? sRawV + (int64_t(stage) * kN + key) * DV
                                    : sRawK + (int64_t(stage) * kN + key) * D;
          cp_async_16(dst + c * 16, static_cast<const fp8*>(src) + off, valid);
        } else {
          T* dst = is_v ? sV + (stage * kN + key) * kStrideV : sK + (stage * kN + key) * kStride;
          cp_async_16(dst + c * 8, static_cast<const T*>(src) + off, valid);
        }
      }
    }
  };

  const int num_tiles = key_hi > key_lo ? (key_hi - key_lo + kN - 1) / kN : 0;
  if (num_tiles > 0) load_tile(key_lo, 0);
  cp_async_commit();
  cp_async_wait<1>();  // Q has landed
  __syncthreads();

  constexpr int kQFrags = Cfg::kQInRegs ? D / 16 : 1;
  uint32_t qf[kQFrags][4];
  const T* q_warp = sQ + (wm * 16 + lane % 16) * kStride + (lane / 16) * 8;
  if constexpr (Cfg::kQInRegs) {
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) ldmatrix_x4(qf[ks], q_warp + ks * 16);
  }

  // The two rows this thread holds in every accumulator fragment, and what they may see.
  int row_pos[2];
  bool row_ok[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int gr = it.row_begin + wm * 16 + lane / 4 + 8 * i;
    row_ok[i] = gr < row_end;
    row_pos[i] = ctx + (row_ok[i] ? gr / rpt : 0);
  }

  float o[DV / 8][4];
#pragma unroll
  for (int dn = 0; dn < DV / 8; ++dn) o[dn][0] = o[dn][1] = o[dn][2] = o[dn][3] = 0.0f;
  float m[2] = {kNegInf, kNegInf}, l[2] = {0.0f, 0.0f};

  for (int j = 0; j < num_tiles; ++j) {
    const int tile_start = key_lo + j * kN;
    if (j + 1 < num_tiles) load_tile(tile_start + kN, (j + 1) % 2);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const T* tK;
    const T* tV;
    if constexpr (Cfg::kFp8) {
      // Widen the raw fp8 stage into the 16-bit tile the tensor cores read.
      const unsigned char* rk = sRawK + size_t(j % 2) * kN * D;
      const unsigned char* rv = sRawV + size_t(j % 2) * kN * DV;
      for (int idx = tid; idx < kN * D / 8; idx += Cfg::kThreads) {
        const int key = idx / (D / 8), c = idx % (D / 8);
        *reinterpret_cast<uint4*>(sK + key * kStride + c * 8) =
            fp8x8_to<T>(*reinterpret_cast<const uint2*>(rk + key * D + c * 8));
      }
      for (int idx = tid; idx < kN * DV / 8; idx += Cfg::kThreads) {
        const int key = idx / (DV / 8), c = idx % (DV / 8);
        *reinterpret_cast<uint4*>(sV + key * kStrideV + c * 8) =
            fp8x8_to<T>(*reinterpret_cast<const uint2*>(rv + key * DV + c * 8));
      }
      __syncthreads();
      tK = sK;
      tV = sV;
    } else {
      tK = sK + (j % 2) * kN * kStride;
      tV = sV + (j % 2) * kN * kStrideV;
    }

    float s[kKW / 8][4];
#pragma unroll
    for (int nt = 0; nt < kKW / 8; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
      uint32_t a[4];
      if constexpr (Cfg::kQInRegs) {
        a[0] = qf[ks][0]; a[1] = qf[ks][1]; a[2] = qf[ks][2]; a[3] = qf[ks][3];
      } else {
        ldmatrix_x4(a, q_warp + ks * 16);
      }
#pragma unroll
      for (int np = 0; np < kKW / 16; ++np) {
        uint32_t b[4];
        const int key = wn * kKW + np * 16 + (lane / 16) * 8 + lane % 8;
        ldmatrix_x4(b, tK + key * kStride + ks * 16 + ((lane / 8) % 2) * 8);
        mma_16816<T>(s[2 * np], a, b[0], b[1]);
        mma_16816<T>(s[2 * np + 1], a, b[2], b[3]);
      }
    }

    // Scale, soft-cap and mask into base-2 logits.
#pragma unroll
    for (int nt = 0; nt < kKW / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int i = e / 2;
        const int key = tile_start + wn * kKW + nt * 8 + (lane % 4) * 2 + (e % 2);
        const bool ok = row_ok[i] && key < key_hi && key <= row_pos[i] &&
                        (p.window_left < 0 || key >= row_pos[i] - p.window_left);
        float x;
        if (p.softcap > 0.0f) {
          x = p.softcap * tanhf(s[nt][e] * p.score_scale / p.softcap) * 1.4426950408889634f;
        } else {
          x = s[nt][e] * p.scale_log2;
        }
        s[nt][e] = ok ? x : kNegInf;
      }
    }

    // Online softmax per row; a row with nothing visible yet keeps m = -inf and weight 0.
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      float mx = kNegInf;
#pragma unroll
      for (int nt = 0; nt < kKW / 8; ++nt) mx = fmaxf(mx, fmaxf(s[nt][2 * i], s[nt][2 * i + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m[i], mx);
      const float base = m_new == kNegInf ? 0.0f : m_new;
      const float alpha = exp2f(m[i] - base);
      m[i] = m_new;
      float sum = 0.0f;
#pragma unroll
      for (int nt = 0; nt < kKW / 8; ++nt) {
        s[nt][2 * i] = exp2f(s[nt][2 * i] - base);
        s[nt][2 * i + 1] = exp2f(s[nt][2 * i + 1] - base);
        sum += s[nt][2 * i] + s[nt][2 * i + 1];
      }
      l[i] = l[i] * alpha + sum;
#pragma unroll
      for (int dn = 0; dn < DV / 8; ++dn) {
        o[dn][2 * i] *= alpha;
        o[dn][2 * i + 1] *= alpha;
      }
    }

    // O += P V over this warp's keys.
#pragma unroll
    for (int kk = 0; kk < kKW / 16; ++kk) {
      const uint32_t a[4] = {pack2<T>(s[2 * kk][0], s[2 * kk][1]),
                             pack2<T>(s[2 * kk][2], s[2 * kk][3]),
                             pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                             pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
      const int key = wn * kKW + kk * 16 + ((lane / 8) % 2) * 8 + lane % 8;
#pragma unroll
      for (int dp = 0; dp < DV / 16; ++dp) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, tV + key * kStrideV + dp * 16 + (lane / 16) * 8);
        mma_16816<T>(o[2 * dp], a, b[0], b[1]);
        mma_16816<T>(o[2 * dp + 1], a, b[2], b[3]);
      }
    }
    __syncthreads();  // the stage just read is the next load's target
  }

#pragma unroll
  for (int i = 0; i < 2; ++i) {
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
  }

  // Writes element d of local row r given its unnormalized sum o, row sum l and base-2 max m.
  auto store = [&](int r, int d, float ov, float lv, float mv) {
    const int gr = it.row_begin + r;
    if (gr >= row_end) return;
    const int token = tok0 + gr / rpt, head = it.q_head + gr % rpt;
    const int64_t row = int64_t(token) * p.num_q_heads + head;
    float lse = lv > 0.0f ? (mv + log2f(lv)) * 0.6931471805599453f : kNegInf;
    float value = lv > 0.0f ? ov / lv * p.v_scale : 0.0f;
    if (it.split >= 0) {
      const int64_t prow = int64_t(it.split) * p.num_tokens * p.num_q_heads + row;
      p.partial_out[prow * DV + d] = value;
      if (d == 0) p.partial_lse[prow] = lse;
      return;
    }
    if (p.sinks != nullptr) fold_sink(p.sinks[head], lse, value);
    static_cast<T*>(p.out)[row * DV + d] = from_float<T>(value);
    if (d == 0 && p.lse != nullptr) p.lse[row] = lse;
  };

  if constexpr (kWarpsN == 1) {
#pragma unroll
    for (int dn = 0; dn < DV / 8; ++dn) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int i = e / 2;
        store(wm * 16 + lane / 4 + 8 * i, dn * 8 + (lane % 4) * 2 + e % 2, o[dn][e], l[i], m[i]);
      }
    }
  } else {
    // The warps hold the same 16 rows over different keys: combine through shared memory.
    float* red_o = reinterpret_cast<float*>(smem + Cfg::kSmemQ);  // [kWarpsN][16][DV]
    float* red_m = red_o + kWarpsN * 16 * DV;                      // [kWarpsN][16]
    float* red_l = red_m + kWarpsN * 16;
    __syncthreads();
#pragma unroll
    for (int dn = 0; dn < DV / 8; ++dn) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        red_o[(wn * 16 + lane / 4 + 8 * (e / 2)) * DV + dn * 8 + (lane % 4) * 2 + e % 2] =
            o[dn][e];
      }
    }
    if (lane % 4 == 0) {
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        red_m[wn * 16 + lane / 4 + 8 * i] = m[i];
        red_l[wn * 16 + lane / 4 + 8 * i] = l[i];
      }
    }
    __syncthreads();
    for (int idx = tid; idx < 16 * DV; idx += Cfg::kThreads) {
      const int r = idx / DV, d = idx % DV;
      float mx = kNegInf;
#pragma unroll
      for (int w = 0; w < kWarpsN; ++w) mx = fmaxf(mx, red_m[w * 16 + r]);
      const float base = mx == kNegInf ? 0.0f : mx;
      float lv = 0.0f, ov = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarpsN; ++w) {
        const float f = exp2f(red_m[w * 16 + r] - base);
        lv += red_l[w * 16 + r] * f;
        ov += red_o[(w * 16 + r) * DV + d] * f;
      }
      store(r, d, ov, lv, base);
    }
  }
}

// Head dim D for q/k and DV for v (equal but for MLA's non-absorbed 192/128).
template <int D, int DV, typename T, typename KvT>
cudaError_t launch_attention_tiles(const UnifiedParams& p, UnifiedTile tile,
                                   cudaStream_t stream) {
  if (p.num_items == 0) return cudaSuccess;
  auto launch = [&](auto kernel, size_t smem) {
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(smem));
    if (e != cudaSuccess) return e;
    kernel<<<p.num_items, 128, smem, stream>>>(p);
    return cudaGetLastError();
  };
  if (tile == kRows16) {
    return launch(unified_attention_kernel<D, DV, T, KvT, 1>,
                  UnifiedConfig<D, DV, T, KvT, 1>::kSmemBytes);
  }
  return launch(unified_attention_kernel<D, DV, T, KvT, 4>,
                UnifiedConfig<D, DV, T, KvT, 4>::kSmemBytes);
}

template <int D, typename T, typename KvT>
cudaError_t launch_unified_impl(const UnifiedParams& p, UnifiedTile tile, cudaStream_t stream) {
  return launch_attention_tiles<D, D, T, KvT>(p, tile, stream);
}

}  // namespace tripath::kernels
