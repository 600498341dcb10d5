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

// The same, with the blocks grouped in clusters of `cluster_x` along x (cluster_x > 1: grid.x a
// multiple of it; sm_90 thread-block clusters).
template <typename... Params, typename... Args>
cudaError_t launch_kernel_in_clusters(bool pdl, unsigned cluster_x, void (*kernel)(Params...),
                                      dim3 grid, dim3 block, size_t smem_bytes, cudaStream_t stream,
                                      const Args&... args) {
  cudaLaunchAttribute attr[2];
  unsigned n = 0;
  if (pdl) {
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (cluster_x > 1) {
    attr[n].id = cudaLaunchAttributeClusterDimension;
    attr[n].val.clusterDim.x = cluster_x;
    attr[n].val.clusterDim.y = 1;
    attr[n++].val.clusterDim.z = 1;
  }
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem_bytes;
  cfg.stream = stream;
  cfg.attrs = n > 0 ? attr : nullptr;
  cfg.numAttrs = n;
  const cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, args...);
  return e != cudaSuccess ? e : cudaGetLastError();
}

template <typename... Params, typename... Args>
cudaError_t launch_kernel(bool pdl, void (*kernel)(Params...), dim3 grid, dim3 block,
                          size_t smem_bytes, cudaStream_t stream, const Args&... args) {
  return launch_kernel_in_clusters(pdl, 1, kernel, grid, block, smem_bytes, stream, args...);
}

}  // namespace tripath::kernels
