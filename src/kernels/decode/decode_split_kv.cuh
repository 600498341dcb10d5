// Split-KV paged decode: the bandwidth-bound decode path of three_path.
//
// What it computes: for one UnifiedWorkItem (decode request, KV head, key range [kv_begin,
// kv_end), split slot) the attention of up to 16 packed query rows (query token x GQA group,
// row = token * group + head, as the unified kernel packs them) over those keys, straight from
// the paged cache: causal with the context offset (query i sees keys <= context_len + i), left
// window, soft-cap, fp8 k/v scales. A partial item (split >= 0) writes the normalized output and
// natural-log LSE to the merge kernel's partial slot (merge_states applies sinks); an item with
// split -1 writes the final output, sinks and LSE (the request's only split).
//
// Grid: one block per item; kWarps warps (head dim <= 128: 4 for 16-bit KV, 6 for fp8; else 2)
// each own 16 keys of every stage. Stages of kKeys = 16 * kWarps keys stream through shared
// memory in a kStages-deep cp.async ring sized to keep two blocks per SM (bf16 D=128: 3 x 64
// keys, 64 KB in flight per block; fp8 D=128: 3 x 96 keys): one __syncthreads per stage. Each key's
// global row offset is computed once (one block-table lookup per key, a stage ahead, into shared
// memory), not per 16-byte chunk. QK^T and PV on tensor cores (mma.sync m16n8k16, f32 accumulate),
// online softmax in base 2 per warp; the warps' states combine through shared memory at the end.
// fp8 caches land raw and widen in registers (decode_fragments.cuh) with the tensor cores in f16.
// Pair launches (p.cluster_splits = 2): each row set's two splits run as a 2-CTA cluster of wide
// blocks (one per SM, 8 warps, 3 stages of 128 keys); rank 1 stores its normalized rows and LSEs
// into rank 0's shared memory, and after one cluster barrier rank 0 merges them with its own
// (decode_pair_merge): no partial buffers and no merge launch. three_path takes it for even
// batches whose row sets, cut in halves, fit one wave (the 8-query / 1-KV-head shard).
//
// Bulk stages (kBulk, the tiled layout's default on sm_90; DecodeConfig): warp 0 copies each
// stage as one cp.async.bulk per run of a cache block's keys, counted on the slot's mbarrier;
// measured 1-4% faster than cp.async on every decode shape (perf-notes, runs w2-w4, H100).
//
// Fused cache write (p.new_k, p.new_v: three_path's default): the block whose keys hold a new
// token's row stores it into the cache (as the cache-write kernel would) before its copies read
// it, so a decode step needs no cache-write launch.
//
// Block lists (p.block_items, decode segments): a block runs its pieces in turn. With an fp8
// cache, while one streams, the next one's item, lengths and first stages' block-table entries
// are copied into shared memory (cp.async), so a piece boundary waits for one global round trip
// (its K/V) instead of four.
//
// Specializations: head dim x q dtype (bf16, f16) x KV dtype (q dtype, fp8 e4m3), generated from
// the unified table in src/kernels/CMakeLists.txt. Tests: tests/gpu/test_gpu_decode.cpp (also
// its opt-in timing test, TRIPATH_DECODE_BENCH=1).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "common/cluster.cuh"
#include "common/device_math.cuh"
#include "common/kv_layout.h"
#include "common/launch_kernel.h"
#include "common/mbarrier.cuh"
#include "common/tma.cuh"
#include "common/wgmma.cuh"
#include "decode/decode_cache_write.cuh"
#include "decode/decode_fragments.cuh"
#include "decode/decode_pair_merge.cuh"
#include "decode/launch.h"
#include "unified/params.h"

