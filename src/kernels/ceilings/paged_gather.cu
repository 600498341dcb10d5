#include "ceilings/paged_gather.h"

#include "common/kv_layout.h"

namespace tripath::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kEntries = 4;  // list entries (cache blocks) per thread block
constexpr int kUnroll = 4;   // K and V loads in flight per thread: 2 x kUnroll x 16 bytes

__device__ __forceinline__ uint4 load_streaming(const unsigned char* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// Block (x, y): list entries [x * kEntries, + kEntries) for KV head y. Sizes are powers of two,
// so a chunk index splits into (entry, row, chunk) by shifts, keeping the loop load-bound.
__global__ void __launch_bounds__(kThreads) paged_gather_kernel(const PagedGatherParams p) {
  __shared__ int64_t s_base[kEntries];  // byte offset of row 0 of (block, head)
  __shared__ int32_t s_rows[kEntries];
  const int head = blockIdx.y, bs = 1 << p.log2_block_size;
  const int row_bytes = 16 << p.log2_row_chunks;
  const bool nhd = p.layout == kLayoutNHD;
  if (threadIdx.x < kEntries) {
    const int e = blockIdx.x * kEntries + threadIdx.x;
    const int64_t block = e < p.num_entries ? p.blocks[e] : 0;
    s_rows[threadIdx.x] = e < p.num_entries ? p.rows[e] : 0;
    // In bytes (row_bytes one-byte elements per row); the tiled layout's rows are HND's.
    s_base[threadIdx.x] = kv_chunk_offset(nhd ? kLayoutNHD : kLayoutHND, block, 0, head, 0, bs,
                                          p.num_kv_heads, row_bytes, 16);
  }
  __syncthreads();
  const int64_t row_stride = nhd ? int64_t(p.num_kv_heads) * row_bytes : row_bytes;
  const int log2_per_entry = p.log2_block_size + p.log2_row_chunks;
  const int total = kEntries << log2_per_entry;
  uint32_t sum = 0;
  for (int base = threadIdx.x; base < total; base += kUnroll * kThreads) {
    uint4 k[kUnroll], v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int idx = base + u * kThreads;
      k[u] = v[u] = make_uint4(0, 0, 0, 0);
      const int e = idx >> log2_per_entry;
      const int r = idx & ((1 << log2_per_entry) - 1);
      const int row = r >> p.log2_row_chunks, c = r & ((1 << p.log2_row_chunks) - 1);
      if (idx < total && row < s_rows[e]) {
        const int64_t off = s_base[e] + row * row_stride + c * 16;
        k[u] = load_streaming(p.k_cache + off);
        v[u] = load_streaming(p.v_cache + off);
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      sum += k[u].x + k[u].y + k[u].z + k[u].w + v[u].x + v[u].y + v[u].z + v[u].w;
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  // One atomic per block, spread over kPagedGatherSumWords words: thousands of blocks adding
  // into one word would queue at one L2 slice and time the atomics instead of the loads.
  __shared__ uint32_t s_sum[kThreads / 32];
  if (threadIdx.x % 32 == 0) s_sum[threadIdx.x / 32] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    uint32_t total = 0;
#pragma unroll
    for (int w = 0; w < kThreads / 32; ++w) total += s_sum[w];
    const int b = blockIdx.y * gridDim.x + blockIdx.x;
    atomicAdd(p.checksum + b % kPagedGatherSumWords, total);
  }
}

}  // namespace

cudaError_t launch_paged_gather_impl(const PagedGatherParams& p, cudaStream_t stream) {
  if (p.num_entries <= 0) return cudaSuccess;
  const dim3 grid((p.num_entries + kEntries - 1) / kEntries, p.num_kv_heads);
  paged_gather_kernel<<<grid, kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace tripath::kernels
