// Fills every SM's shared memory with 0xFF bytes (NaN as bf16, f16 and f32) before a kernel under
// test runs, so a kernel that reads shared memory it never wrote (a row its copies leave out)
// meets NaN rather than whatever the last kernel left there. Shared memory is not cleared between
// kernels of one context, so the next kernel's blocks usually find it; a best effort, never a
// false failure.
#include <cuda_runtime.h>

#include "shared_memory_poison.h"

namespace tripath::gputest {
namespace {

__global__ void fill_shared_kernel(int words) {
  extern __shared__ uint4 smem_words[];
  for (int i = threadIdx.x; i < words; i += blockDim.x)
    smem_words[i] = make_uint4(~0u, ~0u, ~0u, ~0u);
  __syncthreads();
}

}  // namespace

cudaError_t poison_shared_memory(cudaStream_t stream) {
  int device = 0, sms = 0, bytes = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (e == cudaSuccess)
    e = cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  if (e == cudaSuccess)
    e = cudaFuncSetAttribute(fill_shared_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             bytes);
  if (e != cudaSuccess) return e;
  // One block per SM (each takes the whole shared memory), twice over for good measure.
  fill_shared_kernel<<<2 * sms, 1024, bytes, stream>>>(bytes / 16);
  return cudaGetLastError();
}

}  // namespace tripath::gputest
