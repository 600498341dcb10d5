// A one-thread kernel that holds a stream until the host writes a nonzero flag: a timer enqueues
// its start event, the timed work and its end event behind it, then releases it, so the events'
// interval holds the GPU's work and not the host's launch calls (see time_gpu_calls).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace tripath::kernels {

// `flag`: host-mapped pinned memory (cudaHostAllocMapped) the host sets to nonzero to release the
// stream. The kernel also ends after `timeout_ns` of GPU time, so a host that never releases it
// (an exception between enqueue and release) cannot hang the stream.
cudaError_t launch_stream_hold(const volatile int32_t* flag, unsigned long long timeout_ns,
                               cudaStream_t stream);

}  // namespace tripath::kernels
