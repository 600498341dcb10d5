// Shared helpers of the tripath GoogleTest suite, written independently of src/:
//  - number formats (bf16, f16, fp8 e4m3) decoded and rounded from their definitions, in double;
//  - host tensors with their own storage;
//  - a naive dense float64 attention (mask, soft-cap, sinks, LSE) over dequantized K/V;
//  - adversarial paged caches: shuffled block tables over a pool 2-3x larger than needed,
//    garbage block ids past the needed entries of each row, NaN in every unused block and tail
//    slot, contexts pre-filled through write_kv_cache at the slots of the context positions.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "tripath/tripath.h"

namespace tptest {

using tripath::DType;
using tripath::KvLayout;

inline constexpr double kInf = std::numeric_limits<double>::infinity();

// ----------------------------------------------------------------------------------------------
// Errors: every tripath::Error message names its argument ("invalid argument 'NAME': ...").

#define EXPECT_TRIPATH_ERROR(statement, substring)                                 \
  do {                                                                             \
    bool thrown_ = false;                                                          \
    try {                                                                          \
      statement;                                                                   \
    } catch (const tripath::Error& e_) {                                           \
      thrown_ = true;                                                              \
      EXPECT_NE(std::string(e_.what()).find(substring), std::string::npos)         \
          << "message does not mention \"" << (substring) << "\": " << e_.what();  \
    }                                                                              \
    EXPECT_TRUE(thrown_) << "expected tripath::Error mentioning \"" << (substring) \
                         << "\" from: " #statement;                                \
  } while (0)

// ----------------------------------------------------------------------------------------------
// Number formats from their definitions.

inline float bits_to_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t float_to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// OCP e4m3fn: bias 7, subnormals m/8 * 2^-6, S.1111.111 NaN, no infinities.
inline double fp8_value(uint8_t code) {
  const int s = code >> 7, e = (code >> 3) & 15, m = code & 7;
  if (e == 15 && m == 7) return std::numeric_limits<double>::quiet_NaN();
  const double mag =
      e == 0 ? (m / 8.0) * std::pow(2.0, -6) : (1.0 + m / 8.0) * std::pow(2.0, e - 7);
  return s ? -mag : mag;
}
// IEEE binary16: bias 15, subnormals m/1024 * 2^-14.
inline double f16_value(uint16_t code) {
  const int s = code >> 15, e = (code >> 10) & 31, m = code & 1023;
  double mag;
  if (e == 31) {
    mag = m == 0 ? kInf : std::numeric_limits<double>::quiet_NaN();
  } else if (e == 0) {
    mag = (m / 1024.0) * std::pow(2.0, -14);
  } else {
    mag = (1.0 + m / 1024.0) * std::pow(2.0, e - 15);
  }
  return s ? -mag : mag;
}
inline double bf16_value(uint16_t code) { return bits_to_float(static_cast<uint32_t>(code) << 16); }

// Round to nearest even on a binary format with `mant_bits` stored mantissa bits and smallest
// normal exponent `min_exp` (no overflow handling).
inline double round_binary(double x, int mant_bits, int min_exp) {
  if (!std::isfinite(x) || x == 0.0) return x;
  const double a = std::fabs(x);
  const int e = std::max(std::ilogb(a), min_exp);
  const double quantum = std::ldexp(1.0, e - mant_bits);
  return std::copysign(std::nearbyint(a / quantum) * quantum, x);  // default mode: ties to even
}

inline constexpr double kBf16Max = 3.3895313892515355e38;  // (2 - 2^-7) * 2^127
inline constexpr double kF16Max = 65504.0;
inline constexpr double kFp8Max = 448.0;

// The value x takes stored as `t`: RNE; bf16/f16 overflow to inf; fp8 saturates to +-448.
inline float ref_round(DType t, float x) {
  if (std::isnan(x)) return x;
  double r;
  switch (t) {
    case DType::kF32:
      return x;
    case DType::kBF16:
      r = round_binary(x, 7, -126);
      return std::fabs(r) > kBf16Max ? static_cast<float>(std::copysign(kInf, x))
                                     : static_cast<float>(r);
    case DType::kF16:
      r = round_binary(x, 10, -14);
      return std::fabs(r) > kF16Max ? static_cast<float>(std::copysign(kInf, x))
                                    : static_cast<float>(r);
    case DType::kFP8E4M3:
      if (std::isinf(x)) return static_cast<float>(std::copysign(kFp8Max, x));
      r = round_binary(x, 3, -6);
      return static_cast<float>(std::fabs(r) > kFp8Max ? std::copysign(kFp8Max, x) : r);
    default:
      return x;  // integer types carry no attention data
  }
}

// Bit patterns of an exactly representable (already rounded) value.
inline uint16_t bf16_bits_of(float rounded) {
  if (std::isnan(rounded)) return 0x7FC0;
  return static_cast<uint16_t>(float_to_bits(rounded) >> 16);
}
inline uint16_t f16_bits_of(float rounded) {
  if (std::isnan(rounded)) return 0x7E00;
  const uint16_t sign = std::signbit(rounded) ? 0x8000 : 0;
  const double a = std::fabs(rounded);
  if (std::isinf(a)) return sign | 0x7C00;
  if (a < std::ldexp(1.0, -14)) return sign | static_cast<uint16_t>(a * std::ldexp(1.0, 24));
  const int e = std::ilogb(a);
  const int m = static_cast<int>((a / std::ldexp(1.0, e) - 1.0) * 1024.0);
  return sign | static_cast<uint16_t>(((e + 15) << 10) | m);
}
inline uint8_t fp8_bits_of(float rounded) {
  if (std::isnan(rounded)) return 0x7F;
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7F) == 0x7F) continue;
    if (fp8_value(static_cast<uint8_t>(c)) == rounded &&
        std::signbit(fp8_value(static_cast<uint8_t>(c))) == std::signbit(rounded))
      return static_cast<uint8_t>(c);
  }
  ADD_FAILURE() << "fp8_bits_of: " << rounded << " is not an e4m3 value";
  return 0;
}