namespace tripath::kernels {

// kWide = 8: one block per SM of 8 warps, the whole shared memory its ring (bf16 D = 128: 3
// stages of 128 keys, 139 KB in flight, as two 4-warp blocks of 3 x 64 keys hold; 6 warps in 4
// stages of 96 keys, 156 KB, measured the same: run n4). The pair launches take it: a batch
// whose row sets, cut in halves, fit one wave at one block per SM needs each block to stream
// twice the bytes of a two-per-SM block.
// kBulk: the tiled layout's pages land by bulk copies (cp.async.bulk, sm_90), one per run of a
// page's keys in a stage, issued by one warp and counted on a per-slot mbarrier, instead of a
// 16-byte cp.async per chunk from every thread. Rows land as the cache stores them (D elements,
// no padding), chunks swizzled by key (tiled_chunk_of), which the fragments undo (decode_qk's
// `sw`). Caches
// whose rows are whole 8-chunk swizzle groups (16-bit: D % 64 == 0; fp8: D % 128 == 0, opt-in).
template <int D, typename T, typename KvT, int kWide = 0, bool kBulk = false>
struct DecodeConfig {
  static constexpr bool kFp8 = std::is_same_v<KvT, fp8>;
  static_assert(!kBulk || D * sizeof(KvT) % 128 == 0, "bulk stages: rows of 8-chunk groups");
  using MmaT = std::conditional_t<kFp8, fp16, T>;  // fp8 widens exactly into f16
  // fp8 runs 6 warps: its loop is latency-bound (run f2's ncu: 2 warps per scheduler, 0.40
  // issued per cycle, "wait" stalls first), and its halved stage bytes leave shared memory for
  // 96-key stages at two blocks per SM; 16-bit KV keeps 4 (at 97% of copy already). kWide runs
  // 8, the warps two blocks would put on the SM: at 4 warps its one block per SM was bound by
  // the per-stage math's latency (run n1: tp8 decode-4k 47.2 us in ncu against 41.0 for two
  // 4-warp blocks per SM, 32 stages in series instead of 16).
  static constexpr int kWarps = kWide != 0 ? kWide : D <= 128 ? (kFp8 ? 6 : 4) : 2;
  static constexpr int kThreads = 32 * kWarps;
  // 6 warps need <= 170 registers for two blocks per SM; 4 warps fit any count (the bound would
  // change their code: 168 -> 203 registers in ptxas).
  static constexpr int kMinBlocks = kWide != 0 ? 1 : kWarps > 4 ? 2 : 0;
  static constexpr int kKeys = 16 * kWarps;   // keys per stage: 16 per warp
  static constexpr int kPer = kFp8 ? 16 : 8;  // elements per 16-byte chunk
  static constexpr int kChunks = D / kPer;    // 16-byte chunks per K/V row
  // Shared row pitch: 16-bit rows +16 bytes (conflict-free ldmatrix, as unified); fp8 rows
  // padded to 16 mod 32 bytes, which makes the 8 rows of one ldmatrix phase hit 8 bank groups.
  static constexpr int kRowBytes =
      kBulk ? D * int(sizeof(KvT)) : kFp8 ? ((D + 16) % 32 == 16 ? D + 16 : D + 32) : (D + 8) * 2;
  static constexpr int kStageBytes = 2 * kKeys * kRowBytes;  // K rows, then V rows
  static constexpr int kQStride = D + 8;                     // q rows, in elements
  static constexpr int kSmemQ = 16 * kQStride * sizeof(T);
  static constexpr int kSmemQh = kFp8 ? 16 * kQStride * 2 : 0;  // f16 q, permuted (fp8 only)
  static constexpr int kSmemQmul = 16 * sizeof(float);
  // Pair merge (kWide): the peer's normalized rows and LSEs, pushed in by the peer, and this
  // block's LSEs: [16][D] + [16] + [16] floats outside the ring, which the peer may write while
  // this block still streams.
  static constexpr int kSmemPeer = kWide != 0 ? (16 * D + 32) * 4 : 0;
  // Two blocks per SM: 228 KB per SM, 1 KB reserved per block; kWide: the 227 KB one block may
  // have.
  static constexpr int kSmemBudget = kWide != 0 ? 227 * 1024 : 113 * 1024;
  // Block lists (decode segments, never the wide form): the next piece's item (8 ints, in one
  // of two slots by parity), its lengths (tok0, tok1, context; 4 ints) and the block-table
  // entries of its first kStages stages, prefetched into shared memory while this piece streams.
  // fp8 only: there it cost one SASS instruction of the stage loop and measured 1.0-1.6% on fp8
  // decode-mixed (run s1, H100); in the 16-bit loop it cost 21 (address arithmetic reshaped,
  // predicates spilled), bf16 decode-mixed did not move and the one-item shapes lost 0.3-1.9%.
  // kBulk: the stages' table entries are per run, loaded by warp 0 (no per-key prefetch).
  static constexpr bool kLists = kWide == 0 && kFp8 && !kBulk;
  static constexpr int kNextItems = 2 * 8;  // two item slots of 8 ints
  static constexpr int kNextLens = 4;       // tok0, tok1, context, padding
  static constexpr int kNextFixed = kLists ? (kNextItems + kNextLens) * 4 : 0;
  static constexpr int kNextPerStage = kLists ? kKeys * 4 : 0;
  // Per stage: the keys' row offsets (s_kb), or with kBulk one mbarrier (8 bytes).
  static constexpr int kMetaPerStage = kBulk ? 8 : kKeys * 8;
  static constexpr int kStagesFit =
      (kSmemBudget - kSmemQ - kSmemQh - kSmemQmul - kSmemPeer - kNextFixed) /
      (kStageBytes + kMetaPerStage + kNextPerStage);
  static constexpr int kStages = kStagesFit > 6 ? 6 : kStagesFit;
  static_assert(kStages >= 2, "a stage ring of two at least");
  static constexpr int kSmemKV = kStages * kStageBytes;
  // The end-of-block combine reuses the stage ring: per warp 16 rows x (D + 8) floats, m, l.
  static constexpr int kReduceStride = D + 8;
  static constexpr int kSmemReduce = kWarps * 16 * (kReduceStride + 2) * 4;
  static constexpr int kOffQ = kSmemKV > kSmemReduce ? kSmemKV : kSmemReduce;
  static constexpr int kOffQh = kOffQ + kSmemQ;
  static constexpr int kOffKB = kOffQh + kSmemQh;  // s_kb, or kBulk's mbarriers
  // Rounded to 16 bytes: the pair form's peer buffer further on takes 16-byte copies and stores.
  static constexpr int kSmemMeta = (kStages * kMetaPerStage + 15) / 16 * 16;
  static constexpr int kOffQmul = kOffKB + kSmemMeta;
  static constexpr int kOffNext = kOffQmul + kSmemQmul;  // item, lengths, then the entries
  static constexpr int kSmemNext = kNextFixed + kStages * kNextPerStage;
  static constexpr int kOffPeer = kOffNext + kSmemNext;
  static constexpr int kSmemBytes = kOffPeer + kSmemPeer;
  static_assert(kOffPeer % 16 == 0, "16-byte copies and stores into the peer buffer");
  static constexpr bool kQInRegs = D <= 128;  // D/16 x 4 registers of q fragments
  static_assert(D % 16 == 0, "head dim a multiple of 16");
  static_assert(kSmemBytes <= kSmemBudget, "two blocks per SM (kWide: one)");
};

// First key of stage 0 for keys [lo, end): the stages end at `end`, so a range that is not a
// whole number of kKeys-key stages starts with the partial one (at or below lo). Written to take
// the partial stage's round trip off the end; run o3 measured it no cheaper first than last (a
// partial stage costs a round trip wherever it sits: launch.h's pair notes), and the figures
// the same as stages from lo (decode-4k 139, decode-mixed 174, decode-long 523 us).
__device__ __forceinline__ int stage_origin(int lo, int end, int keys) {
  return end - (end - lo + keys - 1) / keys * keys;
}

// Physical 16-byte chunk of logical chunk c in a key row (the tiled layout swizzles them).
__device__ __forceinline__ int decode_phys_chunk(int layout, int c, int slot, int chunks) {
  return layout == kLayoutTiled ? tiled_chunk_of(c, slot, chunks) : c;
}

// kWrite: the fused cache write (p.new_k set) compiled in. A launch without new rows takes the
// form without it, whose code is the reading kernel's as it was before the write existed; with it
// beside the loop ptxas lays the stage loop out longer (sm_90a, D = 128: bf16 713 SASS
// instructions against 703, fp8 721 against 698).
// kBulk: the tiled layout's stages by bulk copies (DecodeConfig); launched on sm_90 only.
template <int D, typename T, typename KvT, int kWide, bool kWrite, bool kBulk>
__global__ void __launch_bounds__(DecodeConfig<D, T, KvT, kWide>::kThreads,
                                  DecodeConfig<D, T, KvT, kWide>::kMinBlocks)
    paged_decode_split_kv_kernel(const __grid_constant__ UnifiedParams p) {
  using Cfg = DecodeConfig<D, T, KvT, kWide, kBulk>;
  using MmaT = typename Cfg::MmaT;
  constexpr int kThreads = Cfg::kThreads, kKeys = Cfg::kKeys, kStages = Cfg::kStages;
  constexpr int kRowBytes = Cfg::kRowBytes, kChunks = Cfg::kChunks, kPer = Cfg::kPer;
  constexpr int kQStride = Cfg::kQStride;
  constexpr bool kFp8 = Cfg::kFp8;
  constexpr float kNegInf = -INFINITY;
  constexpr float kLog2e = 1.4426950408889634f;

  extern __shared__ __align__(128) unsigned char smem[];
  unsigned char* s_kv = smem;
  T* s_q = reinterpret_cast<T*>(smem + Cfg::kOffQ);
  fp16* s_qh = reinterpret_cast<fp16*>(smem + Cfg::kOffQh);
  int64_t* s_kb = reinterpret_cast<int64_t*>(smem + Cfg::kOffKB);  // [kStages][kKeys]
  float* s_qmul = reinterpret_cast<float*>(smem + Cfg::kOffQmul);
  // Block lists: piece i's item in s_items[i % 2] (copied with piece i - 1's q), its lengths in
  // s_lens[0..2] and its first stages' table entries in s_next_blocks (by stage key, as s_kb),
  // both copied once piece i - 1's item has landed.
  int32_t* s_items = reinterpret_cast<int32_t*>(smem + Cfg::kOffNext);  // [2][8]
  int32_t* s_lens = s_items + Cfg::kNextItems;                            // [4]
  int32_t* s_next_blocks = s_lens + Cfg::kNextLens;                       // [kStages * kKeys]
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr bool kPairs = kWide != 0;
  constexpr bool kBulkCp = kBulk;
#else
  constexpr bool kPairs = false;  // the host launches the wide form on sm_90 only
  constexpr bool kBulkCp = false;  // and the bulk form
#endif
  if constexpr (kBulk && !kBulkCp) __trap();
  [[maybe_unused]] uint32_t rank = 0;
  if constexpr (kPairs) rank = cluster::ctarank();
  // kBulk: stage slot st's copies count on s_full[st]; bit st of full_phase is the parity its
  // next wait expects (it carries over a block's items: each waits for every stage it issues).
  [[maybe_unused]] uint64_t* s_full = reinterpret_cast<uint64_t*>(smem + Cfg::kOffKB);
  [[maybe_unused]] uint32_t full_phase = 0;
  if constexpr (kBulkCp) {
    if (threadIdx.x == 0) {
      for (int st = 0; st < kStages; ++st) mbarrier::init(&s_full[st], 1);
      cluster::fence_mbarrier_init();  // visible to the async proxy (a lone CTA is a cluster)
    }
    __syncthreads();
  }

  // Phase stamps (p.trace, the wide form only): thread 0 of each block.
  [[maybe_unused]] unsigned long long* trace = nullptr;
  if constexpr (kWide != 0) {
    if (p.trace != nullptr && threadIdx.x == 0) trace = p.trace + blockIdx.x * kDecodeTraceSlots;
  }
  auto stamp = [&](int event, int after = 0) {  // `after`: a value the stamp waits for
    if constexpr (kWide != 0) {
      if (trace != nullptr) trace[event] = global_timer_ns(after);
    }
  };
  stamp(0);
  pdl_wait();  // a programmatic dependent (p.pdl): the cache write before it has finished
  pdl_launch_dependents();
  // Items: one per block, or with p.block_items the block's list [block_items[b],
  // block_items[b + 1]) (decode segments: a block streams a run of pieces, each a partial state).
  int item_lo = blockIdx.x, item_hi = blockIdx.x + 1;
  if (p.block_items != nullptr) {
    item_lo = p.block_items[blockIdx.x];
    item_hi = p.block_items[blockIdx.x + 1];
  }
  // A piece boundary would cost four dependent global round trips (item, lengths, table, K/V)
  // while this block's ring is empty; the first three are prefetched during the piece before.
  bool next_ready = false;  // this piece's metadata is in shared memory (uniform over the block)
  for (int item = item_lo; item < item_hi; ++item) {
    // The last item's combine has read the ring this item's copies overwrite (kBulk: and its
    // generic writes there come before the bulk copies, an async-proxy write).
    if (item > item_lo) {
      if constexpr (kBulkCp) wgmma::fence_proxy_async();
      __syncthreads();
    }
    const bool prefetched = Cfg::kLists && next_ready;
    next_ready = false;
    const bool has_next = Cfg::kLists && item + 1 < item_hi;
    const UnifiedWorkItem it =
        prefetched ? *reinterpret_cast<const UnifiedWorkItem*>(s_items + 8 * (item & 1))
                   : p.items[item];
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    stamp(9, it.request);
    const int32_t* table = p.block_table + int64_t(it.request) * p.max_blocks_per_request;
    // Rank 1 of a pair attends a remainder of <= 8 keys past whole stages as a tail
    // (decode_pair_tail) instead of one more stage. It lives in rank 1's peer buffer, which only
    // rank 0's receives pushes into: K rows 0..7, V rows 0..7, 8 zero rows, so the 16-key tile
    // reads finite rows past the tail (their scores masked, their P zero).
    static_assert(kWide == 0 || (kDecodePairTailKeys <= 8 && Cfg::kKeys == kDecodePairStageKeys &&
                                 24 * kRowBytes <= Cfg::kSmemPeer),
                  "the pair tail: 8 keys in the peer buffer, 128-key stages");
    unsigned char* tail_k = smem + Cfg::kOffPeer;
    auto tail_of = [&](int lo) {
      return kPairs && rank == 1 ? decode_pair_tail(lo, it.kv_end) : 0;
    };
    int32_t tail_block = 0;  // the block of tail key tid / kChunks
    // Wide blocks without a window: the first stages' keys follow from kv_begin and kv_end alone,
    // so their block-table entries load now, beside the request's lengths, instead of after them
    // (one dependent global round trip fewer before the first K/V copy of the launch's one wave).
    constexpr int kPre = kWide != 0 && !kBulkCp ? (kStages * kKeys + kThreads - 1) / kThreads : 1;
    int32_t pre_block[kPre];
    // kBulk: lane i of warp 0 copies run i of each stage (its keys in the i-th cache block the
    // stage touches); pre_page[s] is that block's table entry for stage s < kStages.
    [[maybe_unused]] int32_t pre_page[kStages];
    // The page (table index) of this lane's run in stage s of keys [lo, hi) staged from `org`,
    // or -1 for none.
    [[maybe_unused]] auto run_page = [&](int org, int s, int lo, int hi) {
      const int start = org + s * kKeys, a = max(start, lo), b = min(start + kKeys, hi);
      const int page = (a >> p.log2_block_size) + tid;
      return a < b && (page << p.log2_block_size) < b ? page : -1;
    };
    [[maybe_unused]] auto load_pages = [&](int org, int lo, int hi) {
#pragma unroll
      for (int s = 0; s < kStages; ++s) {
        const int page = run_page(org, s, lo, hi);
        pre_page[s] = page >= 0 ? load_global_pinned(table + page) : 0;
      }
    };
    const bool early_table = kWide != 0 && p.window_left < 0;
    if (early_table) {
      const int lo = max(0, it.kv_begin), tail = tail_of(lo);
      const int first = stage_origin(lo + tail, it.kv_end, kKeys);
      if (tid / kChunks < tail)
        tail_block = load_global_pinned(table + ((lo + tid / kChunks) >> p.log2_block_size));
      if constexpr (kBulkCp) {
        if (tid < 32) load_pages(first, lo + tail, it.kv_end);
      } else {
#pragma unroll
        for (int i = 0; i < kPre; ++i) {
          const int idx = tid + i * kThreads, kabs = first + idx;
          pre_block[i] = idx < kStages * kKeys && kabs >= lo && kabs < it.kv_end
                             ? load_global_pinned(table + (kabs >> p.log2_block_size))
                             : 0;
        }
      }
    }
    const int tok0 = prefetched ? s_lens[0] : p.cu_seqlens_q[it.request];
    const int qlen = (prefetched ? s_lens[1] : p.cu_seqlens_q[it.request + 1]) - tok0;
    const int ctx = prefetched ? s_lens[2] : p.context_lens[it.request];
    const int rpt = p.rows_per_token;
    // The trace's stamp 10 waits for the first early table entry too (the array that exists).
    int early0 = 0;
    if (early_table) {
      if constexpr (kBulkCp) early0 = pre_page[0];
      else early0 = pre_block[0];
    }
    stamp(10, ctx + qlen + early0);
    const int row_end = min(it.row_begin + 16, qlen * rpt);
    if (row_end <= it.row_begin) continue;  // no rows: nothing reads this item's slot
    const int t_first = it.row_begin / rpt, t_last = (row_end - 1) / rpt;
    const int window = p.window_left;
    const int key_lo = max(window >= 0 ? max(0, ctx + t_first - window) : 0, it.kv_begin);
    const int key_hi = min(ctx + t_last + 1, it.kv_end);
    // Rank 1's tail is [key_lo, main_lo); the stages cover [main_lo, key_hi) and end at kv_end
    // (stage_origin): a range that is not a whole number of stages starts with its partial stage,
    // whose keys below main_lo are zero-filled and masked.
    const int tail = tail_of(key_lo), main_lo = key_lo + tail;
    if (!early_table && tid / kChunks < tail)
      tail_block = table[(key_lo + tid / kChunks) >> p.log2_block_size];
    const int first = key_hi > main_lo ? stage_origin(main_lo, it.kv_end, kKeys) : main_lo;
    const int num_stages = key_hi > main_lo ? (key_hi - first + kKeys - 1) / kKeys : 0;
    // Keys every row of the item sees: a stage inside [full_lo, full_hi) needs no mask.
    const int full_lo = window >= 0 ? ctx + t_last - window : 0;
    const int full_hi = min(key_hi, ctx + t_first + 1);
    const int bs_mask = p.block_size - 1;
    // The fused cache write: the new keys among [key_lo, key_hi) (key ctx + t is token t's own)
    // go into the cache before a barrier that precedes the copy reading them. Keys of a stage
    // the prologue issues (or of rank 1's tail) are written before the prologue's barrier; later
    // ones after the prologue's copies are issued, off the ramp: the loop's barrier of the
    // iteration that issues their stage comes after.
    [[maybe_unused]] const int new_lo = max(key_lo, ctx);
    [[maybe_unused]] const int new_count = max(0, key_hi - new_lo);
    [[maybe_unused]] const bool write_early =
        new_count > 0 && new_lo < first + (kStages - 1) * kKeys;

    // Q rows (zero-filled past row_end): the first cp.async group.
    {
      const T* q = static_cast<const T*>(p.q);
      constexpr int kQChunks = D / 8;
      for (int idx = tid; idx < 16 * kQChunks; idx += kThreads) {
        const int r = idx / kQChunks, c = idx % kQChunks, gr = it.row_begin + r;
        const bool valid = gr < row_end;
        const T* src =
            valid
                ? q + (int64_t(tok0 + gr / rpt) * p.num_q_heads + it.q_head + gr % rpt) * D + c * 8
                : q;
        cp_async_16(s_q + r * kQStride + c * 8, src, valid);
      }
      // The next piece's item lands with q, in the slot this piece does not read.
      if (has_next && tid < 8) {
        cp_async_4(s_items + 8 * ((item + 1) & 1) + tid,
                   reinterpret_cast<const int32_t*>(p.items + item + 1) + tid);
      }
      cp_async_commit();
    }

    // Element offset of logical chunk 0's row start of key `kabs` (chunk c adds phys(c) * kPer):
    // kv_chunk_offset(chunk c) == key_base + decode_phys_chunk(c) * kPer for every layout.
    auto key_base = [&](int kabs, int32_t block) -> int64_t {
      const int slot = kabs & bs_mask;
      return kv_chunk_offset(p.layout, block, slot, it.kv_head, 0, p.block_size, p.num_kv_heads, D,
                             kPer) -
             int64_t(decode_phys_chunk(p.layout, 0, slot, kChunks)) * kPer;
    };
    // Element offset of chunk c of key `kabs`, whose row starts at `base` (key_base).
    auto chunk_offset = [&](int64_t base, int kabs, int c) -> int64_t {
      return base + int64_t(decode_phys_chunk(p.layout, c, kabs & bs_mask, kChunks)) * kPer;
    };
    [[maybe_unused]] auto write_new_rows = [&] {
      decode_write_new_rows<D, T, KvT>(
          p, it.kv_head, tok0 + (new_lo - ctx), new_lo, new_count, [&](int kabs, int c) {
            return chunk_offset(key_base(kabs, table[kabs >> p.log2_block_size]), kabs, c);
          });
    };
    const KvT* k_cache = static_cast<const KvT*>(p.k_cache);
    const KvT* v_cache = static_cast<const KvT*>(p.v_cache);
    // kBulk: warp 0 issues stage s, lane i the two bulk copies (K, V) of run i: the stage's keys
    // in one cache block, contiguous rows in the tiled layout, from table entry `block`. The V
    // rows no copy fills (outside [main_lo, key_hi)) are zeroed: they meet P = 0, and a stale or
    // never-written row may hold NaN. The copies count on s_full[slot], whose one arrival (lane
    // 0's) comes after the zero stores, so a waiter sees those too.
    [[maybe_unused]] auto issue_bulk = [&](int s, int32_t block) {
      const int slot = s % kStages, start = first + s * kKeys;
      unsigned char* dk = s_kv + slot * Cfg::kStageBytes;
      unsigned char* dv = dk + kKeys * kRowBytes;
      const int lo = max(start, main_lo), hi = min(start + kKeys, key_hi);
      if (lane == 0) mbarrier::expect_tx(&s_full[slot], uint32_t(hi - lo) * 2u * kRowBytes);
      __syncwarp();
      // This lane's run: the keys of [lo, hi) in the stage's lane-th cache block (run_page's).
      const int page = (lo >> p.log2_block_size) + lane;
      const int a = max(lo, page << p.log2_block_size);
      const int b = min(hi, (page + 1) << p.log2_block_size);
      if (a < b) {
        // A tiled row's chunks are in place: its start is the HND row start.
        const int64_t off = kv_chunk_offset(kLayoutHND, block, a & bs_mask, it.kv_head, 0,
                                            p.block_size, p.num_kv_heads, D, kPer);
        const uint32_t bytes = uint32_t(b - a) * kRowBytes;
        tma::bulk_load(dk + (a - start) * kRowBytes, k_cache + off, bytes, &s_full[slot]);
        tma::bulk_load(dv + (a - start) * kRowBytes, v_cache + off, bytes, &s_full[slot]);
      }
      if (lo > start || hi < start + kKeys) {
        for (int u = lane; u < kKeys * kChunks; u += 32) {
          const int r = u / kChunks;
          if (r < lo - start || r >= hi - start) {
            *reinterpret_cast<uint4*>(dv + r * kRowBytes + (u % kChunks) * 16) =
                make_uint4(0u, 0u, 0u, 0u);
          }
        }
        // A later stage's bulk copies (async proxy) rewrite these rows; this warp's generic
        // stores must be ordered before them.
        wgmma::fence_proxy_async();
      }
      __syncwarp();
      if (lane == 0) mbarrier::arrive(&s_full[slot]);
    };
    // kBulk: the first kStages - 1 stages, by warp 0 (lanes hold pre_page).
    [[maybe_unused]] auto issue_bulk_prologue = [&] {
#pragma unroll
      for (int st = 0; st < kStages - 1; ++st) {
        if (st < num_stages) issue_bulk(st, pre_page[st]);
      }
    };
    // kBulk: warp 0 issues the first stages before the block's barrier, unless this item's
    // fused write stores keys of them first (then after it).
    [[maybe_unused]] const bool bulk_early = !(kWrite && write_early);
    if constexpr (kWrite) {
      if (write_early) {
        write_new_rows();
        if constexpr (kBulkCp) tma::fence_proxy_async_global();  // before bulk copies read them
      }
    }
    if constexpr (kBulkCp) {
      if (warp == 0) {
        if (!early_table) load_pages(first, main_lo, key_hi);
        if (bulk_early) issue_bulk_prologue();
      }
    } else if constexpr (kWide != 0) {
#pragma unroll
      for (int i = 0; i < kPre; ++i) {
        const int idx = tid + i * kThreads, kabs = first + idx;
        if (idx < kStages * kKeys && kabs >= key_lo && kabs < key_hi) {
          s_kb[idx] = key_base(kabs, early_table ? pre_block[i] : table[kabs >> p.log2_block_size]);
        }
      }
    } else {
      // Prefetched entries exist without a window only (key_lo then follows from the item alone).
      const bool blocks_ready = prefetched && window < 0;
      for (int idx = tid; idx < kStages * kKeys; idx += kThreads) {
        const int kabs = first + idx;  // stage idx / kKeys, key idx % kKeys
        if (kabs >= key_lo && kabs < key_hi) {
          s_kb[idx] = key_base(kabs, blocks_ready ? s_next_blocks[idx]
                                                  : table[kabs >> p.log2_block_size]);
        }
      }
    }
    __syncthreads();
    stamp(11);

    // Stage s -> ring slot s % kStages; keys outside [main_lo, key_hi) are zero-filled and never
    // read from HBM. (Skipping the partial first stage's keys below main_lo instead, their V rows
    // zeroed by stores, measured 2-3% slower on decode-mixed / decode-long in runs o4-o6 (179-181
    // against 174 us) and is not used.)
    auto issue_stage = [&](int s) {
      const int slot = s % kStages, start = first + s * kKeys;
      const int64_t* kb = s_kb + slot * kKeys;
      unsigned char* dk = s_kv + slot * Cfg::kStageBytes;
      unsigned char* dv = dk + kKeys * kRowBytes;
      constexpr int kTotal = kKeys * kChunks;
#pragma unroll
      for (int i = 0; i < (kTotal + kThreads - 1) / kThreads; ++i) {
        const int idx = tid + i * kThreads;
        if (kTotal % kThreads != 0 && idx >= kTotal) break;
        const int key = idx / kChunks, c = idx % kChunks, kabs = start + key;
        const bool valid = kabs >= main_lo && kabs < key_hi;
        const int64_t off = valid ? chunk_offset(kb[key], kabs, c) : 0;
        if constexpr (D * sizeof(KvT) >= 128) {
          cp_async_16_l2_128(dk + key * kRowBytes + c * 16, k_cache + off, valid);
          cp_async_16_l2_128(dv + key * kRowBytes + c * 16, v_cache + off, valid);
        } else {
          cp_async_16(dk + key * kRowBytes + c * 16, k_cache + off, valid);
          cp_async_16(dv + key * kRowBytes + c * 16, v_cache + off, valid);
        }
      }
    };
    // The tail: copied with stage 0; V rows past it zeroed (they meet P = 0). kBulk: its chunks
    // placed as the stages' bulk copies land theirs (swizzled by key).
    if (tail > 0) {
      const int key = tid / kChunks, c = tid % kChunks, kabs = key_lo + key;
      if (key < tail) {
        const bool valid = kabs < key_hi;
        const int64_t off = valid ? chunk_offset(key_base(kabs, tail_block), kabs, c) : 0;
        const int pc = kBulk ? c ^ (kabs & 7) : c;
        cp_async_16(tail_k + key * kRowBytes + pc * 16, k_cache + off, valid);
        cp_async_16(tail_k + (8 + key) * kRowBytes + pc * 16, v_cache + off, valid);
      }
      for (int idx = tid; idx < (16 - tail) * kChunks; idx += kThreads) {
        *reinterpret_cast<uint4*>(tail_k + (8 + tail + idx / kChunks) * kRowBytes +
                                  (idx % kChunks) * 16) = make_uint4(0u, 0u, 0u, 0u);
      }
    }
    if constexpr (kBulkCp) {
      if (warp == 0 && !bulk_early) issue_bulk_prologue();
      cp_async_commit();  // the tail's group
    } else {
#pragma unroll
      for (int s = 0; s < kStages - 1; ++s) {
        if (s < num_stages) issue_stage(s);
        cp_async_commit();
      }
    }
    if constexpr (kWrite) {
      if (new_count > 0 && !write_early) {
        write_new_rows();
        if constexpr (kBulkCp) tma::fence_proxy_async_global();  // before bulk copies read them
      }
    }
    stamp(1);
    // The q group has landed (the stages may still be in flight); kBulk: and the tail's.
    if constexpr (kBulkCp) {
      cp_async_wait<0>();
    } else {
      cp_async_wait<kStages - 1>();
    }
    __syncthreads();
    // The next piece's lengths and (no window) first stages' table entries, now that its item
    // has landed with q. They join the first loop iteration's group (a group of their own would
    // make that iteration wait for one stage more) and land by the combine's wait; without
    // stages there is no such group, and the next piece loads its metadata itself.
    if (has_next && num_stages > 0) {
      const int32_t* nx = s_items + 8 * ((item + 1) & 1);
      const int nreq = nx[0], n_begin = nx[4], n_end = nx[5];
      if (tid < 3)
        cp_async_4(s_lens + tid, tid < 2 ? p.cu_seqlens_q + nreq + tid : p.context_lens + nreq);
      if (window < 0) {
        const int lo = max(0, n_begin), nfirst = stage_origin(lo, n_end, kKeys);
        const int32_t* ntable = p.block_table + int64_t(nreq) * p.max_blocks_per_request;
        for (int idx = tid; idx < kStages * kKeys; idx += kThreads) {
          const int kabs = nfirst + idx;
          if (kabs >= lo && kabs < n_end)
            cp_async_4(s_next_blocks + idx, ntable + (kabs >> p.log2_block_size));
        }
      }
      next_ready = true;
    }

    // fp8: q goes to f16 in the permuted order the widened K fragments expect. A bf16 row is first
    // scaled by 2^e so its largest |q| lands in [2^14, 2^15): bf16's 8 significant bits fit f16's
    // 11 exactly down to 2^-29 of the row maximum; the score multiplier undoes 2^e.
    float row_mul[2] = {1.0f, 1.0f};
    if constexpr (kFp8) {
      // Threads per row: a power of two (the shuffle tree) of at most kThreads / 16; the warps
      // past 16 rows' worth skip the conversion whole.
      constexpr int kTpr = kThreads / 16 >= 8 ? 8 : kThreads / 16;
      const int r = tid / kTpr, part = tid % kTpr;
      int e = 0;
      if (tid < 16 * kTpr) {
        if constexpr (std::is_same_v<T, bf16>) {
          float mx = 0.0f;
          for (int d = part; d < D; d += kTpr)
            mx = fmaxf(mx, fabsf(to_float(s_q[r * kQStride + d])));
#pragma unroll
          for (int o = kTpr / 2; o > 0; o /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
          if (mx > 0.0f && mx < INFINITY) e = min(max(14 - ilogbf(mx), -120), 120);  // NaN: 0
        }
        const float up = __int_as_float((127 + e) << 23);  // 2^e, exact
        if (part == 0) s_qmul[r] = __int_as_float((127 - e) << 23);
        for (int d = part; d < D; d += kTpr) {
          s_qh[r * kQStride + decode::decode_q_position(d)] =
              __float2half_rn(to_float(s_q[r * kQStride + d]) * up);
        }
      }
      __syncthreads();
      row_mul[0] = s_qmul[lane / 4];
      row_mul[1] = s_qmul[lane / 4 + 8];
    }
    const MmaT* q_smem =
        kFp8 ? reinterpret_cast<const MmaT*>(s_qh) : reinterpret_cast<const MmaT*>(s_q);
    const MmaT* q_warp = q_smem + (lane % 16) * kQStride + (lane / 16) * 8;
    constexpr int kQFrags = Cfg::kQInRegs ? D / 16 : 1;
    uint32_t qf[kQFrags][4];
    if constexpr (Cfg::kQInRegs) {
#pragma unroll
      for (int ks = 0; ks < D / 16; ++ks) ldmatrix_x4(qf[ks], q_warp + ks * 16);
    }
    auto q_frag = [&](int ks, uint32_t(&a)[4]) {
      if constexpr (Cfg::kQInRegs) {
        a[0] = qf[ks][0];
        a[1] = qf[ks][1];
        a[2] = qf[ks][2];
        a[3] = qf[ks][3];
      } else {
        ldmatrix_x4(a, q_warp + ks * 16);
      }
    };

    // The two rows this thread holds in every accumulator fragment, and what they may see.
    int row_pos[2];
    bool row_ok[2];
    float lg_scale[2], cap_in[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int gr = it.row_begin + lane / 4 + 8 * i;
      row_ok[i] = gr < row_end;
      row_pos[i] = ctx + (row_ok[i] ? gr / rpt : 0);
      lg_scale[i] = p.scale_log2 * row_mul[i];
      cap_in[i] = p.softcap > 0.0f ? p.score_scale * row_mul[i] / p.softcap : 0.0f;
    }
    const float cap_out = p.softcap * kLog2e;

    float o[D / 8][4];
#pragma unroll
    for (int dn = 0; dn < D / 8; ++dn) o[dn][0] = o[dn][1] = o[dn][2] = o[dn][3] = 0.0f;
    float m[2] = {kNegInf, kNegInf}, l[2] = {0.0f, 0.0f};

    // This warp's 16 keys key0.. (K rows at tk, V rows at tv): scores, online softmax, O += P V.
    // `full`: every key visible to every row (no mask); else keys outside [key_lo, lim) and the
    // rows' causal / window limits are masked.
    auto attend = [&](const unsigned char* tk, const unsigned char* tv, int key0, bool full,
                      int lim) {
      float s[2][4];
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
      // kBulk: rows as the tiled layout stores them, chunks swizzled by the key's slot mod 8
      // (the key mod 8, blocks of >= 8 keys); this lane's rows are keys key0 + lane % 8 (+ 8).
      const int sw = kBulk ? (key0 + lane % 8) & 7 : 0;
      decode::decode_qk<D, kRowBytes, kFp8, MmaT, kBulk>(s, tk, lane, q_frag, sw);

      // Scale (soft-cap) into base-2 logits; mask only stages not wholly visible to every row.
      // Uniform branches outside the element loops (inside, each element became its own basic
      // blocks).
      if (p.softcap > 0.0f) {
#pragma unroll
        for (int nt = 0; nt < 2; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) s[nt][e] = cap_out * tanhf(s[nt][e] * cap_in[e / 2]);
      } else {
#pragma unroll
        for (int nt = 0; nt < 2; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) s[nt][e] *= lg_scale[e / 2];
      }
      if (!full) {
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int i = e / 2;
            const int key = key0 + nt * 8 + (lane % 4) * 2 + (e % 2);
            const bool ok = row_ok[i] && key >= key_lo && key < lim && key <= row_pos[i] &&
                            (window < 0 || key >= row_pos[i] - window);
            s[nt][e] = ok ? s[nt][e] : kNegInf;
          }
        }
      }

      // Online softmax per row; a row with nothing visible yet keeps m = -inf and weight 0.
      float alpha[2];
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        float mx = fmaxf(fmaxf(s[0][2 * i], s[0][2 * i + 1]), fmaxf(s[1][2 * i], s[1][2 * i + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_new = fmaxf(m[i], mx);
        const float base = m_new == kNegInf ? 0.0f : m_new;
        alpha[i] = fast_exp2(m[i] - base);
        m[i] = m_new;
        float sum = 0.0f;
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
          s[nt][2 * i] = fast_exp2(s[nt][2 * i] - base);
          s[nt][2 * i + 1] = fast_exp2(s[nt][2 * i + 1] - base);
          sum += s[nt][2 * i] + s[nt][2 * i + 1];
        }
        l[i] = l[i] * alpha[i] + sum;
      }
      // Once the maxima settle (most stages of a long context) alpha is exactly 1: skip the
      // D/2 multiplies per thread.
      if (!warp_rescale_is_identity(alpha[0], alpha[1])) {
#pragma unroll
        for (int dn = 0; dn < D / 8; ++dn) {
          o[dn][0] *= alpha[0];
          o[dn][1] *= alpha[0];
          o[dn][2] *= alpha[1];
          o[dn][3] *= alpha[1];
        }
      }

      // O += P V over this warp's 16 keys.
      const uint32_t a[4] = {pack2<MmaT>(s[0][0], s[0][1]), pack2<MmaT>(s[0][2], s[0][3]),
                             pack2<MmaT>(s[1][0], s[1][1]), pack2<MmaT>(s[1][2], s[1][3])};
      decode::decode_pv<D, kRowBytes, kFp8, MmaT, kBulk>(o, a, tv, lane, sw);
    };

    // Rank 1's tail as warp 0's one more 16-key tile (rows past it masked, their V rows zero).
    auto attend_tail = [&] {
      attend(tail_k, tail_k + 8 * kRowBytes, key_lo, false, min(main_lo, key_hi));
    };

    // Stage j's math: this warp's 16 keys of it.
    auto attend_stage = [&](int j) {
      const int start = first + j * kKeys;
      const unsigned char* tk = s_kv + (j % kStages) * Cfg::kStageBytes + warp * 16 * kRowBytes;
      const unsigned char* tv = tk + kKeys * kRowBytes;
      const bool full = start >= key_lo && start >= full_lo && start + kKeys <= full_hi;
      attend(tk, tv, start + warp * 16, full, key_hi);
      // Rank 1's tail landed with stage 0: warp 0 attends it now, while the ring streams, not after
      // the last stage (run o5's trace: rank 1 still ended its loop ~1 us after rank 0).
      if (tail > 0 && j == 0 && warp == 0) attend_tail();
    };
    if constexpr (kBulkCp) {
      int32_t next_page = pre_page[kStages - 1];  // warp 0: the entry of stage j + kStages - 1
      for (int j = 0; j < num_stages; ++j) {
        const int slot = j % kStages;
        mbarrier::wait(&s_full[slot], (full_phase >> slot) & 1u);  // stage j's copies landed
        full_phase ^= 1u << slot;
        __syncthreads();  // stage j - 1's slot is free again
        if (j == 0) stamp(2);
        if (warp == 0) {
          if (j + kStages - 1 < num_stages) issue_bulk(j + kStages - 1, next_page);
          // The entry of stage j + kStages, used next iteration: its latency hides behind this
          // stage's math.
          if (j + kStages < num_stages) {
            const int page = run_page(first, j + kStages, main_lo, key_hi);
            next_page = page >= 0 ? table[page] : 0;
          }
        }
        attend_stage(j);
      }
    } else {
      for (int j = 0; j < num_stages; ++j) {
        cp_async_wait<kStages - 2>();  // stage j has landed (this thread's copies)
        __syncthreads();               // everyone's copies; stage j - 1's slot is free again
        if (j == 0) stamp(2);
        if (j + kStages - 1 < num_stages) issue_stage(j + kStages - 1);
        cp_async_commit();
        // Block-table lookup of stage j + kStages now, its shared store after the math: the
        // lookup's latency hides behind this stage. Slot (j + kStages) % kStages was last read
        // when stage j was issued, before this iteration's barrier.
        const int nb_kabs = first + (j + kStages) * kKeys + tid;
        const bool nb_do = tid < kKeys && nb_kabs < key_hi;
        const int32_t nb_block = nb_do ? table[nb_kabs >> p.log2_block_size] : 0;
        attend_stage(j);
        if (nb_do) s_kb[((j + kStages) % kStages) * kKeys + tid] = key_base(nb_kabs, nb_block);
      }
    }
    // A tail without stages (not met by pair cuts; kept exact): attended here.
    if (tail > 0 && num_stages == 0) {
      cp_async_wait<0>();
      __syncthreads();
      if (warp == 0) attend_tail();
    }

#pragma unroll
    for (int i = 0; i < 2; ++i) {
      l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
      l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
    }

    stamp(3);
    // The warps hold the same 16 rows over different keys: combine through shared memory (the
    // stage ring, idle now).
    constexpr int kRS = Cfg::kReduceStride;
    float* red_o = reinterpret_cast<float*>(smem);  // [kWarps][16][kRS]
    float* red_m = red_o + Cfg::kWarps * 16 * kRS;  // [kWarps][16]
    float* red_l = red_m + Cfg::kWarps * 16;
    cp_async_wait<0>();
    __syncthreads();
    {
      const int t = lane % 4, g = lane / 4;
      float* w_o = red_o + warp * 16 * kRS;
      // Rows 8..15 only where the item has them (a group of <= 8 one-token rows fills half the
      // tile): the combine below reads valid rows alone.
      const bool high_rows = row_end - it.row_begin > 8;
#pragma unroll
      for (int tile = 0; tile < D / 8; ++tile) {
#pragma unroll
        for (int e = 0; e < 2; ++e)
          w_o[g * kRS + decode::decode_o_dim<kFp8>(tile, e, t)] = o[tile][e];
        if (high_rows) {
#pragma unroll
          for (int e = 2; e < 4; ++e)
            w_o[(g + 8) * kRS + decode::decode_o_dim<kFp8>(tile, e, t)] = o[tile][e];
        }
      }
      if (t == 0) {
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          red_m[warp * 16 + g + 8 * i] = m[i];
          red_l[warp * 16 + g + 8 * i] = l[i];
        }
      }
    }
    __syncthreads();

    // Pair launches (the wide form; clusters of 2 on sm_90): rank 1 pushes its normalized rows and
    // LSEs into rank 0's peer buffers, rank 0 leaves its own in place (warp 0's combine rows, which
    // only this thread reads at (r, d)) and merges after the cluster barrier.
    [[maybe_unused]] float* peer_o = reinterpret_cast<float*>(smem + Cfg::kOffPeer);  // [16][D]
    [[maybe_unused]] float* peer_lse = peer_o + 16 * D;                               // [16]
    [[maybe_unused]] float* own_lse = peer_lse + 16;                                  // [16]
    for (int idx = tid; idx < 16 * (D / 4); idx += kThreads) {
      const int r = idx / (D / 4), d = (idx % (D / 4)) * 4, gr = it.row_begin + r;
      if (gr >= row_end) continue;
      float mx = kNegInf;
#pragma unroll
      for (int w = 0; w < Cfg::kWarps; ++w) mx = fmaxf(mx, red_m[w * 16 + r]);
      const float base = mx == kNegInf ? 0.0f : mx;
      float lv = 0.0f;
      float4 ov = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
      for (int w = 0; w < Cfg::kWarps; ++w) {
        const float f = exp2f(red_m[w * 16 + r] - base);
        const float4 x = *reinterpret_cast<const float4*>(red_o + (w * 16 + r) * kRS + d);
        lv += red_l[w * 16 + r] * f;
        ov.x += x.x * f;
        ov.y += x.y * f;
        ov.z += x.z * f;
        ov.w += x.w * f;
      }
      const int head = it.q_head + gr % rpt;
      const int64_t row = int64_t(tok0 + gr / rpt) * p.num_q_heads + head;
      float lse = lv > 0.0f ? (base + log2f(lv)) * 0.6931471805599453f : kNegInf;
      float scale = lv > 0.0f ? p.v_scale / lv : 0.0f;
      if constexpr (kPairs) {
        const float4 v = make_float4(ov.x * scale, ov.y * scale, ov.z * scale, ov.w * scale);
        if (rank != 0) {
          cluster::store_remote4(peer_o + r * D + d, 0, v);
          if (d == 0) cluster::store_remote(peer_lse + r, 0, lse);
        } else {
          *reinterpret_cast<float4*>(red_o + r * kRS + d) = v;
          if (d == 0) own_lse[r] = lse;
        }
        continue;
      }
      if (it.split >= 0) {
        const int64_t prow = int64_t(it.split) * p.num_tokens * p.num_q_heads + row;
        *reinterpret_cast<float4*>(p.partial_out + prow * D + d) =
            make_float4(ov.x * scale, ov.y * scale, ov.z * scale, ov.w * scale);
        if (d == 0) p.partial_lse[prow] = lse;
        continue;
      }
      if (p.sinks != nullptr) fold_sink(p.sinks[head], lse, scale);
      uint2 packed;
      packed.x = pack2<T>(ov.x * scale, ov.y * scale);
      packed.y = pack2<T>(ov.z * scale, ov.w * scale);
      *reinterpret_cast<uint2*>(static_cast<T*>(p.out) + row * D + d) = packed;
      if (d == 0 && p.lse != nullptr) p.lse[row] = lse;
    }
    if constexpr (kPairs) {
      stamp(4);
      cluster::sync();  // the peer's pushes have landed; it may exit after this
      stamp(5);
      if (rank == 0) decode_pair_merge<D, T>(p, it, row_end, red_o, kRS, own_lse, peer_o, peer_lse);
    }
    stamp(6);
    if (trace != nullptr) {
      trace[7] = sm_id();
      trace[8] = static_cast<unsigned long long>(num_stages);
    }
  }
}

