// three_path: each class of the ordered step on its own path (shared/DESIGN.md section 3).
//  - decode: split-KV over the planner's partition (16-row tiles: one token x the GQA group
//    when it fits), partial states merged (with sinks) by the merge kernel;
//  - prefill: causal attention over the new tokens, final output written directly;
//  - extend: the causal self-part, then the cached context one planner chunk at a time (at most
//    extend_chunk_budget context tokens per round across the extend requests), each round
//    merged into a running state: workspace is 3 x extend tokens x heads x (head dim + 1)
//    floats whatever the context length. Each chunk's context is read in place from the paged
//    cache, or (TRIPATH_EXTEND_GATHER=1) first gathered into a contiguous workspace of at most
//    one chunk (extend_gather.h), whichever measures faster.
// Decode runs the split-KV paged decode kernel (src/kernels/decode) when a request's rows (query
// tokens x GQA group) fit its 16-row tile, the unified tiles otherwise; a step whose decode
// requests all have one split writes the output directly (no partials, no merge); an even
// batch of few row sets (the tensor-parallel shard) runs as 2-CTA clusters merging in
// distributed shared memory (add_decode_pairs); where the planner made decode segments (uneven
// contexts), one block per segment and KV head streams its list of pieces
// (add_decode_segments). The split-KV kernel also writes the decode tokens' new K / V rows into
// the cache itself (TRIPATH_DECODE_WRITE), so the cache-write kernel runs for the extend and
// prefill tokens only.
// Prefill and extend run the Hopper flash kernel (src/kernels/prefill: wgmma, 128-row work
// items) on compute capability 9.0 when the cache holds the q dtype and the head dim is built
// for it; otherwise the unified mma.sync tile kernel (64-row items).
// All launches go to the caller's stream; nothing allocates or synchronizes in run().
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <tuple>

#include "cuda_backend.h"
#include "cuda_entry.h"
#include "cuda_util.h"
#include "decode/launch.h"
#include "device_info.h"
#include "extend_gather.h"
#include "merge/merge_states.h"
#include "prefill/launch.h"
#include "tensor_map_cache.h"
#include "unified/launch.h"

