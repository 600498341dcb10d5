#include "device_info.h"

#include <cuda_runtime.h>

namespace tripath {

const CudaDeviceInfo& cuda_device_info() {
  static const CudaDeviceInfo info = [] {
    CudaDeviceInfo i;
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
      cudaGetLastError();  // clear the sticky "no device" error
      return i;
    }
    int device = 0;
    cudaDeviceProp prop{};
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
      cudaGetLastError();
      return i;
    }
    i.found = true;
    i.name = prop.name;
    i.sm_count = prop.multiProcessorCount;
    i.compute_capability = prop.major * 10 + prop.minor;
    i.memory_bytes = static_cast<long long>(prop.totalGlobalMem);
    return i;
  }();
  return info;
}

}  // namespace tripath
