#include <omp.h>

#include "tripath/backend.h"

#ifdef TRIPATH_WITH_CUDA
#include "../backends/cuda/cuda_entry.h"
#include "../backends/cuda/device_info.h"
#endif

namespace tripath {

BuildInfo build_info() {
  BuildInfo info;
  info.version = TRIPATH_VERSION;
#ifdef TRIPATH_WITH_CUDA
  info.with_cuda = true;
#endif
  info.num_threads = omp_get_max_threads();
#ifdef TRIPATH_WITH_CUDA
  info.cuda_archs = TRIPATH_CUDA_ARCHS;
  info.cuda_specializations = cuda_specializations_text();
  const CudaDeviceInfo& gpu = cuda_device_info();
  info.gpu_found = gpu.found;
  info.gpu_name = gpu.name;
  info.gpu_sm_count = gpu.sm_count;
  info.gpu_compute_capability = gpu.compute_capability;
  info.gpu_memory_bytes = gpu.memory_bytes;
#endif
  return info;
}

}  // namespace tripath
