// Hopper flash attention for three_path's prefill and extend paths (sm_90a, wgmma).
//
// Same parameters as the unified kernel (UnifiedParams / UnifiedWorkItem) but 128-row items:
// one thread block = 128 packed query rows (row = token * group + head, so a K/V tile serves the
// whole GQA group) against the keys [kv_begin, kv_end) of one request and KV head, read in place
// from the paged cache. Warp-specialized:
//   - two producer warps gather Q once and K/V tiles (kN keys) through cp.async into the
//     128-byte swizzled layout wgmma reads (64-element panels, 8-row groups 1024 bytes apart),
//     up to 4 stages ahead; K and V have their own barriers per stage, the first half of the
//     producer threads loading K and the second V (FA3's split pipelines): S(j) waits for K(j)
//     alone and K(j)'s stage is refilled once S(j) is done, while P V(j) still reads V(j);
//   - two consumer warpgroups, 64 rows each, run independently (no block-wide barrier in the
//     loop), so one's softmax overlaps the other's tensor-core work:
//       S = Q K^T: wgmma m64 x kN, both operands in shared memory (K-major);
//       online softmax in base 2 on the S registers (scale, soft-cap; causal / window / range
//       masks only on tiles that need them);
//       O += P V: wgmma with P straight from the S registers (the accumulator layout is the A
//       operand layout) and V MN-major from shared memory.
//     Other consumer modes (FlashConsumerMode, three_path's TRIPATH_FLASH_OVERLAP):
//     kWideSerial (=4), this loop on 128-key tiles with a producer warpgroup that hands its
//     registers to the consumers (setmaxnreg); kOverlap (=1), FA3's order inside a warpgroup,
//     S(j + 1) and P V(j) issued back to back and softmax(j + 1) under P V(j); kWide (=2), the
//     same on kWideSerial's shape; kPingPong (=3), kOverlap with the two warpgroups taking
//     turns at issuing; kWidePingPong (=5, three_path's default for head dims <= 128: FA3's
//     whole configuration at head dim 128; H200 prefill-8k 8.28 ms against kWideSerial's 8.80
//     once the loads were spread over the producer warps, run h3); kWidePingPongQReg (=13),
//     kWidePingPong with Q in registers for S (RS wgmma) and a stale row max (the loop runs at
//     the H200's 700 W cap, where fewer shared-memory bytes and instructions per tile pay:
//     1-6% in run i6).
// K/V loads: with tensor maps (kTma; three_path's default, TRIPATH_FLASH_TMA=0 turns it off)
// the producer warps issue a TMA box copy per (cache block, 64-wide panel) for every tile of
// whole keys, a lane per block, each warp a share of the panels (maps.all_warps_issue; else
// the first warp issues them all); on the tiled layout the copy lands already swizzled, since
// its 16-byte chunks are XORed by slot in memory. Without maps, and for the last tile of an
// item, the producer threads gather the tile with cp.async (one block-table lookup per key).
// Any consumer mode takes either.
// Items with split >= 0 write normalized partial
// states (merged by merge_states, which applies sinks); others write the final output, sinks
// and LSE. Semantics match unified_attention.cuh. KV must be the 16-bit q dtype; head dims
// multiples of 64. The backend picks this kernel on compute capability 9.0 only; built without
// sm_90a it traps.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <type_traits>

#include "common/cluster.cuh"
#include "common/device_math.cuh"
#include "common/fragment_softmax.cuh"
#include "common/kv_layout.h"
#include "common/launch_kernel.h"
#include "common/mbarrier.cuh"
#include "common/tma.cuh"
#include "common/wgmma.cuh"
#include "prefill/launch.h"
#include "unified/params.h"

