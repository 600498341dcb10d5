// MLA absorbed decode with the heads packed in the MMA M dimension (the `mla` backend).
//
// What it computes: for the packed rows of one decode request (row = query token * heads +
// head), softmax(scale * q[576] . latent[576]) over the keys of one split, times latent[:512];
// a final output (bf16 + natural LSE) when the request has a single split, else a partial state
// (normalized f32 output + natural LSE) that the merge kernel combines.
//
// Grid: one block per MlaDecodeWorkItem = (request, split, block of kM rows). All heads of a
// token share one latent row, so each 64-key tile of latent is loaded once into shared memory
// and serves all kM rows. bf16: a cp.async ring of 16-key pieces (18 KB each) as deep as shared
// memory allows (11 pieces at kM = 16, 10 at 32, 8 at 64): while one tile (4 pieces) is
// computed, the next 7 / 6 / 4 pieces are in flight; a plain double buffer of 64-key tiles left
// nothing in flight at each tile's wait and ran 16 heads at 30% of the read rate. fp8: tiles land
// raw, two in flight, and are widened once. kM rows per block, 8 warps each: kM = 64 for 64+
// rows (128 heads = 2 blocks per split); 32 or 16 for fewer (16 heads x 1 or 2 tokens), so small
// head counts do not pay for padded MMA rows. Per tile:
//   QK^T  S[kM x 64] over 576 dims on tensor cores (mma.sync m16n8k16); warp = (16-row M tile,
//         group of 8, 16 or 32 keys); Q and the tile are read by ldmatrix from XOR-swizzled rows.
//         16 rows on a bf16 cache instead: warp = (32 keys, 144 of the 576 dims) with its Q
//         fragments in registers; the partial scores are summed in shared memory.
//   softmax  the row max crosses the key groups through shared memory; P goes to shared memory
//         as bf16; the running max, rescale factor and row sum live in shared memory (16 rows,
//         bf16: in the registers of each row's half-warp).
//   PV    O[kM x 512] += P V with V = the tile's first 512 dims; each warp owns 512 / warps
//         value dims of every row (64 dims: 32 to 128 f32 accumulators per thread), which is
//         what keeps a 64 x 512 accumulator in registers without spills.
// Shared memory (kM = 64): Q 72 KB + 8 pieces 144 KB + P 8 KB + stats: 226 KB, one block per SM.
// Specializations: kMTiles {1, 2, 4} x cache {bf16, fp8 e4m3}, q bf16 (decode_packed_*.cu).
// Tests: tests/gpu/test_gpu_mla.cpp; benchmark: `tripath bench --mla-backend=mla`.
#pragma once

#include <cuda_runtime.h>

#include <type_traits>

#include "common/device_math.cuh"
#include "common/launch_kernel.h"
#include "mla/decode_item.cuh"
#include "mla/params.h"

