// Conversions between Python objects and tripath types for the nanobind binding
// (tripath_ext.cpp): DLPack arrays -> TensorView, dtype / layout arguments, NumPy results.
//
// as_view() takes any DLPack array (NumPy, torch, CuPy; CPU or CUDA) and keeps pointer, dtype,
// device and device id, shape and strides in elements; it checks only what a TensorView can
// hold, leaving rank, dtype, device and layout checks to the library so errors read the same
// from C++ and Python. as_cache_view() is the rule for cache tensors: the config's float type,
// or integer storage of its element size (uint8 for fp8, uint16 / int16 for bf16).
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "tripath/tripath.h"

namespace tripath::python {

namespace nb = nanobind;

using InArray = nb::ndarray<nb::ro>;  // read access is enough: accepts read-only arrays too
using OutArray = nb::ndarray<>;       // written by the call: must be writable
using SlotArray = nb::ndarray<const int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using BlockTableArray = nb::ndarray<const int32_t, nb::ndim<2>, nb::c_contig, nb::device::cpu>;
using F32Array = nb::ndarray<const float, nb::c_contig, nb::device::cpu>;

// DLPack type codes beyond nanobind's enum (DLPack 1.1, dlpack.h DLDataTypeCode).
inline constexpr uint8_t kDLFloat8E4M3FN = 10;

inline std::string dlpack_dtype_text(const nb::dlpack::dtype& dt) {
  std::ostringstream s;
  switch (dt.code) {
    case static_cast<uint8_t>(nb::dlpack::dtype_code::Int):
      s << "int";
      break;
    case static_cast<uint8_t>(nb::dlpack::dtype_code::UInt):
      s << "uint";
      break;
    case static_cast<uint8_t>(nb::dlpack::dtype_code::Float):
      s << "float";
      break;
    case static_cast<uint8_t>(nb::dlpack::dtype_code::Bfloat):
      s << "bfloat";
      break;
    case static_cast<uint8_t>(nb::dlpack::dtype_code::Complex):
      s << "complex";
      break;
    case static_cast<uint8_t>(nb::dlpack::dtype_code::Bool):
      s << "bool";
      break;
    case kDLFloat8E4M3FN:
      s << "float8_e4m3fn";
      return s.str();
    default:
      s << "dlpack_code" << static_cast<int>(dt.code) << "_";
      break;
  }
  s << static_cast<int>(dt.bits);
  if (dt.lanes != 1) s << "x" << dt.lanes;
  return s.str();
}

// The tripath dtype a floating DLPack type names, if any.
inline std::optional<DType> float_dtype(const nb::dlpack::dtype& dt) {
  if (dt.lanes != 1) return std::nullopt;
  const auto code = dt.code;
  if (code == static_cast<uint8_t>(nb::dlpack::dtype_code::Float) && dt.bits == 32)
    return DType::kF32;
  if (code == static_cast<uint8_t>(nb::dlpack::dtype_code::Float) && dt.bits == 16)
    return DType::kF16;
  if (code == static_cast<uint8_t>(nb::dlpack::dtype_code::Bfloat) && dt.bits == 16)
    return DType::kBF16;
  if (code == kDLFloat8E4M3FN && dt.bits == 8) return DType::kFP8E4M3;
  return std::nullopt;
}

inline bool is_integer_storage(const nb::dlpack::dtype& dt) {
  return dt.lanes == 1 && (dt.code == static_cast<uint8_t>(nb::dlpack::dtype_code::Int) ||
                           dt.code == static_cast<uint8_t>(nb::dlpack::dtype_code::UInt));
}

// Shape, strides, device and pointer of any ndarray; the dtype is set by the caller.
template <typename Array>
TensorView view_common(const Array& a, std::string_view name) {
  TensorView t;
  const int ndim = static_cast<int>(a.ndim());
  if (ndim < 1 || ndim > kMaxDims) {
    throw_arg_error(name, std::to_string(ndim) + "-d array",
                    "an array of 1 to " + std::to_string(kMaxDims) + " dimensions");
  }
  switch (a.device_type()) {
    case nb::device::cpu::value:
    case nb::device::cuda_host::value:  // pinned host memory: the CPU reads it directly
      t.device = Device::kCPU;
      break;
    case nb::device::cuda::value:
    case nb::device::cuda_managed::value:
      t.device = Device::kCUDA;
      break;
    default:
      throw_arg_error(name, "DLPack device type " + std::to_string(a.device_type()),
                      "a CPU or CUDA array");
  }
  t.device_index = a.device_id();
  t.data = const_cast<void*>(static_cast<const void*>(a.data()));
  t.ndim = ndim;
  for (int i = 0; i < ndim; ++i) {
    t.shape[i] = static_cast<int64_t>(a.shape(static_cast<size_t>(i)));
    t.strides[i] = a.stride(static_cast<size_t>(i));
  }
  return t;
}

// A tensor argument (q, k, v, out, lse, sinks, slot_mapping, ...): float32 / float16 / bfloat16,
// uint8 (and DLPack float8_e4m3fn) as fp8 e4m3 storage, int32 / int64 for index tensors. Which
// of these an argument takes is the library's check, not the binding's.
template <typename Array>
TensorView as_view(const Array& a, std::string_view name) {
  TensorView t = view_common(a, name);
  const nb::dlpack::dtype dt = a.dtype();
  if (auto f = float_dtype(dt)) {
    t.dtype = *f;
  } else if (dt.lanes == 1 && dt.bits == 8 &&
             dt.code == static_cast<uint8_t>(nb::dlpack::dtype_code::UInt)) {
    t.dtype = DType::kFP8E4M3;
  } else if (dt.lanes == 1 && dt.code == static_cast<uint8_t>(nb::dlpack::dtype_code::Int) &&
             (dt.bits == 32 || dt.bits == 64)) {
    t.dtype = dt.bits == 32 ? DType::kI32 : DType::kI64;
  } else {
    throw_arg_error(name, "dtype " + dlpack_dtype_text(dt),
                    "float32, float16, bfloat16, uint8 (fp8 e4m3 storage), int32 or int64");
  }
  return t;
}

template <typename Array>
std::optional<TensorView> as_view(const std::optional<Array>& a, std::string_view name) {
  if (!a) return std::nullopt;
  return as_view(*a, name);
}

// A cache tensor: its elements are `cache_dtype` (the config's). A floating array must be
// exactly that type (a float16 array for a bf16 cache is a mistake, not storage); an integer
// array of the same element size is taken as raw storage (uint8 for fp8, uint16 for bf16).
template <typename Array>
TensorView as_cache_view(const Array& a, std::string_view name, DType cache_dtype) {
  TensorView t = view_common(a, name);
  const nb::dlpack::dtype dt = a.dtype();
  const size_t want_bits = dtype_size(cache_dtype) * 8;
  if (cache_dtype == DType::kI32 || cache_dtype == DType::kI64) {
    throw_arg_error("cache_config.dtype", dtype_name(cache_dtype),
                    "a cache element type: f32, f16, bf16 or fp8_e4m3");
  }
  const std::string expected = std::string("elements of the cache config dtype ") +
                               dtype_name(cache_dtype) + " (" + std::to_string(want_bits) +
                               "-bit): that float type, or uint" + std::to_string(want_bits) +
                               "/int" + std::to_string(want_bits) + " storage";
  if (auto f = float_dtype(dt)) {
    if (*f != cache_dtype) throw_arg_error(name, "dtype " + dlpack_dtype_text(dt), expected);
  } else if (!is_integer_storage(dt) || dt.bits != want_bits) {
    throw_arg_error(name, "dtype " + dlpack_dtype_text(dt), expected);
  }
  t.dtype = cache_dtype;
  return t;
}

// ---- dtype / layout arguments: the enum, or its name ("bf16", "fp8_e4m3", "nhd", ...) ----

inline DType dtype_arg(nb::handle h) {
  if (nb::isinstance<DType>(h)) return nb::cast<DType>(h);
  if (nb::isinstance<nb::str>(h)) {
    std::string s = nb::cast<std::string>(h);
    // Framework spellings, so np.dtype(...).name / str(torch.bfloat16) work.
    if (s.rfind("torch.", 0) == 0) s = s.substr(6);
    if (s == "float32" || s == "float")
      s = "f32";
    else if (s == "float16" || s == "half")
      s = "f16";
    else if (s == "bfloat16")
      s = "bf16";
    else if (s == "float8_e4m3fn" || s == "fp8" || s == "e4m3")
      s = "fp8_e4m3";
    else if (s == "int32")
      s = "i32";
    else if (s == "int64")
      s = "i64";
    return parse_dtype(s);
  }
  throw Error("invalid argument 'dtype': got " + nb::cast<std::string>(nb::str(h.type())) +
              ", expected a tripath.DType or one of the names f32, f16, bf16, fp8_e4m3, i32, i64");
}

inline KvLayout layout_arg(nb::handle h) {
  if (nb::isinstance<KvLayout>(h)) return nb::cast<KvLayout>(h);
  if (nb::isinstance<nb::str>(h)) return parse_layout(nb::cast<std::string>(h));
  throw Error("invalid argument 'layout': got " + nb::cast<std::string>(nb::str(h.type())) +
              ", expected a tripath.KvLayout or one of the names nhd, hnd, tiled");
}

// ---- NumPy results: copies owned by a capsule ----

template <typename T>
nb::object numpy_copy(const std::vector<T>& values, std::vector<size_t> shape) {
  auto* heap = new std::vector<T>(values);
  if (heap->empty()) heap->reserve(1);  // a non-null pointer even for zero elements
  nb::capsule owner(heap, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  return nb::cast(nb::ndarray<nb::numpy, T>(heap->data(), shape.size(), shape.data(), owner));
}

template <typename T>
nb::object numpy_copy(const std::vector<T>& values) {
  return numpy_copy(values, {values.size()});
}

// [rows, cols] when the sizes agree, else the flat vector (never hides data).
template <typename T>
nb::object numpy_matrix(const std::vector<T>& values, int64_t rows, int64_t cols) {
  if (rows >= 0 && cols >= 0 && static_cast<size_t>(rows * cols) == values.size())
    return numpy_copy(values, {static_cast<size_t>(rows), static_cast<size_t>(cols)});
  return numpy_copy(values);
}

inline nb::tuple int_tuple(const std::vector<int64_t>& values) {
  return nb::steal<nb::tuple>(PySequence_Tuple(nb::cast(values).ptr()));
}

inline nb::tuple range_tuple(const PathRange& r) {
  return nb::make_tuple(r.begin, r.end, r.token_begin, r.token_end);
}

inline std::string range_text(const PathRange& r) {
  std::ostringstream s;
  s << "[" << r.begin << ", " << r.end << ") tokens [" << r.token_begin << ", " << r.token_end
    << ")";
  return s.str();
}

}  // namespace tripath::python