namespace tripath::kernels {

// kWide: FA3's shape for head dims <= 128: a whole producer warpgroup that gives registers
// away (setmaxnreg 40) to the two consumer warpgroups (232 each, instead of the 168 that 320
// threads get), which pays for 128-key tiles: S in 64 registers, P in 32.
template <int D, int DV, bool kWide = false>
struct FlashPrefillConfig {
  static_assert(D % 64 == 0 && DV % 64 == 0, "flash prefill needs 64-multiple head dims");
  static_assert(!kWide || (D == DV && D <= 128), "wide tiles: head dims up to 128");
  static constexpr int kConsumers = 2;                       // warpgroups of 64 rows
  static constexpr int kProducerThreads = kWide ? 128 : 64;  // a warpgroup, or two warps
  static constexpr int kConsumerThreads = 128 * kConsumers;
  static constexpr int kThreads = kConsumerThreads + kProducerThreads;
  static constexpr int kProducerRegs = 40, kConsumerRegs = 232;  // kWide: 128 x 40 + 256 x 232
  static constexpr int kM = 64 * kConsumers;  // packed query rows per block (kFlashPrefillRows)
  static constexpr int kN = kWide ? 128 : flash_prefill_tile_keys(D, DV);  // keys per tile
  static constexpr uint32_t kBytesQ = uint32_t(kM) * D * 2;
  static constexpr uint32_t kBytesK = uint32_t(kN) * D * 2;
  static constexpr uint32_t kBytesV = uint32_t(kN) * DV * 2;
  // Q and the stages in at most 224 KB (+ the alignment pad and barriers: under sm_90's 227 KB
  // per block): 3 stages of 128-key tiles at D = 128, so the producer can refill one while the
  // two warpgroups, out of phase, hold the other two.
  static constexpr uint32_t kTileBudget = 224 * 1024;
  static constexpr int kStagesFit = int((kTileBudget - kBytesQ) / (kBytesK + kBytesV));
  static constexpr int kStages = kStagesFit < 4 ? kStagesFit : 4;
  static_assert(kStages >= 2, "flash prefill: tiles do not fit shared memory");
  static constexpr uint32_t kBytesTiles = kBytesQ + kStages * (kBytesK + kBytesV);
  // + 1024: tiles start on a 1024-byte boundary (the swizzle period); then the mbarriers (K full,
  // V full, K empty, V empty per stage; Q full, Q empty, item full) and two item slots.
  static constexpr size_t kSmemBytes = 1024 + kBytesTiles + 8 * (4 * kStages + 3) + 8;
};

// kPersistent: at most one CTA per SM, each starting on item blockIdx.x and then claiming the
// next unclaimed item of the list (p.item_counter; the first producer thread claims one item
// ahead and hands each to the others through a shared-memory slot): the hardware's greedy
// order, which a static schedule lost to on uneven items (run h2). The stage ring and the Q
// barriers carry on from item to item, so the producer loads the next item's Q and first tiles
// while the consumers finish the last tile and write their output, which a fresh CTA per item
// leaves exposed (launch, Q load, first tile, epilogue).
template <int D, int DV, typename T, bool kTma,
          FlashConsumerMode kMode = FlashConsumerMode::kSerial, bool kPersistent = false>
__global__ void __launch_bounds__(FlashPrefillConfig<D, DV, flash_mode_is_wide(kMode)>::kThreads, 1)
    flash_prefill_kernel(const __grid_constant__ UnifiedParams p,
                         const __grid_constant__ FlashTensorMaps maps) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  // kCluster: CTA pairs of a 2-CTA cluster share the K/V tiles they both read (TMA multicast).
  constexpr bool kCluster = flash_mode_is_cluster(kMode);
  static_assert(!kCluster || kTma, "the cluster modes load by TMA");
  static_assert(!kPersistent || kMode == FlashConsumerMode::kWideSerial ||
                    kMode == FlashConsumerMode::kWidePingPong ||
                    kMode == FlashConsumerMode::kWidePingPongQReg,
                "persistent CTAs: the wide serial and ping-pong loops");
  constexpr bool kMathOnly = kMode == FlashConsumerMode::kProbeMathOnly ||
                             kMode == FlashConsumerMode::kProbeMathOnlyWidePingPong;
  constexpr bool kLoadsOnly = kMode == FlashConsumerMode::kProbeLoadsOnly;
  constexpr bool kOverlap = kMode != FlashConsumerMode::kSerial &&
                            kMode != FlashConsumerMode::kWideSerial &&
                            kMode != FlashConsumerMode::kWideSerialCluster &&
                            kMode != FlashConsumerMode::kProbeMathOnly && !kLoadsOnly;
  constexpr bool kWide = flash_mode_is_wide(kMode);
  // kQReg: S = Q K^T with Q in registers (loaded from the Q tile once per item).
  constexpr bool kQReg = kMode == FlashConsumerMode::kWidePingPongQReg;
  constexpr bool kPingPong = kMode == FlashConsumerMode::kPingPong ||
                             kMode == FlashConsumerMode::kWidePingPong || kQReg ||
                             kMode == FlashConsumerMode::kWidePingPongCluster ||
                             kMode == FlashConsumerMode::kProbeMathOnlyWidePingPong;
  using Cfg = FlashPrefillConfig<D, DV, kWide>;
  constexpr int kM = Cfg::kM, kN = Cfg::kN, kStages = Cfg::kStages;
  constexpr float kNegInf = -INFINITY;
  using MmaS = wgmma::Mma<kN, T>;
  using MmaO = wgmma::Mma<DV, T>;

  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw_addr = smem_addr(smem_raw);
  const uint32_t pad = ((raw_addr + 1023u) & ~1023u) - raw_addr;
  unsigned char* sQ = smem_raw + pad;
  unsigned char* sK = sQ + Cfg::kBytesQ;
  unsigned char* sV = sK + kStages * Cfg::kBytesK;
  // K and V have their own barriers per stage (FA3's split pipelines): S(j) waits for K(j)
  // only, and K(j)'s stage is refilled once S(j) is done, while P V(j) still reads V(j).
  uint64_t* k_full = reinterpret_cast<uint64_t*>(sQ + Cfg::kBytesTiles);  // [kStages]
  uint64_t* v_full = k_full + kStages;                                    // [kStages]
  uint64_t* k_empty = v_full + kStages;                                   // [kStages]
  uint64_t* v_empty = k_empty + kStages;                                  // [kStages]
  uint64_t* q_full = v_empty + kStages;
  uint64_t* q_empty = q_full + 1;  // kPersistent: the consumers are done reading Q
  // kPersistent: item n's index (-1: none left) in item_slot[n % 2], posted on item_full.
  uint64_t* item_full = q_empty + 1;
  int32_t* item_slot = reinterpret_cast<int32_t*>(item_full + 1);
  const uint32_t aQ = raw_addr + pad;
  const uint32_t aK = aQ + Cfg::kBytesQ;
  const uint32_t aV = aK + kStages * Cfg::kBytesK;