inline size_t elem_size(DType t) {
  switch (t) {
    case DType::kFP8E4M3:
      return 1;
    case DType::kF16:
    case DType::kBF16:
      return 2;
    case DType::kF32:
    case DType::kI32:
      return 4;
    case DType::kI64:
      return 8;
  }
  return 8;
}

// ----------------------------------------------------------------------------------------------
// Host tensors.

inline tripath::TensorView make_view(void* data, DType dtype, const std::vector<int64_t>& shape,
                                     tripath::Device device = tripath::Device::kCPU) {
  tripath::TensorView t;
  t.data = data;
  t.dtype = dtype;
  t.device = device;
  t.ndim = static_cast<int>(shape.size());
  int64_t stride = 1;
  for (int d = t.ndim - 1; d >= 0; --d) {
    t.shape[d] = shape[d];
    t.strides[d] = stride;
    stride *= shape[d];
  }
  return t;
}

struct HostTensor {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;

  HostTensor() = default;
  HostTensor(DType t, std::vector<int64_t> s) : dtype(t), shape(std::move(s)) {
    bytes.assign(static_cast<size_t>(numel()) * elem_size(dtype) + 1, 0);  // +1: never null
  }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    return n;
  }
  tripath::TensorView view(tripath::Device device = tripath::Device::kCPU) {
    return make_view(bytes.data(), dtype, shape, device);
  }
  // Stores x rounded to the dtype by the test's own rounding.
  void set(int64_t i, float x) {
    const float r = ref_round(dtype, x);
    switch (dtype) {
      case DType::kF32:
        std::memcpy(bytes.data() + 4 * i, &r, 4);
        break;
      case DType::kBF16: {
        uint16_t b = bf16_bits_of(r);
        std::memcpy(bytes.data() + 2 * i, &b, 2);
        break;
      }
      case DType::kF16: {
        uint16_t b = f16_bits_of(r);
        std::memcpy(bytes.data() + 2 * i, &b, 2);
        break;
      }
      case DType::kFP8E4M3:
        bytes[i] = fp8_bits_of(r);
        break;
      default:
        ADD_FAILURE() << "HostTensor::set on an integer tensor";
    }
  }
  double get(int64_t i) const {
    uint16_t b;
    switch (dtype) {
      case DType::kF32: {
        float f;
        std::memcpy(&f, bytes.data() + 4 * i, 4);
        return f;
      }
      case DType::kBF16:
        std::memcpy(&b, bytes.data() + 2 * i, 2);
        return bf16_value(b);
      case DType::kF16:
        std::memcpy(&b, bytes.data() + 2 * i, 2);
        return f16_value(b);
      case DType::kFP8E4M3:
        return fp8_value(bytes[i]);
      default:
        ADD_FAILURE() << "HostTensor::get on an integer tensor";
    }
    return 0;
  }
  // Every element NaN in the dtype's own encoding.
  void fill_nan() {
    const int64_t n = numel();
    for (int64_t i = 0; i < n; ++i) {
      switch (dtype) {
        case DType::kF32: {
          const float f = std::numeric_limits<float>::quiet_NaN();
          std::memcpy(bytes.data() + 4 * i, &f, 4);
          break;
        }
        case DType::kBF16:
          bytes[2 * i] = 0xC0, bytes[2 * i + 1] = 0x7F;
          break;
        case DType::kF16:
          bytes[2 * i] = 0x00, bytes[2 * i + 1] = 0x7E;
          break;
        case DType::kFP8E4M3:
          bytes[i] = 0x7F;
          break;
        default:
          break;
      }
    }
  }
  void fill(float x) {
    for (int64_t i = 0; i < numel(); ++i) set(i, x);
  }
};

