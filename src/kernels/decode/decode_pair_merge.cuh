// The split-KV decode kernel's pair merge (decode_split_kv.cuh, p.cluster_splits = 2): rank 0
// of a 2-CTA cluster merges its partner's normalized rows with its own and stores the output.
#pragma once

#include <cstdint>

#include "common/device_math.cuh"
#include "unified/params.h"

namespace tripath::kernels {

// The pair's merge (p.cluster_splits = 2), run by rank 0 after the cluster barrier: its own
// normalized rows (left in place in the combine's buffer, row stride `own_stride`) and LSEs, the
// peer's pushed into peer_o / peer_lse, merged as merge_states does (o = sum w_i o_i / sum w_i,
// w_i = exp(lse_i - max), sinks one more part with output 0; an all-empty row 0 and -inf).
template <int D, typename T>
__device__ __forceinline__ void decode_pair_merge(const UnifiedParams& p, const UnifiedWorkItem& it,
                                                  int row_end, const float* own_o, int own_stride,
                                                  const float* own_lse, const float* peer_o,
                                                  const float* peer_lse) {
  constexpr float kNegInf = -INFINITY;
  const int tok0 = p.cu_seqlens_q[it.request], rpt = p.rows_per_token;
  for (int idx = threadIdx.x; idx < 16 * (D / 4); idx += blockDim.x) {
    const int r = idx / (D / 4), d = (idx % (D / 4)) * 4, gr = it.row_begin + r;
    if (gr >= row_end) continue;
    const int head = it.q_head + gr % rpt;
    const int64_t row = int64_t(tok0 + gr / rpt) * p.num_q_heads + head;
    const float sink = p.sinks != nullptr ? p.sinks[head] : kNegInf;
    const float l0 = own_lse[r], l1 = peer_lse[r];
    const float mx = fmaxf(sink, fmaxf(l0, l1));
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    float inv = 0.0f, lse = kNegInf;
    if (mx != kNegInf) {
      const float w0 = l0 != kNegInf ? expf(l0 - mx) : 0.0f;
      const float w1 = l1 != kNegInf ? expf(l1 - mx) : 0.0f;
      const float total = w0 + w1 + (p.sinks != nullptr ? expf(sink - mx) : 0.0f);
      const float4 a = *reinterpret_cast<const float4*>(own_o + r * own_stride + d);
      const float4 b = *reinterpret_cast<const float4*>(peer_o + r * D + d);
      acc = make_float4(w0 * a.x + w1 * b.x, w0 * a.y + w1 * b.y, w0 * a.z + w1 * b.z,
                        w0 * a.w + w1 * b.w);
      inv = 1.0f / total;
      lse = mx + logf(total);
    }
    uint2 packed;
    packed.x = pack2<T>(acc.x * inv, acc.y * inv);
    packed.y = pack2<T>(acc.z * inv, acc.w * inv);
    *reinterpret_cast<uint2*>(static_cast<T*>(p.out) + row * D + d) = packed;
    if (d == 0 && p.lse != nullptr) p.lse[row] = lse;
  }
}

}  // namespace tripath::kernels
