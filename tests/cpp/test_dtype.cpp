// Element types: fp8 e4m3 (OCP "e4m3fn"), bf16 and f16 conversions against values computed here
// from the bit fields, round-to-nearest-even at exact midpoints, overflow, NaN and signed zero.
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

#include "test_util.h"

namespace {

using namespace tptest;
using tripath::DType;

const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kInfF = std::numeric_limits<float>::infinity();

bool same_value(double a, double b) {  // equal, including the sign of zero; NaN == NaN
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return a == b && std::signbit(a) == std::signbit(b);
}

// ---------------------------------------------------------------------------------------------
// fp8 e4m3

TEST(Fp8E4M3, DecodesEveryCodeFromItsBitFields) {
  for (int c = 0; c < 256; ++c) {
    const double want = fp8_value(static_cast<uint8_t>(c));
    const float got = tripath::fp8e4m3_to_float(static_cast<uint8_t>(c));
    EXPECT_TRUE(same_value(got, want))
        << "code 0x" << std::hex << c << ": got " << got << ", want " << want;
  }
}

TEST(Fp8E4M3, ValueTableLandmarks) {
  // Independent of fp8_value: a few entries of the OCP table written out.
  EXPECT_EQ(tripath::fp8e4m3_to_float(0x7E), 448.0f);
  EXPECT_EQ(tripath::fp8e4m3_to_float(0xFE), -448.0f);
  EXPECT_EQ(tripath::fp8e4m3_to_float(0x01), 0.001953125f);  // 2^-9, smallest subnormal
  EXPECT_EQ(tripath::fp8e4m3_to_float(0x07), 0.013671875f);  // 7/8 * 2^-6
  EXPECT_EQ(tripath::fp8e4m3_to_float(0x08), 0.015625f);     // 2^-6, smallest normal
  EXPECT_EQ(tripath::fp8e4m3_to_float(0x38), 1.0f);
  EXPECT_EQ(tripath::fp8e4m3_to_float(0x78), 256.0f);
  EXPECT_EQ(tripath::fp8e4m3_to_float(0x77), 240.0f);
  EXPECT_TRUE(std::isnan(tripath::fp8e4m3_to_float(0x7F)));
  EXPECT_TRUE(std::isnan(tripath::fp8e4m3_to_float(0xFF)));
  EXPECT_TRUE(std::signbit(tripath::fp8e4m3_to_float(0x80)));
  EXPECT_EQ(tripath::fp8e4m3_to_float(0x80), 0.0f);
  // No infinities anywhere in the table.
  for (int c = 0; c < 256; ++c) EXPECT_FALSE(std::isinf(tripath::fp8e4m3_to_float(c))) << c;
}

TEST(Fp8E4M3, EveryFiniteCodeRoundTrips) {
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7F) == 0x7F) continue;
    const float x = tripath::fp8e4m3_to_float(static_cast<uint8_t>(c));
    EXPECT_EQ(tripath::float_to_fp8e4m3(x), c) << "value " << x;
  }
}

// Exactly halfway between adjacent codes rounds to the even code (mantissa LSB 0); a hair on
// either side rounds to the nearer one.
TEST(Fp8E4M3, MidpointsRoundToNearestEven) {
  for (int c = 0; c < 0x7E; ++c) {
    for (int sign : {0, 0x80}) {
      const double a = fp8_value(static_cast<uint8_t>(c | sign));
      const double b = fp8_value(static_cast<uint8_t>((c + 1) | sign));
      const float mid = static_cast<float>((a + b) / 2);
      ASSERT_EQ(static_cast<double>(mid), (a + b) / 2);  // exact in float
      const int even = (c % 2 == 0 ? c : c + 1) | sign;
      EXPECT_EQ(tripath::float_to_fp8e4m3(mid), even) << "midpoint " << mid;
      const float toward_b = std::nextafter(mid, static_cast<float>(b));
      const float toward_a = std::nextafter(mid, static_cast<float>(a));
      EXPECT_EQ(tripath::float_to_fp8e4m3(toward_b), (c + 1) | sign) << toward_b;
      if (c == 0 && sign == 0x80) {
        EXPECT_EQ(tripath::float_to_fp8e4m3(toward_a) & 0x7F, 0) << toward_a;
      } else {
        EXPECT_EQ(tripath::float_to_fp8e4m3(toward_a), c | sign) << toward_a;
      }
    }
  }
}

