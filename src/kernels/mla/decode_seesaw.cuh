// MLA absorbed decode on Hopper tensor cores for 64 packed rows per block and a bf16 latent
// cache, with the two warpgroups in a "seesaw" (the schedule FlashMLA's 2025 kernel describes):
// the `mla` backend's kernel for 64-row items (TRIPATH_MLA_WGMMA=4, the default: H200 run j3,
// mla-decode-4k at 128 heads 169 against 207 us for decode_wgmma.cuh; 154 us since run k6, with
// the refills at blocks under 64 keys issued by all four warps of a warpgroup).
//
// Why: in decode_wgmma.cuh warpgroup 0 computes every S = Q K^T (53% of the FLOPs) and the
// softmax while warpgroup 1 waits, so the tensor cores idle through each softmax and hand-off
// (H200 probes, run g2: math alone 2.1 us per 64-key tile against ~1.2 us of tensor work).
// Here the tiles go in pairs (j0 = 2t, j1 = 2t + 1) and each warpgroup computes S for one of
// them; O stays split by value dims (warpgroup 0 dims 0..255, warpgroup 1 256..511: 128
// accumulator registers a thread), so each warpgroup multiplies both tiles' P into its half:
//   wg0: softmax(S0) with the running max m -> m0, P0; O_L = a0 O_L + P0 V0_L; hands P0, m0 over
//   wg1: O_R = a0' O_R + P0 V0_R (a0' from its own max and m0); softmax(S1) from m0 -> m1, P1;
//        hands P1, m1 over; O_R = a1 O_R + P1 V1_R
//   wg0: O_L = a1 O_L + P1 V1_L; then S0 of the next pair; wg1: S1 of the next pair.
// While one warpgroup runs its softmax the other's products keep the tensor cores busy. Exact:
// every P and O term is taken against the max in force when it is made and rescaled by every
// later factor, as in the online softmax; rows keep a stale max up to 2^8 (fragment_online_
// softmax's slack) so the factors are almost always 1 and a warp skips the rescale.
// Each warpgroup keeps its own share of the row sums; the epilogue adds the two.
//
// Hand-off: P (as RS A-operand registers) and the row max go through one shared slot per
// thread; thread t of either warpgroup holds the same rows and columns, so a slot is only ever
// read and then rewritten by the same thread of the other side (wg1 reads P0 then writes P1;
// wg0 reads P1 then writes the next P0), ordered by two named barriers.
//
// Loads: TMA box copies per (cache block, 64-dim panel), one mbarrier per stage and panel, two
// stages (tile j in stage j % 2): each panel is refilled by the warpgroup that last reads it, as
// soon as it has:
//   stage j0: panels 0-3 and 8 after wg0's P0 V0_L, panels 4-7 after wg1's P0 V0_R;
//   stage j1: panels 0-3 after wg0's P1 V1_L, panels 4-8 after wg1's P1 V1_R;
// and S waits panel by panel, so its first products start while later panels land. A tile's
// blocks wholly past key_hi are not loaded; the value rows at or past key_hi of an item's last
// tile are zeroed before P V (stale or unwritten slots could hold NaN; their P is 0).
// Q: cp.async by all threads (72 KB), once. Shared memory: Q 72 KB + 2 x 72 KB stages + the
// hand-off slots (9 KB) + 18 mbarriers. Built for sm_90a only (traps elsewhere; the backend
// checks). Tests: tests/gpu/test_gpu_mla.cpp (`mla_seesaw_*` cases).
#pragma once

#include <cuda_runtime.h>

#include "common/device_math.cuh"
#include "common/fragment_softmax.cuh"
#include "common/mbarrier.cuh"
#include "common/tma.cuh"
#include "common/wgmma.cuh"
#include "mla/decode_item.cuh"
#include "mla/decode_seesaw_probe.h"
#include "mla/mla.h"
#include "mla/params.h"

