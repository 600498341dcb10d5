// Thread-block clusters (sm_90): the CTA's rank, the cluster-wide barrier, and arrivals on a
// peer CTA's shared-memory mbarrier (distributed shared memory). Used by kernels whose CTAs share
// TMA multicast loads.
#pragma once

#include <cstdint>

#include "common/device_math.cuh"

namespace tripath::kernels::cluster {

__device__ __forceinline__ uint32_t ctarank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
// Every thread of every CTA of the cluster arrives, then waits for all the others: orders the
// CTAs' shared-memory writes and barrier inits before, and keeps a CTA alive until its peers no
// longer address its shared memory.
__device__ __forceinline__ void sync() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}
// Makes this thread's mbarrier.init visible to the cluster (before the sync that publishes it).
__device__ __forceinline__ void fence_mbarrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// One arrival on the mbarrier at the same shared-memory offset as `bar` in CTA `rank`.
__device__ __forceinline__ void arrive_remote(uint64_t* bar, uint32_t rank) {
  asm volatile(
      "{\n.reg .b32 remote;\n"
      "mapa.shared::cluster.u32 remote, %0, %1;\n"
      "mbarrier.arrive.release.cluster.shared::cluster.b64 _, [remote];\n}\n" ::"r"(smem_addr(bar)),
      "r"(rank)
      : "memory");
}

// Stores of a float / float4 to the same shared-memory offset as `p` in CTA `rank` (made visible
// to it by the next cluster barrier).
__device__ __forceinline__ void store_remote(float* p, uint32_t rank, float v) {
  asm volatile(
      "{\n.reg .b32 remote;\n"
      "mapa.shared::cluster.u32 remote, %0, %1;\n"
      "st.shared::cluster.f32 [remote], %2;\n}\n" ::"r"(smem_addr(p)),
      "r"(rank), "f"(v)
      : "memory");
}
__device__ __forceinline__ void store_remote4(float* p, uint32_t rank, float4 v) {
  asm volatile(
      "{\n.reg .b32 remote;\n"
      "mapa.shared::cluster.u32 remote, %0, %1;\n"
      "st.shared::cluster.v4.f32 [remote], {%2, %3, %4, %5};\n}\n" ::"r"(smem_addr(p)),
      "r"(rank), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w)
      : "memory");
}

}  // namespace tripath::kernels::cluster