  // The cluster modes pad the grid to an even size: the extra CTA has no rows and no tiles.
  const bool real = !kCluster || int(blockIdx.x) < p.num_items;
  UnifiedWorkItem it = p.items[real ? blockIdx.x : 0];
  const int tid = threadIdx.x;
  const int rpt = p.rows_per_token;
  // An item's key range and tiles: [key_lo, key_hi), tiles from tile0 (TMA copies whole cache
  // blocks, or kN-key pieces of bigger ones: tiles then start on a multiple of maps.rows, and
  // the keys before key_lo in the first tile are masked); the first n_tma tiles hold only whole
  // keys below key_hi and come by TMA (async proxy), the last one (and every tile without maps)
  // by cp.async, which zero-fills the keys past key_hi.
  struct Span {
    int tok0, ctx, row_end, key_lo, key_hi, tile0, num_tiles, n_tma;
  };
  auto span_of = [&](const UnifiedWorkItem& x, bool has_rows) {
    Span v;
    v.tok0 = p.cu_seqlens_q[x.request];
    const int q_len = p.cu_seqlens_q[x.request + 1] - v.tok0;
    v.ctx = p.context_lens[x.request];
    v.row_end = has_rows ? min(x.row_begin + kM, q_len * rpt) : x.row_begin;
    const int first = x.row_begin / rpt, last = (max(v.row_end, x.row_begin + 1) - 1) / rpt;
    v.key_lo = max(p.window_left >= 0 ? max(0, v.ctx + first - p.window_left) : 0, x.kv_begin);
    v.key_hi = has_rows ? min(v.ctx + last + 1, x.kv_end) : v.key_lo;
    v.tile0 = kTma ? v.key_lo - v.key_lo % maps.rows : v.key_lo;
    v.num_tiles = v.key_hi > v.key_lo ? (v.key_hi - v.tile0 + kN - 1) / kN : 0;
    v.n_tma = kTma && v.num_tiles > 0 ? (v.key_hi - v.tile0) / kN : 0;
    return v;
  };
  Span sp = span_of(it, real);
  int tok0 = sp.tok0, ctx = sp.ctx, row_end = sp.row_end;
  int key_lo = sp.key_lo, key_hi = sp.key_hi, tile0 = sp.tile0, num_tiles = sp.num_tiles;
  // kPersistent: makes item idx this CTA's current one (the lambdas below read these by
  // reference).
  auto set_item = [&](int idx) {
    it = p.items[idx];
    sp = span_of(it, true);
    tok0 = sp.tok0, ctx = sp.ctx, row_end = sp.row_end;
    key_lo = sp.key_lo, key_hi = sp.key_hi, tile0 = sp.tile0, num_tiles = sp.num_tiles;
  };
  auto tma_tile = [&](int j) { return kTma && j < sp.n_tma; };
  // kCluster: the first n_shared tiles are the same cache keys for both CTAs of the pair (same
  // request, KV head and tile start); each CTA copies half of their boxes (rank 0 K, rank 1 V)
  // into both. The rest each CTA loads alone.
  uint32_t rank = 0;
  int n_shared = 0;
  if constexpr (kCluster) {
    rank = cluster::ctarank();
    const int peer_idx = int(blockIdx.x ^ 1u);
    const bool peer_real = peer_idx < p.num_items;
    const UnifiedWorkItem pi = p.items[peer_real ? peer_idx : 0];
    const Span ps = span_of(pi, peer_real);
    if (real && peer_real && pi.request == it.request && pi.kv_head == it.kv_head &&
        ps.tile0 == tile0)
      n_shared = min(sp.n_tma, ps.n_tma);
  }

  if (tid == 0) {
    for (int st = 0; st < kStages; ++st) {
      // A full barrier counts the threads of its producer half (K: the first, V: the second).
      mbarrier::init(&k_full[st], Cfg::kProducerThreads / 2);
      mbarrier::init(&v_full[st], Cfg::kProducerThreads / 2);
      // kCluster: per consumer warp, one arrival for this CTA and one for the pair's shared
      // tiles (from the peer's warp) or again its own (a tile this CTA loads alone).
      const int consumers = kCluster ? 2 * Cfg::kConsumerThreads / 32 : Cfg::kConsumerThreads;
      mbarrier::init(&k_empty[st], consumers);
      mbarrier::init(&v_empty[st], consumers);
    }
    mbarrier::init(q_full, Cfg::kProducerThreads);
    mbarrier::init(q_empty, Cfg::kConsumerThreads);
    if constexpr (kPersistent) mbarrier::init(item_full, 1);
    if constexpr (kCluster) cluster::fence_mbarrier_init();
  }
  if constexpr (kCluster) {
    cluster::sync();  // both CTAs' barriers exist before either copies or arrives into the other
  } else {
    __syncthreads();
  }

