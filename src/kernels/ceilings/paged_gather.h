// A paged gather with nothing computed: every cache row a decode step reads, through its block
// list, with 16-byte loads (shared/BENCH.md quotes this floor for decode-4k and its 1-KV-head
// shard). The bench times it on the step's own cache and blocks, so a decode kernel's time can
// be read against the fastest the same rows come out of HBM, not only against a linear copy.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace tripath::kernels {

inline constexpr int kPagedGatherSumWords = 256;  // the checksum's words (tripath/device.h)

struct PagedGatherParams {
  const unsigned char* k_cache;
  const unsigned char* v_cache;
  const int32_t* blocks;  // [num_entries] physical block ids
  const int32_t* rows;    // [num_entries] rows [0, rows[i]) of blocks[i] are read
  int32_t num_entries;
  int32_t log2_block_size;
  int32_t num_kv_heads;
  int32_t log2_row_chunks;  // 16-byte chunks per row (head_dim x element size / 16)
  int32_t layout;           // KvLayoutId (the tiled layout reads as HND: chunk order is moot)
  uint32_t* checksum;       // [kPagedGatherSumWords]: their sum gains every 32-bit word read
};

cudaError_t launch_paged_gather_impl(const PagedGatherParams& p, cudaStream_t stream);

}  // namespace tripath::kernels
