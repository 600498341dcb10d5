// One kernel launch, optionally as a programmatic dependent of the kernel before it in the
// stream (cudaLaunchAttributeProgrammaticStreamSerialization, sm_90): its blocks may be scheduled
// while that kernel finishes, instead of after it, which hides the launch latency between the
// small kernels of a decode step (cache write -> decode -> merge). A kernel launched this way
// must call pdl_wait() (device_math.cuh) before its first global access. Without `pdl` it is a
// plain launch; inside stream capture the attribute becomes a programmatic graph edge. Returns
// the launch's error, else cudaGetLastError() (what `<<<>>>` then cudaGetLastError gave).
#pragma once

#include <cuda_runtime.h>

namespace tripath::kernels {

template <typename... Params, typename... Args>
cudaError_t launch_kernel(bool pdl, void (*kernel)(Params...), dim3 grid, dim3 block,
                          size_t smem_bytes, cudaStream_t stream, const Args&... args) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem_bytes;
  cfg.stream = stream;
  cfg.attrs = pdl ? attr : nullptr;
  cfg.numAttrs = pdl ? 1 : 0;
  const cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, args...);
  return e != cudaSuccess ? e : cudaGetLastError();
}

}  // namespace tripath::kernels