inline std::vector<float> random_floats(std::mt19937_64& rng, size_t n, float lo = -1.0f,
                                        float hi = 1.0f) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}
inline int rand_int(std::mt19937_64& rng, int lo, int hi) {  // inclusive
  return std::uniform_int_distribution<int>(lo, hi)(rng);
}

// ----------------------------------------------------------------------------------------------
// Naive dense attention, float64.

struct RowResult {
  std::vector<double> out;
  double lse = -kInf;
};

// One query row q[dqk] against keys `keys` (row j: K + j * k_stride, V + j * v_stride).
// Scores scale * q.k, then cap * tanh(s / cap) if cap > 0; a sink adds exp(sink) to the
// denominator only. No keys and no sink: out 0, lse -inf.
inline RowResult naive_row(const float* q, const float* K, int64_t k_stride, const float* V,
                           int64_t v_stride, const std::vector<int64_t>& keys, int dqk, int dv,
                           double scale, double softcap, bool has_sink, double sink) {
  RowResult r;
  r.out.assign(dv, 0.0);
  std::vector<double> s(keys.size());
  double m = has_sink ? sink : -kInf;
  for (size_t i = 0; i < keys.size(); ++i) {
    const float* k = K + keys[i] * k_stride;
    double dot = 0;
    for (int d = 0; d < dqk; ++d) dot += static_cast<double>(q[d]) * k[d];
    double x = scale * dot;
    if (softcap > 0) x = softcap * std::tanh(x / softcap);
    s[i] = x;
    m = std::max(m, x);
  }
  if (m == -kInf) return r;
  double sum = has_sink ? std::exp(sink - m) : 0.0;
  for (size_t i = 0; i < keys.size(); ++i) {
    const double p = std::exp(s[i] - m);
    sum += p;
    const float* v = V + keys[i] * v_stride;
    for (int d = 0; d < dv; ++d) r.out[d] += p * v[d];
  }
  for (double& o : r.out) o /= sum;
  r.lse = m + std::log(sum);
  return r;
}

