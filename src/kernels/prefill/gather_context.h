// Gather of one extend context chunk (three_path with TRIPATH_EXTEND_GATHER=1): the chunk's keys
// of every extend request, K and V of all KV heads, copied from the paged cache into a workspace
// that is itself a paged cache of the same layout and dtype with kGatherBlockSize-token blocks.
// Each request's piece starts on a fresh block, so the attention kernels read it unchanged
// through a per-chunk block table (built by the backend) with key positions shifted by the
// piece's start.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "tripath/dtype.h"

namespace tripath::kernels {

// Tokens per workspace block: a power of two the flash and unified kernels take in every layout,
// and a whole flash K/V tile (64 keys), so tiles never straddle a request's pieces.
constexpr int kGatherBlockSize = 64;
constexpr int kGatherLog2BlockSize = 6;

// Workspace block i of a chunk: `rows` (1..kGatherBlockSize) keys of `request`, starting at
// context key `key_begin`, land in slots 0..rows-1 of block i.
struct GatherBlock {
  int32_t request;  // position in the ordered batch (the row of block_table)
  int32_t key_begin;
  int32_t rows;
  int32_t pad;
};

struct GatherContextParams {
  const void* k_cache;  // the paged cache (layout `layout`, `block_size`-token blocks)
  const void* v_cache;
  void* k_out;  // the workspace: the same layout and dtype, kGatherBlockSize-token blocks
  void* v_out;
  const int32_t* block_table;  // [num_requests, max_blocks_per_request] of the paged cache
  const GatherBlock* blocks;   // [num_blocks]
  int32_t num_blocks;
  int32_t max_blocks_per_request;
  int32_t block_size;
  int32_t log2_block_size;
  int32_t num_kv_heads;
  int32_t head_dim;
  int32_t layout;  // KvLayoutId
};

// cache: bf16, f16 or fp8 e4m3 (a byte copy: only the element size matters).
cudaError_t launch_gather_context(const GatherContextParams& p, DType cache, cudaStream_t stream);

}  // namespace tripath::kernels
