#include "common/stream_hold.h"

#include "common/device_math.cuh"

namespace tripath::kernels {
namespace {

__global__ void stream_hold_kernel(const volatile int32_t* flag, unsigned long long timeout_ns) {
  const unsigned long long start = global_timer_ns(0);
  // Polls the host's flag over the bus; 1 us apart is fine-grained enough for a timer's start.
  while (*flag == 0 && global_timer_ns(0) - start < timeout_ns) __nanosleep(1000);
}

}  // namespace

cudaError_t launch_stream_hold(const volatile int32_t* flag, unsigned long long timeout_ns,
                               cudaStream_t stream) {
  if (flag == nullptr) return cudaErrorInvalidValue;
  stream_hold_kernel<<<1, 1, 0, stream>>>(flag, timeout_ns);
  return cudaGetLastError();
}

}  // namespace tripath::kernels
