// Gather of one extend context chunk into the contiguous workspace (see gather_context.h).
// Grid: (workspace block, KV head); each thread moves 16-byte chunks of K and V rows, addressed
// through kv_chunk_offset on both sides, so the tiled layout's per-slot chunk order is undone at
// the source slot and redone at the workspace slot (they differ when the piece does not start on
// a cache block boundary). A batch of loads is issued before its stores to keep several 16-byte
// reads in flight per thread.
#include "common/kv_layout.h"
#include "prefill/gather_context.h"

namespace tripath::kernels {
namespace {

constexpr int kGatherThreads = 128;
constexpr int kGatherBatch = 4;  // 16-byte units per thread in flight (K and V each)

// E: an integer type of the cache element's size (offsets count elements).
template <typename E>
__global__ void __launch_bounds__(kGatherThreads)
    gather_context_kernel(const __grid_constant__ GatherContextParams p) {
  constexpr int kPer = 16 / sizeof(E);  // elements per 16-byte chunk
  const GatherBlock g = p.blocks[blockIdx.x];
  const int head = blockIdx.y;
  const int chunks = p.head_dim / kPer;
  const int units = g.rows * chunks;
  const int32_t* table = p.block_table + int64_t(g.request) * p.max_blocks_per_request;
  const E* kc = static_cast<const E*>(p.k_cache);
  const E* vc = static_cast<const E*>(p.v_cache);
  E* ko = static_cast<E*>(p.k_out);
  E* vo = static_cast<E*>(p.v_out);

  for (int base = 0; base < units; base += kGatherThreads * kGatherBatch) {
    uint4 kb[kGatherBatch], vb[kGatherBatch];
    int64_t dst[kGatherBatch];
#pragma unroll
    for (int u = 0; u < kGatherBatch; ++u) {
      const int idx = base + u * kGatherThreads + static_cast<int>(threadIdx.x);
      dst[u] = -1;
      if (idx < units) {
        const int row = idx / chunks, c = idx % chunks, key = g.key_begin + row;
        const int64_t src = kv_chunk_offset(p.layout, table[key >> p.log2_block_size],
                                            key & (p.block_size - 1), head, c, p.block_size,
                                            p.num_kv_heads, p.head_dim, kPer);
        dst[u] = kv_chunk_offset(p.layout, blockIdx.x, row, head, c, kGatherBlockSize,
                                 p.num_kv_heads, p.head_dim, kPer);
        kb[u] = __ldg(reinterpret_cast<const uint4*>(kc + src));
        vb[u] = __ldg(reinterpret_cast<const uint4*>(vc + src));
      }
    }
#pragma unroll
    for (int u = 0; u < kGatherBatch; ++u) {
      if (dst[u] >= 0) {
        *reinterpret_cast<uint4*>(ko + dst[u]) = kb[u];
        *reinterpret_cast<uint4*>(vo + dst[u]) = vb[u];
      }
    }
  }
}

}  // namespace

cudaError_t launch_gather_context(const GatherContextParams& p, DType cache, cudaStream_t stream) {
  if (p.num_blocks == 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned>(p.num_blocks), static_cast<unsigned>(p.num_kv_heads));
  if (cache == DType::kFP8E4M3) {
    gather_context_kernel<uint8_t><<<grid, kGatherThreads, 0, stream>>>(p);
  } else if (cache == DType::kBF16 || cache == DType::kF16) {
    gather_context_kernel<uint16_t><<<grid, kGatherThreads, 0, stream>>>(p);
  } else {
    return cudaErrorInvalidValue;  // the backend validates the cache dtype first
  }
  return cudaGetLastError();
}

}  // namespace tripath::kernels
