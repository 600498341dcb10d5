// Host/device addressing of the paged KV cache layouts, in 16-byte chunks: the kernels' mirror of
// kv_cache_offset() in include/tripath/kv_cache.h (the tests check they agree).
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#define TRIPATH_HD __host__ __device__ __forceinline__
#else
#define TRIPATH_HD inline
#endif

namespace tripath::kernels {

enum KvLayoutId : int32_t { kLayoutNHD = 0, kLayoutHND = 1, kLayoutTiled = 2 };

// Physical chunk of logical chunk `chunk` in row `row` of the tiled layout (see kv_cache.h).
TRIPATH_HD int tiled_chunk_of(int chunk, int row, int chunks_per_row) {
  int w = 8;
  while (w > 1 && (w > chunks_per_row || chunks_per_row % w != 0)) w >>= 1;
  return (chunk & ~(w - 1)) | ((chunk ^ row) & (w - 1));
}

// Element offset of the first element of 16-byte chunk `chunk` of (block, slot, head), for
// head_dim elements per row and `per_chunk` elements per chunk.
TRIPATH_HD int64_t kv_chunk_offset(int layout, int64_t block, int slot, int head, int chunk,
                                   int block_size, int num_kv_heads, int head_dim,
                                   int per_chunk) {
  if (layout == kLayoutNHD)
    return ((block * block_size + slot) * num_kv_heads + head) * head_dim + chunk * per_chunk;
  const int64_t row = ((block * num_kv_heads + head) * block_size + slot) * head_dim;
  if (layout == kLayoutHND) return row + chunk * per_chunk;
  return row + tiled_chunk_of(chunk, slot, head_dim / per_chunk) * per_chunk;
}

}  // namespace tripath::kernels