TEST(Fp8E4M3, SaturatesToMaxFinite) {
  for (float x :
       {448.0f, 449.0f, 463.99f, 464.0f, 465.0f, 479.9f, 480.0f, 1000.0f, 1e10f, 3.4e38f, kInfF}) {
    EXPECT_EQ(tripath::float_to_fp8e4m3(x), 0x7E) << x;
    EXPECT_EQ(tripath::float_to_fp8e4m3(-x), 0xFE) << -x;
  }
  EXPECT_EQ(tripath::round_to(DType::kFP8E4M3, kInfF), 448.0f);
  EXPECT_EQ(tripath::round_to(DType::kFP8E4M3, -kInfF), -448.0f);
}

TEST(Fp8E4M3, NaNStaysNaN) {
  for (float x : {kNaN, -kNaN, bits_to_float(0x7F800001u), bits_to_float(0xFFC00000u)}) {
    const uint8_t c = tripath::float_to_fp8e4m3(x);
    EXPECT_EQ(c & 0x7F, 0x7F) << "NaN encoded as 0x" << std::hex << int(c);
    EXPECT_TRUE(std::isnan(tripath::round_to(DType::kFP8E4M3, x)));
  }
}

TEST(Fp8E4M3, SignedZeroAndSubnormals) {
  EXPECT_EQ(tripath::float_to_fp8e4m3(0.0f), 0x00);
  EXPECT_EQ(tripath::float_to_fp8e4m3(-0.0f), 0x80);
  EXPECT_EQ(tripath::float_to_fp8e4m3(std::ldexp(1.0f, -10)), 0x00);  // half the smallest: tie
  EXPECT_EQ(tripath::float_to_fp8e4m3(-std::ldexp(1.0f, -10)), 0x80);
  EXPECT_EQ(tripath::float_to_fp8e4m3(std::ldexp(1.0f, -11)), 0x00);
  EXPECT_EQ(tripath::float_to_fp8e4m3(1e-30f), 0x00);
  EXPECT_EQ(tripath::float_to_fp8e4m3(std::ldexp(3.0f, -10)), 0x02);   // 1.5 * 2^-9: tie -> 2
  EXPECT_EQ(tripath::float_to_fp8e4m3(std::ldexp(5.0f, -10)), 0x02);   // 2.5 * 2^-9: tie -> 2
  EXPECT_EQ(tripath::float_to_fp8e4m3(std::ldexp(7.0f, -10)), 0x04);   // 3.5 * 2^-9: tie -> 4
  EXPECT_EQ(tripath::float_to_fp8e4m3(std::ldexp(15.0f, -10)), 0x08);  // 7.5*2^-9 -> 2^-6
  EXPECT_EQ(tripath::float_to_fp8e4m3(0.0136f), 0x07);
}

TEST(Fp8E4M3, RandomValuesMatchIndependentRounding) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<float> mant(-1.0f, 1.0f);
  std::uniform_int_distribution<int> ex(-14, 10);
  for (int i = 0; i < 200000; ++i) {
    const float x = std::ldexp(mant(rng), ex(rng));
    const float want = ref_round(DType::kFP8E4M3, x);
    const float got = tripath::fp8e4m3_to_float(tripath::float_to_fp8e4m3(x));
    ASSERT_TRUE(same_value(got, want)) << "x = " << x << ": got " << got << ", want " << want;
    ASSERT_TRUE(same_value(tripath::round_to(DType::kFP8E4M3, x), want)) << x;
  }
}

// ---------------------------------------------------------------------------------------------
// bf16

TEST(Bf16, DecodesAndRoundTripsEveryCode) {
  for (uint32_t c = 0; c < 65536; ++c) {
    const float x = tripath::bf16_to_float(static_cast<uint16_t>(c));
    ASSERT_TRUE(same_value(x, bf16_value(static_cast<uint16_t>(c)))) << c;
    if (std::isnan(x)) {
      ASSERT_TRUE(std::isnan(tripath::bf16_to_float(tripath::float_to_bf16(x)))) << c;
    } else {
      ASSERT_EQ(tripath::float_to_bf16(x), c) << "value " << x;
    }
  }
}