  if (tid >= Cfg::kConsumerThreads) {
    if constexpr (kWide) {
      asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(Cfg::kProducerRegs));
    }
    // Producers. Q: packed row r -> token (row_begin + r) / rpt, head q_head + (row_begin + r) %
    // rpt.
    const int pt = tid - Cfg::kConsumerThreads;
    constexpr int kChunksQ = D / 8;
    // K/V: the first half of the producer threads loads the K tiles, the second half the V
    // tiles, each half on its own barriers, so K can run up to a ring ahead of V.
    constexpr int kHalf = Cfg::kProducerThreads / 2;
    static_assert(kN % kHalf == 0, "producer half: whole keys per thread");
    const bool is_v = pt >= kHalf;
    const int ht = pt - (is_v ? kHalf : 0);  // thread in the half
    int g = 0;  // tiles this CTA put in the ring for its items before the current one
    // kPersistent: producer thread 0 claims the item after the current one as the current one
    // starts, so the atomic's round trip to L2 hides under the item's loads.
    int claimed = -1;
    for (int n = 0;; ++n) {
      if (n > 0) {  // kPersistent: the next item, once the consumers are done with Q
        // (q_empty also says the consumers have read item n - 2's slot, which n overwrites.)
        mbarrier::wait(q_empty, (n - 1) & 1);
        int idx;
        if (pt == 0) {
          idx = claimed < p.num_items ? claimed : -1;
          item_slot[n & 1] = idx;
          mbarrier::arrive(item_full);  // release: the slot before the arrival
        } else {
          mbarrier::wait(item_full, (n - 1) & 1);
          idx = item_slot[n & 1];
        }
        if (idx < 0) break;
        set_item(idx);
      }
      if constexpr (kPersistent) {
        if (pt == 0) claimed = int(gridDim.x) + atomicAdd(&p.item_counter[0], 1);
      }
      for (int idx = pt; idx < kM * kChunksQ; idx += Cfg::kProducerThreads) {
        const int r = idx / kChunksQ, c = idx % kChunksQ, gr = it.row_begin + r;
        const bool valid = gr < row_end;
        const T* src = static_cast<const T*>(p.q);
        if (valid)
          src += (int64_t(tok0 + gr / rpt) * p.num_q_heads + it.q_head + gr % rpt) * D + c * 8;
        cp_async_16(sQ + sw128_offset(r, c, kM), src, valid);
      }
      mbarrier::arrive_on_cp_async(q_full);

      // One half's tiles of the item (kV: the V half), its barriers and row length fixed at
      // compile time.
      auto load_tiles = [&](auto v_constant) {
        constexpr bool kV = decltype(v_constant)::value;
        uint64_t* h_full = kV ? v_full : k_full;
        uint64_t* h_empty = kV ? v_empty : k_empty;
        constexpr int h_dim = kV ? DV : D;  // this half's row length
        const int32_t* table = p.block_table + int64_t(it.request) * p.max_blocks_per_request;
        for (int j = 0; j < num_tiles; ++j) {
          const int gj = g + j, st = gj % kStages;
          if (gj >= kStages) mbarrier::wait(&h_empty[st], ((gj / kStages) - 1) & 1);
          if (kMathOnly && j >= kStages) {  // probe: the stage keeps its old tile
            mbarrier::arrive(&h_full[st]);
            continue;
          }
          const int tile_start = tile0 + j * kN;
          unsigned char* dst = kV ? sV + st * Cfg::kBytesV : sK + st * Cfg::kBytesK;
          if constexpr (kTma) {
            // A tile of whole blocks below key_hi: box copies per (block, 64-wide panel), the
            // half's barrier counting the bytes. The last tile (keys past key_hi, whose slots may
            // hold anything, even NaN) takes the cp.async path below, which zero-fills them.
            if (tma_tile(j)) {
              // Lane l of an issuing warp copies the box rows [l * rows, l * rows + rows): one
              // cache block (maps.rows >= 8, so a lane has at most one per tile), so a tile's
              // block-table reads go out together instead of one dependent L2 round trip per box.
              // maps.all_warps_issue: every warp of the half takes the half's 64-wide panels c with
              // c % warps == its index, its lane 0 posting their bytes; else the half's first warp
              // issues them all. kCluster: for a tile both CTAs read, rank 0 copies K and rank 1 V
              // into both (multicast); each CTA's half still posts its bytes.
              constexpr int kHalfWarps = kHalf / 32;
              constexpr int panels = h_dim / 64;
              const CUtensorMap* map = kV ? &maps.v : &maps.k;
              const bool spread = !kCluster && maps.all_warps_issue;
              const int w = ht / 32, lane_p = ht % 32;
              const bool shared_tile = kCluster && j < n_shared;
              const bool issues = shared_tile ? (rank == (kV ? 1u : 0u)) : true;
              const int step = spread ? kHalfWarps : 1;
              const int mine =
                  spread ? (panels - w + kHalfWarps - 1) / kHalfWarps : (w == 0 ? panels : 0);
              if (lane_p == 0) {
                if (mine > 0) {
                  mbarrier::arrive_expect_tx(&h_full[st], uint32_t(mine) * kN * 128);
                } else {
                  mbarrier::arrive(&h_full[st]);
                }
              }
              __syncwarp();
              const int r0 = lane_p * maps.rows;
              if (issues && mine > 0 && r0 < kN) {
                const bool nhd = p.layout == kLayoutNHD;
                const int kabs = tile_start + r0;
                const int block = table[kabs >> p.log2_block_size];
                const int slot = kabs & (p.block_size - 1);
                // NHD maps are {dim, kv head, block * block_size + slot}; HND / tiled maps are
                // {dim, slot, block * kv heads + kv head}.
                const int c1 = nhd ? it.kv_head : slot;
                const int c2 =
                    nhd ? block * p.block_size + slot : block * p.num_kv_heads + it.kv_head;
#pragma unroll
                for (int c = w; c < panels; c += step) {
                  if (shared_tile) {
                    tma::load_3d_multicast(dst + c * kN * 128 + r0 * 128, map, c * 64, c1, c2,
                                           &h_full[st], 0x3);
                  } else {
                    tma::load_3d(dst + c * kN * 128 + r0 * 128, map, c * 64, c1, c2, &h_full[st]);
                  }
                }
              }
              if (lane_p != 0) mbarrier::arrive(&h_full[st]);
              continue;
            }
          }
          // cp.async: each thread of the half copies whole rows of kN / kHalf keys (their block
          // lookups first, so they go out together).
          constexpr int kKeysPer = kN / kHalf;
          const T* cache = static_cast<const T*>(kV ? p.v_cache : p.k_cache);
          int64_t block[kKeysPer];
#pragma unroll
          for (int u = 0; u < kKeysPer; ++u) {
            const int kabs = tile_start + ht + u * kHalf;
            block[u] = kabs < key_hi ? table[kabs >> p.log2_block_size] : 0;
          }
#pragma unroll
          for (int u = 0; u < kKeysPer; ++u) {
            const int key = ht + u * kHalf, kabs = tile_start + key;
            const bool valid = kabs < key_hi;
            const int slot = kabs & (p.block_size - 1);
#pragma unroll 4
            for (int c = 0; c < h_dim / 8; ++c) {
              const int64_t off = valid ? kv_chunk_offset(p.layout, block[u], slot, it.kv_head, c,
                                                          p.block_size, p.num_kv_heads, h_dim, 8)
                                        : 0;
              cp_async_16(dst + sw128_offset(key, c, kN), cache + off, valid);
            }
          }
          mbarrier::arrive_on_cp_async(&h_full[st]);
        }
      };
      if (is_v) {
        load_tiles(std::true_type{});
      } else {
        load_tiles(std::false_type{});
      }
      g += num_tiles;
      if (!kPersistent) break;
    }
    asm volatile("cp.async.wait_all;\n" ::: "memory");  // stay until this thread's copies land
    if constexpr (kPersistent) {
      // Every CTA's last claim precedes its count here, so the last CTA counted may zero both
      // counters for the next launch (stream order makes the stores visible to it).
      if (pt == 0) {
        __threadfence();
        if (atomicAdd(&p.item_counter[1], 1) == int(gridDim.x) - 1) {
          atomicExch(&p.item_counter[0], 0);
          atomicExch(&p.item_counter[1], 0);
        }
      }
    }
    if constexpr (kCluster) cluster::sync();  // the consumers' matching sync is at the end
    return;
  }

  // Consumers: warpgroup wg holds packed rows [64 wg, 64 wg + 64) of the block.
  if constexpr (kWide) {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(Cfg::kConsumerRegs));
  }
  const int wg = tid / 128, warp = (tid % 128) / 32, lane = tid % 32;
  const uint32_t aQ_wg = aQ + wg * 64 * 128;
  // This thread's two rows in the current item: their key positions, and the warpgroup's first
  // and last row positions (the masks' bounds).
  int row_pos[2];
  bool row_ok[2];
  int first_pos, last_pos;
  float o[DV / 2];
  float s[kN / 2];