namespace tripath::kernels {

template <int kMTiles, typename CacheT>
struct MlaPackedConfig {
  static constexpr int kM = 16 * kMTiles;  // packed rows per block
  // 8 warps at every height: at 16 rows, 4 warps (one per scheduler, one block per SM) left
  // every ldmatrix / mma / barrier latency exposed (233 us at 16 heads, 1.3 TB/s).
  static constexpr int kWarps = 8;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kN = 64;                       // keys per tile
  static constexpr int kQkGroups = kWarps / kMTiles;  // key groups of the QK^T warps
  static constexpr int kKeysPerWarp = kN / kQkGroups;
  static constexpr int kDimsPerWarp = kMlaLatent / kWarps;
  static constexpr int kRowChunks = kMlaEntry / 8;  // 72 16-byte chunks per bf16 row
  static constexpr bool kFp8 = std::is_same_v<CacheT, fp8>;
  // 16 rows, bf16: QK^T split over the 576 dims (see the kernel), Q held in registers.
  static constexpr bool kSplitDims = kMTiles == 1 && !kFp8;
  static constexpr size_t kSmemQ = size_t(kM) * kMlaEntry * sizeof(bf16);
  static constexpr size_t kSmemTile = size_t(kN) * kMlaEntry * sizeof(bf16);
  static constexpr size_t kSmemP = size_t(kM) * kN * sizeof(bf16);
  // row max and row sum per key group, running max (two parities), rescale factor, row sum.
  static constexpr size_t kSmemStats = size_t(2 * kQkGroups + 4) * kM * sizeof(float);
  // bf16: a ring of kRing pieces of 16 keys, at most 12 (as deep as the rest leaves room for).
  static constexpr int kPieceKeys = 16;
  static constexpr int kTilePieces = kN / kPieceKeys;
  static constexpr size_t kSmemPiece = size_t(kPieceKeys) * kMlaEntry * sizeof(bf16);
  static constexpr size_t kSmemMax = 227 * 1024;
  static constexpr int kRingFit = int((kSmemMax - kSmemQ - kSmemP - kSmemStats) / kSmemPiece);
  static constexpr int kRing = kRingFit > 12 ? 12 : kRingFit;
  // bf16: the piece ring. fp8: one widened tile plus two raw stages of half its size.
  static constexpr size_t kSmemTiles = kFp8 ? 2 * kSmemTile : kRing * kSmemPiece;
  static constexpr size_t kSmemBytes = kSmemQ + kSmemTiles + kSmemP + kSmemStats;
  static_assert(kFp8 || kRing >= 2 * kTilePieces, "the ring holds two tiles at least");
  static_assert((kKeysPerWarp == 8 || kKeysPerWarp % 16 == 0) && kDimsPerWarp % 64 == 0,
                "warp tiles: 8 or 16k keys, whole swizzle groups of value dims");
  static_assert(kSmemBytes <= kSmemMax, "shared memory of one block on sm_90");
};

// Element offset of 16-byte chunk `chunk` of `row` in a tile of rows of kChunks chunks (a
// multiple of 8) whose chunks are XOR-swizzled within each group of 8: the 8 rows an ldmatrix
// reads at one logical chunk land in 8 different bank groups.
template <int kChunks>
__device__ __forceinline__ int mla_swizzle(int row, int chunk) {
  static_assert(kChunks % 8 == 0, "swizzle groups of 8 chunks");
  return row * kChunks * 8 + ((chunk & ~7) | ((chunk ^ row) & 7)) * 8;
}

// kLoadsOnly: a timing probe (launch_mla_decode_packed_loads_only): the same loads, ring waits
// and barriers with the attention math left out; its outputs mean nothing.
template <int kMTiles, typename CacheT, bool kLoadsOnly = false>
__global__ void __launch_bounds__(MlaPackedConfig<kMTiles, CacheT>::kThreads, 1)
    mla_decode_packed_kernel(const __grid_constant__ MlaDecodeParams p) {
  using Cfg = MlaPackedConfig<kMTiles, CacheT>;
  constexpr int kM = Cfg::kM, kN = Cfg::kN, kKW = Cfg::kKeysPerWarp, kDW = Cfg::kDimsPerWarp;
  constexpr int kGroups = Cfg::kQkGroups, kRC = Cfg::kRowChunks;
  constexpr float kNegInf = -INFINITY;

  extern __shared__ __align__(128) unsigned char smem[];
  bf16* sQ = reinterpret_cast<bf16*>(smem);
  unsigned char* sTiles = smem + Cfg::kSmemQ;
  bf16* sP = reinterpret_cast<bf16*>(sTiles + Cfg::kSmemTiles);
  float* sRowMax = reinterpret_cast<float*>(smem + Cfg::kSmemQ + Cfg::kSmemTiles + Cfg::kSmemP);
  float* sRowSum = sRowMax + kGroups * kM;  // [kGroups][kM]
  float* sMax = sRowSum + kGroups * kM;     // [2][kM]: running max of tile parity
  float* sAlpha = sMax + 2 * kM;            // [kM]
  float* sSum = sAlpha + kM;                // [kM]

  pdl_wait();  // a programmatic dependent (p.pdl): the cache write before it has finished
  pdl_launch_dependents();
  const MlaDecodeWorkItem it = p.items[blockIdx.x];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int H = p.num_heads;
  const MlaItemSpan span = mla_item_span(p, it, kM);

  // Q rows (padding rows zero-filled), then the running softmax state.
  mla_load_q_rows<kM, Cfg::kThreads>(p, it, span,
                                     [&](int r, int c) { return sQ + mla_swizzle<kRC>(r, c); });
  if (tid < kM) {
    sMax[tid] = kNegInf;
    sSum[tid] = 0.0f;
  }

  // Loads: each refill covers kN consecutive keys (a tile, or for bf16 kTP pieces of 16 keys
  // from any piece on). fp8: thread t copies key t / 4 of it, raw chunks t % 4 + 4 i. bf16:
  // thread t copies keys k = 16 (t / 64) + (t % 64) / 8 and k + 8 (piece t / 64), chunks
  // t % 8 + 8 i, so one warp instruction reads 4 whole 128-byte lines (4 keys x 8 lanes; 4
  // threads per key read 8 rows x 64 bytes, and copies alone ran at 3.15 TB/s of 3.96). Each
  // key's block-table entry is looked up one refill ahead (`next_base`), so no thread waits on a
  // dependent table load before its copies: with a lookup per 16-byte chunk, every piece's
  // first lookup missed L1 (a new cache block) and the copies of a tile issued after four
  // serial L2 round trips, on every thread's critical path.
  constexpr int kPK = Cfg::kPieceKeys, kTP = Cfg::kTilePieces, kRing = Cfg::kRing;
  constexpr int kTPK = Cfg::kThreads / kN;  // fp8: threads per key
  static_assert(Cfg::kThreads % kN == 0, "whole threads per key");
  static_assert(Cfg::kFp8 || Cfg::kThreads == 64 * kTP, "bf16: 64 threads per piece");
  const int my_key = Cfg::kFp8 ? tid / kTPK : (tid / 64) * kPK + (tid % 64) / 8;
  const int my_part = Cfg::kFp8 ? tid % kTPK : tid % 8;
  // Element offsets of this thread's keys (bf16: k and k + 8) in the refill whose first key is
  // `first`; -1 past key_hi.
  struct KeyBases {
    int64_t k0, k1;
  };
  auto key_base = [&](int first) -> KeyBases {
    auto one = [&](int kabs) -> int64_t {
      return kabs < span.key_hi ? mla_latent_offset(p, span, kabs) : -1;
    };
    return {one(first + my_key), Cfg::kFp8 ? int64_t(-1) : one(first + my_key + 8)};
  };
  // fp8: raw rows (unswizzled) of the tile into raw stage `stage`; keys past key_hi zero-filled.
  auto load_tile = [&](int stage, KeyBases kb) {
    if constexpr (Cfg::kFp8) {
      const int64_t base = kb.k0;
      constexpr int kRawChunks = kMlaEntry / 16;
      static_assert(kRawChunks % kTPK == 0, "whole raw chunks per thread");
      unsigned char* raw = sTiles + Cfg::kSmemTile + size_t(stage) * kN * kMlaEntry;
      const uint8_t* src = static_cast<const uint8_t*>(p.cache) + (base >= 0 ? base : 0);
#pragma unroll
      for (int i = 0; i < kRawChunks / kTPK; ++i) {
        const int c = my_part + kTPK * i;
        cp_async_16(raw + my_key * kMlaEntry + c * 16, src + c * 16, base >= 0);
      }
    }
  };
  // bf16: pieces [q0, q0 + count) (keys key_lo + 16 q ...) into ring slots q % kRing, rows
  // swizzled as in a tile (the swizzle depends on the row mod 8 only), one commit group per
  // piece (empty for pieces past the last tile, and for the pieces other threads copy): the
  // ring's wait counts groups. A warp's keys lie in one piece, so the branch is uniform.
  const int num_tiles = span.key_hi > span.key_lo ? (span.key_hi - span.key_lo + kN - 1) / kN : 0;
  // Chunk c = my_part + 8 i of row r: its swizzle group is i and its slot in the group
  // (my_part ^ r) & 7, the same for rows r and r + 8: one per-thread slot and immediate
  // offsets cover all 18 copies (the general mla_swizzle per copy cost ~8 integer
  // instructions each).
  const int piece_row = my_key % kPK;
  const int slot = ((my_part ^ piece_row) & 7) * 8;
  auto load_pieces = [&](int q0, int count, KeyBases kb) {
    static_assert(kRC % 8 == 0, "whole swizzle groups per row");
    const int mine = tid / 64;  // the piece this thread copies, relative to q0
#pragma unroll 1
    for (int pc = 0; pc < count; ++pc) {
      const int q = q0 + pc;
      if (pc == mine && q < num_tiles * kTP) {
        bf16* dst = reinterpret_cast<bf16*>(sTiles + size_t(q % kRing) * Cfg::kSmemPiece) +
                    piece_row * kMlaEntry + slot;
        const bf16* cache = static_cast<const bf16*>(p.cache) + my_part * 8;
        const bf16* src0 = cache + (kb.k0 >= 0 ? kb.k0 : 0);
        const bf16* src1 = cache + (kb.k1 >= 0 ? kb.k1 : 0);
#pragma unroll
        for (int i = 0; i < kRC / 8; ++i) {
          cp_async_16_l2_128(dst + 64 * i, src0 + 64 * i, kb.k0 >= 0);
          cp_async_16_l2_128(dst + 8 * kMlaEntry + 64 * i, src1 + 64 * i, kb.k1 >= 0);
        }
      }
      cp_async_commit();
    }
  };

  // QK^T warp tile: 16 rows (M tile qm) x kKW keys (group qg).
  const int qm = warp % kMTiles, qg = warp / kMTiles;
  // Every ldmatrix below reads rows r with r % 8 == lane % 8 and logical chunks 2k + delta
  // (k = 0..3 within a swizzle group of 8 chunks), so its swizzled address is a row base, a
  // group offset (64 elements a group) and one of four per-lane offsets: xa for delta =
  // lane / 16 (A operands and the transposed V loads), xb for delta = (lane / 8) % 2 (K).
  int xa[4], xb[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    xa[k] = (((2 * k + lane / 16) ^ lane) & 7) * 8;
    xb[k] = (((2 * k + (lane / 8) % 2) ^ lane) & 7) * 8;
  }
  const int q_row = (qm * 16 + lane % 16) * kMlaEntry;
  const int k_row = ((lane / 16) * 8 + lane % 8) * kMlaEntry;  // within a 16-key group
  const int p_row = (lane % 16) * kN;
  // PV: value dims [d0, d0 + kDW) of this warp; d0 / 8 is a multiple of 8 (a swizzle group).
  const int v_row = (((lane / 8) % 2) * 8 + lane % 8) * kMlaEntry + warp * kDW;  // in a group
  // The last key each score row this thread holds may see (-1: padding row).
  int limit[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int gr = it.row_begin + qm * 16 + lane / 4 + 8 * i;
    limit[i] = gr < span.row_end ? min(span.key_hi - 1, span.ctx + gr / H) : -1;
  }

  float o[kMTiles][kDW / 8][4];
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int dn = 0; dn < kDW / 8; ++dn)
      o[mt][dn][0] = o[mt][dn][1] = o[mt][dn][2] = o[mt][dn][3] = 0.0f;

