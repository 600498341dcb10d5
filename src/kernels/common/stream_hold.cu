#include "common/stream_hold.h"

#include <cstdint>

namespace tripath::kernels {
namespace {

__device__ __forceinline__ uint64_t global_timer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void stream_hold_kernel(uint64_t ns) {
  const uint64_t start = global_timer_ns();
  while (global_timer_ns() - start < ns) {
  }
}

}  // namespace

cudaError_t launch_stream_hold(int microseconds, cudaStream_t stream) {
  if (microseconds < 1 || microseconds > 100000) return cudaErrorInvalidValue;
  stream_hold_kernel<<<1, 1, 0, stream>>>(uint64_t(microseconds) * 1000);
  return cudaGetLastError();
}

}  // namespace tripath::kernels
