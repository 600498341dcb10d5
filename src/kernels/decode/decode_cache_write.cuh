// The split-KV decode kernel's fused cache write (decode_split_kv.cuh): the block whose keys
// hold a decode step's new rows stores them into the paged cache before its copies read them.
#pragma once

#include <cstdint>
#include <type_traits>

#include "common/device_math.cuh"
#include "unified/params.h"

namespace tripath::kernels {

// The fused cache write (p.new_k set): this step's new K / V rows of keys [lo, lo + count) of
// one request and KV head, token `tok` holding key lo, into their cache slots, as the cache-write
// kernel stores them (fp8: e4m3(x / scale), the same division and rounding, so the caches agree
// bit for bit). `offset(key, c)`: the element offset of the key's 16-byte chunk c, the one the
// kernel's copies read. Each thread moves chunks, strided by the block's threads.
template <int D, typename T, typename KvT, typename Offset>
__device__ __forceinline__ void decode_write_new_rows(const UnifiedParams& p, int kv_head, int tok,
                                                      int lo, int count, Offset offset) {
  constexpr bool kFp8 = std::is_same_v<KvT, fp8>;
  constexpr int kPer = kFp8 ? 16 : 8, kChunks = D / kPer;
  for (int u = threadIdx.x; u < count * kChunks; u += blockDim.x) {
    const int j = u / kChunks, c = u % kChunks;
    const int64_t src = (int64_t(tok + j) * p.num_kv_heads + kv_head) * D + c * kPer;
    const int64_t dst = offset(lo + j, c);
    const uint4* k = reinterpret_cast<const uint4*>(static_cast<const T*>(p.new_k) + src);
    const uint4* v = reinterpret_cast<const uint4*>(static_cast<const T*>(p.new_v) + src);
    // The caches are read-only to every other kernel reading UnifiedParams, hence const there.
    KvT* kc = static_cast<KvT*>(const_cast<void*>(p.k_cache));
    KvT* vc = static_cast<KvT*>(const_cast<void*>(p.v_cache));
    if constexpr (!kFp8) {
      const uint4 kr = k[0], vr = v[0];
      *reinterpret_cast<uint4*>(kc + dst) = kr;
      *reinterpret_cast<uint4*>(vc + dst) = vr;
    } else {
      // A 16-element chunk: two 8-element input loads each.
      const uint2 k0 = fp8x8_from<T>(k[0], p.k_scale), k1 = fp8x8_from<T>(k[1], p.k_scale);
      const uint2 v0 = fp8x8_from<T>(v[0], p.v_scale), v1 = fp8x8_from<T>(v[1], p.v_scale);
      *reinterpret_cast<uint4*>(kc + dst) = make_uint4(k0.x, k0.y, k1.x, k1.y);
      *reinterpret_cast<uint4*>(vc + dst) = make_uint4(v0.x, v0.y, v1.x, v1.y);
    }
  }
}

}  // namespace tripath::kernels
