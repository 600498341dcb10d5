// Online softmax on accumulator fragments (the wgmma m64nN / mma.sync m16n8 layout: each thread
// holds two rows, g and g + 8 of its warp's 16, as element pairs 4 j + 2 i and 4 j + 2 i + 1 for
// row i, and a row's columns spread over the 4 lanes of a quad), shared by the Hopper kernels
// that keep S and O in registers (flash prefill, MLA wgmma decode).
#pragma once

#include <cstdint>

#include "common/device_math.cuh"

namespace tripath::kernels {

// s: a tile's scores of kN columns (masked keys -inf) whose base-2 logits are s * scale
// (scale > 0: the max of the scaled scores is the scaled max, so the scale folds into the
// exponent's FMA instead of a multiply per element; 1 when s is already scaled). Updates the
// running max m (base-2 logits) and sum l of both rows, leaves the probabilities in s and each
// row's rescale factor for O in alpha. A row with nothing visible yet keeps m = -inf and weight
// 0 (alpha 0 while it is -inf). kSlack > 0 (in log2 units): a row keeps its running max unless
// the tile's exceeds it by more than kSlack (its probabilities then reach up to 2^kSlack, and
// alpha is exactly 1), so O needs rescaling only on the few tiles that raise a row's max by that
// much; exact all the same, since O, l and the LSE share whatever reference max the row keeps.
template <int kN, int kSlack = 0>
__device__ __forceinline__ void fragment_online_softmax(float (&s)[kN / 2], float (&m)[2],
                                                        float (&l)[2], float (&alpha)[2],
                                                        float scale = 1.0f) {
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    float mx = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < kN / 8; ++nt)
      mx = fmaxf(mx, fmaxf(s[nt * 4 + 2 * i], s[nt * 4 + 2 * i + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float m_new =
        kSlack > 0 && mx * scale <= m[i] + float(kSlack) ? m[i] : fmaxf(m[i], mx * scale);
    const float base = m_new == -INFINITY ? 0.0f : m_new;
    alpha[i] = fast_exp2(m[i] - base);
    m[i] = m_new;
    float sum = 0.0f;
#pragma unroll
    for (int nt = 0; nt < kN / 8; ++nt) {
      s[nt * 4 + 2 * i] = fast_exp2(fmaf(s[nt * 4 + 2 * i], scale, -base));
      s[nt * 4 + 2 * i + 1] = fast_exp2(fmaf(s[nt * 4 + 2 * i + 1], scale, -base));
      sum += s[nt * 4 + 2 * i] + s[nt * 4 + 2 * i + 1];
    }
    l[i] = l[i] * alpha[i] + sum;
  }
}

// o: an accumulator of kN columns; both rows scaled by their factor.
template <int kN>
__device__ __forceinline__ void fragment_scale_rows(float (&o)[kN / 2], const float (&alpha)[2]) {
#pragma unroll
  for (int i = 0; i < 2; ++i) {
#pragma unroll
    for (int dn = 0; dn < kN / 8; ++dn) {
      o[dn * 4 + 2 * i] *= alpha[i];
      o[dn * 4 + 2 * i + 1] *= alpha[i];
    }
  }
}

// P as the A operand of an RS wgmma (or of mma.sync), 16 columns per k-step: the accumulator
// layout is the A operand layout, so packing pairs to T is all it takes.
template <typename T, int kN>
__device__ __forceinline__ void fragment_pack_a(const float (&s)[kN / 2],
                                                uint32_t (&pa)[kN / 16][4]) {
#pragma unroll
  for (int kk = 0; kk < kN / 16; ++kk) {
    pa[kk][0] = pack2<T>(s[8 * kk + 0], s[8 * kk + 1]);
    pa[kk][1] = pack2<T>(s[8 * kk + 2], s[8 * kk + 3]);
    pa[kk][2] = pack2<T>(s[8 * kk + 4], s[8 * kk + 5]);
    pa[kk][3] = pack2<T>(s[8 * kk + 6], s[8 * kk + 7]);
  }
}

}  // namespace tripath::kernels
