// MLA absorbed decode on Hopper tensor cores (wgmma), for 64 packed rows per block and a bf16
// latent cache: the `mla` backend's kernel for 64+ rows per request (128 heads: 2 blocks per
// split) unless TRIPATH_MLA_WGMMA=0 (measured 247 vs 410 us for the mma.sync packed kernel on
// mla-decode-4k, 128 heads, H200).
//
// Same work items, semantics and outputs as decode_packed.cuh (final bf16 + natural LSE, or a
// normalized f32 partial state and its LSE). Two warpgroups over the same 64 rows, FlashMLA's
// division of labour: warpgroup 0 computes S = Q K^T over the 576 latent dims (wgmma m64n64k16,
// both operands in shared memory), the online softmax, and O[:, 0:256] += P V from registers;
// it hands P (as its register fragments) and the rescale factors through shared memory to
// warpgroup 1, which computes O[:, 256:512] += P V. Each warpgroup then holds a 64 x 256 f32
// accumulator (128 registers a thread), which is what makes a 512-wide value fit. The latent
// tile serves as K (all 9 panels, K-major) and V (panels 0-7, MN-major) without a copy.
// Loads, one tile ahead (two 72 KB stages + 72 KB of Q: 226 KB, one block per SM): with a
// latent map (map.rows > 0; TRIPATH_MLA_WGMMA=2 or 3, measured 3% slower than cp.async on the
// H200: the warps wait at the P hand-off and the loop-top barrier, not on loads) thread 0 issues a
// TMA box copy per (cache block, 64-dim panel) of every tile of whole keys below key_hi, landing
// 128-byte-swizzled on the stage's mbarrier; tiles then start on a multiple of map.rows and keys
// before key_lo are masked. The last tile of an item (keys past key_hi zero-filled, so no NaN from
// stale slots reaches P V) and every tile without a map: all 256 threads cp.async, one block-table
// lookup per key per tile, fetched a tile ahead. Built for sm_90a only (traps elsewhere; the
// backend checks). Tests: tests/gpu/test_gpu_mla.cpp (`wgmma_*` cases).
#pragma once

#include <cuda_runtime.h>

#include "common/device_math.cuh"
#include "common/fragment_softmax.cuh"
#include "common/mbarrier.cuh"
#include "common/tma.cuh"
#include "common/wgmma.cuh"
#include "mla/decode_item.cuh"
#include "mla/mla.h"
#include "mla/params.h"

namespace tripath::kernels {

struct MlaWgmmaConfig {
  static constexpr int kM = 64;                      // packed rows per block
  static constexpr int kN = 64;                      // keys per tile
  static constexpr int kThreads = 256;               // two warpgroups
  static constexpr int kChunks = kMlaEntry / 8;      // 72 16-byte chunks per latent row
  static constexpr int kValueHalf = kMlaLatent / 2;  // value dims per warpgroup
  static constexpr int kStages = 2;
  static constexpr uint32_t kBytesQ = uint32_t(kM) * kMlaEntry * 2;
  static constexpr uint32_t kBytesTile = uint32_t(kN) * kMlaEntry * 2;
  static constexpr uint32_t kBytesP = 128 * (kN / 16) * 16;  // P fragments of warpgroup 0
  static constexpr uint32_t kBytesAlpha = 128 * 8;           // a float2 per warpgroup-0 thread
  // + 1024: the tiles start on a 1024-byte boundary (the swizzle period); then the stages'
  // mbarriers.
  static constexpr size_t kSmemBytes =
      1024 + kBytesQ + kStages * kBytesTile + kBytesP + kBytesAlpha + 8 * kStages;
  static_assert(kSmemBytes <= 227 * 1024, "shared memory of one block on sm_90");
};

// Timing probes (launch_mla_decode_wgmma_probe; outputs meaningless): which part of a tile's
// time the loads and the math each take on their own.
enum MlaWgmmaProbe : int {
  kMlaProbeNone = 0,       // the kernel
  kMlaProbeLoadsOnly = 1,  // every tile's loads, waits and barriers; no S, softmax or P V
  kMlaProbeMathOnly = 2,   // the first kStages tiles loaded, then the math on stale stages
  kMlaProbeNoPV = 3,       // as kMathOnly, without the P V products (S, softmax, P hand-off)
};

template <int kProbe>
__global__ void __launch_bounds__(MlaWgmmaConfig::kThreads, 1)
    mla_decode_wgmma_kernel(const __grid_constant__ MlaDecodeParams p,
                            const __grid_constant__ MlaLatentMap map) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Cfg = MlaWgmmaConfig;
  constexpr int kM = Cfg::kM, kN = Cfg::kN, kRC = Cfg::kChunks, kHalf = Cfg::kValueHalf;
  constexpr float kNegInf = -INFINITY;
  using MmaS = wgmma::Mma<kN, bf16>;
  using MmaO = wgmma::Mma<kHalf, bf16>;
  constexpr int kBarP = 1;  // named barrier: P of this tile is in shared memory

  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw_addr = smem_addr(smem_raw);
  const uint32_t pad = ((raw_addr + 1023u) & ~1023u) - raw_addr;
  unsigned char* sQ = smem_raw + pad;
  unsigned char* sT = sQ + Cfg::kBytesQ;
  uint4* sP = reinterpret_cast<uint4*>(sT + Cfg::kStages * Cfg::kBytesTile);  // [kN / 16][128]
  float2* sAlpha = reinterpret_cast<float2*>(sP + (kN / 16) * 128);           // [128]
  uint64_t* full = reinterpret_cast<uint64_t*>(sAlpha + 128);                 // [kStages]
  const uint32_t aQ = raw_addr + pad;
  const uint32_t aT = aQ + Cfg::kBytesQ;