template <int D, typename T, typename KvT, int kWide, bool kBulk>
cudaError_t launch_paged_decode_config(const UnifiedParams& p, cudaStream_t stream) {
  using Cfg = DecodeConfig<D, T, KvT, kWide, kBulk>;
  auto kernel = p.new_k != nullptr ? paged_decode_split_kv_kernel<D, T, KvT, kWide, true, kBulk>
                                   : paged_decode_split_kv_kernel<D, T, KvT, kWide, false, kBulk>;
  cudaError_t e =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes);
  if (e != cudaSuccess) return e;
  // The whole carveout as shared memory, so two blocks fit per SM (kWide: one, its ring whole).
  e = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                           cudaSharedmemCarveoutMaxShared);
  if (e != cudaSuccess) return e;
  const int grid = p.block_items != nullptr ? p.num_blocks : p.num_items;
  return launch_kernel_in_clusters(p.pdl != 0, kWide != 0 ? 2 : 1, kernel, dim3(grid),
                                   dim3(Cfg::kThreads), Cfg::kSmemBytes, stream, p);
}

// How many 2-CTA clusters of the wide configuration the device holds at once (a cluster's
// CTAs share one GPC, so an odd GPC leaves an SM out); 0 where it is not built or on error.
template <int D, typename T, typename KvT>
int decode_cluster_capacity_impl() {
  if constexpr (!kDecodeClusterBuilt<D, T, KvT>) {
    return 0;
  } else {
    using Cfg = DecodeConfig<D, T, KvT, 8>;
    auto kernel = paged_decode_split_kv_kernel<D, T, KvT, 8, false, false>;
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             Cfg::kSmemBytes) != cudaSuccess)
      return 0;
    cudaLaunchAttribute attr;
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = 2;
    attr.val.clusterDim.y = 1;
    attr.val.clusterDim.z = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(2);
    cfg.blockDim = dim3(Cfg::kThreads);
    cfg.dynamicSmemBytes = Cfg::kSmemBytes;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    int clusters = 0;
    if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg) != cudaSuccess) {
      (void)cudaGetLastError();  // not sticky: clear it for the caller
      return 0;
    }
    return clusters;
  }
}