namespace tripath {
namespace {

using kernels::UnifiedWorkItem;

// Row tiles of ordered request i against keys [kv_begin, kv_end), writing `split`. An empty
// range still gets its blocks when it writes a partial state: they write LSE -inf (an empty
// part), so a merge never reads a stale slot.
void add_items(std::vector<UnifiedWorkItem>& items, const StepPlan& plan, int32_t i, int group,
               int num_kv_heads, int rows_per_item, int32_t kv_begin, int32_t kv_end,
               int32_t split) {
  if (kv_end <= kv_begin && split < 0) return;
  const int rows = plan.query_lens[i] * group;
  for (int g = 0; g < num_kv_heads; ++g)
    for (int rb = 0; rb < rows; rb += rows_per_item)
      items.push_back({i, g, g * group, rb, kv_begin, kv_end, split, 0});
}

// Each decode token's part count for the merge: decode request d has cu[d + 1] - cu[d] parts
// (the planner's splits or its segments' pieces). Returns the largest count.
int32_t decode_token_parts(const StepPlan& plan, const std::vector<int32_t>& cu,
                           std::vector<int32_t>& token_parts) {
  token_parts.assign(static_cast<size_t>(plan.num_tokens), 0);
  int32_t most = 0;
  for (int32_t d = 0; d < plan.decode.num_requests(); ++d) {
    const int32_t i = plan.decode.begin + d, parts = cu[d + 1] - cu[d];
    most = std::max(most, parts);
    for (int32_t t = 0; t < plan.query_lens[i]; ++t) token_parts[plan.cu_seqlens_q[i] + t] = parts;
  }
  return most;
}

// Longest key ranges first, so the launch does not end on one long block.
void longest_first(std::vector<UnifiedWorkItem>& items, size_t begin, const StepPlan& plan,
                   int group, int rows_per_item) {
  auto keys = [&](const UnifiedWorkItem& it) {
    const int last =
        std::min(plan.query_lens[it.request] - 1, (it.row_begin + rows_per_item - 1) / group);
    return std::min(it.kv_end, plan.context_lens[it.request] + last + 1) - it.kv_begin;
  };
  std::stable_sort(items.begin() + begin, items.end(),
                   [&](const auto& a, const auto& b) { return keys(a) > keys(b); });
}

class ThreePathBackend final : public CudaAttentionBackend {
 public:
  // Kernel variants, read once, at creation (read_variant: unset or empty takes the default).
  //   TRIPATH_FLASH_TMA (default 2): the flash kernel loads K/V tiles with TMA box copies,
  //     every producer warp issuing a share of each tile's boxes (H200, block size 16: the
  //     loads alone 5.2 -> 3.65 ms on prefill-8k); 1: all issued by the first producer warp;
  //     0: cp.async gathers (measured slower: 15.8 vs 11.8 ms on prefill-8k).
  //   TRIPATH_FLASH_OVERLAP (default 13: =5 with Q in registers for S = Q K^T, 1-6% faster
  //     than =5 in an interleaved A/B on the H200, run i6). =5: 128-key tiles, a producer
  //     warpgroup that hands its registers to the consumers, FA3's consumer order (S(j + 1)
  //     and P V(j) back to back, softmax(j + 1) under P V(j)) and ping-pong between the two
  //     consumer warpgroups (with TMA=2: prefill-8k 8.28 against =4's 8.80 ms, mixed 4.86
  //     against 5.35); =4: the same tiles with the serial consumer loop (the default up to run
  //     h3: 10.3 vs 11.85 ms for =0, 64-key tiles); =1: FA3's order on 64-key tiles; =2: on 128-key
  //     tiles; =3: =1 with the two consumer warpgroups taking turns at the tensor cores; =6 / =7:
  //     timing probes of =4 on TMA loads, its math alone / its loads alone (outputs meaningless);
  //     =8: =5's math alone; =9 / =10: =4 / =5 in 2-CTA clusters whose CTAs share each K/V tile
  //     they both read (TMA multicast: one L2 read for two items; measured slower, 9.65 /
  //     9.13 against 8.63 ms on prefill-8k); =11 / =12: =4 / =5 in persistent CTAs (one per
  //     SM, each looping over the items in a static snake order; the next item's loads run
  //     under the last tile: measured slower, prefill-8k 9.13 / 9.21 against 8.93 ms and the
  //     mixed step 5.81 / 6.00 against 5.34, uneven items on a static schedule; the CTAs now
  //     claim items in list order instead); =13 (the default): =5 with Q in registers for
  //     S = Q K^T (RS wgmma) and rows keeping a stale max (O rescaled only when a row's max
  //     grows by more than 2^8); =14: =13 in persistent CTAs claiming items, Q's tile released
  //     once it is in registers so the next item's Q and tiles load under the current one.
  //   TRIPATH_EXTEND_GATHER=1: extend chunks gathered to contiguous memory before attention.
  //   TRIPATH_EXTEND_GATHER defaults to 0 (off).
  //   TRIPATH_FUSE_COMPUTE (default 2): 1: prefill, the extend self-part and the first context
  //     round share one launch (add_compute_paths; mixed step 4.68-4.71 ms against 4.84-4.96
  //     apart, run m1); 2: the same, and where one round holds every extend context, each
  //     extend item runs its context and new keys in one pass (no slots, no merge); 0: each in
  //     its own launch.
  //   TRIPATH_DECODE_CLUSTER (default 1): a decode batch of even lengths whose row sets, cut
  //     in halves, fit one wave at one block per SM (the 8-query / 1-KV-head shard at 64
  //     requests) runs each row set as a 2-CTA cluster of wide blocks that merges in
  //     distributed shared memory (add_decode_pairs; tp8 decode-4k 43-44 us against 46-48,
  //     runs n4-n5); 0: the planner's splits, partials and the merge kernel.
  //   TRIPATH_DECODE_WRITE (default 1): on a 16-bit cache the split-KV decode kernel stores the
  //     decode tokens' new K / V rows into the cache itself (each block the rows its keys hold,
  //     before it reads them), so a decode-only step launches no cache-write kernel (whole calls
  //     on an H100, run t2: tp8 decode-4k 57.3 -> 55.5 us, decode-4k 191-193 -> 189); 2: on an
  //     fp8 cache too (measured slower there: decode-mixed 136.5 -> 138.6 us, the conversion
  //     lengthens the stage loop); 0: the cache-write kernel writes every token first.
  //   TRIPATH_DECODE_BULK (default 1): on the tiled layout the split-KV decode kernel's stages
  //     land by bulk copies (one per run of a cache block's keys, from one warp) where that form
  //     is built and runs (decode/launch.h: decode_bulk_eligible); 0: by cp.async; 2: on fp8
  //     caches too (off by default: GPU-tested, but slower than cp.async on fp8 on an H100).
  //   TRIPATH_PDL=1: the split-KV decode kernel and its merge launched as programmatic
  //     dependents (launch_kernel.h): each may start while the kernel before it ends.
  //     Default 0 until measured.
  //   A value outside the list is an error naming the variable.
  ThreePathBackend() {
    const int tma = read_variant("TRIPATH_FLASH_TMA");
    flash_tma_ = tma >= 1;
    flash_tma_all_warps_ = tma == 2;
    // FlashConsumerMode's values are the variable's: 0 serial, 1 overlap, 2 wide, 3 ping-pong,
    // 4 wide tiles with the serial loop, 5 wide tiles with ping-pong.
    flash_mode_ = static_cast<kernels::FlashConsumerMode>(read_variant("TRIPATH_FLASH_OVERLAP"));
    extend_gather_ = read_variant("TRIPATH_EXTEND_GATHER") == 1;
    pdl_ = read_variant("TRIPATH_PDL") == 1;
    fuse_ = read_variant("TRIPATH_FUSE_COMPUTE");
    decode_cluster_ = read_variant("TRIPATH_DECODE_CLUSTER") == 1;
    decode_segment_mode_ = read_variant("TRIPATH_DECODE_SEGMENTS");
    decode_write_ = read_variant("TRIPATH_DECODE_WRITE");
    decode_bulk_ = read_variant("TRIPATH_DECODE_BULK");
  }
  const char* name() const override { return "three_path"; }
  bool needs_ordered_batch() const override { return true; }