#pragma unroll
  for (int i = 0; i < kN / 2; ++i) s[i] = 0.0f;
  float m[2], l[2];
  auto begin_item = [&] {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int gr = it.row_begin + wg * 64 + warp * 16 + lane / 4 + 8 * i;
      row_ok[i] = gr < row_end;
      row_pos[i] = ctx + (row_ok[i] ? gr / rpt : 0);
      m[i] = kNegInf;
      l[i] = 0.0f;
    }
    const int wg_first = min(it.row_begin + wg * 64, row_end - 1);
    const int wg_last = min(it.row_begin + wg * 64 + 63, row_end - 1);
    first_pos = ctx + wg_first / rpt;
    last_pos = ctx + wg_last / rpt;
#pragma unroll
    for (int i = 0; i < DV / 2; ++i) o[i] = 0.0f;
  };
  int g = 0;  // tiles of this CTA's items before the current one (the ring's position)
  auto stage = [&](int j) { return (g + j) % kStages; };

  // The steps of one tile, shared by the two loop forms below.
  // S = Q K^T of the tile in stage st over D in 16-wide steps: panel ks / 4, 32 bytes per step.
  // fence_operands before each issue pins the accumulators' last plain writes before the wgmma
  // pipeline stage starts.
  // kQReg: this thread's Q fragments (16-dim steps x 4 registers, the RS A operand layout).
  uint32_t qa[kQReg ? D / 16 : 1][4];
  auto load_q_regs = [&] {
    if constexpr (kQReg) {
      // ldmatrix x4 per step: lane l gives row warp * 16 + l % 16 of this warpgroup's block and
      // the 16-byte chunk 2 ks + l / 16, which yields the (rows g, g + 8) x (k, k + 8) fragments.
#pragma unroll
      for (int ks = 0; ks < D / 16; ++ks)
        ldmatrix_x4(qa[ks],
                    sQ + sw128_offset(wg * 64 + warp * 16 + lane % 16, 2 * ks + lane / 16, kM));
    }
  };
  auto issue_s = [&](int st, float(&sx)[kN / 2]) {
    const uint32_t kst = aK + st * Cfg::kBytesK;
    wgmma::fence_operands(sx);
    wgmma::fence();
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
      const uint64_t db = wgmma::desc_sw128(kst + (ks / 4) * kN * 128 + (ks % 4) * 32, 16, 1024);
      if constexpr (kQReg) {
        MmaS::template rs<0>(sx, qa[ks], db, ks > 0);
      } else {
        const uint64_t da =
            wgmma::desc_sw128(aQ_wg + (ks / 4) * kM * 128 + (ks % 4) * 32, 16, 1024);
        MmaS::ss(sx, da, db, ks > 0);
      }
    }
    wgmma::commit();
  };
  // Soft-cap (into base-2 logits) and mask (interior tiles skip it), then the online softmax per
  // row, which applies the plain scale inside its exponent FMA (a row with nothing visible yet
  // keeps m = -inf and weight 0): leaves the probabilities in sx and each row's rescale factor
  // for O in alpha.
  auto scores = [&](int j, float(&sx)[kN / 2], float(&alpha)[2]) {
    const int tile_start = tile0 + j * kN;
    const bool full_tile = tile_start >= key_lo && tile_start + kN <= key_hi &&
                           tile_start + kN - 1 <= first_pos &&
                           (p.window_left < 0 || tile_start >= last_pos - p.window_left);
    // The uniform branches stay outside the element loops: inside, they split every element
    // into its own basic blocks (two branches each in the PTX) and ptxas could not interleave
    // the elements' arithmetic.
    const bool capped = p.softcap > 0.0f;
    if (capped) {
      const float cap_in = p.score_scale / p.softcap, cap_out = p.softcap * 1.4426950408889634f;
#pragma unroll
      for (int e = 0; e < kN / 2; ++e) sx[e] = cap_out * tanhf(sx[e] * cap_in);
    }
    if (!full_tile) {
#pragma unroll
      for (int nt = 0; nt < kN / 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int i = e / 2;
          const int key = tile_start + nt * 8 + (lane % 4) * 2 + (e % 2);
          const bool ok = row_ok[i] && key >= key_lo && key < key_hi && key <= row_pos[i] &&
                          (p.window_left < 0 || key >= row_pos[i] - p.window_left);
          sx[nt * 4 + e] = ok ? sx[nt * 4 + e] : kNegInf;
        }
      }
    }
    // kQReg: rows keep a stale max up to 8 (log2) below the true one, so alpha is 1 on almost
    // every tile and the O rescale below is skipped (less energy per tile: the loop runs at the
    // H200's power cap, run i6).
    fragment_online_softmax<kN, kQReg ? 8 : 0>(sx, m, l, alpha, capped ? 1.0f : p.scale_log2);
  };
  auto rescale_o = [&](const float(&alpha)[2]) { fragment_scale_rows<DV>(o, alpha); };
  // P, packed as the RS A operand.
  uint32_t pa[kN / 16][4];
  auto pack_p = [&](const float(&sx)[kN / 2]) { fragment_pack_a<T, kN>(sx, pa); };
  // O += P V of the tile in stage st: P from registers, 16 keys per step (2048 bytes of V rows
  // per step); V's 64-wide panels sit kN * 128 bytes apart (the descriptor's leading offset).
  auto issue_pv = [&](int st) {
    const uint32_t vst = aV + st * Cfg::kBytesV;
    wgmma::fence_operands(o);
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < kN / 16; ++kk) {
      const uint64_t db = wgmma::desc_sw128(vst + kk * 16 * 128, kN * 128, 1024);
      MmaO::rs(o, pa[kk], db, 1);
    }
    wgmma::commit();
  };
  // Waits for tile j's K (`bars` = k_full) or V (v_full) in its stage.
  auto wait_tile = [&](uint64_t* bars, int j) {
    mbarrier::wait(&bars[stage(j)], ((g + j) / kStages) & 1);
    // cp.async copies are generic-proxy writes that wgmma (async proxy) must be fenced from; a
    // TMA tile is async-proxy already, and its barrier's completion makes it visible (the fence
    // costs a MEMBAR.ALL.CTA per tile).
    if (!tma_tile(j)) wgmma::fence_proxy_async();
  };
  auto wait_k = [&](int j) { wait_tile(k_full, j); };
  auto wait_v = [&](int j) { wait_tile(v_full, j); };

  // This warpgroup is done with tile j's K (`bars` = k_empty) or V (v_empty). kCluster: a
  // warp-level arrival on this CTA's barrier and one on the peer's for a shared tile (the peer's
  // multicast may refill the stage only when both CTAs are done with it), else a second one on
  // its own.
  auto release_tile = [&](uint64_t* bars, int j) {
    if constexpr (kCluster) {
      __syncwarp();
      if (lane == 0) mbarrier::arrive(&bars[stage(j)]);
      if (lane == 1) {
        if (j < n_shared) {
          cluster::arrive_remote(&bars[stage(j)], rank ^ 1u);
        } else {
          mbarrier::arrive(&bars[stage(j)]);
        }
      }
    } else {
      mbarrier::arrive(&bars[stage(j)]);
    }
  };
  auto release_k = [&](int j) { release_tile(k_empty, j); };
  auto release_v = [&](int j) { release_tile(v_empty, j); };
  // kPersistent: this thread is done with the item's Q tile (the producer may load the next
  // item's): with Q in registers (kEarlyQ) once they are loaded, else after its last S GEMM.
  constexpr bool kEarlyQ = kPersistent && kQReg;
  auto release_q = [&] {
    if constexpr (kPersistent && !kEarlyQ) mbarrier::arrive(q_empty);
  };

  float alpha[2];
  // kPingPong's turns (see below) run on across this CTA's items: warpgroup 1 gives warpgroup 0
  // the first turn before the first item, and warpgroup 0 takes one extra turn after the last.
  if constexpr (kPingPong) {
    if (wg == 1) named_barrier_arrive(2, Cfg::kConsumerThreads);
  }
  for (int n = 0;; ++n) {
    if (n > 0) {  // kPersistent: the next item, as the producer claimed it
      mbarrier::wait(item_full, (n - 1) & 1);
      const int idx = item_slot[n & 1];
      if (idx < 0) break;
      set_item(idx);
    }
    begin_item();
    mbarrier::wait(q_full, n & 1);
    wgmma::fence_proxy_async();  // Q: the producers' cp.async (generic-proxy) writes
    load_q_regs();
    if constexpr (kEarlyQ) mbarrier::arrive(q_empty);  // release: after the ldmatrix reads
    if (num_tiles == 0) release_q();
    if constexpr (!kOverlap) {
      // In series: S, softmax, P V; the other warpgroup fills the tensor cores meanwhile.
      for (int j = 0; j < num_tiles; ++j) {
        wait_k(j);
        if constexpr (kLoadsOnly) {  // probe: release the tile untouched
          release_k(j);
          wait_v(j);
          release_v(j);
          continue;
        }
        issue_s(stage(j), s);
        wgmma::wait<0>();
        wgmma::fence_operands(s);
        release_k(j);
        if (j + 1 == num_tiles) release_q();
        scores(j, s, alpha);
        // Once a warp's row maxima settle (most tiles of a long row) alpha is exactly 1 and the
        // 64 multiplies of O change nothing: skipped, warp by warp.
        if (!warp_rescale_is_identity(alpha[0], alpha[1])) rescale_o(alpha);
        pack_p(s);
        wait_v(j);
        issue_pv(stage(j));
        wgmma::wait<0>();
        wgmma::fence_operands(o);
        release_v(j);
      }
    } else {
      // Overlapped, in FA3's order: S(j + 1) and P V(j) go to the tensor cores back to back, and
      // softmax(j + 1) runs while P V(j) does. No plain instruction writes the registers of a
      // wgmma in flight (O is rescaled and P repacked only after P V(j) retires), which keeps
      // ptxas from serializing the wgmmas (C7515).
      if (num_tiles > 0) {
        wait_k(0);
        issue_s(stage(0), s);
        wgmma::wait<0>();
        wgmma::fence_operands(s);
        release_k(0);
        if (num_tiles == 1) release_q();
        scores(0, s, alpha);
        rescale_o(alpha);
        pack_p(s);
      }
      // kPingPong (FA3's warpgroup scheduling): the two warpgroups take turns issuing their pair
      // of GEMMs, so one's softmax runs under the other's GEMMs instead of both contending for
      // the tensor cores at once and then both leaving them idle. Named barrier 2 + w is
      // warpgroup w's turn: it waits there before issuing and then gives the turn to the other.
      // Warpgroup 1 gives warpgroup 0 the first turn, and warpgroup 0 takes one extra turn after
      // the last item, so every barrier sees as many arrivals as waits.
      // (Literal barrier ids at each call: ptxas reserves all 16 barriers for a runtime id.)
      auto my_turn = [&] {
        if (wg == 0) {
          named_barrier_sync(2, Cfg::kConsumerThreads);
        } else {
          named_barrier_sync(3, Cfg::kConsumerThreads);
        }
      };
      auto other_turn = [&] {
        if (wg == 0) {
          named_barrier_arrive(3, Cfg::kConsumerThreads);
        } else {
          named_barrier_arrive(2, Cfg::kConsumerThreads);
        }
      };
      // Every tile but the last has a successor; the last is peeled off so the control flow has
      // no `has next` branches for ptxas to pair up wrongly (it serialized the wgmmas then).
      for (int j = 0; j + 1 < num_tiles; ++j) {
        wait_k(j + 1);
        wait_v(j);
        if constexpr (kPingPong) my_turn();
        issue_s(stage(j + 1), s);
        issue_pv(stage(j));
        if constexpr (kPingPong) other_turn();
        wgmma::wait<1>();  // S(j + 1) has retired; P V(j) may still run
        wgmma::fence_operands(s);
        release_k(j + 1);
        if (j + 2 == num_tiles) release_q();
        scores(j + 1, s, alpha);
        // softmax(j + 1) (its row sums l, >= 0, depend on all of it) stays under P V(j).
        wgmma::anchor_before_wait(l[0] + l[1], aQ);
        wgmma::wait<0>();
        wgmma::fence_operands(o);
        release_v(j);
        if constexpr (kQReg) {
          if (!warp_rescale_is_identity(alpha[0], alpha[1])) rescale_o(alpha);
        } else {
          rescale_o(alpha);
        }
        pack_p(s);
      }
      if (num_tiles > 0) {
        wait_v(num_tiles - 1);
        issue_pv(stage(num_tiles - 1));
        wgmma::wait<0>();
        wgmma::fence_operands(o);
        release_v(num_tiles - 1);  // (kPersistent: the next item's tiles reuse the ring)
      }
    }

#pragma unroll
    for (int i = 0; i < 2; ++i) {
      l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
      l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
    }

    // Each thread writes two adjacent elements per 8-column block of its two rows.
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int gr = it.row_begin + wg * 64 + warp * 16 + lane / 4 + 8 * i;
      if (gr >= row_end) continue;
      const int token = tok0 + gr / rpt, head = it.q_head + gr % rpt;
      const int64_t row = int64_t(token) * p.num_q_heads + head;
      const float lv = l[i];
      float lse = lv > 0.0f ? (m[i] + log2f(lv)) * 0.6931471805599453f : kNegInf;
      float factor = lv > 0.0f ? p.v_scale / lv : 0.0f;
      if (it.split >= 0) {
        const int64_t prow = int64_t(it.split) * p.num_tokens * p.num_q_heads + row;
        float* dst = p.partial_out + prow * DV + (lane % 4) * 2;
#pragma unroll
        for (int dn = 0; dn < DV / 8; ++dn) {
          *reinterpret_cast<float2*>(dst + dn * 8) =
              make_float2(o[dn * 4 + 2 * i] * factor, o[dn * 4 + 2 * i + 1] * factor);
        }
        if (lane % 4 == 0) p.partial_lse[prow] = lse;
        continue;
      }
      if (p.sinks != nullptr) fold_sink(p.sinks[head], lse, factor);
      T* dst = static_cast<T*>(p.out) + row * DV + (lane % 4) * 2;
#pragma unroll
      for (int dn = 0; dn < DV / 8; ++dn) {
        *reinterpret_cast<uint32_t*>(dst + dn * 8) =
            pack2<T>(o[dn * 4 + 2 * i] * factor, o[dn * 4 + 2 * i + 1] * factor);
      }
      if (lane % 4 == 0 && p.lse != nullptr) p.lse[row] = lse;
    }
    g += num_tiles;
    if (!kPersistent) break;
  }  // items
  if constexpr (kPingPong) {
    if (wg == 0) named_barrier_sync(2, Cfg::kConsumerThreads);
  }
  // kCluster: stay until the peer no longer arrives on this CTA's barriers or copies into it.
  if constexpr (kCluster) cluster::sync();