  pdl_wait();  // a programmatic dependent (p.pdl): the cache write before it has finished
  pdl_launch_dependents();
  const MlaDecodeWorkItem it = p.items[blockIdx.x];
  const int tid = threadIdx.x, wg = tid / 128, wt = tid % 128, warp = wt / 32, lane = tid % 32;
  const int H = p.num_heads;
  const MlaItemSpan span = mla_item_span(p, it, kM);

  // Q rows into the swizzled panels (rows past row_end zero-filled).
  mla_load_q_rows<kM, Cfg::kThreads>(p, it, span,
                                     [&](int r, int c) { return sQ + sw128_offset(r, c, kM); });
  // Tile loads: thread t copies key t / 4 of the tile, chunks t % 4 + 4 i; its block-table
  // entry is looked up a tile ahead (next_base). Keys past key_hi are zero-filled (and masked).
  constexpr int kTPK = Cfg::kThreads / kN;
  static_assert(kRC % kTPK == 0, "whole chunks per thread");
  const int my_key = tid / kTPK, my_part = tid % kTPK;
  auto key_base = [&](int first) -> int64_t {
    const int kabs = first + my_key;
    return kabs < span.key_hi ? mla_latent_offset(p, span, kabs) : -1;
  };
  auto load_tile = [&](int stage, int64_t base) {
    unsigned char* dst = sT + stage * Cfg::kBytesTile;
    const bf16* src = static_cast<const bf16*>(p.cache) + (base >= 0 ? base : 0);
#pragma unroll
    for (int i = 0; i < kRC / kTPK; ++i) {
      const int c = my_part + kTPK * i;
      cp_async_16(dst + sw128_offset(my_key, c, kN), src + c * 8, base >= 0);
    }
  };
  // A stage's barrier completes once per use: TMA bytes, or thread 0's plain arrival for a
  // cp.async tile (whose data the loop-top cp.async wait and __syncthreads order).
  const bool tma = map.rows > 0;
  const int tile0 = tma ? span.key_lo - span.key_lo % map.rows : span.key_lo;
  const int num_tiles = span.key_hi > span.key_lo ? (span.key_hi - tile0 + kN - 1) / kN : 0;
  if (tid == 0) {
    for (int st = 0; st < Cfg::kStages; ++st) mbarrier::init(&full[st], 1);
  }
  __syncthreads();
  auto issue_tile = [&](int j, int64_t base) {
    const int stage = j % Cfg::kStages, tile_start = tile0 + j * kN;
    if (kProbe >= kMlaProbeMathOnly && j >= Cfg::kStages) {  // the stage keeps its old tile
      if (tid == 0) mbarrier::arrive(&full[stage]);
      return;
    }
    if (tma && tile_start + kN <= span.key_hi) {
      if (tid == 0) {
        mbarrier::arrive_expect_tx(&full[stage], Cfg::kBytesTile);
        unsigned char* dst = sT + stage * Cfg::kBytesTile;
        for (int r0 = 0; r0 < kN; r0 += map.rows) {
          const int kabs = tile_start + r0;
          const int block = span.table[kabs >> p.log2_block_size];
          const int slot = kabs & (p.block_size - 1);
#pragma unroll
          for (int pk = 0; pk < kMlaEntry / 64; ++pk)
            tma::load_3d(dst + pk * kN * 128 + r0 * 128, &map.map, pk * 64, slot, block,
                         &full[stage]);
        }
      }
    } else {
      load_tile(stage, base);
      if (tid == 0) mbarrier::arrive(&full[stage]);
    }
  };
  if (num_tiles > 0) issue_tile(0, key_base(tile0));
  cp_async_commit();  // Q and tile 0
  int64_t next_base = key_base(tile0 + kN);