 protected:
  void prepare_work(const StepPlan& plan, const AttentionParams& params,
                    DeviceArena& arena) override {
    check_ordered(plan, name());
    const int group = params.num_q_heads / params.num_kv_heads;
    const int hkv = params.num_kv_heads;
    std::vector<UnifiedWorkItem> items;
    launches_.clear();

    // Decode: the planner's splits; per-token part counts for the merge.
    // The 16-row tile unless a decode request's rows exceed it. (Sized once from the step's
    // longest query, a prompt's, it sent every mixed step's decode requests to the unified
    // 64-row tile: 575 us against ~165 on the H200, run m2.)
    decode_tile_ = plan.max_decode_query_len * group <= 16 ? kernels::kRows16 : kernels::kRows64;
    max_decode_query_ = std::max(1, plan.max_decode_query_len);
    const int decode_rows = decode_tile_ == kernels::kRows64 ? 64 : 16;
    std::vector<int32_t> token_parts;
    decode_splits_ = decode_token_parts(plan, plan.decode_cu_splits, token_parts);
    // One split per request: the kernel writes the output itself, no partials and no merge.
    decode_direct_ = decode_splits_ <= 1;
    for (int32_t d = 0; d < plan.decode.num_requests(); ++d) {
      const int32_t i = plan.decode.begin + d;
      const int32_t first = plan.decode_cu_splits[d], count = plan.decode_cu_splits[d + 1] - first;
      for (int32_t s = 0; s < count; ++s) {
        const int32_t start = plan.split_kv_start[first + s];
        add_items(items, plan, i, group, hkv, decode_rows, start,
                  start + plan.split_kv_len[first + s], decode_direct_ ? -1 : s);
      }
    }
    push_launch(items, decode_tile_, Launch::kDecode, -1);
    decode_pairs_ = decode_cluster_ && decode_tile_ == kernels::kRows16 &&
                    add_decode_pairs(items, plan, group, hkv, params.head_dim);
    std::vector<int32_t> block_items, segment_token_parts;
    decode_segments_ = decode_segment_mode_ != 0 && decode_tile_ == kernels::kRows16 &&
                       add_decode_segments(items, block_items, segment_token_parts, plan, group,
                                           hkv);

    // Prefill and extend, as 64-row items for the unified tiles and, where the flash kernel
    // may run (the cache dtype is known only in run()), again as its 128-row items.
    add_compute_paths(items, plan, group, hkv, 64, false);
    flash_possible_ = cuda_device_info().compute_capability == 90 &&
                      (kernels::flash_prefill_built(params.head_dim, DType::kBF16) ||
                       kernels::flash_prefill_built(params.head_dim, DType::kF16));
    if (flash_possible_)
      add_compute_paths(items, plan, group, hkv, kernels::kFlashPrefillRows, true);
    items_offset_ = arena.add(items);
    token_parts_offset_ = arena.add(token_parts);
    if (decode_segments_) {
      block_items_offset_ = arena.add(block_items);
      segment_token_parts_offset_ = arena.add(segment_token_parts);
    }

    // Workspace: decode partials [splits, decode tokens, heads, dim (+1 lse)]; extend running
    // states in three slots [extend tokens, heads, dim (+1)].
    const size_t row_floats = static_cast<size_t>(params.head_dim) + 1;
    decode_rows_total_ = static_cast<size_t>(plan.decode.num_tokens()) * params.num_q_heads;
    extend_rows_total_ = static_cast<size_t>(plan.extend.num_tokens()) * params.num_q_heads;
    // Partial slots for the larger part count of the item sets that write partials.
    decode_slots_ = std::max(decode_direct_ ? 0 : decode_splits_,
                             decode_segments_ && !segment_direct_ ? segment_parts_ : 0);
    decode_floats_ = decode_slots_ * decode_rows_total_ * row_floats;
    const size_t total = decode_floats_ + 3 * extend_rows_total_ * row_floats;
    workspace_.ensure(std::max<size_t>(total, 1) * sizeof(float));
    // The persistent flash modes' item counters: zeroed once here, and by the kernel's last CTA
    // after every launch.
    if (kernels::flash_mode_is_persistent(flash_mode_) && item_counter_.size() == 0) {
      item_counter_.ensure(2 * sizeof(int32_t));
      TRIPATH_CUDA_CHECK(cudaMemset(item_counter_.as<void>(), 0, 2 * sizeof(int32_t)));
    }
    if (extend_gather_) {
      gather_bytes_ = gather_.prepare(plan, hkv, params.head_dim, arena);
      if (gather_bytes_ > 0) gather_workspace_.ensure(gather_bytes_);
    }
  }

