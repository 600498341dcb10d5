#pragma once

#include <string>

namespace tripath {

struct CudaDeviceInfo {
  bool found = false;
  std::string name;
  int sm_count = 0;
  int compute_capability = 0;  // major * 10 + minor
  long long memory_bytes = 0;
};

// The current CUDA device, or found == false when there is none (or no driver).
const CudaDeviceInfo& cuda_device_info();

}  // namespace tripath