  // next_base: this thread's keys of the next refill (fp8: tile j + 2; bf16: the pieces from
  // kTP j + kRing - kTP on).
  KeyBases next_base{-1, -1};
  if constexpr (Cfg::kFp8) {
    if (num_tiles > 0) load_tile(0, key_base(span.key_lo));
    cp_async_commit();  // Q and tile 0
    if (num_tiles > 1) load_tile(1, key_base(span.key_lo + kN));
    cp_async_commit();
    next_base = key_base(span.key_lo + 2 * kN);
  } else {
    // The first kRing - kTP pieces, Q in the first group.
    for (int q = 0; q < kRing - kTP; q += kTP) {
      load_pieces(q, min(kTP, kRing - kTP - q), key_base(span.key_lo + q * kPK));
    }
    next_base = key_base(span.key_lo + (kRing - kTP) * kPK);
  }

  // kSplitDims: warp w computes the scores of keys [32 (w / 4), + 32) over dims
  // [144 (w % 4), + 144) (9 of the 36 16-dim k-steps), with those 9 Q fragments in registers,
  // loaded once here; the four dim groups' partial scores meet in shared memory (sS, in Q's
  // place, which nothing reads after this) and the softmax sums them. Before, each of the 8
  // warps re-read all of Q (18 KB) by ldmatrix for its 8 keys every tile: 147 KB of the ~300 KB
  // of shared-memory reads per 64-key tile, where the tile's copies take ~4300 cycles and
  // shared memory serves 128 bytes a cycle.
  constexpr int kSteps = kMlaEntry / 16, kDimGroups = 4, kStepsPerGroup = kSteps / kDimGroups;
  static_assert(kSteps % kDimGroups == 0 && Cfg::kWarps == 2 * kDimGroups,
                "8 warps: 4 dim groups x 2 key halves");
  constexpr int kSRow = kN + 8;  // sS row pitch (floats): float2 stores 2-way, float4 reads free
  static_assert(!Cfg::kSplitDims || size_t(kDimGroups) * 16 * kSRow * 4 <= Cfg::kSmemQ,
                "partial scores fit in Q's space");
  float* sS = reinterpret_cast<float*>(sQ);  // [dim group][16 rows][kSRow]
  uint32_t qa[Cfg::kSplitDims ? kStepsPerGroup : 1][4];
  int kofs[Cfg::kSplitDims ? kStepsPerGroup : 1];
  float m_run = kNegInf, l_run = 0.0f;  // kSplitDims: row tid / 16's running max and sum
  if constexpr (Cfg::kSplitDims) {
    cp_async_wait<kRing - kTP - 1>();  // the first group (Q and piece 0): this thread's copies
    __syncthreads();                   // ... and everyone's
#pragma unroll
    for (int i = 0; i < kStepsPerGroup; ++i) {
      const int ks = kStepsPerGroup * (warp % kDimGroups) + i;
      const int group = (ks / 4) * 64;
      ldmatrix_x4(qa[i], sQ + (lane % 16) * kMlaEntry + group +
                             (((2 * (ks % 4) + lane / 16) ^ lane) & 7) * 8);
      kofs[i] = k_row + group + (((2 * (ks % 4) + (lane / 8) % 2) ^ lane) & 7) * 8;
    }
    // The loop's first barrier orders these reads before any warp writes sS over Q.
  }