  void launch(const StepPlan& plan, const AttentionParams& params, const AttentionInputs& in,
              cudaStream_t stream) override {
    const int64_t hq = params.num_q_heads, dim = params.head_dim;
    const DType kv = in.cache.config.dtype;
    // Partial buffers are indexed by global token row (token * heads + head): offset the base
    // so a path's first token lands at the buffer's start.
    float* decode_out = workspace_.as<float>();
    float* decode_lse = decode_out + decode_slots_ * decode_rows_total_ * dim;
    float* ext = workspace_.as<float>() + decode_floats_;
    float* slot_out[3];
    float* slot_lse[3];
    for (int k = 0; k < 3; ++k) {
      slot_out[k] = ext + k * extend_rows_total_ * dim;
      slot_lse[k] = ext + 3 * extend_rows_total_ * dim + k * extend_rows_total_;
    }
    const int64_t ext_row0 = plan.extend.token_begin * hq;
    const int64_t dec_row0 = plan.decode.token_begin * hq;  // 0 in an ordered batch

    const bool flash = flash_possible_ && kv == in.q.dtype &&
                       kernels::flash_prefill_built(params.head_dim, in.q.dtype);
    const kernels::FlashTensorMaps* maps = nullptr;
    const kernels::FlashTensorMaps* gather_maps = nullptr;  // of the gathered workspace
    const bool gather = extend_gather_ && gather_bytes_ > 0;
    if (flash && flash_tma_) {
      const KvCacheConfig& c = in.cache.config;
      // Maps of (k, v, layout, blocks, block size) with this step's heads, dims and dtype.
      auto cached_maps = [&](const void* k, const void* v, int64_t blocks, int block_size,
                             kernels::FlashTensorMaps* out) {
        const FlashMapKey key{k,          v,          static_cast<int>(c.layout),
                              blocks,     block_size, c.num_kv_heads,
                              c.head_dim, in.q.dtype};
        return tensor_maps_.get(key, out, [&](kernels::FlashTensorMaps* m) {
          return kernels::make_flash_tensor_maps(k, v, static_cast<int>(c.layout), blocks,
                                                 block_size, c.num_kv_heads, c.head_dim, in.q.dtype,
                                                 m);
        });
      };
      if (cached_maps(in.cache.k.data, in.cache.v.data, c.num_blocks, c.block_size, &maps_)) {
        maps_.all_warps_issue = flash_tma_all_warps_;
        maps = &maps_;
      }
      char* ws = gather_workspace_.as<char>();
      if (gather && cached_maps(ws, ws + gather_.v_offset(), gather_.capacity_blocks(),
                                kernels::kGatherBlockSize, &gather_maps_)) {
        gather_maps_.all_warps_issue = flash_tma_all_warps_;
        gather_maps = &gather_maps_;
      }
    }
    const bool decode_kernel = decode_kernel_runs(plan, params, in);
    const bool decode_writes = fused_write_tokens(plan, params, in) > 0;
    // The 2-CTA clusters' item set where the wide kernel is built for this cache, else the
    // planner's splits.
    const bool pairs = decode_pairs_ && decode_kernel &&
                       kernels::decode_cluster_built(params.head_dim, in.q.dtype, kv);
    // Else the planner's segments where it made them and the split-KV kernel runs (a block per
    // segment and KV head, running a list of items), else its splits.
    const bool segments = !pairs && decode_segments_ && decode_kernel;
    int acc = 0;  // extend slot holding the running state
    for (const Launch& l : launches_) {
      if (l.kind != Launch::kDecode && l.flash != flash) continue;  // the other item set
      if (l.kind == Launch::kDecode && (l.pairs != pairs || l.segments != segments)) continue;
      kernels::UnifiedParams p = unified_params(plan, params, in);
      p.items = arena().at<UnifiedWorkItem>(items_offset_) + l.first_item;
      p.num_items = l.num_items;
      if (l.kind == Launch::kDecode) {
        p.partial_out = decode_out - dec_row0 * dim;
        p.partial_lse = decode_lse - dec_row0;
      } else {
        // An item's split field picks its slot: slot k starts k * extend rows after slot 0.
        p.partial_out = slot_out[0] - ext_row0 * dim;
        p.partial_lse = slot_lse[0] - ext_row0;
      }
      // The partial buffers hold only this path's tokens: one "token block" per split slot.
      p.num_tokens = static_cast<int32_t>(l.kind == Launch::kDecode ? plan.decode.num_tokens()
                                                                    : plan.extend.num_tokens());
      // Gathered chunks: copy the chunk, then read the workspace (the items are shifted).
      const bool gathered = gather && l.chunk >= 0;
      if (gathered) {
        gather_.gather_and_redirect(l.chunk, arena(), in.cache.config, gather_workspace_.as<void>(),
                                    p, stream);
      }
      if (flash && l.kind != Launch::kDecode) {
        p.item_counter = item_counter_.as<int32_t>();
        TRIPATH_CUDA_CHECK(kernels::launch_flash_prefill(
            params.head_dim, in.q.dtype, p, gathered ? gather_maps : maps, flash_mode_, stream));
      } else if (decode_kernel && l.kind == Launch::kDecode) {
        p.pdl = pdl_ ? 1 : 0;
        p.cluster_splits = l.pairs ? 2 : 0;
        p.decode_copies = decode_bulk_ == 0 ? 1 : decode_bulk_ == 2 ? 2 : 0;
        if (decode_writes) {
          p.new_k = in.k.data;
          p.new_v = in.v.data;
          p.k_scale = kv == DType::kFP8E4M3 ? in.cache.config.k_scale : 1.0f;
        }
        if (l.segments) {
          p.block_items = arena().at<int32_t>(block_items_offset_);
          p.num_blocks = plan.num_segments() * params.num_kv_heads;
        }
        TRIPATH_CUDA_CHECK(
            kernels::launch_paged_decode(params.head_dim, in.q.dtype, kv, p, stream));
      } else {
        TRIPATH_CUDA_CHECK(
            kernels::launch_unified(params.head_dim, in.q.dtype, kv, p, l.tile, stream));
      }

      const bool direct = l.segments ? segment_direct_ : decode_direct_;
      if (l.kind == Launch::kDecode && !direct && !l.pairs) {
        kernels::MergeParams m{};
        m.part_out = decode_out - dec_row0 * dim;
        m.part_lse = decode_lse - dec_row0;
        m.out = in.out.data;
        m.lse = p.lse;
        m.sinks = p.sinks;
        m.token_parts = arena().at<int32_t>(l.segments ? segment_token_parts_offset_
                                                       : token_parts_offset_);
        m.num_parts = l.segments ? segment_parts_ : decode_splits_;
        m.heads = params.num_q_heads;
        m.dim = params.head_dim;
        m.part_stride = static_cast<int64_t>(decode_rows_total_);
        m.row_begin = dec_row0;
        m.row_end = plan.decode.token_end * hq;
        m.pdl = pdl_ ? 1 : 0;
        TRIPATH_CUDA_CHECK(kernels::launch_merge_states(m, in.out.dtype, stream));
      } else if (l.chunk >= 0) {
        const bool last = l.chunk == plan.num_chunks - 1;
        const int next = acc == 0 ? 1 : 0;
        kernels::MergeParams m{};
        m.part_out = slot_out[acc] - ext_row0 * dim;
        m.part_lse = slot_lse[acc] - ext_row0;
        // Part 1 (the chunk, slot 2) sits a signed distance away from the running state.
        m.part_stride = (slot_lse[kChunkSlot] - slot_lse[acc]);
        m.num_parts = 2;
        m.heads = params.num_q_heads;
        m.dim = params.head_dim;
        m.row_begin = ext_row0;
        m.row_end = plan.extend.token_end * hq;
        if (last) {  // the final state: the output dtype, with sinks and LSE
          m.out = in.out.data;
          m.lse = p.lse;
          m.sinks = p.sinks;
          TRIPATH_CUDA_CHECK(kernels::launch_merge_states(m, in.out.dtype, stream));
        } else {
          m.out = slot_out[next] - ext_row0 * dim;
          m.lse = slot_lse[next] - ext_row0;
          TRIPATH_CUDA_CHECK(kernels::launch_merge_states(m, DType::kF32, stream));
          acc = next;
        }
      }
    }
  }