  // This thread's two accumulator rows (the same in both warpgroups): 16 warp + lane / 4 + 8 i.
  // limit: the last key the row may see (causal for multi-token requests; padding rows see all).
  int limit[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int gr = it.row_begin + warp * 16 + lane / 4 + 8 * i;
    limit[i] = gr < span.row_end ? min(span.key_hi - 1, span.ctx + gr / H) : span.key_hi - 1;
  }
  // The block's first row has the smallest limit: tiles wholly below it (and at or after key_lo)
  // need no mask.
  const int block_limit = min(span.key_hi - 1, span.ctx + it.row_begin / H);

  float o[kHalf / 2];
#pragma unroll
  for (int i = 0; i < kHalf / 2; ++i) o[i] = 0.0f;
  float s[kN / 2];
#pragma unroll
  for (int i = 0; i < kN / 2; ++i) s[i] = 0.0f;
  float m[2] = {kNegInf, kNegInf}, l[2] = {0.0f, 0.0f};
  uint32_t pa[kN / 16][4];
  // Value panels of this warpgroup: 256 dims = 4 panels of 64, kN * 128 bytes apart.
  const uint32_t v_panel0 = uint32_t(wg) * (kHalf / 64) * kN * 128;

  for (int j = 0; j < num_tiles; ++j) {
    const int st = j % Cfg::kStages;
    const int tile_start = tile0 + j * kN;
    cp_async_wait<0>();
    wgmma::fence_proxy_async();  // this thread's copies, to the async proxy (and again below,
    __syncthreads();             // for everyone's): tile j (if cp.async) and Q have landed for
    wgmma::fence_proxy_async();  // all threads; tile j - 1 and P(j - 1) are no longer read
    if (j + 1 < num_tiles) issue_tile(j + 1, next_base);
    cp_async_commit();
    next_base = key_base(tile_start + 2 * kN);
    mbarrier::wait(&full[st], (j / Cfg::kStages) & 1);  // tile j's TMA bytes
    const uint32_t a_tile = aT + st * Cfg::kBytesTile;
    if constexpr (kProbe == kMlaProbeLoadsOnly) continue;

    float alpha[2];
    if (wg == 0) {
      // S = Q K^T over 576 dims: 9 panels x 4 k-steps of 16 (32 bytes each).
      wgmma::fence_operands(s);
      wgmma::fence();
#pragma unroll
      for (int ks = 0; ks < kMlaEntry / 16; ++ks) {
        const uint64_t da = wgmma::desc_sw128(aQ + (ks / 4) * kM * 128 + (ks % 4) * 32, 16, 1024);
        const uint64_t db =
            wgmma::desc_sw128(a_tile + (ks / 4) * kN * 128 + (ks % 4) * 32, 16, 1024);
        MmaS::ss(s, da, db, ks > 0);
      }
      wgmma::commit();
      wgmma::wait<0>();
      wgmma::fence_operands(s);
      // The mask only on tiles that reach past the block's smallest limit; the softmax scales
      // into base-2 logits inside its exponent FMA.
      if (tile_start < span.key_lo || tile_start + kN - 1 > block_limit) {
#pragma unroll
        for (int nt = 0; nt < kN / 8; ++nt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int key = tile_start + nt * 8 + (lane % 4) * 2 + (e % 2);
            const bool ok = key >= span.key_lo && key <= limit[e / 2];
            s[nt * 4 + e] = ok ? s[nt * 4 + e] : kNegInf;
          }
        }
      }
      fragment_online_softmax<kN>(s, m, l, alpha, p.scale_log2);
      // P as the RS A operand, handed to warpgroup 1 thread for thread: its thread wt holds the
      // same rows.
      fragment_pack_a<bf16, kN>(s, pa);
#pragma unroll
      for (int kk = 0; kk < kN / 16; ++kk) {
        sP[kk * 128 + wt] = make_uint4(pa[kk][0], pa[kk][1], pa[kk][2], pa[kk][3]);
      }
      sAlpha[wt] = make_float2(alpha[0], alpha[1]);
      named_barrier_arrive(kBarP, Cfg::kThreads);
    } else {
      named_barrier_sync(kBarP, Cfg::kThreads);
#pragma unroll
      for (int kk = 0; kk < kN / 16; ++kk) {
        const uint4 v = sP[kk * 128 + wt];
        pa[kk][0] = v.x;
        pa[kk][1] = v.y;
        pa[kk][2] = v.z;
        pa[kk][3] = v.w;
      }
      const float2 a = sAlpha[wt];
      alpha[0] = a.x;
      alpha[1] = a.y;
    }
    // O = diag(alpha) O + P V over this warpgroup's 256 value dims (16 keys per step). Once
    // the row maxima settle alpha is exactly 1: a warp skips its 128 multiplies (as the flash
    // kernel's serial loop does).
    if (!warp_rescale_is_identity(alpha[0], alpha[1])) fragment_scale_rows<kHalf>(o, alpha);
    if constexpr (kProbe == kMlaProbeNoPV) continue;
    wgmma::fence_operands(o);
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < kN / 16; ++kk) {
      const uint64_t db = wgmma::desc_sw128(a_tile + v_panel0 + kk * 16 * 128, kN * 128, 1024);
      MmaO::rs(o, pa[kk], db, 1);
    }
    wgmma::commit();
    wgmma::wait<0>();
    wgmma::fence_operands(o);
  }
  cp_async_wait<0>();

  // Row statistics of warpgroup 0 to warpgroup 1, through the P buffer (the loop's last reads of
  // it are done once every thread passes this barrier).
  float4* sStat = reinterpret_cast<float4*>(sP);  // [128]
  __syncthreads();
  if (wg == 0) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
      l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
    }
    sStat[wt] = make_float4(m[0], m[1], l[0], l[1]);
  }
  __syncthreads();
  if (wg == 1) {
    const float4 a = sStat[wt];
    m[0] = a.x;
    m[1] = a.y;
    l[0] = a.z;
    l[1] = a.w;
  }

  // Epilogue: o / l (times the cache scale), natural LSE; final or partial.
  const int64_t part_rows = int64_t(p.num_tokens) * H;
  const int d0 = wg * kHalf + (lane % 4) * 2;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int lr = warp * 16 + lane / 4 + 8 * i;
    if (it.row_begin + lr >= span.row_end) continue;
    const float inv = l[i] > 0.0f ? p.out_scale / l[i] : 0.0f;
    const float lse = l[i] > 0.0f ? (m[i] + log2f(l[i])) * 0.6931471805599453f : kNegInf;
    const int64_t grow = span.row0 + lr;
    if (it.split < 0) {
      bf16* dst = static_cast<bf16*>(p.out) + grow * kMlaLatent + d0;
#pragma unroll
      for (int dn = 0; dn < kHalf / 8; ++dn) {
        *reinterpret_cast<uint32_t*>(dst + dn * 8) =
            pack2<bf16>(o[dn * 4 + 2 * i] * inv, o[dn * 4 + 2 * i + 1] * inv);
      }
      if (wg == 0 && lane % 4 == 0 && p.lse != nullptr) p.lse[grow] = lse;
    } else {
      const int64_t prow = int64_t(it.split) * part_rows + grow;
      float* dst = p.partial_out + prow * kMlaLatent + d0;
#pragma unroll
      for (int dn = 0; dn < kHalf / 8; ++dn) {
        *reinterpret_cast<float2*>(dst + dn * 8) =
            make_float2(o[dn * 4 + 2 * i] * inv, o[dn * 4 + 2 * i + 1] * inv);
      }
      if (wg == 0 && lane % 4 == 0) p.partial_lse[prow] = lse;
    }
  }
#else
  __trap();  // built without sm_90a: the backend never launches it there
#endif
}

}  // namespace tripath::kernels