// Keys visible to the query at absolute position `pos` (bottom-right causal, left window).
inline std::vector<int64_t> visible_keys(int64_t pos, int window_left) {
  const int64_t lo = window_left < 0 ? 0 : std::max<int64_t>(0, pos - window_left);
  std::vector<int64_t> k(static_cast<size_t>(pos - lo + 1));
  std::iota(k.begin(), k.end(), lo);
  return k;
}

// ----------------------------------------------------------------------------------------------
// Comparisons.

// Relative L2 error of `got` against `want`; any NaN in `got` fails.
inline ::testing::AssertionResult rel_l2_close(const std::vector<double>& got,
                                               const std::vector<double>& want, double tol) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "size " << got.size() << " vs " << want.size();
  double num = 0, den = 0, worst = 0;
  size_t worst_i = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i]) || std::isnan(want[i]))
      return ::testing::AssertionFailure()
             << "NaN at element " << i << " (got " << got[i] << ", want " << want[i] << ")";
    const double d = got[i] - want[i];
    num += d * d;
    den += want[i] * want[i];
    if (std::fabs(d) > worst) worst = std::fabs(d), worst_i = i;
  }
  const double rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  if (rel <= tol) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "relative L2 error " << rel << " > " << tol << "; worst element " << worst_i << ": got "
         << got[worst_i] << ", want " << want[worst_i];
}

// LSE: -inf exactly where expected, otherwise |got - want| <= tol * max(1, |want|); no NaN.
inline ::testing::AssertionResult lse_close(const std::vector<double>& got,
                                            const std::vector<double>& want, double tol) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "size " << got.size() << " vs " << want.size();
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i])) return ::testing::AssertionFailure() << "NaN LSE at " << i;
    if (std::isinf(want[i]) || std::isinf(got[i])) {
      if (got[i] != want[i])
        return ::testing::AssertionFailure()
               << "LSE at " << i << ": got " << got[i] << ", want " << want[i];
      continue;
    }
    if (std::fabs(got[i] - want[i]) > tol * std::max(1.0, std::fabs(want[i])))
      return ::testing::AssertionFailure()
             << "LSE at " << i << ": got " << got[i] << ", want " << want[i];
  }
  return ::testing::AssertionSuccess();
}

inline std::vector<double> to_doubles(const HostTensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[i] = t.get(i);
  return v;
}

// ----------------------------------------------------------------------------------------------
// Adversarial paged block tables.

struct PagedTable {
  int64_t num_blocks = 0;      // pool size, 2-3x what the requests need
  int64_t stride = 0;          // row stride, larger than any request needs
  std::vector<int32_t> table;  // [num_requests, stride]; garbage ids past each row's need
};

inline PagedTable make_block_table(const std::vector<int32_t>& seq_lens, int block_size,
                                   std::mt19937_64& rng) {
  PagedTable t;
  int64_t needed = 0, most = 0;
  for (int32_t s : seq_lens) {
    const int64_t b = (s + block_size - 1) / block_size;
    needed += b;
    most = std::max(most, b);
  }
  t.num_blocks = needed * 2 + needed / 2 + 3;
  t.stride = most + 3;
  std::vector<int32_t> ids(static_cast<size_t>(t.num_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  t.table.assign(seq_lens.size() * static_cast<size_t>(t.stride), 0);
  size_t next = 0;
  for (size_t r = 0; r < seq_lens.size(); ++r) {
    const int64_t b = (seq_lens[r] + block_size - 1) / block_size;
    for (int64_t j = 0; j < t.stride; ++j) {
      // Entries past the request's need are ignored by contract: make them invalid ids.
      t.table[r * t.stride + j] = j < b ? ids[next++] : (j % 2 ? -77 : 1 << 30);
    }
  }
  return t;
}

inline int64_t slot_of(const PagedTable& t, size_t r, int64_t pos, int block_size) {
  return static_cast<int64_t>(t.table[r * t.stride + pos / block_size]) * block_size +
         pos % block_size;
}

}  // namespace tptest