 private:
  // The split-KV decode kernel takes this step's decode path (else the unified tiles).
  bool decode_kernel_runs(const StepPlan& plan, const AttentionParams& params,
                          const AttentionInputs& in) const {
    return decode_tile_ == kernels::kRows16 &&
           kernels::decode_kernel_supports(
               params.head_dim, in.q.dtype, in.cache.config.dtype,
               params.num_q_heads / params.num_kv_heads,
               plan.decode.num_requests() > 0 ? max_decode_query_ : 1);
  }

  // The decode tokens (the ordered batch's first) when the split-KV kernel writes their rows.
  int64_t fused_write_tokens(const StepPlan& plan, const AttentionParams& params,
                             const AttentionInputs& in) const override {
    const bool fp8 = in.cache.config.dtype == DType::kFP8E4M3;
    if (decode_write_ == 0 || (fp8 && decode_write_ != 2) || !in.k.defined() ||
        plan.decode.token_begin != 0 || !decode_kernel_runs(plan, params, in))
      return 0;
    return plan.decode.token_end;
  }

  // Extend partial states: three slots of [extend tokens, heads, dim (+1 lse)] floats. The
  // self-part writes slot 0, a chunk round slot 2, the merges alternate the running state
  // between slots 0 and 1 (the items' split field is the slot).
  static constexpr int32_t kSelfSlot = 0, kChunkSlot = 2;