namespace tripath::kernels {

struct MlaSeesawConfig {
  static constexpr int kM = 64;                      // packed rows per block
  static constexpr int kN = 64;                      // keys per tile
  static constexpr int kThreads = 256;               // two warpgroups
  static constexpr int kPanels = kMlaEntry / 64;     // 9 panels of 64 dims per latent row
  static constexpr int kValueHalf = kMlaLatent / 2;  // value dims per warpgroup
  static constexpr int kStages = 2;
  static constexpr uint32_t kPanelBytes = uint32_t(kN) * 128;
  static constexpr uint32_t kBytesQ = uint32_t(kM) * kMlaEntry * 2;
  static constexpr uint32_t kBytesTile = uint32_t(kN) * kMlaEntry * 2;
  static constexpr uint32_t kBytesP = 128 * (kN / 16) * 16;  // a P slot per thread (RS operand)
  static constexpr uint32_t kBytesM = 128 * 8;               // a float2 row max per thread
  // + 1024: the tiles start on a 1024-byte boundary (the swizzle period); then the mbarriers.
  static constexpr size_t kSmemBytes =
      1024 + kBytesQ + kStages * kBytesTile + kBytesP + kBytesM + 8 * kStages * kPanels;
  static_assert(kSmemBytes <= 227 * 1024, "shared memory of one block on sm_90");
};

// kWideIssue (the launch's choice at cache blocks under 64 keys): a refill's boxes are issued by
// all four warps of the warpgroup, not by its warp 0 alone: a warp issues its lanes' TMA copies
// one after another, and at blocks of 16 a tile is 36 boxes (9 at blocks of 64), while the
// warpgroup's next wgmma waits for all four warps (run k6's trace: ~2000 clocks between wg1's
// P1 hand-off and its P1 V1_R, the 16 boxes of panels 4-7; mla-decode-4k 171 -> 154 us).
template <int kProbe, bool kWideIssue = false>
__global__ void __launch_bounds__(MlaSeesawConfig::kThreads, 1)
    mla_decode_seesaw_kernel(const __grid_constant__ MlaDecodeParams p,
                             const __grid_constant__ MlaLatentMap map, uint32_t* trace) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Cfg = MlaSeesawConfig;
  constexpr int kM = Cfg::kM, kN = Cfg::kN, kP = Cfg::kPanels, kHalf = Cfg::kValueHalf;
  constexpr uint32_t kPB = Cfg::kPanelBytes;
  constexpr float kNegInf = -INFINITY;
  using MmaS = wgmma::Mma<kN, bf16>;
  using MmaO = wgmma::Mma<kHalf, bf16>;
  // Named barriers (0 is __syncthreads): P0 / m0 handed to wg1, P1 / m1 handed to wg0, and one
  // per warpgroup for zeroing the last tile's value rows.
  constexpr int kBarP0 = 1, kBarP1 = 2, kBarZero0 = 3;
  // The trace probe's clock stamp of event e of pair t (a no-op in every other instantiation).
  auto stamp = [&](int t, int e) {
    if constexpr (kProbe == kSeesawProbeTrace) {
      uint32_t c;
      asm volatile("mov.u32 %0, %%clock;\n" : "=r"(c));
      if (threadIdx.x % 128 == 0 && blockIdx.x < kSeesawTraceBlocks && t < kSeesawTracePairs)
        trace[((blockIdx.x * 2 + threadIdx.x / 128) * kSeesawTracePairs + t) * kSeesawTraceEvents +
              e] = c;
    }
  };

  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw_addr = smem_addr(smem_raw);
  const uint32_t pad = ((raw_addr + 1023u) & ~1023u) - raw_addr;
  unsigned char* sQ = smem_raw + pad;
  unsigned char* sT = sQ + Cfg::kBytesQ;
  uint4* sP = reinterpret_cast<uint4*>(sT + Cfg::kStages * Cfg::kBytesTile);  // [kN / 16][128]
  float2* sM = reinterpret_cast<float2*>(sP + (kN / 16) * 128);               // [128]
  uint64_t* full = reinterpret_cast<uint64_t*>(sM + 128);  // [kStages][kPanels]
  const uint32_t aQ = raw_addr + pad;
  const uint32_t aT = aQ + Cfg::kBytesQ;

  pdl_wait();  // a programmatic dependent (p.pdl): the cache write before it has finished
  pdl_launch_dependents();
  const MlaDecodeWorkItem it = p.items[blockIdx.x];
  const int tid = threadIdx.x, wg = tid / 128, wt = tid % 128, warp = wt / 32, lane = tid % 32;
  const int H = p.num_heads;
  const MlaItemSpan span = mla_item_span(p, it, kM);