  for (int j = 0; j < num_tiles; ++j) {
    const int tile_start = span.key_lo + j * kN;
    const bf16* tile = nullptr;  // fp8: the widened tile
    if constexpr (Cfg::kFp8) {
      cp_async_wait<1>();  // raw tile j has landed; j + 1 may still be in flight
      __syncthreads();     // ... for every thread; PV of tile j - 1 is done with the tile
      const unsigned char* raw = sTiles + Cfg::kSmemTile + size_t(j % 2) * kN * kMlaEntry;
      bf16* wide = reinterpret_cast<bf16*>(sTiles);
      for (int idx = tid; idx < kN * kRC; idx += Cfg::kThreads) {
        const int key = idx / kRC, c = idx % kRC;
        *reinterpret_cast<uint4*>(wide + mla_swizzle<kRC>(key, c)) =
            fp8x8_to<bf16>(*reinterpret_cast<const uint2*>(raw + key * kMlaEntry + c * 8));
      }
      __syncthreads();  // the widened tile is complete; raw stage j % 2 is free
      if (j + 2 < num_tiles) load_tile(j % 2, next_base);
      cp_async_commit();
      next_base = key_base(tile_start + 3 * kN);
      tile = wide;
    } else {
      // Committed so far: kRing - kTP + kTP j groups; pieces up to kTP (j + 1) - 1 must land.
      cp_async_wait<kRing - 2 * kTP>();
      __syncthreads();  // ... for every thread; tile j - 1's pieces are no longer read
      const int q0 = kTP * j + kRing - kTP;
      load_pieces(q0, kTP, next_base);
      next_base = key_base(span.key_lo + (q0 + kTP) * kPK);
    }
    if constexpr (kLoadsOnly) continue;
    // The 16-key group g of tile j (rows swizzled by key mod 8 in both layouts).
    auto keys16 = [&](int g) -> const bf16* {
      if constexpr (Cfg::kFp8) {
        return tile + g * kPK * kMlaEntry;
      } else {
        return reinterpret_cast<const bf16*>(sTiles +
                                             size_t((kTP * j + g) % kRing) * Cfg::kSmemPiece);
      }
    };

    if constexpr (Cfg::kSplitDims) {
      // Partial S for keys [32 kh, + 32) over this warp's 9 k-steps: 4 n-tiles, even and odd
      // k-steps in separate accumulators (chains of 5 and 4).
      const int kh = warp / kDimGroups, dg = warp % kDimGroups;
      float sc[2][4][4] = {};
#pragma unroll
      for (int np = 0; np < 2; ++np) {
        const bf16* kp = keys16(2 * kh + np);
#pragma unroll
        for (int i = 0; i < kStepsPerGroup; ++i) {
          uint32_t b[4];
          ldmatrix_x4(b, kp + kofs[i]);
          mma_16816<bf16>(sc[i % 2][2 * np], qa[i], b[0], b[1]);
          mma_16816<bf16>(sc[i % 2][2 * np + 1], qa[i], b[2], b[3]);
        }
      }
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = lane / 4 + 8 * h, key = 32 * kh + 8 * nt + 2 * (lane % 4);
          *reinterpret_cast<float2*>(sS + (dg * 16 + row) * kSRow + key) =
              make_float2(sc[0][nt][2 * h] + sc[1][nt][2 * h],
                          sc[0][nt][2 * h + 1] + sc[1][nt][2 * h + 1]);
        }
      }
      __syncthreads();
      // Softmax: thread (row r = tid / 16, keys 4 c .. 4 c + 3, c = tid % 16); a row's 16
      // threads are one half-warp, so its max and sum reduce by shuffles, and each of them
      // keeps the row's running max and sum in registers.
      const int r = tid / 16, c = tid % 16;
      float4 v = *reinterpret_cast<const float4*>(sS + r * kSRow + 4 * c);
#pragma unroll
      for (int g = 1; g < kDimGroups; ++g) {
        const float4 x = *reinterpret_cast<const float4*>(sS + (g * 16 + r) * kSRow + 4 * c);
        v.x += x.x;
        v.y += x.y;
        v.z += x.z;
        v.w += x.w;
      }
      const int gr = it.row_begin + r;
      const int lim = gr < span.row_end ? min(span.key_hi - 1, span.ctx + gr / H) : -1;
      float e4[4] = {v.x, v.y, v.z, v.w};
      float tile_max = kNegInf;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        e4[e] = tile_start + 4 * c + e <= lim ? e4[e] * p.scale_log2 : kNegInf;
        tile_max = fmaxf(tile_max, e4[e]);
      }
