// Parameters of the classic paged decode kernels of the two_path backend (shared/DESIGN.md
// section 4): CUDA cores, one thread block per (request, KV head, partition of 256 keys) on the
// fast path, one per (request, query head) on the generic single-pass path.
#pragma once

#include <cstdint>

namespace tripath::kernels {

struct PagedDecodeParams {
  const void* q;                // [num_tokens, num_q_heads, head_dim] T
  void* out;                    // [num_tokens, num_q_heads, head_dim] T (generic path)
  float* lse;                   // optional [num_tokens, num_q_heads] (generic path)
  const void* k_cache;          // layout `layout`, element KvT (T or fp8 e4m3)
  const void* v_cache;
  float* partial_out;           // fast path: [max_partitions, num_tokens, num_q_heads, head_dim]
  float* partial_lse;           // fast path: [max_partitions, num_tokens, num_q_heads]
  const float* sinks;           // optional [num_q_heads] (generic path; fast path has none)
  const int32_t* block_table;   // [num_requests, max_blocks_per_request]
  const int32_t* cu_seqlens_q;  // [num_requests + 1]
  const int32_t* context_lens;  // [num_requests]
  int32_t request_begin;        // decode requests [request_begin, request_end) of the step
  int32_t request_end;
  int32_t max_partitions;       // grid.z of the fast path: ceil(max seq_len / 256)
  int32_t num_tokens;
  int32_t num_q_heads;
  int32_t num_kv_heads;
  int32_t head_dim;
  int32_t max_blocks_per_request;
  int32_t block_size;
  int32_t layout;               // KvLayoutId
  int32_t window_left;          // -1: none (generic path only)
  float scale;                  // softmax scale * k_scale
  float softcap;                // 0: off
  float v_scale;
};

inline constexpr int kDecodePartitionKeys = 256;

}  // namespace tripath::kernels