#else
  __trap();  // built without sm_90a: the backend never launches it there
#endif
}

template <int D, int DV, typename T>
cudaError_t launch_flash_prefill_impl(const UnifiedParams& p, const FlashTensorMaps* maps,
                                      FlashConsumerMode mode, cudaStream_t stream) {
  static_assert(FlashPrefillConfig<D, DV>::kM == kFlashPrefillRows, "item rows");
  if (p.num_items == 0) return cudaSuccess;
  // The kernel of consumer mode kMode (`mode_constant`) runs its mode's shape (the wide modes'
  // FlashPrefillConfig, as its launch bounds). `cluster` > 1: the cluster modes' CTA groups, on
  // a grid padded to a multiple of it (the padding CTAs have no item). `persistent`: one CTA per
  // SM at most (the kernel's kPersistent loop over items; one CTA fits an SM).
  auto launch = [&](auto kernel, auto mode_constant, unsigned cluster = 1,
                    bool persistent = false) {
    using Cfg = FlashPrefillConfig<D, DV, flash_mode_is_wide(decltype(mode_constant)::value)>;
    const size_t smem = Cfg::kSmemBytes;
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(smem));
    if (e != cudaSuccess) return e;
    unsigned grid = (unsigned(p.num_items) + cluster - 1) / cluster * cluster;
    if (persistent) {
      int device = 0, sms = 0;
      if ((e = cudaGetDevice(&device)) != cudaSuccess) return e;
      e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
      if (e != cudaSuccess) return e;
      grid = std::min(grid, unsigned(sms));
    }
    return launch_kernel_in_clusters(false, cluster, kernel, dim3(grid), dim3(Cfg::kThreads), smem,
                                     stream, p, maps != nullptr ? *maps : FlashTensorMaps{});
  };
  // One consumer mode, with or without tensor maps.
  // `persistent_constant` (std::bool_constant): the kernel's kPersistent form.
  auto launch_mode_as = [&](auto mode_constant, auto persistent_constant) {
    constexpr FlashConsumerMode kMode = decltype(mode_constant)::value;
    constexpr bool kPersistent = decltype(persistent_constant)::value;
    if (maps != nullptr)
      return launch(flash_prefill_kernel<D, DV, T, true, kMode, kPersistent>, mode_constant, 1,
                    kPersistent);
    return launch(flash_prefill_kernel<D, DV, T, false, kMode, kPersistent>, mode_constant, 1,
                  kPersistent);
  };
  auto launch_mode = [&](auto mode_constant) {
    return launch_mode_as(mode_constant, std::false_type{});
  };
  using M = FlashConsumerMode;
  // The overlapped loops: built for D = DV <= 128 only (D = 256 already runs out of registers,
  // and MLA's 192 / 128 keeps the measured loop).
  if constexpr (D == DV && D <= 128) {
    // The persistent CTAs claim items through the caller's zeroed counters.
    if (flash_mode_is_persistent(mode) && p.item_counter == nullptr) return cudaErrorInvalidValue;
    switch (mode) {
      case M::kOverlap:
        return launch_mode(std::integral_constant<M, M::kOverlap>{});
      case M::kPingPong:
        return launch_mode(std::integral_constant<M, M::kPingPong>{});
      case M::kWide:
        return launch_mode(std::integral_constant<M, M::kWide>{});
      case M::kWidePingPong:
        return launch_mode(std::integral_constant<M, M::kWidePingPong>{});
      case M::kWidePingPongQReg:
        return launch_mode(std::integral_constant<M, M::kWidePingPongQReg>{});
      case M::kWideSerial:
        return launch_mode(std::integral_constant<M, M::kWideSerial>{});
      // The persistent forms of kWideSerial / kWidePingPong / kWidePingPongQReg (with or
      // without tensor maps).
      case M::kWideSerialPersistent:
        return launch_mode_as(std::integral_constant<M, M::kWideSerial>{}, std::true_type{});
      case M::kWidePingPongPersistent:
        return launch_mode_as(std::integral_constant<M, M::kWidePingPong>{}, std::true_type{});
      case M::kWidePingPongQRegPersistent:
        return launch_mode_as(std::integral_constant<M, M::kWidePingPongQReg>{},
                              std::true_type{});
      default:
        break;
    }
    // The probes and the cluster modes, on TMA loads only: without maps a cluster mode runs its
    // plain mode, a probe the default below.
    auto wide_tma = [&](auto mode_constant, unsigned cluster) {
      return launch(flash_prefill_kernel<D, DV, T, true, decltype(mode_constant)::value>,
                    mode_constant, cluster);
    };
    if (maps != nullptr) {
      if (mode == M::kProbeMathOnly)
        return wide_tma(std::integral_constant<M, M::kProbeMathOnly>{}, 1);
      if (mode == M::kProbeLoadsOnly)
        return wide_tma(std::integral_constant<M, M::kProbeLoadsOnly>{}, 1);
      if (mode == M::kProbeMathOnlyWidePingPong)
        return wide_tma(std::integral_constant<M, M::kProbeMathOnlyWidePingPong>{}, 1);
      if (mode == M::kWideSerialCluster)
        return wide_tma(std::integral_constant<M, M::kWideSerialCluster>{}, 2);
      if (mode == M::kWidePingPongCluster)
        return wide_tma(std::integral_constant<M, M::kWidePingPongCluster>{}, 2);
    }
    if (mode == M::kWideSerialCluster)
      return launch_mode(std::integral_constant<M, M::kWideSerial>{});
    if (mode == M::kWidePingPongCluster)
      return launch_mode(std::integral_constant<M, M::kWidePingPong>{});
  }
  return launch_mode(std::integral_constant<M, M::kSerial>{});
}

}  // namespace tripath::kernels