TEST(Bf16, MidpointsRoundToNearestEven) {
  // 1 + 2^-8 is halfway between 1 (even) and 1 + 2^-7 (odd).
  EXPECT_EQ(tripath::float_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3F80);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even).
  EXPECT_EQ(tripath::float_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3F82);
  EXPECT_EQ(tripath::float_to_bf16(std::nextafter(1.0f + std::ldexp(1.0f, -8), 2.0f)), 0x3F81);
  std::mt19937_64 rng(11);
  for (int i = 0; i < 20000; ++i) {
    const uint16_t c = static_cast<uint16_t>(rng() % 0x7F7F);  // c and c + 1 finite
    const uint32_t mid_bits = (static_cast<uint32_t>(c) << 16) | 0x8000u;
    const float mid = bits_to_float(mid_bits);
    const uint16_t even = (c & 1) ? c + 1 : c;
    ASSERT_EQ(tripath::float_to_bf16(mid), even) << "midpoint above code " << c;
    ASSERT_EQ(tripath::float_to_bf16(-mid), even | 0x8000) << "negative midpoint " << c;
  }
}

TEST(Bf16, InfinityNaNAndOverflow) {
  EXPECT_EQ(tripath::float_to_bf16(kInfF), 0x7F80);
  EXPECT_EQ(tripath::float_to_bf16(-kInfF), 0xFF80);
  EXPECT_EQ(tripath::float_to_bf16(std::numeric_limits<float>::max()), 0x7F80);  // rounds up
  EXPECT_EQ(tripath::float_to_bf16(bits_to_float(0x7F7F7FFFu)), 0x7F7F);
  // NaN payloads only in the low 16 bits must not collapse to infinity.
  for (uint32_t bits : {0x7F800001u, 0x7FC00000u, 0xFF800001u, 0x7F80FFFFu}) {
    const uint16_t c = tripath::float_to_bf16(bits_to_float(bits));
    EXPECT_TRUE(std::isnan(tripath::bf16_to_float(c))) << std::hex << bits << " -> " << c;
  }
  EXPECT_EQ(tripath::float_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(tripath::float_to_bf16(std::numeric_limits<float>::denorm_min()), 0x0000);
}

TEST(Bf16, RandomValuesMatchIndependentRounding) {
  std::mt19937_64 rng(13);
  for (int i = 0; i < 200000; ++i) {
    const float x = bits_to_float(static_cast<uint32_t>(rng()));
    if (std::isnan(x)) continue;
    const float want = ref_round(DType::kBF16, x);
    ASSERT_TRUE(same_value(tripath::bf16_to_float(tripath::float_to_bf16(x)), want)) << x;
    ASSERT_TRUE(same_value(tripath::round_to(DType::kBF16, x), want)) << x;
  }
}

// ---------------------------------------------------------------------------------------------
// f16

TEST(F16, DecodesAndRoundTripsEveryCode) {
  for (uint32_t c = 0; c < 65536; ++c) {
    const float x = tripath::f16_to_float(static_cast<uint16_t>(c));
    ASSERT_TRUE(same_value(x, f16_value(static_cast<uint16_t>(c)))) << c;
    if (std::isnan(x)) {
      ASSERT_TRUE(std::isnan(tripath::f16_to_float(tripath::float_to_f16(x)))) << c;
    } else {
      ASSERT_EQ(tripath::float_to_f16(x), c) << "value " << x;
    }
  }
}

TEST(F16, MidpointsRoundToNearestEven) {
  for (uint32_t c = 0; c < 0x7BFF; ++c) {  // every pair of adjacent finite positive codes
    const double a = f16_value(static_cast<uint16_t>(c));
    const double b = f16_value(static_cast<uint16_t>(c + 1));
    const float mid = static_cast<float>((a + b) / 2);
    const uint16_t even = (c & 1) ? c + 1 : c;
    ASSERT_EQ(tripath::float_to_f16(mid), even) << "midpoint " << mid;
    ASSERT_EQ(tripath::float_to_f16(-mid), even | 0x8000) << "midpoint " << -mid;
    ASSERT_EQ(tripath::float_to_f16(std::nextafter(mid, static_cast<float>(b))), c + 1) << mid;
    if (c > 0) {
      ASSERT_EQ(tripath::float_to_f16(std::nextafter(mid, 0.0f)), c) << mid;
    }
  }
}

TEST(F16, OverflowInfinityNaNAndSubnormals) {
  EXPECT_EQ(tripath::float_to_f16(65504.0f), 0x7BFF);
  EXPECT_EQ(tripath::float_to_f16(65519.99f), 0x7BFF);
  EXPECT_EQ(tripath::float_to_f16(65520.0f), 0x7C00);  // midpoint to the odd max: rounds to inf
  EXPECT_EQ(tripath::float_to_f16(-1e6f), 0xFC00);
  EXPECT_EQ(tripath::float_to_f16(kInfF), 0x7C00);
  EXPECT_EQ(tripath::float_to_f16(-kInfF), 0xFC00);
  EXPECT_TRUE(std::isnan(tripath::f16_to_float(tripath::float_to_f16(kNaN))));
  EXPECT_TRUE(std::isnan(tripath::f16_to_float(tripath::float_to_f16(bits_to_float(0x7F800001u)))));
  EXPECT_EQ(tripath::float_to_f16(-0.0f), 0x8000);
  EXPECT_EQ(tripath::float_to_f16(std::ldexp(1.0f, -24)), 0x0001);     // smallest subnormal
  EXPECT_EQ(tripath::float_to_f16(std::ldexp(1.0f, -25)), 0x0000);     // tie -> even (0)
  EXPECT_EQ(tripath::float_to_f16(std::ldexp(1.5f, -24)), 0x0002);     // tie -> even (2)
  EXPECT_EQ(tripath::float_to_f16(std::ldexp(1023.5f, -24)), 0x0400);  // -> smallest normal
  EXPECT_EQ(tripath::f16_to_float(0x03FF), std::ldexp(1023.0f, -24));
}

TEST(F16, RandomValuesMatchIndependentRounding) {
  std::mt19937_64 rng(17);
  std::uniform_real_distribution<float> mant(-1.0f, 1.0f);
  std::uniform_int_distribution<int> ex(-28, 17);
  for (int i = 0; i < 200000; ++i) {
    const float x = std::ldexp(mant(rng), ex(rng));
    const float want = ref_round(DType::kF16, x);
    ASSERT_TRUE(same_value(tripath::f16_to_float(tripath::float_to_f16(x)), want)) << x;
    ASSERT_TRUE(same_value(tripath::round_to(DType::kF16, x), want)) << x;
  }
}

// ---------------------------------------------------------------------------------------------
// Generic accessors and names

TEST(DTypeApi, SizesNamesAndParsing) {
  EXPECT_EQ(tripath::dtype_size(DType::kF32), 4u);
  EXPECT_EQ(tripath::dtype_size(DType::kF16), 2u);
  EXPECT_EQ(tripath::dtype_size(DType::kBF16), 2u);
  EXPECT_EQ(tripath::dtype_size(DType::kFP8E4M3), 1u);
  EXPECT_EQ(tripath::dtype_size(DType::kI32), 4u);
  EXPECT_EQ(tripath::dtype_size(DType::kI64), 8u);
  for (DType t :
       {DType::kF32, DType::kF16, DType::kBF16, DType::kFP8E4M3, DType::kI32, DType::kI64})
    EXPECT_EQ(tripath::parse_dtype(tripath::dtype_name(t)), t) << tripath::dtype_name(t);
  EXPECT_STREQ(tripath::dtype_name(DType::kI64), "i64");
  EXPECT_STREQ(tripath::dtype_name(DType::kF32), "f32");
  EXPECT_STREQ(tripath::dtype_name(DType::kF16), "f16");
  EXPECT_STREQ(tripath::dtype_name(DType::kBF16), "bf16");
  EXPECT_STREQ(tripath::dtype_name(DType::kFP8E4M3), "fp8_e4m3");
  EXPECT_TRIPATH_ERROR(tripath::parse_dtype("f64"), "f64");
  EXPECT_TRIPATH_ERROR(tripath::parse_dtype("f64"), "bf16");  // lists the valid names
  EXPECT_TRIPATH_ERROR(tripath::parse_dtype(""), "fp8_e4m3");
}

TEST(DTypeApi, StoreAndLoadRoundLikeTheCodecs) {
  std::mt19937_64 rng(19);
  const std::vector<float> xs = random_floats(rng, 512, -500.0f, 500.0f);
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kFP8E4M3}) {
    std::vector<uint8_t> buf(xs.size() * 4 + 8, 0xAB);
    for (size_t i = 0; i < xs.size(); ++i) tripath::store_float(buf.data(), t, i, xs[i]);
    for (size_t i = 0; i < xs.size(); ++i) {
      const float want = ref_round(t, xs[i]);
      ASSERT_TRUE(same_value(tripath::load_float(buf.data(), t, i), want))
          << tripath::dtype_name(t) << " element " << i;
    }
    // Nothing written past the last element.
    EXPECT_EQ(buf[xs.size() * tripath::dtype_size(t)], 0xAB) << tripath::dtype_name(t);
  }
}

}  // namespace
