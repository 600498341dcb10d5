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

// Dims [d, d + 4) of one merged row, on its own: the rows' fallback for more than kMaxParts
// parts. Part i of the row is at part_out[(i * part_stride + row) * dim] (normalized, f32) with
// natural LSE part_lse[i * part_stride + row] (-inf: empty); read from L2 (__ldcg: other blocks
// wrote them during this launch). `sink`: -inf for none. Writes out[d .. d + 3] and, when
// lse_out is set, *lse_out.
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

// The block's rows [0, rows) (kRows at most, kDim dims, kThreads threads) merged from `parts`
// parts; local row r is global row grow(r) with sink sink_of(r) (-inf: none); outputs at
// out + grow(r) * kDim and lse[grow(r)] (lse may be null). Two round trips to L2 rather than a
// dependent chain per 4 dims (which cost 13 us of a 99 us MLA kernel, run e3): the rows' part
// weights and 1 / total go to shared memory first (`scratch`: kRows * (kMaxParts + 1) floats of
// shared memory the block no longer uses), then each thread loads its chunks of every part,
// independent loads, and sums them in part order. Same arithmetic and order as the merge
// kernel's vectorized form: the same bits.
template <typename OutT, int kRows, int kDim, int kThreads, class GlobalRow, class SinkOf>
__device__ __forceinline__ void merge_last_split_rows(const float* part_out, const float* part_lse,
                                                      int64_t part_stride, int parts, int rows,
                                                      GlobalRow grow, SinkOf sink_of, OutT* out,
                                                      float* lse, float* scratch) {
  constexpr int kMaxParts = 128;
  constexpr int kVec = kDim / 4;                          // 4-dim chunks per row
  constexpr int kPer = (kRows * kVec + kThreads - 1) / kThreads;  // chunks per thread
  static_assert(kDim % 4 == 0, "whole 4-dim chunks");
  const int tid = threadIdx.x;
  if (parts > kMaxParts) {
    for (int idx = tid; idx < rows * kVec; idx += kThreads) {
      const int r = idx / kVec, d = (idx % kVec) * 4;
      const int64_t g = grow(r);
      merge_last_split_chunk<OutT>(part_out, part_lse, part_stride, parts, g, kDim, d, sink_of(r),
                                   out + g * kDim, d == 0 && lse != nullptr ? lse + g : nullptr);
    }
    return;
  }
  float* s_w = scratch;                       // [kRows][kMaxParts]: LSEs, then weights
  float* s_inv = scratch + kRows * kMaxParts;  // [kRows]
  for (int idx = tid; idx < rows * parts; idx += kThreads) {
    const int r = idx / parts, i = idx % parts;
    s_w[r * kMaxParts + i] = __ldcg(part_lse + i * part_stride + grow(r));
  }
  __syncthreads();
  for (int r = tid; r < rows; r += kThreads) {
    float* w = s_w + r * kMaxParts;
    const float sink = sink_of(r);
    float mx = sink;
    for (int i = 0; i < parts; ++i) mx = fmaxf(mx, w[i]);
    float total = 0.0f, lse_r = -INFINITY, inv = 0.0f;
    if (mx != -INFINITY) {
      total = sink != -INFINITY ? expf(sink - mx) : 0.0f;
      for (int i = 0; i < parts; ++i) {
        const float x = w[i] != -INFINITY ? expf(w[i] - mx) : 0.0f;
        total += x;
        w[i] = x;
      }
      inv = 1.0f / total;
      lse_r = mx + logf(total);
    } else {
      for (int i = 0; i < parts; ++i) w[i] = 0.0f;  // an empty row: 0 out, LSE -inf
    }
    s_inv[r] = inv;
    if (lse != nullptr) lse[grow(r)] = lse_r;
  }
  __syncthreads();
  // Chunk k of this thread: idx = tid + k kThreads (row idx / kVec). At most 8 chunks' sums in
  // registers at a time (64-row MLA blocks hold 32 chunks per thread).
  constexpr int kBatch = kPer < 8 ? kPer : 8;
  for (int k0 = 0; k0 < kPer; k0 += kBatch) {
    float4 acc[kBatch];
#pragma unroll
    for (int k = 0; k < kBatch; ++k) acc[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    // An empty part (weight 0, its slot written as zeros) adds fmaf(0, x, acc) = acc: the merge
    // kernel's skip, without a branch between the loads.
#pragma unroll 2
    for (int i = 0; i < parts; ++i) {
      const float* part = part_out + i * part_stride * kDim;
#pragma unroll
      for (int k = 0; k < kBatch; ++k) {
        const int idx = tid + (k0 + k) * kThreads;
        if (idx >= rows * kVec) continue;
        const int r = idx / kVec;
        const float w = s_w[r * kMaxParts + i];
        const float4 x =
            __ldcg(reinterpret_cast<const float4*>(part + grow(r) * kDim + (idx % kVec) * 4));
        acc[k].x = fmaf(w, x.x, acc[k].x);
        acc[k].y = fmaf(w, x.y, acc[k].y);
        acc[k].z = fmaf(w, x.z, acc[k].z);
        acc[k].w = fmaf(w, x.w, acc[k].w);
      }
    }
#pragma unroll
    for (int k = 0; k < kBatch; ++k) {
      const int idx = tid + (k0 + k) * kThreads;
      if (idx >= rows * kVec) continue;
      const int r = idx / kVec;
      const float inv = s_inv[r];
      *reinterpret_cast<uint2*>(out + grow(r) * kDim + (idx % kVec) * 4) =
          make_uint2(pack2<OutT>(acc[k].x * inv, acc[k].y * inv),
                     pack2<OutT>(acc[k].z * inv, acc[k].w * inv));
    }
  }
}

}  // namespace tripath::kernels