#pragma unroll
      for (int off = 8; off > 0; off /= 2)
        tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, off));
      const float m_new = fmaxf(m_run, tile_max);
      const float base = m_new == kNegInf ? 0.0f : m_new;
      float sum = 0.0f;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        e4[e] = fast_exp2(e4[e] - base);
        sum += e4[e];
      }
#pragma unroll
      for (int off = 8; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
      const float alpha = fast_exp2(m_run - base);
      l_run = l_run * alpha + sum;
      m_run = m_new;
      *reinterpret_cast<uint2*>(sP + mla_swizzle<kN / 8>(r, c / 2) + (c % 2) * 4) =
          make_uint2(pack2<bf16>(e4[0], e4[1]), pack2<bf16>(e4[2], e4[3]));
      if (c == 0) sAlpha[r] = alpha;
      __syncthreads();
    } else {
    // S = Q K^T for this warp's 16 rows and kKW keys: 9 groups of 4 k-steps (8 chunks, one
    // swizzle group), the per-lane swizzle offsets precomputed (xa, xb).
    float s[kKW / 8][4];
#pragma unroll
    for (int nt = 0; nt < kKW / 8; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
    // 8 keys per warp: k-step k4 of each group accumulates into chain[k4], summed into s[0],
    // so the 36 MMAs form four dependent chains of 9 instead of one of 36, and at 16 rows the
    // group loop is unrolled whole so the next groups' ldmatrix loads issue under this group's
    // MMAs (the MMA and ldmatrix latencies, not their rates, set the QK^T time: 16-row blocks
    // issued 0.33 instructions per cycle per scheduler, long waits on fixed-latency results)
    // and every ldmatrix address is a per-lane base plus an immediate: unrolled by 3, each
    // pass recomputed ~40 addresses (SASS: ~710 -> ~560 instructions per warp per tile, 165 ->
    // 148 registers; run f1: 16 heads 103 -> 95 us). 16 rows now reach this loop on fp8 caches
    // only; bf16 takes the split-dims path above (run f3: 95 -> 88 us).
    float chain[4][4] = {};
#pragma unroll(kMTiles == 1 ? 9 : 1)
    for (int g = 0; g < kMlaEntry / 64; ++g) {
      const bf16* qg_ptr = sQ + q_row + g * 64;
#pragma unroll
      for (int k4 = 0; k4 < 4; ++k4) {
        uint32_t a[4];
        ldmatrix_x4(a, qg_ptr + xa[k4]);
        if constexpr (kKW == 8) {
          // 8 keys (16 rows at 8 warps): half a 16-key group; lanes 0-15 address its rows.
          uint32_t b[2];
          ldmatrix_x2(b, keys16(qg / 2) + (qg % 2) * 8 * kMlaEntry + k_row + g * 64 + xb[k4]);
          mma_16816<bf16>(chain[k4], a, b[0], b[1]);
        } else {
#pragma unroll
          for (int np = 0; np < kKW / 16; ++np) {
            uint32_t b[4];
            ldmatrix_x4(b, keys16(qg * (kKW / 16) + np) + k_row + g * 64 + xb[k4]);
            mma_16816<bf16>(s[2 * np], a, b[0], b[1]);
            mma_16816<bf16>(s[2 * np + 1], a, b[2], b[3]);
          }
        }
      }
    }

    if constexpr (kKW == 8) {
#pragma unroll
      for (int e = 0; e < 4; ++e)
        s[0][e] = (chain[0][e] + chain[1][e]) + (chain[2][e] + chain[3][e]);
    }

    // Mask, scale to base-2 logits, and this warp's row maxima.
    float mx[2] = {kNegInf, kNegInf};
#pragma unroll
    for (int nt = 0; nt < kKW / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = tile_start + qg * kKW + nt * 8 + (lane % 4) * 2 + (e & 1);
        s[nt][e] = key <= limit[e / 2] ? s[nt][e] * p.scale_log2 : kNegInf;
        mx[e / 2] = fmaxf(mx[e / 2], s[nt][e]);
      }
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 1));
      mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 2));
      if (lane % 4 == 0) sRowMax[qg * kM + qm * 16 + lane / 4 + 8 * i] = mx[i];
    }
    __syncthreads();

    // P = exp2(S - running max) to shared memory as bf16; the new max, rescale and row sums.
    const float* max_old = sMax + (j % 2) * kM;
    float* max_new = sMax + ((j + 1) % 2) * kM;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int r = qm * 16 + lane / 4 + 8 * i;
      float tile_max = kNegInf;
