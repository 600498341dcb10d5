// poison_shared_memory: every SM's shared memory set to 0xFF bytes (NaN) before a kernel under
// test (shared_memory_poison.cu).
#pragma once

#include <cuda_runtime.h>

namespace tripath::gputest {

cudaError_t poison_shared_memory(cudaStream_t stream);

}  // namespace tripath::gputest
