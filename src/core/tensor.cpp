#include "tripath/tensor.h"

#include <string>

#include "tripath/error.h"

namespace tripath {

const char* device_name(Device d) { return d == Device::kCPU ? "cpu" : "cuda"; }

TensorView TensorView::contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape,
                                  Device device) {
  TRIPATH_CHECK_ARG(shape.size() >= 1 && shape.size() <= kMaxDims, "shape", shape.size(),
                    "1 to 6 dimensions");
  TensorView t;
  t.data = data;
  t.dtype = dtype;
  t.device = device;
  t.ndim = static_cast<int>(shape.size());
  int i = 0;
  for (int64_t s : shape) t.shape[i++] = s;
  int64_t stride = 1;
  for (int d = t.ndim - 1; d >= 0; --d) {
    t.strides[d] = stride;
    stride *= t.shape[d];
  }
  return t;
}

int64_t TensorView::numel() const {
  if (ndim == 0) return 0;
  int64_t n = 1;
  for (int d = 0; d < ndim; ++d) n *= shape[d];
  return n;
}

bool TensorView::is_contiguous() const {
  int64_t stride = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    if (shape[d] != 1 && strides[d] != stride) return false;
    stride *= shape[d];
  }
  return true;
}

std::string TensorView::shape_text() const {
  if (ndim == 0) return "(not given)";
  std::string s = "[";
  for (int d = 0; d < ndim; ++d) {
    if (d) s += ", ";
    s += std::to_string(shape[d]);
  }
  return s + "]";
}

namespace {
std::string expected_shape_text(std::initializer_list<int64_t> shape) {
  std::string s = "[";
  int d = 0;
  for (int64_t v : shape) {
    if (d++) s += ", ";
    s += v < 0 ? std::string("*") : std::to_string(v);
  }
  return s + "]";
}
}  // namespace

void check_tensor(const TensorView& t, std::string_view name, std::initializer_list<int64_t> shape,
                  Device device) {
  const std::string expected = "shape " + expected_shape_text(shape);
  TRIPATH_CHECK_ARG(t.ndim > 0, name, "no tensor", "a tensor of " + expected);
  bool same = t.ndim == static_cast<int>(shape.size());
  int d = 0;
  for (int64_t s : shape) {
    if (same && s >= 0 && t.shape[d] != s) same = false;
    ++d;
  }
  TRIPATH_CHECK_ARG(same, name, "shape " + t.shape_text(), expected);
  TRIPATH_CHECK_ARG(t.device == device, name, std::string("a ") + device_name(t.device) +
                    " tensor", std::string("a ") + device_name(device) + " tensor");
  TRIPATH_CHECK_ARG(t.is_contiguous(), name, "a strided (non-contiguous) tensor",
                    "a contiguous row-major tensor");
  TRIPATH_CHECK_ARG(t.data != nullptr || t.numel() == 0, name, "a null data pointer",
                    "allocated memory");
}

void check_dtype(const TensorView& t, std::string_view name, std::initializer_list<DType> allowed) {
  std::string list;
  for (DType a : allowed) {
    if (a == t.dtype) return;
    if (!list.empty()) list += " or ";
    list += dtype_name(a);
  }
  throw_arg_error(name, std::string("dtype ") + dtype_name(t.dtype), "dtype " + list);
}

}  // namespace tripath
