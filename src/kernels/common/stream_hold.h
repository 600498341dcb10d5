// A one-thread kernel that keeps a stream busy for a given time. The GPU timer queues each timed
// call behind one, so the call is already in the stream when its start event records: what the
// events measure is the GPU's work, not the host's launch of it.
#pragma once

#include <cuda_runtime.h>

namespace tripath::kernels {

// Spins one thread for `microseconds` (1..100000) of the GPU's global timer;
// cudaErrorInvalidValue outside that range.
cudaError_t launch_stream_hold(int microseconds, cudaStream_t stream);

}  // namespace tripath::kernels