  struct Launch {
    enum Kind { kDecode, kCompute } kind;
    kernels::UnifiedTile tile;
    int32_t first_item, num_items;
    int32_t chunk;  // kCompute: the chunk round this launch holds (merged after it), or -1
    bool flash;     // an item set for the flash kernel (128 rows); else the unified tiles
    bool pairs;     // kDecode: the row sets' halves in 2-CTA clusters (add_decode_pairs)
    bool segments;  // kDecode: the planner's segments, blocks running item lists
  };

  void push_launch(const std::vector<UnifiedWorkItem>& items, kernels::UnifiedTile tile,
                   Launch::Kind kind, int32_t chunk, bool flash = false, bool pairs = false,
                   bool segments = false) {
    const int32_t first =
        launches_.empty() ? 0 : launches_.back().first_item + launches_.back().num_items;
    const int32_t count = static_cast<int32_t>(items.size()) - first;
    if (count > 0) launches_.push_back({kind, tile, first, count, chunk, flash, pairs, segments});
  }

  // The decode path as the planner's segments (StepPlan::segment_cu_pieces), another item set
  // beside its splits: block (KV head g, segment j) runs segment j's pieces for head g in turn,
  // one 16-row item each, and each piece writes the partial slot of its index among its
  // request's pieces (or the output, where no request has two). block_items gets the blocks'
  // item offsets (relative to the set's first item), token_parts each decode token's part
  // count for the merge. False (no items) where the plan has no segments.
  bool add_decode_segments(std::vector<UnifiedWorkItem>& items, std::vector<int32_t>& block_items,
                           std::vector<int32_t>& token_parts, const StepPlan& plan, int group,
                           int hkv) {
    const int32_t segments = plan.num_segments();
    if (segments == 0) return false;
    segment_parts_ = decode_token_parts(plan, plan.decode_cu_pieces, token_parts);
    segment_direct_ = segment_parts_ <= 1;
    const size_t first = items.size();
    block_items.assign(1, 0);
    for (int g = 0; g < hkv; ++g) {
      for (int32_t j = 0; j < segments; ++j) {
        for (int32_t q = plan.segment_cu_pieces[j]; q < plan.segment_cu_pieces[j + 1]; ++q) {
          const int32_t i = plan.piece_request[q];
          const int32_t slot = q - plan.decode_cu_pieces[i - plan.decode.begin];
          const int32_t start = plan.piece_kv_start[q];
          items.push_back({i, g, g * group, 0, start, start + plan.piece_kv_len[q],
                           segment_direct_ ? -1 : slot, 0});
        }
        block_items.push_back(static_cast<int32_t>(items.size() - first));
      }
    }
    push_launch(items, kernels::kRows16, Launch::kDecode, -1, false, false, true);
    return true;
  }

