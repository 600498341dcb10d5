// Parameters of the MLA kernels (DeepSeek-V3/R1 multi-head latent attention): the latent cache
// write, the absorbed decode kernels (baseline and heads-packed), and the helpers of the
// non-absorbed extend/prefill path (latent gather with k_pe broadcast, partial-state merge).
// Plain data: the backend fills them once per call; kernels take them as __grid_constant__.
#pragma once

#include <cstdint>

namespace tripath::kernels {

inline constexpr int kMlaEntry = 576;  // latent row: 512 c_kv + 64 k_pe
inline constexpr int kMlaLatent = 512;
inline constexpr int kMlaRope = 64;
inline constexpr int kMlaNope = 128;  // non-absorbed k_nope per head
inline constexpr int kMlaQk = 192;    // non-absorbed q/k head dim
inline constexpr int kMlaV = 128;     // non-absorbed v head dim

struct MlaCacheWriteParams {
  const void* latent;           // [num_tokens, 576] InT (f32, bf16 or f16)
  void* cache;                  // [num_blocks, block_size, 576] CacheT (bf16, f16 or fp8 e4m3)
  const int64_t* slot_mapping;  // [num_tokens]; -1: skip the token
  int64_t num_tokens;
  float scale;  // fp8: stored = e4m3(x / scale) (true division); 1 otherwise
};

// One thread block of absorbed decode: `rows` packed rows of one request against the keys
// [kv_begin, kv_end) of that request. Row r of a request is query token r / num_heads, head
// r % num_heads, so a block's rows are all the heads of one token (and of the next tokens when
// a request has several query tokens and few heads): every latent row loaded serves them all.
struct MlaDecodeWorkItem {
  int32_t request;   // position in the ordered batch (a decode request)
  int32_t split;     // >= 0: partial slot (split index within the request); -1: final output
  int32_t kv_begin;  // key range of the split, within the request's seq_len keys
  int32_t kv_end;
  int32_t row_begin;  // first packed row of the block
  int32_t pad[3];
};

struct MlaDecodeParams {
  const void* q;                   // [num_tokens, num_heads, 576] bf16 (q_nope @ W_UK | q_pe)
  const void* cache;               // [num_blocks, block_size, 576] bf16 or fp8 e4m3
  void* out;                       // [num_tokens, num_heads, 512] bf16 (items with split < 0)
  float* lse;                      // optional [num_tokens, num_heads] natural log (split < 0)
  float* partial_out;              // [max_splits, num_tokens * num_heads, 512] normalized
  float* partial_lse;              // [max_splits, num_tokens * num_heads] natural log
  const int32_t* block_table;      // [num_requests, max_blocks_per_request]
  const int32_t* cu_seqlens_q;     // [num_requests + 1] (decode tokens come first)
  const int32_t* context_lens;     // [num_requests]
  const MlaDecodeWorkItem* items;  // [num_items]
  int32_t num_items;
  int32_t num_tokens;  // decode tokens
  int32_t num_heads;
  int32_t max_blocks_per_request;
  int32_t block_size;
  int32_t log2_block_size;
  float scale_log2;  // softmax scale * cache scale * log2(e)
  float out_scale;   // cache scale for fp8 (values are raw e4m3), 1 otherwise
  int32_t pdl;       // host side: launch as a programmatic dependent (launch_kernel.h)
};

// Non-absorbed path, step 1: latent rows of one pass gathered into a contiguous workspace.
// Segment s copies keys [key_begin, key_begin + len) of request `request` into workspace rows
// [ws_row, ws_row + len) (ws_row a multiple of 64); rows up to the next multiple of 64 are
// zeroed. The 512 c_kv dims go to `latent_ws` (widened, unscaled: the GEMM's alpha carries the
// fp8 scale); the 64 k_pe dims, times the cache scale, go to dims 128..191 of every head of K.
struct MlaGatherSegment {
  int32_t request;
  int32_t key_begin;
  int32_t len;
  int32_t ws_row;
};

struct MlaGatherParams {
  const void* cache;                 // [num_blocks, block_size, 576] bf16 or fp8 e4m3
  const int32_t* block_table;        // [num_requests, max_blocks_per_request]
  const MlaGatherSegment* segments;  // [num_segments]
  void* latent_ws;                   // [ws_rows, 512] bf16
  void* k_ws;                        // [ws_rows, num_heads, 192] bf16
  int32_t num_segments;
  int32_t max_rows;  // longest segment rounded up to 64 (grid extent)
  int32_t num_heads;
  int32_t max_blocks_per_request;
  int32_t block_size;
  float scale;  // fp8 cache scale, 1 otherwise
};

// Non-absorbed path, step 3: one pass's partial states (o_p, lse_p) folded into the running
// state of every token the pass covered (shared/DESIGN.md section 5). Range i covers tokens
// [token_begin, token_end) (relative to the partial buffers); flags: kMlaFirstPart (no running
// state yet: it becomes the part), kMlaLastPart (write the final output and LSE instead).
inline constexpr int32_t kMlaFirstPart = 1;
inline constexpr int32_t kMlaLastPart = 2;

struct MlaMergeRange {
  int32_t token_begin;
  int32_t token_end;
  int32_t flags;
  int32_t pad;
};

struct MlaMergePartsParams {
  const float* part_out;        // [tokens, num_heads, 128] this pass's normalized outputs
  const float* part_lse;        // [tokens, num_heads] natural log; -inf: no keys
  float* acc_out;               // [tokens, num_heads, 128] running state
  float* acc_lse;               // [tokens, num_heads]
  void* out;                    // [tokens, num_heads, 128] bf16 final output (same rows)
  float* lse;                   // optional [tokens, num_heads] final LSE
  const MlaMergeRange* ranges;  // [num_ranges]
  int32_t num_ranges;
  int32_t max_range_tokens;  // grid extent
  int32_t num_heads;
};

}  // namespace tripath::kernels