#pragma unroll
      for (int g = 0; g < kGroups; ++g) tile_max = fmaxf(tile_max, sRowMax[g * kM + r]);
      const float m_old = max_old[r];
      const float m_new = fmaxf(m_old, tile_max);
      const float base = m_new == kNegInf ? 0.0f : m_new;
      float sum = 0.0f;
#pragma unroll
      for (int nt = 0; nt < kKW / 8; ++nt) {
        s[nt][2 * i] = fast_exp2(s[nt][2 * i] - base);
        s[nt][2 * i + 1] = fast_exp2(s[nt][2 * i + 1] - base);
        sum += s[nt][2 * i] + s[nt][2 * i + 1];
        const int col = qg * kKW + nt * 8 + (lane % 4) * 2;
        *reinterpret_cast<uint32_t*>(sP + mla_swizzle<kN / 8>(r, col / 8) + col % 8) =
            pack2<bf16>(s[nt][2 * i], s[nt][2 * i + 1]);
      }
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      if (lane % 4 == 0) {
        sRowSum[qg * kM + r] = sum;
        if (qg == 0) {
          max_new[r] = m_new;
          sAlpha[r] = fast_exp2(m_old - base);
        }
      }
    }
    __syncthreads();

    // O = diag(alpha) O + P V over this warp's value dims [d0, d0 + kDW) of every row.
    if (tid < kM) {
      float sum = sSum[tid] * sAlpha[tid];
#pragma unroll
      for (int g = 0; g < kGroups; ++g) sum += sRowSum[g * kM + tid];
      sSum[tid] = sum;
    }
    }  // kSplitDims
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
      const float a0 = sAlpha[mt * 16 + lane / 4], a1 = sAlpha[mt * 16 + lane / 4 + 8];
      // Once the row maxima settle (most tiles of a long split) alpha is exactly 1: skip the
      // kDW / 2 multiplies (a warp-uniform vote; the same skip as the decode and flash loops).
      if (warp_rescale_is_identity(a0, a1)) continue;
