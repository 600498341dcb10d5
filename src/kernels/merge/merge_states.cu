// Merge of partial attention states over disjoint key sets: o = sum w_i o_i / sum w_i with
// w_i = exp(lse_i - max lse), lse = max + log sum w_i; -inf parts weigh nothing and a row whose
// parts are all empty gets 0 and -inf, never NaN. Sinks enter as one more part (output 0).
// Grid: one warp per row, lanes over the head dim. Used by split-KV decode (every backend), the
// extend chunks and the public merge entry point. Tests: tests/gpu/test_gpu_kernels.cpp.
// Two forms: the general one (a scalar loop over dims, then parts), and for 16-byte-aligned
// parts (and 4-element-aligned outputs) of dims that are multiples of 4 up to 512 (every case
// the backends produce) a vectorized one that walks the parts once, each lane holding its dims'
// sums in registers: the general loop's load -> FMA chain per (dim, part) serialized ~4 x 16
// memory round trips per row at 512 dims (about 30 us of mla's 190 us at 16 heads).
#include <cstdint>
#include <type_traits>

#include "common/device_math.cuh"
#include "common/launch_kernel.h"
#include "merge/merge_states.h"

namespace tripath::kernels {
namespace {

// The row's part count and its sink's LSE (-inf without sinks).
__device__ __forceinline__ int merge_row_parts(const MergeParams& p, int64_t row) {
  return p.token_parts != nullptr ? p.token_parts[row / p.heads] : p.num_parts;
}
__device__ __forceinline__ float merge_row_sink(const MergeParams& p, int64_t row) {
  return p.sinks != nullptr ? p.sinks[row % p.heads] : -INFINITY;
}

// A row whose parts are all empty: 0 and LSE -inf, never NaN.
template <typename OutT>
__device__ __forceinline__ void merge_write_empty_row(const MergeParams& p, int64_t row, int lane) {
  OutT* out = static_cast<OutT*>(p.out) + row * p.dim;
  for (int d = lane; d < p.dim; d += 32) out[d] = from_float<OutT>(0.0f);
  if (lane == 0 && p.lse != nullptr) p.lse[row] = -INFINITY;
}

// The row's parts and their maximum LSE (sinks included). A row whose parts are all empty is
// written here (0, LSE -inf) and false returned.
template <typename OutT>
__device__ __forceinline__ bool merge_row_start(const MergeParams& p, int64_t row, int lane,
                                                int& parts, float& mx, float& sink) {
  parts = merge_row_parts(p, row);
  mx = -INFINITY;
  for (int i = 0; i < parts; ++i) mx = fmaxf(mx, p.part_lse[i * p.part_stride + row]);
  sink = merge_row_sink(p, row);
  mx = fmaxf(mx, sink);
  if (mx != -INFINITY) return true;
  merge_write_empty_row<OutT>(p, row, lane);
  return false;
}

template <typename OutT>
__global__ void merge_states_kernel(const __grid_constant__ MergeParams p) {
  pdl_wait();  // a programmatic dependent (p.pdl): the kernel that wrote the parts has finished
  const int64_t row = p.row_begin + (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= p.row_end) return;
  int parts;
  float mx, sink;
  if (!merge_row_start<OutT>(p, row, lane, parts, mx, sink)) return;
  OutT* out = static_cast<OutT*>(p.out) + row * p.dim;
  float total = p.sinks != nullptr ? expf(sink - mx) : 0.0f;
  for (int i = 0; i < parts; ++i) {
    const float l = p.part_lse[i * p.part_stride + row];
    if (l != -INFINITY) total += expf(l - mx);
  }
  const float inv = 1.0f / total;
  for (int d = lane; d < p.dim; d += 32) {
    float acc = 0.0f;
    for (int i = 0; i < parts; ++i) {
      const float l = p.part_lse[i * p.part_stride + row];
      if (l != -INFINITY) acc += expf(l - mx) * p.part_out[(i * p.part_stride + row) * p.dim + d];
    }
    out[d] = from_float<OutT>(acc * inv);
  }
  if (lane == 0 && p.lse != nullptr) p.lse[row] = mx + logf(total);
}

// Vectorized form: lane l holds dims [4 (l + 32 k), 4 (l + 32 k) + 4) for k < kVec. The row's
// LSEs are read by the lanes together (lane i: parts i, i + 32, ...) and handed out by shuffle,
// and the parts' outputs are loaded kBatch at a time before any is summed, so a row costs about
// three memory round trips (parts count, LSEs, outputs) whatever its part count; the general
// form's chain (LSE max, LSE sum, then LSE -> output per part, two parts in flight) made the
// merge of a tp8 decode step 5.6 us in ncu. Sums run in the general form's order (sink, then
// parts 0, 1, ...), with the same weights: same rounding.
template <typename OutT, int kVec>
__global__ void merge_states_vec_kernel(const __grid_constant__ MergeParams p) {
  constexpr unsigned kAll = 0xffffffffu;
  constexpr int kBatch = kVec == 1 ? 8 : kVec == 2 ? 4 : 2;  // parts in flight (registers)
  pdl_wait();
  const int64_t row = p.row_begin + (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= p.row_end) return;
  const int parts = merge_row_parts(p, row);
  const float sink = merge_row_sink(p, row);
  auto lse_of = [&](int i) { return i < parts ? p.part_lse[i * p.part_stride + row] : -INFINITY; };
  const float lse_first = lse_of(lane);  // parts 0..31, kept for their weights
  float mx = fmaxf(sink, lse_first);
  for (int i = lane + 32; i < parts; i += 32) mx = fmaxf(mx, lse_of(i));
#pragma unroll
  for (int off = 16; off > 0; off /= 2) mx = fmaxf(mx, __shfl_xor_sync(kAll, mx, off));
  if (mx == -INFINITY) {
    merge_write_empty_row<OutT>(p, row, lane);
    return;
  }
  OutT* out = static_cast<OutT*>(p.out) + row * p.dim;
  const int nvec = p.dim / 4;
  float total = p.sinks != nullptr ? expf(sink - mx) : 0.0f;
  float4 acc[kVec];
#pragma unroll
  for (int k = 0; k < kVec; ++k) acc[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  for (int base = 0; base < parts; base += 32) {
    const float lse_mine = base == 0 ? lse_first : lse_of(base + lane);
    const int n = min(32, parts - base);
    for (int b = 0; b < n; b += kBatch) {
      float lse[kBatch];
      float4 x[kBatch][kVec];
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        lse[u] = __shfl_sync(kAll, lse_mine, (b + u) & 31);
        const bool live = b + u < n && lse[u] != -INFINITY;  // uniform over the warp
        const float4* src = reinterpret_cast<const float4*>(
            p.part_out + ((base + b + u) * p.part_stride + row) * p.dim);
#pragma unroll
        for (int k = 0; k < kVec; ++k) {
          const int v = lane + 32 * k;
          x[u][k] = live && v < nvec ? src[v] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
      }
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        if (b + u >= n || lse[u] == -INFINITY) continue;
        const float w = expf(lse[u] - mx);
        total += w;
#pragma unroll
        for (int k = 0; k < kVec; ++k) {
          acc[k].x = fmaf(w, x[u][k].x, acc[k].x);
          acc[k].y = fmaf(w, x[u][k].y, acc[k].y);
          acc[k].z = fmaf(w, x[u][k].z, acc[k].z);
          acc[k].w = fmaf(w, x[u][k].w, acc[k].w);
        }
      }
    }
  }
  const float inv = 1.0f / total;
  // One store per lane and 4 dims (16 bytes of f32, 8 of 16-bit: the launch checks `out`'s
  // alignment), rounded as from_float rounds.
#pragma unroll
  for (int k = 0; k < kVec; ++k) {
    const int v = lane + 32 * k;
    if (v < nvec) {
      const float4 r = make_float4(acc[k].x * inv, acc[k].y * inv, acc[k].z * inv, acc[k].w * inv);
      if constexpr (std::is_same_v<OutT, float>) {
        *reinterpret_cast<float4*>(out + 4 * v) = r;
      } else {
        *reinterpret_cast<uint2*>(out + 4 * v) =
            make_uint2(pack2<OutT>(r.x, r.y), pack2<OutT>(r.z, r.w));
      }
    }
  }
  if (lane == 0 && p.lse != nullptr) p.lse[row] = mx + logf(total);
}

template <typename OutT>
cudaError_t launch(const MergeParams& p, cudaStream_t stream) {
  const int64_t rows = p.row_end - p.row_begin;
  if (rows <= 0) return cudaSuccess;
  constexpr int kThreads = 128;  // 4 rows per block: a tp8 step's 512 rows reach 128 SMs
  const unsigned blocks = static_cast<unsigned>((rows * 32 + kThreads - 1) / kThreads);
  const bool vec = p.dim % 4 == 0 && p.dim <= 512 &&
                   reinterpret_cast<uintptr_t>(p.part_out) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(p.out) % (4 * sizeof(OutT)) == 0;
  auto kernel = vec && p.dim <= 128   ? merge_states_vec_kernel<OutT, 1>
                : vec && p.dim <= 256 ? merge_states_vec_kernel<OutT, 2>
                : vec                 ? merge_states_vec_kernel<OutT, 4>
                                      : merge_states_kernel<OutT>;
  return launch_kernel(p.pdl != 0, kernel, dim3(blocks), dim3(kThreads), 0, stream, p);
}

}  // namespace

cudaError_t launch_merge_states(const MergeParams& p, DType out, cudaStream_t stream) {
  switch (out) {
    case DType::kF32: return launch<float>(p, stream);
    case DType::kBF16: return launch<bf16>(p, stream);
    case DType::kF16: return launch<fp16>(p, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace tripath::kernels