template <int D, typename T, typename KvT>
cudaError_t launch_paged_decode_impl(const UnifiedParams& p, cudaStream_t stream) {
  // The device is asked only where its answer matters (pairs, or a launch the bulk form may
  // take), so the host-side refusals below also work without a GPU.
  constexpr bool kFp8 = std::is_same_v<KvT, fp8>;
  const bool bulk_candidate = decode_bulk_eligible(kDecodeBulkBuilt<D, T, KvT>, kFp8, p.layout,
                                                   p.block_size, p.decode_copies);
  int major = 0;
  if (p.cluster_splits != 0 || bulk_candidate) {
    int device = 0;
    cudaError_t e = cudaGetDevice(&device);
    if (e == cudaSuccess)
      e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
    if (e != cudaSuccess) return e;
  }
  if (p.cluster_splits != 0) {
    // Pairs: sm_90, exactly 2 splits per row set, whole pairs of items, the wide form built.
    if (!kDecodeClusterBuilt<D, T, KvT> || major < 9 || p.cluster_splits != 2 ||
        p.num_items % 2 != 0 || p.block_items != nullptr)
      return cudaErrorInvalidValue;
  }
  if (p.block_items != nullptr && p.num_blocks < 1) return cudaErrorInvalidValue;
  if (p.num_items == 0) return cudaSuccess;
  const bool bulk = bulk_candidate && major >= 9;
  if constexpr (kDecodeClusterBuilt<D, T, KvT>) {
    if (p.cluster_splits != 0) {
      if constexpr (kDecodeBulkBuilt<D, T, KvT>) {
        if (bulk) return launch_paged_decode_config<D, T, KvT, 8, true>(p, stream);
      }
      return launch_paged_decode_config<D, T, KvT, 8, false>(p, stream);
    }
  }
  if constexpr (kDecodeBulkBuilt<D, T, KvT>) {
    if (bulk) return launch_paged_decode_config<D, T, KvT, 0, true>(p, stream);
  }
  return launch_paged_decode_config<D, T, KvT, 0, false>(p, stream);
}

}  // namespace tripath::kernels