  // The decode path as 2-CTA clusters, a second item set beside the planner's splits (the
  // cache dtype, which decides whether the wide kernel is built, is known only in launch()).
  // The planner models two blocks per SM; when every decode request was split (splitting pays)
  // and the batch is even (the shortest key range at least 7/8 of the longest) with 3/4 to all
  // of the SMs' worth of row set halves, one wave of wide blocks (one per SM, 8 warps)
  // streams the same bytes with no partial writes and no merge launch: each row set's keys cut
  // at a cache block near the middle, the two halves one cluster merging in distributed shared
  // memory. False (no items) otherwise.
  bool add_decode_pairs(std::vector<UnifiedWorkItem>& items, const StepPlan& plan, int group,
                        int hkv, int head_dim) {
    const CudaDeviceInfo& dev = cuda_device_info();
    const int32_t nd = plan.decode.num_requests();
    if (dev.compute_capability < 90 || nd == 0) return false;
    int32_t shortest = INT32_MAX, longest = 0;
    for (int32_t d = 0; d < nd; ++d) {
      if (plan.decode_cu_splits[d + 1] - plan.decode_cu_splits[d] < 2) return false;
      const int32_t len = plan.seq_len(plan.decode.begin + d);
      shortest = std::min(shortest, len);
      longest = std::max(longest, len);
    }
    const int64_t blocks = 2LL * nd * hkv;  // one row tile per (request, KV head): 16 rows
    if (shortest * 8LL < longest * 7LL || blocks * 4 < dev.sm_count * 3) return false;
    // One wave: every cluster resident at once (measured, not assumed: a GPC of odd SM count
    // leaves one out).
    if (capacity_head_dim_ != head_dim) {
      capacity_head_dim_ = head_dim;
      cluster_capacity_ =
          std::max(kernels::decode_cluster_capacity(head_dim, DType::kBF16, DType::kBF16),
                   kernels::decode_cluster_capacity(head_dim, DType::kF16, DType::kF16));
    }
    if (blocks > 2LL * cluster_capacity_) return false;
    for (int32_t i = plan.decode.begin; i < plan.decode.end; ++i) {
      const int32_t len = plan.seq_len(i);
      const int32_t mid = kernels::decode_pair_cut(len);
      for (int g = 0; g < hkv; ++g) {
        items.push_back({i, g, g * group, 0, 0, mid, 0, 0});
        items.push_back({i, g, g * group, 0, mid, len, 1, 0});
      }
    }
    push_launch(items, kernels::kRows16, Launch::kDecode, -1, false, true);
    return true;
  }

  // Prefill (final output, causal over the new tokens) and extend: the self-part (split slot 0)
  // and one round per planner chunk (slot 2), each round merged into the running state after
  // its launch; `rows` packed rows per item. With fuse_ >= 1 the prefill items, the self-part
  // and the first round (read in place) share one launch, the round's long items first, so the
  // short causal items fill the SMs its last wave leaves idle instead of each launch ending on
  // its own tail. Within a class the unified tiles take the longest key ranges first; the
  // flash items stay grouped by (request, KV head), last row block first, so the blocks
  // running together share one K/V prefix in L2 (a wave sorted by length alone reads every
  // pair's prefix at once: 64 MB for prefill-8k, more than the L2).
  void add_compute_paths(std::vector<UnifiedWorkItem>& items, const StepPlan& plan, int group,
                         int hkv, int rows, bool flash) {
    auto order = [&](size_t begin) {
      if (flash) {
        std::stable_sort(items.begin() + begin, items.end(), [](const auto& a, const auto& b) {
          if (a.request != b.request) return a.request < b.request;
          if (a.kv_head != b.kv_head) return a.kv_head < b.kv_head;
          return a.row_begin > b.row_begin;
        });
      } else {
        longest_first(items, begin, plan, group, rows);
      }
    };
    const int32_t ne = plan.extend.num_requests();
    auto add_round = [&](int32_t c) {
      const size_t round_begin = items.size();
      for (int32_t e = 0; e < ne; ++e) {
        const int32_t start = plan.chunk_kv_start[c * ne + e];
        add_items(items, plan, plan.extend.begin + e, group, hkv, rows, start,
                  start + plan.chunk_kv_len[c * ne + e], kChunkSlot);
      }
      order(round_begin);
      // Gathered: the kernels see the chunk's keys at positions shifted by its start.
      if (extend_gather_)
        ExtendGather::shift_items(plan, c, items.data() + round_begin, items.size() - round_begin);
    };
    // Every key of each request of `range` from 0, the final output written directly.
    auto add_whole = [&](const PathRange& range) {
      const size_t begin = items.size();
      for (int32_t i = range.begin; i < range.end; ++i)
        add_items(items, plan, i, group, hkv, rows, 0, plan.seq_len(i), -1);
      order(begin);
    };
    // A single round holds every extend request's whole context (the plan puts each context
    // token in exactly one chunk): with fuse_ 2 each extend item takes its rows' context and new
    // keys in one pass, [0, seq_len) with the causal offset, and writes the final output: no
    // partial slots, no merge (the same exact softmax over the same keys).
    if (fuse_ == 2 && !extend_gather_ && plan.num_chunks == 1) {
      add_whole(plan.extend);
      add_whole(plan.prefill);
      push_launch(items, kernels::kRows64, Launch::kCompute, -1, flash);
      return;
    }
    // A gathered round reads its own workspace (other tensor maps): never fused.
    const bool fuse_round = fuse_ >= 1 && !extend_gather_ && plan.num_chunks > 0;
    if (fuse_round) add_round(0);
    add_whole(plan.prefill);
    if (fuse_ == 0) push_launch(items, kernels::kRows64, Launch::kCompute, -1, flash);

    const size_t self_begin = items.size();
    for (int32_t i = plan.extend.begin; i < plan.extend.end; ++i)
      add_items(items, plan, i, group, hkv, rows, plan.context_lens[i], plan.seq_len(i), kSelfSlot);
    order(self_begin);
    push_launch(items, kernels::kRows64, Launch::kCompute, fuse_round ? 0 : -1, flash);
    for (int32_t c = fuse_round ? 1 : 0; c < plan.num_chunks; ++c) {
      add_round(c);
      push_launch(items, kernels::kRows64, Launch::kCompute, c, flash);
    }
  }