  mla_load_q_rows<kM, Cfg::kThreads>(p, it, span,
                                     [&](int r, int c) { return sQ + sw128_offset(r, c, kM); });
  cp_async_commit();

  // Tiles start on a multiple of the box rows (keys before key_lo masked).
  const int tile0 = span.key_lo - span.key_lo % map.rows;
  const int num_tiles = span.key_hi > span.key_lo ? (span.key_hi - tile0 + kN - 1) / kN : 0;
  if (tid == 0) {
    for (int b = 0; b < Cfg::kStages * kP; ++b) mbarrier::init(&full[b], 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  // Tile j's panels [p0, p1) (and panel 8 if `rope`): the boxes of every cache block with a key
  // below key_hi, each panel counting its bytes on its own barrier. Called by the issuing warps
  // (warp 0, or all four with kWideIssue), each thread issuing some of the (panel, box) copies:
  // at block size 16 a pair's 72 boxes from one thread, each after its own block-table load, took
  // longer than the pair's math (run j2: 266 against 208 us for the plain kernel). A thread always
  // issues the same box of a panel (idx0 % tile_boxes; tile_boxes divides 32), so its block number
  // (`block_of`) is loaded once per tile, ahead.
  const int tile_boxes = kN / map.rows;  // 1, 2, 4 or 8
  // This thread's first (panel, box) index and stride: a lane of warp 0 (lane, 32), or, wide,
  // consecutive indices spread over the four warps (lane * 4 + warp, 128). Both strides are
  // multiples of tile_boxes, so the thread's box within a panel never changes.
  const int idx0 = kWideIssue ? lane * 4 + warp : lane;
  constexpr int kIdxStride = kWideIssue ? 128 : 32;
  const bool issuer = kWideIssue || warp == 0;  // this thread's warp issues refills
  const int my_box = idx0 % tile_boxes;
  auto block_of = [&](int j) {
    const int kabs = tile0 + j * kN + my_box * map.rows;
    return j < num_tiles && kabs < span.key_hi ? span.table[kabs >> p.log2_block_size] : 0;
  };
  auto issue = [&](int j, int block, int p0, int p1, bool rope) {
    const int st = j % Cfg::kStages, tile_start = tile0 + j * kN;
    const int rows = min(kN, span.key_hi - tile_start);  // >= 1
    const int boxes = (rows + map.rows - 1) / map.rows;
    const uint32_t bytes = uint32_t(boxes) * uint32_t(map.rows) * 128u;
    unsigned char* dst = sT + st * Cfg::kBytesTile;
    const int panels = p1 - p0 + (rope ? 1 : 0);
    const int r0 = my_box * map.rows;
    const int slot = (tile_start + r0) & (p.block_size - 1);
    for (int idx = idx0; idx < panels * tile_boxes; idx += kIdxStride) {
      const int pi = idx / tile_boxes;
      const int pk = pi < p1 - p0 ? p0 + pi : kP - 1;
      if (my_box == 0) mbarrier::arrive_expect_tx(&full[st * kP + pk], bytes);
      if (my_box < boxes)
        tma::load_3d(dst + pk * kPB + r0 * 128, &map.map, pk * 64, slot, block,
                     &full[st * kP + pk]);
    }
  };
  auto parity = [](int j) { return uint32_t((j / Cfg::kStages) & 1); };
  if (issuer) {
    if (wg == 0 && num_tiles > 0) issue(0, block_of(0), 0, kP, false);
    if (wg == 1 && num_tiles > 1) issue(1, block_of(1), 0, kP, false);
  }
  cp_async_wait<0>();
  wgmma::fence_proxy_async();  // this thread's Q copies, to the async proxy
  __syncthreads();             // everyone's

  // This thread's two accumulator rows (the same in both warpgroups): 16 warp + lane / 4 + 8 i.
  // limit: the last key the row may see (causal for multi-token requests; padding rows see all).
  int limit[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int gr = it.row_begin + warp * 16 + lane / 4 + 8 * i;
    limit[i] = gr < span.row_end ? min(span.key_hi - 1, span.ctx + gr / H) : span.key_hi - 1;
  }
  const int block_limit = min(span.key_hi - 1, span.ctx + it.row_begin / H);

  float o[kHalf / 2];
#pragma unroll
  for (int i = 0; i < kHalf / 2; ++i) o[i] = 0.0f;
  float s[kN / 2];
#pragma unroll
  for (int i = 0; i < kN / 2; ++i) s[i] = 0.0f;
  float m[2] = {kNegInf, kNegInf}, l[2] = {0.0f, 0.0f};
  // P as the RS operand: this warpgroup's own, or the other's from the slot (one at a time: a
  // second array of 16 registers spilled at the 255-register limit).
  uint32_t pr[kN / 16][4];
  const uint32_t v_panel0 = uint32_t(wg) * (kHalf / 64) * kPB;

  // S = Q K^T of tile j over panels order[i0..i1) (each waited for on its own barrier; S
  // starts from zero at i = 0), as one commit group.
  auto s_gemm = [&](int j, const int (&order)[kP], int i0, int i1) {
    const int st = j % Cfg::kStages;
    const uint32_t a_tile = aT + st * Cfg::kBytesTile;
    // Not between two parts of one S (the fence "defines" s while the first part is in flight:
    // ptxas then serializes every wgmma, C7515).
    if (i0 == 0) wgmma::fence_operands(s);
#pragma unroll
    for (int i = i0; i < i1; ++i) {
      const int pk = order[i];
      mbarrier::wait(&full[st * kP + pk], parity(j));
      if constexpr (kProbe != kSeesawProbeLoadsOnly) {
        wgmma::fence();  // after the wait's branch (else ptxas serializes every wgmma: C7520)
#pragma unroll
        for (int ks = 0; ks < 4; ++ks) {
          const uint64_t da = wgmma::desc_sw128(aQ + pk * kM * 128 + ks * 32, 16, 1024);
          const uint64_t db = wgmma::desc_sw128(a_tile + pk * kPB + ks * 32, 16, 1024);
          MmaS::ss(s, da, db, i > 0 || ks > 0);
        }
      }
    }
    wgmma::commit();
  };
  // O += P V over this warpgroup's value dims of tile j.
  auto pv_gemm = [&](int j, const uint32_t (&a)[kN / 16][4]) {
    if constexpr (kProbe != kSeesawProbeLoadsOnly) {
      const uint32_t a_tile = aT + (j % Cfg::kStages) * Cfg::kBytesTile;
      wgmma::fence_operands(o);
      wgmma::fence();
#pragma unroll
      for (int kk = 0; kk < kN / 16; ++kk) {
        const uint64_t db = wgmma::desc_sw128(a_tile + v_panel0 + kk * 16 * 128, kPB, 1024);
        MmaO::rs(o, a[kk], db, 1);
      }
      wgmma::commit();
    }
  };
  // The mask (keys before key_lo, past a row's limit) on tiles that need it.
  auto mask = [&](int j) {
    const int tile_start = tile0 + j * kN;
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
  };
  // Tile j is the item's last and runs past key_hi: zero this warpgroup's value rows at or past
  // key_hi (after the tile's TMA bytes have landed) before its P V reads them.
  auto zero_tail = [&](int j) {
    const int tile_start = tile0 + j * kN;
    if (tile_start + kN <= span.key_hi) return;
    const int st = j % Cfg::kStages;
#pragma unroll
    for (int pk = 0; pk < kHalf / 64; ++pk)
      mbarrier::wait(&full[st * kP + wg * (kHalf / 64) + pk], parity(j));
    const int valid = span.key_hi - tile_start;
    unsigned char* base = sT + st * Cfg::kBytesTile + v_panel0;
    for (int idx = wt; idx < (kN - valid) * (kHalf / 8); idx += 128) {
      const int r = valid + idx / (kHalf / 8), c = idx % (kHalf / 8);
      *reinterpret_cast<uint4*>(base + sw128_offset(r, c, kN)) = make_uint4(0, 0, 0, 0);
    }
    wgmma::fence_proxy_async();
    named_barrier_sync(kBarZero0 + wg, 128);
  };
  auto base_of = [](float mx) { return mx == kNegInf ? 0.0f : mx; };
  // Tile j's mask and online softmax (S -> P in s; the rescale factors in alpha).
  auto softmax = [&](int j, float (&alpha)[2]) {
    if constexpr (kProbe == kSeesawProbeLoadsOnly) {
      alpha[0] = alpha[1] = 1.0f;
    } else {
      mask(j);
      fragment_online_softmax<kN, 8>(s, m, l, alpha, p.scale_log2);
    }
  };

  constexpr int kOrder0[kP] = {0, 1, 2, 3, 8, 4, 5, 6, 7};  // wg0's S: its own refills first
  constexpr int kOrder1[kP] = {0, 1, 2, 3, 4, 5, 6, 7, 8};
  if (wg == 0 && num_tiles > 0) s_gemm(0, kOrder0, 0, kP);
  if (wg == 1 && num_tiles > 1) s_gemm(1, kOrder1, 0, kP);
  wgmma::wait<0>();
  wgmma::fence_operands(s);

  // One loop per warpgroup (one loop with the warpgroup branch inside made ptxas mix the two
  // sides' wgmma pipelines and serialize every wgmma, C7515).
  if (wg == 0) {
    for (int j0 = 0; j0 < num_tiles; j0 += 2) {
      const int j1 = j0 + 1;
      const bool has1 = j1 < num_tiles;
      const int t = j0 / 2;
      stamp(t, 0);
      // The block numbers of this lane's boxes of the pair's refills (tiles j0 + 2, j1 + 2), loaded
      // now so their latency passes under the softmax.
      const int next0 = issuer ? block_of(j0 + 2) : 0;
      const int next1 = issuer ? block_of(j1 + 2) : 0;
      float alpha[2];
      softmax(j0, alpha);
      stamp(t, 1);
      if (!warp_rescale_is_identity(alpha[0], alpha[1])) fragment_scale_rows<kHalf>(o, alpha);
      fragment_pack_a<bf16, kN>(s, pr);
#pragma unroll
      for (int kk = 0; kk < kN / 16; ++kk)
        sP[kk * 128 + wt] = make_uint4(pr[kk][0], pr[kk][1], pr[kk][2], pr[kk][3]);
      sM[wt] = make_float2(m[0], m[1]);
      named_barrier_arrive(kBarP0, Cfg::kThreads);
      stamp(t, 2);
      zero_tail(j0);
      pv_gemm(j0, pr);
      stamp(t, 3);
      // Stage j0's panels 0-3 (read last by this product) and 8 (by S0) for tile j0 + 2.
      wgmma::wait<0>();
      wgmma::fence_operands(o);
      stamp(t, 4);
      if (issuer && j0 + 2 < num_tiles) issue(j0 + 2, next0, 0, 4, true);
      if (has1) {
        named_barrier_sync(kBarP1, Cfg::kThreads);
        stamp(t, 5);
#pragma unroll
        for (int kk = 0; kk < kN / 16; ++kk) {
          const uint4 v = sP[kk * 128 + wt];
          pr[kk][0] = v.x;
          pr[kk][1] = v.y;
          pr[kk][2] = v.z;
          pr[kk][3] = v.w;
        }
        const float2 m1 = sM[wt];
        alpha[0] = fast_exp2(m[0] - base_of(m1.x));
        alpha[1] = fast_exp2(m[1] - base_of(m1.y));
        m[0] = m1.x;
        m[1] = m1.y;
        l[0] *= alpha[0];
        l[1] *= alpha[1];
        if (!warp_rescale_is_identity(alpha[0], alpha[1])) fragment_scale_rows<kHalf>(o, alpha);
        zero_tail(j1);
        pv_gemm(j1, pr);
        stamp(t, 6);
      }
      if (j0 + 2 < num_tiles) {
        // S of tile j0 + 2: first the panels this warpgroup refilled (0-3, 8), then, once P1 V1_L
        // is done and stage j1's panels 0-3 refilled for tile j1 + 2, the rest (refilled by wg1).
        s_gemm(j0 + 2, kOrder0, 0, 5);
        stamp(t, 7);
        if (has1) {
          wgmma::wait<1>();
          stamp(t, 8);
          if (issuer && j1 + 2 < num_tiles) issue(j1 + 2, next1, 0, 4, false);
        }
        s_gemm(j0 + 2, kOrder0, 5, kP);
        wgmma::wait<0>();  // inside the branch: a wait after it made ptxas serialize (C7515)
        stamp(t, 9);
        wgmma::fence_operands(s);
      } else {
        wgmma::wait<0>();
      }
      wgmma::fence_operands(o);
      wgmma::fence_operands(s);
    }
  } else {
    for (int j0 = 0; j0 < num_tiles; j0 += 2) {
      const int j1 = j0 + 1;
      const bool has1 = j1 < num_tiles;
      const int t = j0 / 2;
      stamp(t, 0);
      // The block numbers of this lane's boxes of the pair's refills (tiles j0 + 2, j1 + 2), loaded
      // now so their latency passes under the softmax.
      const int next0 = issuer ? block_of(j0 + 2) : 0;
      const int next1 = issuer ? block_of(j1 + 2) : 0;
      float alpha[2];
      named_barrier_sync(kBarP0, Cfg::kThreads);
      stamp(t, 1);
#pragma unroll
      for (int kk = 0; kk < kN / 16; ++kk) {
        const uint4 v = sP[kk * 128 + wt];
        pr[kk][0] = v.x;
        pr[kk][1] = v.y;
        pr[kk][2] = v.z;
        pr[kk][3] = v.w;
      }
      const float2 m0 = sM[wt];
      alpha[0] = fast_exp2(m[0] - base_of(m0.x));
      alpha[1] = fast_exp2(m[1] - base_of(m0.y));
      m[0] = m0.x;
      m[1] = m0.y;
      l[0] *= alpha[0];
      l[1] *= alpha[1];
      if (!warp_rescale_is_identity(alpha[0], alpha[1])) fragment_scale_rows<kHalf>(o, alpha);
      zero_tail(j0);
      pv_gemm(j0, pr);
      stamp(t, 2);
      if (has1) {
        softmax(j1, alpha);
        stamp(t, 3);
        // P0 V0_R (it ran under the softmax) is done before P1 takes its registers and O is
        // rescaled (a wait only on the warps that rescale made ptxas serialize, C7515).
        wgmma::wait<0>();
        wgmma::fence_operands(o);
        stamp(t, 4);
        fragment_pack_a<bf16, kN>(s, pr);
        // The slot's P0 was read above (same thread): now P1.
#pragma unroll
        for (int kk = 0; kk < kN / 16; ++kk)
          sP[kk * 128 + wt] = make_uint4(pr[kk][0], pr[kk][1], pr[kk][2], pr[kk][3]);
        sM[wt] = make_float2(m[0], m[1]);
        named_barrier_arrive(kBarP1, Cfg::kThreads);
        stamp(t, 5);
        // Stage j0's panels 4-7 (read last by P0 V0_R) for tile j0 + 2.
        if (issuer && j0 + 2 < num_tiles) issue(j0 + 2, next0, 4, 8, false);
        if (!warp_rescale_is_identity(alpha[0], alpha[1])) fragment_scale_rows<kHalf>(o, alpha);
        zero_tail(j1);
        pv_gemm(j1, pr);
        stamp(t, 6);
        // Stage j1's panels 4-8 (P1 V1_R; S1) for tile j1 + 2.
        wgmma::wait<0>();
        wgmma::fence_operands(o);
        stamp(t, 7);
        if (issuer && j1 + 2 < num_tiles) issue(j1 + 2, next1, 4, 8, true);
        if (j1 + 2 < num_tiles) {
          s_gemm(j1 + 2, kOrder1, 0, kP);
          stamp(t, 8);
          wgmma::wait<0>();
          stamp(t, 9);
          wgmma::fence_operands(s);
        }
      } else {
        wgmma::wait<0>();
        wgmma::fence_operands(o);
      }
    }
  }

  // Row sums: each warpgroup's share over its quad, then the two added (both warpgroups hold
  // the same final max).
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
  }
  float2* sL = reinterpret_cast<float2*>(sP);  // [2][128]
  __syncthreads();  // the loop's last reads of the slots are done
  sL[wg * 128 + wt] = make_float2(l[0], l[1]);
  __syncthreads();
  {
    const float2 other = sL[(1 - wg) * 128 + wt];
    l[0] += other.x;
    l[1] += other.y;
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
