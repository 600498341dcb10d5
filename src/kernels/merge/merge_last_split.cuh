// The split-KV merge done by the decode kernels themselves: every block of a group of splits
// (the same rows over disjoint key ranges) writes its partial state, then counts itself in on
// the group's counter; the block that arrives last merges the group's rows, exactly as
// merge_states.cu does (same weights, sinks as one more part, empty rows -> 0 and LSE -inf), and
// sets the counter back to 0 for the next launch (counters start zeroed, once, at allocation).
// What it saves: the merge kernel's launch and its wait on the decode kernel's tail (5.6 us of
// a 48 us tp8 decode step on the H200, ncu). Used by the split-KV decode kernel (three_path)
// and the packed MLA decode kernel; the separate kernel stays for every other writer.
#pragma once

#include <cstdint>

#include "common/device_math.cuh"

namespace tripath::kernels {

// Whether this block arrived last at `counter` among `parts` blocks: the same answer in every
// thread. Call after the block's partial stores; the fences order them before the count (the
// writers) and the other blocks' stores before the merge's loads (the last block).
__device__ __forceinline__ bool merge_last_split_arrives(int32_t* counter, int parts) {
  __shared__ int s_last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) s_last = atomicAdd(counter, 1) == parts - 1;
  __syncthreads();
  const bool last = s_last != 0;
  if (last) __threadfence();
  return last;
}

// Dims [d, d + 4) of one merged row. Part i of the row is at part_out[(i * part_stride + row) *
// dim] (normalized, f32) with natural LSE part_lse[i * part_stride + row] (-inf: empty); read
// from L2 (__ldcg: other blocks wrote them during this launch). `sink`: -inf for none. Writes
// out[d .. d + 3] and, when lse_out is set, *lse_out.
template <typename OutT>
__device__ __forceinline__ void merge_last_split_chunk(const float* part_out, const float* part_lse,
                                                       int64_t part_stride, int parts, int64_t row,
                                                       int dim, int d, float sink, OutT* out,
                                                       float* lse_out) {
  float mx = sink;
  for (int i = 0; i < parts; ++i) mx = fmaxf(mx, __ldcg(part_lse + i * part_stride + row));
  if (mx == -INFINITY) {
    const uint32_t zero = pack2<OutT>(0.0f, 0.0f);
    *reinterpret_cast<uint2*>(out + d) = make_uint2(zero, zero);
    if (lse_out != nullptr) *lse_out = -INFINITY;
    return;
  }
  float total = sink != -INFINITY ? expf(sink - mx) : 0.0f;
  float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  for (int i = 0; i < parts; ++i) {
    const float l = __ldcg(part_lse + i * part_stride + row);
    if (l == -INFINITY) continue;
    const float w = expf(l - mx);
    total += w;
    const float4 x =
        __ldcg(reinterpret_cast<const float4*>(part_out + (i * part_stride + row) * dim + d));
    acc.x = fmaf(w, x.x, acc.x);
    acc.y = fmaf(w, x.y, acc.y);
    acc.z = fmaf(w, x.z, acc.z);
    acc.w = fmaf(w, x.w, acc.w);
  }
  const float inv = 1.0f / total;
  *reinterpret_cast<uint2*>(out + d) =
      make_uint2(pack2<OutT>(acc.x * inv, acc.y * inv), pack2<OutT>(acc.z * inv, acc.w * inv));
  if (lse_out != nullptr) *lse_out = mx + logf(total);
}

}  // namespace tripath::kernels