  kernels::UnifiedTile decode_tile_ = kernels::kRows16;
  bool flash_possible_ = false;
  bool flash_tma_ = false;
  bool flash_tma_all_warps_ = false;  // TRIPATH_FLASH_TMA=2
  kernels::FlashConsumerMode flash_mode_ = kernels::FlashConsumerMode::kSerial;
  // (k, v, layout, num_blocks, block_size, num_kv_heads, head_dim, q dtype)
  using FlashMapKey = std::tuple<const void*, const void*, int, int64_t, int, int, int, DType>;
  TensorMapCache<FlashMapKey, kernels::FlashTensorMaps> tensor_maps_;  // TRIPATH_FLASH_TMA
  kernels::FlashTensorMaps maps_{};
  bool extend_gather_ = false;  // TRIPATH_EXTEND_GATHER=1
  ExtendGather gather_;
  size_t gather_bytes_ = 0;
  DeviceBuffer gather_workspace_;
  kernels::FlashTensorMaps gather_maps_{};
  bool decode_direct_ = false;  // every decode request has one split: final output, no merge
  int decode_segment_mode_ = 1;  // TRIPATH_DECODE_SEGMENTS
  int decode_write_ = 1;          // TRIPATH_DECODE_WRITE
  int decode_bulk_ = 1;           // TRIPATH_DECODE_BULK
  bool decode_segments_ = false;  // this plan has the segments' item set (add_decode_segments)
  bool segment_direct_ = false;   // ... and no request has two pieces: final output, no merge
  int32_t segment_parts_ = 0;     // the most pieces of one request
  int32_t decode_slots_ = 0;      // partial slots in the workspace (the larger item set's)
  size_t block_items_offset_ = 0, segment_token_parts_offset_ = 0;
  int32_t max_decode_query_ = 1;
  int32_t decode_splits_ = 0;
  size_t decode_rows_total_ = 0, extend_rows_total_ = 0, decode_floats_ = 0;
  size_t items_offset_ = 0, token_parts_offset_ = 0;
  std::vector<Launch> launches_;
  DeviceBuffer workspace_;
  DeviceBuffer item_counter_;  // the persistent flash modes' two counters (UnifiedParams)
  bool pdl_ = false;            // TRIPATH_PDL=1
  bool decode_cluster_ = true;  // TRIPATH_DECODE_CLUSTER=1
  bool decode_pairs_ = false;   // this plan has the 2-CTA cluster item set (add_decode_pairs)
  int capacity_head_dim_ = -1;  // the head dim cluster_capacity_ was asked for (-1: none yet)
  int cluster_capacity_ = 0;    // 2-CTA clusters of the wide decode kernel resident at once
  int fuse_ = 2;                // TRIPATH_FUSE_COMPUTE
};

}  // namespace

std::unique_ptr<AttentionBackend> make_three_path_backend() {
  return std::make_unique<ThreePathBackend>();
}

}  // namespace tripath
