// Parameters of the unified paged-attention kernel (one launch for every query token of a step).
// Plain data: the backend fills it once per call; the kernel takes it as a __grid_constant__.
#pragma once

#include <cstdint>

namespace tripath::kernels {

// One thread block's work: `rows` packed query rows of one request and one KV head against the
// keys [kv_begin, kv_end) of that request. Row r (counted from row_begin) is query token
// r / rows_per_token, query head q_head + r % rows_per_token: with GQA packing rows_per_token is
// the group size, so every KV byte loaded serves the whole group.
struct UnifiedWorkItem {
  int32_t request;
  int32_t kv_head;
  int32_t q_head;     // first query head of the rows
  int32_t row_begin;  // first packed row within the request
  int32_t kv_begin;   // key range (a split, or all keys the rows can see)
  int32_t kv_end;
  int32_t split;      // >= 0: write a partial state to split slot `split`; -1: final output
  int32_t pad;
};

struct UnifiedParams {
  const void* q;        // [num_tokens, num_q_heads, head_dim] T
  void* out;            // [num_tokens, num_q_heads, head_dim] T
  float* lse;           // optional [num_tokens, num_q_heads]
  const void* k_cache;  // layout `layout`, element KvT
  const void* v_cache;
  float* partial_out;   // [max_splits, num_tokens, num_q_heads, head_dim]
  float* partial_lse;   // [max_splits, num_tokens, num_q_heads]
  const float* sinks;   // optional [num_q_heads]
  const int32_t* block_table;   // [num_requests, max_blocks_per_request]
  const int32_t* cu_seqlens_q;  // [num_requests + 1]
  const int32_t* context_lens;  // [num_requests]
  const UnifiedWorkItem* items; // [num_items]
  int32_t num_items;
  int32_t num_tokens;
  int32_t num_q_heads;
  int32_t num_kv_heads;
  int32_t rows_per_token;       // group size (GQA packed) or 1
  int32_t max_blocks_per_request;
  int32_t block_size;
  int32_t log2_block_size;
  int32_t layout;               // KvLayoutId
  int32_t window_left;          // -1: none
  float scale_log2;             // softmax scale * k_scale * log2(e) (no soft-cap)
  float score_scale;            // softmax scale * k_scale (soft-cap path)
  float softcap;                // 0: off
  float v_scale;                // fp8 value scale (1 otherwise)
  int32_t pdl;                  // host side: launch as a programmatic dependent (the split-KV
                                // decode kernel; launch_kernel.h)
  int32_t cluster_splits;       // split-KV decode kernel: 0, or 2: items come in pairs, the two
                                // splits of one (request, KV head, rows), each pair a 2-CTA
                                // cluster of the wide one-block-per-SM form that merges through
                                // distributed shared memory and writes the final output (no
                                // partial buffers, no merge launch)
  unsigned long long* trace;    // split-KV decode, wide form only: null, or kDecodeTraceSlots
                                // stamps per block (decode/launch.h; a timing probe for tests)
  const int32_t* block_items;   // split-KV decode, not with cluster_splits: null (one item per
                                // block), or [num_blocks + 1]: block b runs items
                                // [block_items[b], block_items[b + 1]) in turn (decode segments)
  int32_t num_blocks;           // the grid where block_items is set
  // The split-KV decode kernel's fused cache write: null, or this step's new K / V rows
  // [tokens, num_kv_heads, head_dim] T by global token index (cu_seqlens_q), which the kernel
  // stores into k_cache / v_cache (converted to e4m3 by k_scale / v_scale for an fp8 cache)
  // before it reads them: the block whose key range holds a new key writes it.
  const void* new_k;
  const void* new_v;
  float k_scale;                // fp8 key scale of the fused write (1 otherwise)
  int32_t* item_counter;        // the flash kernel's persistent modes: two ints, zero before the
                                // launch (items claimed past the grid, CTAs finished); the last
                                // CTA to finish zeroes them again for the next launch
  int32_t decode_copies;        // split-KV decode, how a tiled cache's stages land where the bulk
                                // form runs (decode/launch.h: decode_bulk_eligible): 0: bulk
                                // copies on 16-bit caches; 1: cp.async always; 2: bulk on fp8
                                // caches too (opt-in: slower on fp8)
};

// Tile shapes. kRows16: 16 packed rows per block and its four warps split the keys (decode:
// one token x a GQA group); kRows64: 64 rows, one warp per 16 rows (prefill and extend).
enum UnifiedTile : int32_t { kRows16 = 0, kRows64 = 1 };

}  // namespace tripath::kernels
