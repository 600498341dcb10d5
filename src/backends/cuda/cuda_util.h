// Error checking and device memory for the CUDA backends.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <string>

#include "tripath/error.h"

#define TRIPATH_CUDA_CHECK(expr)                                                           \
  do {                                                                                     \
    const cudaError_t tripath_err_ = (expr);                                               \
    if (tripath_err_ != cudaSuccess) {                                                     \
      throw ::tripath::Error(std::string("tripath: CUDA error '") +                        \
                             cudaGetErrorString(tripath_err_) + "' from " #expr);          \
    }                                                                                      \
  } while (0)

namespace tripath {

// Grow-only device allocation: prepare() sizes it, run() only uses it.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  void ensure(size_t bytes) {
    if (bytes <= size_) return;
    if (ptr_ != nullptr) TRIPATH_CUDA_CHECK(cudaFree(ptr_));
    ptr_ = nullptr;
    size_ = 0;
    TRIPATH_CUDA_CHECK(cudaMalloc(&ptr_, bytes));
    size_ = bytes;
  }
  template <typename T>
  T* as(size_t byte_offset = 0) const {
    return reinterpret_cast<T*>(static_cast<char*>(ptr_) + byte_offset);
  }
  size_t size() const { return size_; }

 private:
  void* ptr_ = nullptr;
  size_t size_ = 0;
};

}  // namespace tripath