#pragma unroll
      for (int dn = 0; dn < kDW / 8; ++dn) {
        o[mt][dn][0] *= a0;
        o[mt][dn][1] *= a0;
        o[mt][dn][2] *= a1;
        o[mt][dn][3] *= a1;
      }
    }
    // At 16 rows the 4 key steps are unrolled: their ldmatrix loads issue ahead of the MMAs
    // (8 independent accumulators, chains of 4); taller blocks keep the loop (registers).
#pragma unroll(kMTiles == 1 ? 4 : 1)
    for (int kk = 0; kk < kN / 16; ++kk) {
      uint32_t a[kMTiles][4];
      const int xk = (((2 * kk + lane / 16) ^ lane) & 7) * 8;
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) ldmatrix_x4(a[mt], sP + p_row + mt * 16 * kN + xk);
#pragma unroll
      for (int dp = 0; dp < kDW / 16; ++dp) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, keys16(kk) + v_row + (dp / 4) * 64 + xa[dp % 4]);
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          mma_16816<bf16>(o[mt][2 * dp], a[mt], b[0], b[1]);
          mma_16816<bf16>(o[mt][2 * dp + 1], a[mt], b[2], b[3]);
        }
      }
    }
  }
  if constexpr (Cfg::kSplitDims) {
    if (tid % 16 == 0) {  // the rows' running state, where the epilogue reads it
      sMax[(num_tiles % 2) * kM + tid / 16] = m_run;
      sSum[tid / 16] = l_run;
    }
  }
  cp_async_wait<0>();
  __syncthreads();

  // Epilogue: o / l (times the fp8 scale), natural LSE; final or partial.
  const float* max_final = sMax + (num_tiles % 2) * kM;
  const int64_t part_rows = int64_t(p.num_tokens) * H;
  const int d0 = warp * kDW + (lane % 4) * 2;
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int lr = mt * 16 + lane / 4 + 8 * i;
      if (it.row_begin + lr >= span.row_end) continue;
      const float l = sSum[lr];
      const float inv = l > 0.0f ? p.out_scale / l : 0.0f;
      const float lse = l > 0.0f ? (max_final[lr] + log2f(l)) * 0.6931471805599453f : kNegInf;
      const int64_t grow = span.row0 + lr;
      if (it.split < 0) {
        bf16* dst = static_cast<bf16*>(p.out) + grow * kMlaLatent + d0;
#pragma unroll
        for (int dn = 0; dn < kDW / 8; ++dn) {
          *reinterpret_cast<uint32_t*>(dst + dn * 8) =
              pack2<bf16>(o[mt][dn][2 * i] * inv, o[mt][dn][2 * i + 1] * inv);
        }
        if (warp == 0 && lane % 4 == 0 && p.lse != nullptr) p.lse[grow] = lse;
      } else {
        const int64_t prow = int64_t(it.split) * part_rows + grow;
        float* dst = p.partial_out + prow * kMlaLatent + d0;
#pragma unroll
        for (int dn = 0; dn < kDW / 8; ++dn) {
          *reinterpret_cast<float2*>(dst + dn * 8) =
              make_float2(o[mt][dn][2 * i] * inv, o[mt][dn][2 * i + 1] * inv);
        }
        if (warp == 0 && lane % 4 == 0) p.partial_lse[prow] = lse;
      }
    }
  }
}

template <int kMTiles, typename CacheT, bool kLoadsOnly>
cudaError_t launch_mla_decode_packed_kernel(const MlaDecodeParams& p, cudaStream_t stream) {
  if (p.num_items == 0) return cudaSuccess;
  using Cfg = MlaPackedConfig<kMTiles, CacheT>;
  auto kernel = mla_decode_packed_kernel<kMTiles, CacheT, kLoadsOnly>;
  const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             static_cast<int>(Cfg::kSmemBytes));
  if (e != cudaSuccess) return e;
  return launch_kernel(p.pdl != 0, kernel, dim3(p.num_items), dim3(Cfg::kThreads),
                       Cfg::kSmemBytes, stream, p);
}

template <int kMTiles, typename CacheT>
cudaError_t launch_mla_decode_packed_impl(const MlaDecodeParams& p, cudaStream_t stream) {
  return launch_mla_decode_packed_kernel<kMTiles, CacheT, false>(p, stream);
}

}  // namespace tripath::kernels
