// Non-owning strided tensor views. Strides are in elements (int64). The device tag says where the
// memory lives; CPU code refuses CUDA views and the CUDA backends refuse CPU views.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

#include "tripath/dtype.h"

namespace tripath {

enum class Device : uint8_t { kCPU, kCUDA };
const char* device_name(Device d);

constexpr int kMaxDims = 6;

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::kF32;
  Device device = Device::kCPU;
  int device_index = 0;
  int ndim = 0;
  int64_t shape[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};

  // A row-major contiguous view of `data`.
  static TensorView contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape,
                               Device device = Device::kCPU);

  bool defined() const { return ndim > 0; }  // a default view means "not given"
  int64_t numel() const;
  bool is_contiguous() const;
  std::string shape_text() const;  // "[64, 8, 128]"
  template <typename T>
  T* ptr() const {
    return static_cast<T*>(data);
  }
};

// Checks a tensor argument: rank and sizes (-1 in `shape` accepts any size), dtype, device and a
// contiguous layout. Throws tripath::Error naming `name` and the expected value.
void check_tensor(const TensorView& t, std::string_view name,
                  std::initializer_list<int64_t> shape, Device device);
void check_dtype(const TensorView& t, std::string_view name,
                 std::initializer_list<DType> allowed);

}  // namespace tripath
