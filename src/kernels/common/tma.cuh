// Hopper tensor memory accelerator (TMA, sm_90): a box copy global -> shared described by a
// CUtensorMap (built on the host, passed as a __grid_constant__ parameter), completing on an
// mbarrier that counts its bytes (mbarrier::arrive_expect_tx).
#pragma once

#include <cuda.h>

#include <cstdint>

#include "common/device_math.cuh"

namespace tripath::kernels::tma {

// Copies the box at coordinates (c0, c1, c2) (innermost first, in elements) of a rank-3 map to
// `dst` (aligned to the map's swizzle period: 1024 bytes for 128-byte swizzle).
__device__ __forceinline__ void load_3d(void* dst, const CUtensorMap* map, int c0, int c1, int c2,
                                        uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(smem_addr(bar))
      : "memory");
}

// load_3d into every CTA of the cluster named in `cta_mask` (bit r: rank r): the box lands at
// `dst`'s offset in each of their shared memories and counts its bytes on the mbarrier at `bar`'s
// offset in each. One L2 read for all of them.
__device__ __forceinline__ void load_3d_multicast(void* dst, const CUtensorMap* map, int c0, int c1,
                                                  int c2, uint64_t* bar, uint16_t cta_mask) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
      ".multicast::cluster [%0], [%1, {%2, %3, %4}], [%5], %6;\n" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(smem_addr(bar)),
      "h"(cta_mask)
      : "memory");
}

// A 1-D bulk copy (no tensor map) of `bytes` (a multiple of 16; both addresses 16-byte aligned)
// from global memory to `dst`, completing on the mbarrier at `bar` like load_3d.
__device__ __forceinline__ void bulk_load(void* dst, const void* src, uint32_t bytes,
                                          uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::
          "r"(smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(smem_addr(bar))
      : "memory");
}

// Orders this thread's generic-proxy writes to global memory before later async-proxy reads of
// them (a bulk copy issued by any thread after a barrier that follows this fence).
__device__ __forceinline__ void fence_proxy_async_global() {
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
}

}  // namespace tripath::kernels::tma
