// Tensor views and their checks; cache configs and their validation; the element addressing of
// the NHD, HND and tiled layouts; the cache writers (every layout and dtype, slot -1 skipped).
#include <set>
#include <string>
#include <vector>

#include "test_util.h"

namespace {

using namespace tptest;
using tripath::Device;
using tripath::KvCacheConfig;
using tripath::TensorView;

// ---------------------------------------------------------------------------------------------
// Tensor views

TEST(TensorView, ContiguousShapeStridesAndText) {
  float data[2 * 3 * 4];
  const TensorView t = TensorView::contiguous(data, DType::kF32, {2, 3, 4});
  EXPECT_TRUE(t.defined());
  EXPECT_EQ(t.ndim, 3);
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.strides[0], 12);
  EXPECT_EQ(t.strides[1], 4);
  EXPECT_EQ(t.strides[2], 1);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.shape_text(), "[2, 3, 4]");
  EXPECT_EQ(t.device, Device::kCPU);
  EXPECT_FALSE(TensorView().defined());
  TensorView s = t;
  s.strides[2] = 2;
  EXPECT_FALSE(s.is_contiguous());
  EXPECT_STREQ(tripath::device_name(Device::kCPU), "cpu");
  EXPECT_STREQ(tripath::device_name(Device::kCUDA), "cuda");
}

TEST(TensorView, CheckTensorAcceptsMatchingAndWildcards) {
  float data[64];
  const TensorView t = TensorView::contiguous(data, DType::kF32, {4, 2, 8});
  EXPECT_NO_THROW(tripath::check_tensor(t, "x", {4, 2, 8}, Device::kCPU));
  EXPECT_NO_THROW(tripath::check_tensor(t, "x", {-1, 2, -1}, Device::kCPU));
  EXPECT_NO_THROW(tripath::check_dtype(t, "x", {DType::kBF16, DType::kF32}));
}

TEST(TensorView, CheckTensorRejectsWithTheName) {
  float data[64];
  const TensorView t = TensorView::contiguous(data, DType::kF32, {4, 2, 8});
  EXPECT_TRIPATH_ERROR(tripath::check_tensor(t, "my_arg", {4, 2}, Device::kCPU), "'my_arg'");
  EXPECT_TRIPATH_ERROR(tripath::check_tensor(t, "my_arg", {4, 3, 8}, Device::kCPU), "[4, 2, 8]");
  EXPECT_TRIPATH_ERROR(tripath::check_tensor(t, "my_arg", {4, 2, 8}, Device::kCUDA), "'my_arg'");
  EXPECT_TRIPATH_ERROR(tripath::check_tensor(TensorView(), "absent", {4}, Device::kCPU),
                       "'absent'");
  TensorView s = t;
  s.strides[0] = 100;
  EXPECT_TRIPATH_ERROR(tripath::check_tensor(s, "strided", {4, 2, 8}, Device::kCPU), "'strided'");
  EXPECT_TRIPATH_ERROR(tripath::check_dtype(t, "typed", {DType::kBF16}), "'typed'");
  EXPECT_TRIPATH_ERROR(tripath::check_dtype(t, "typed", {DType::kBF16}), "bf16");
}

// ---------------------------------------------------------------------------------------------
// Cache config validation

KvCacheConfig good_config() {
  KvCacheConfig c;
  c.num_blocks = 8;
  c.block_size = 16;
  c.num_kv_heads = 2;
  c.head_dim = 128;
  return c;
}

TEST(KvCacheConfig, AcceptsEverySupportedShape) {
  for (int d : {64, 80, 96, 128, 192, 256}) {
    for (int bs = 1; bs <= 256; bs *= 2) {
      KvCacheConfig c = good_config();
      c.head_dim = d;
      c.block_size = bs;
      EXPECT_NO_THROW(c.validate()) << d << " " << bs;
    }
  }
  EXPECT_TRUE(tripath::is_supported_head_dim(192));
  EXPECT_FALSE(tripath::is_supported_head_dim(100));
  EXPECT_EQ(tripath::supported_head_dims_text(), "{64, 80, 96, 128, 192, 256}");
}

struct BadConfigCase {
  std::string name;
  void (*mutate)(KvCacheConfig&);
  std::string mentions;
};
std::ostream& operator<<(std::ostream& os, const BadConfigCase& c) { return os << c.name; }

class KvCacheConfigBad : public ::testing::TestWithParam<BadConfigCase> {};

TEST_P(KvCacheConfigBad, ThrowsNamingTheField) {
  KvCacheConfig c = good_config();
  GetParam().mutate(c);
  EXPECT_TRIPATH_ERROR(c.validate(), GetParam().mentions);
}

INSTANTIATE_TEST_SUITE_P(
    Fields, KvCacheConfigBad,
    ::testing::Values(
        BadConfigCase{"BlockSize0", [](KvCacheConfig& c) { c.block_size = 0; }, "block_size"},
        BadConfigCase{"BlockSize24", [](KvCacheConfig& c) { c.block_size = 24; }, "block_size"},
        BadConfigCase{"BlockSize512", [](KvCacheConfig& c) { c.block_size = 512; }, "block_size"},
        BadConfigCase{"BlockSizeNeg", [](KvCacheConfig& c) { c.block_size = -16; }, "block_size"},
        BadConfigCase{"HeadDim100", [](KvCacheConfig& c) { c.head_dim = 100; }, "head_dim"},
        BadConfigCase{"HeadDim100Lists", [](KvCacheConfig& c) { c.head_dim = 100; }, "192"},
        BadConfigCase{"HeadDim0", [](KvCacheConfig& c) { c.head_dim = 0; }, "head_dim"},
        BadConfigCase{"HeadDim512", [](KvCacheConfig& c) { c.head_dim = 512; }, "head_dim"},
        BadConfigCase{"ZeroHeads", [](KvCacheConfig& c) { c.num_kv_heads = 0; }, "num_kv_heads"},
        BadConfigCase{"ZeroBlocks", [](KvCacheConfig& c) { c.num_blocks = 0; }, "num_blocks"},
        BadConfigCase{"Fp8ZeroScale",
                      [](KvCacheConfig& c) { c.dtype = DType::kFP8E4M3, c.k_scale = 0.0f; },
                      "k_scale"},
        BadConfigCase{"Fp8NegativeVScale",
                      [](KvCacheConfig& c) { c.dtype = DType::kFP8E4M3, c.v_scale = -1.0f; },
                      "v_scale"}),
    [](const ::testing::TestParamInfo<BadConfigCase>& i) { return i.param.name; });

TEST(KvCacheConfig, SizesAndStorageShape) {
  KvCacheConfig c = good_config();
  c.dtype = DType::kBF16;
  EXPECT_EQ(c.elements_per_tensor(), 8 * 16 * 2 * 128);
  EXPECT_EQ(c.bytes_per_tensor(), 8 * 16 * 2 * 128 * 2);
  EXPECT_EQ(c.shape(), (std::vector<int64_t>{8, 16, 2, 128}));
  c.layout = KvLayout::kHND;
  EXPECT_EQ(c.shape(), (std::vector<int64_t>{8, 2, 16, 128}));
  c.layout = KvLayout::kTiled;
  c.dtype = DType::kFP8E4M3;
  EXPECT_EQ(c.shape(), (std::vector<int64_t>{8, 2, 16, 128}));
  EXPECT_EQ(c.bytes_per_tensor(), 8 * 16 * 2 * 128);
}

TEST(KvCacheConfig, LayoutNames) {
  for (KvLayout l : {KvLayout::kNHD, KvLayout::kHND, KvLayout::kTiled})
    EXPECT_EQ(tripath::parse_layout(tripath::layout_name(l)), l);
  EXPECT_STREQ(tripath::layout_name(KvLayout::kTiled), "tiled");
  EXPECT_TRIPATH_ERROR(tripath::parse_layout("nchw"), "nchw");
}

TEST(KvCacheView, ValidateNamesTheBadStorage) {
  KvCacheConfig c = good_config();
  HostTensor k(DType::kBF16, c.shape()), v(DType::kBF16, c.shape());
  c.dtype = DType::kBF16;
  tripath::KvCacheView view{c, k.view(), v.view()};
  EXPECT_NO_THROW(view.validate(Device::kCPU));
  EXPECT_TRIPATH_ERROR(view.validate(Device::kCUDA), "k_cache");
  HostTensor small(DType::kBF16, {8, 16, 2, 64});
  tripath::KvCacheView bad_v{c, k.view(), small.view()};
  EXPECT_TRIPATH_ERROR(bad_v.validate(Device::kCPU), "v_cache");
  HostTensor wide(DType::kF32, c.shape());
  tripath::KvCacheView bad_k{c, wide.view(), v.view()};
  EXPECT_TRIPATH_ERROR(bad_k.validate(Device::kCPU), "k_cache");
}

TEST(MlaCacheConfig, Validation) {
  tripath::MlaCacheConfig c;
  c.num_blocks = 4;
  EXPECT_NO_THROW(c.validate());
  EXPECT_EQ(c.shape(), (std::vector<int64_t>{4, 16, 576}));
  c.block_size = 48;
  EXPECT_TRIPATH_ERROR(c.validate(), "block_size");
  c.block_size = 16;
  c.num_blocks = 0;
  EXPECT_TRIPATH_ERROR(c.validate(), "num_blocks");
  c.num_blocks = 4;
  c.dtype = DType::kFP8E4M3;
  c.scale = 0.0f;
  EXPECT_TRIPATH_ERROR(c.validate(), "scale");
  c.scale = 1.0f;
  HostTensor wrong(DType::kFP8E4M3, {4, 16, 512});
  tripath::MlaCacheView view{c, wrong.view()};
  EXPECT_TRIPATH_ERROR(view.validate(Device::kCPU), "latent");
}

// ---------------------------------------------------------------------------------------------
// Addressing

TEST(KvCacheOffset, NhdAndHndFormulas) {
  KvCacheConfig c = good_config();
  c.num_blocks = 3, c.block_size = 4, c.num_kv_heads = 3, c.head_dim = 64;
  for (int64_t b = 0; b < 3; ++b)
    for (int s = 0; s < 4; ++s)
      for (int h = 0; h < 3; ++h)
        for (int d = 0; d < 64; ++d) {
          c.layout = KvLayout::kNHD;
          ASSERT_EQ(tripath::kv_cache_offset(c, b, s, h, d), ((b * 4 + s) * 3 + h) * 64 + d);
          c.layout = KvLayout::kHND;
          ASSERT_EQ(tripath::kv_cache_offset(c, b, s, h, d), ((b * 3 + h) * 4 + s) * 64 + d);
        }
}

int independent_tiled_chunk(int c, int r, int chunks) {
  int w = 1;
  for (int cand = 2; cand <= 8; cand *= 2)
    if (cand <= chunks && chunks % cand == 0) w = cand;
  return (c & ~(w - 1)) | ((c ^ r) & (w - 1));
}

TEST(TiledChunk, MatchesDocumentedFormulaAndIsABijectionPerRow) {
  for (int chunks = 1; chunks <= 64; ++chunks) {
    for (int row = 0; row < 40; ++row) {
      std::vector<int> hit(chunks, 0);
      for (int c = 0; c < chunks; ++c) {
        const int p = tripath::tiled_chunk(c, row, chunks);
        ASSERT_EQ(p, independent_tiled_chunk(c, row, chunks)) << c << " " << row << " " << chunks;
        ASSERT_GE(p, 0);
        ASSERT_LT(p, chunks);
        ++hit[p];
      }
      for (int p = 0; p < chunks; ++p)
        ASSERT_EQ(hit[p], 1) << "row " << row << " chunks " << chunks;
    }
  }
  // A few values written out: 8 chunks, row 3 swaps chunk 0 <-> 3; 5 chunks: identity.
  EXPECT_EQ(tripath::tiled_chunk(0, 3, 8), 3);
  EXPECT_EQ(tripath::tiled_chunk(5, 3, 8), 6);
  EXPECT_EQ(tripath::tiled_chunk(9, 1, 16), 8);
  EXPECT_EQ(tripath::tiled_chunk(2, 7, 5), 2);
  EXPECT_EQ(tripath::tiled_chunk(1, 1, 12), 0);
  EXPECT_EQ(tripath::tiled_chunk(4, 1, 12), 5);
}

struct TiledCase {
  int head_dim;
  DType dtype;
};
std::ostream& operator<<(std::ostream& os, const TiledCase& c) {
  return os << "head_dim " << c.head_dim << ", " << tripath::dtype_name(c.dtype);
}

class TiledLayout : public ::testing::TestWithParam<TiledCase> {};

// Every element of a whole cache gets its own offset; each (block, head, slot) row stays in its
// own head_dim-long stretch of the HND order; 16-byte chunks move whole, as tiled_chunk says.
TEST_P(TiledLayout, BijectionOverAWholeCache) {
  KvCacheConfig c;
  c.num_blocks = 3, c.block_size = 16, c.num_kv_heads = 2, c.head_dim = GetParam().head_dim;
  c.dtype = GetParam().dtype;
  c.layout = KvLayout::kTiled;
  const int per_chunk = 16 / static_cast<int>(elem_size(c.dtype));
  const int chunks = c.head_dim / per_chunk;
  std::vector<int> hit(static_cast<size_t>(c.elements_per_tensor()), 0);
  for (int64_t b = 0; b < c.num_blocks; ++b)
    for (int h = 0; h < c.num_kv_heads; ++h)
      for (int s = 0; s < c.block_size; ++s)
        for (int d = 0; d < c.head_dim; ++d) {
          const int64_t off = tripath::kv_cache_offset(c, b, s, h, d);
          const int64_t row = ((b * c.num_kv_heads + h) * c.block_size + s) * c.head_dim;
          ASSERT_GE(off, row);
          ASSERT_LT(off, row + c.head_dim);
          ASSERT_EQ(off, row + independent_tiled_chunk(d / per_chunk, s, chunks) * per_chunk +
                             d % per_chunk);
          ++hit[off];
        }
  for (size_t i = 0; i < hit.size(); ++i) ASSERT_EQ(hit[i], 1) << "offset " << i;
}

INSTANTIATE_TEST_SUITE_P(
    HeadDimsAndDtypes, TiledLayout, ::testing::ValuesIn([] {
      std::vector<TiledCase> v;
      for (int d : {64, 80, 96, 128, 192, 256})
        for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kFP8E4M3})
          v.push_back({d, t});
      return v;
    }()),
    [](const ::testing::TestParamInfo<TiledCase>& i) {
      return "D" + std::to_string(i.param.head_dim) + "_" + tripath::dtype_name(i.param.dtype);
    });

// ---------------------------------------------------------------------------------------------
// Cache writers

struct WriteCase {
  KvLayout layout;
  DType dtype;
  int head_dim;
};
std::ostream& operator<<(std::ostream& os, const WriteCase& c) {
  return os << tripath::layout_name(c.layout) << ", " << tripath::dtype_name(c.dtype)
            << ", head_dim " << c.head_dim;
}

class CacheWrite : public ::testing::TestWithParam<WriteCase> {};

TEST_P(CacheWrite, LandsAtTheLayoutOffsetAndSkipsMinusOne) {
  KvCacheConfig c;
  c.num_blocks = 5, c.block_size = 8, c.num_kv_heads = 3, c.head_dim = GetParam().head_dim;
  c.dtype = GetParam().dtype;
  c.layout = GetParam().layout;
  if (c.dtype == DType::kFP8E4M3) c.k_scale = 0.125f, c.v_scale = 0.25f;
  HostTensor kc(c.dtype, {c.elements_per_tensor()}), vc(c.dtype, {c.elements_per_tensor()});
  kc.fill_nan();
  vc.fill_nan();
  const tripath::KvCacheView view{c, kc.view(), vc.view()};
  std::mt19937_64 rng(23);
  const int64_t n = 12, row = int64_t(c.num_kv_heads) * c.head_dim;
  const std::vector<int64_t> slots = {7, 0, -1, 39, 8, 15, -1, 21, 22, 33, 1, 30};
  HostTensor k(DType::kF32, {n, c.num_kv_heads, c.head_dim}), v = k;
  const std::vector<float> kx = random_floats(rng, n * row, -3, 3),
                           vx = random_floats(rng, n * row, -3, 3);
  for (int64_t i = 0; i < n * row; ++i) k.set(i, kx[i]), v.set(i, vx[i]);
  tripath::reference::write_kv_cache(view, k.view(), v.view(), slots.data(), n);

  std::vector<bool> written(static_cast<size_t>(c.elements_per_tensor()), false);
  for (int64_t t = 0; t < n; ++t) {
    if (slots[t] < 0) continue;
    for (int h = 0; h < c.num_kv_heads; ++h)
      for (int d = 0; d < c.head_dim; ++d) {
        const int64_t off = tripath::kv_cache_offset(c, slots[t] / 8, slots[t] % 8, h, d);
        written[off] = true;
        const float ks = c.dtype == DType::kFP8E4M3 ? c.k_scale : 1.0f;
        const float vs = c.dtype == DType::kFP8E4M3 ? c.v_scale : 1.0f;
        const int64_t src = t * row + h * c.head_dim + d;
        ASSERT_EQ(kc.get(off), ref_round(c.dtype, kx[src] / ks)) << "token " << t << " d " << d;
        ASSERT_EQ(vc.get(off), ref_round(c.dtype, vx[src] / vs)) << "token " << t << " d " << d;
      }
  }
  for (size_t i = 0; i < written.size(); ++i)
    if (!written[i]) {
      ASSERT_TRUE(std::isnan(kc.get(i)) && std::isnan(vc.get(i))) << i;
    }
}

INSTANTIATE_TEST_SUITE_P(
    LayoutsAndDtypes, CacheWrite, ::testing::ValuesIn([] {
      std::vector<WriteCase> v;
      for (KvLayout l : {KvLayout::kNHD, KvLayout::kHND, KvLayout::kTiled})
        for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kFP8E4M3})
          v.push_back({l, t, l == KvLayout::kTiled ? 80 : 64});
      return v;
    }()),
    [](const ::testing::TestParamInfo<WriteCase>& i) {
      return std::string(tripath::layout_name(i.param.layout)) + "_" +
             tripath::dtype_name(i.param.dtype) + "_D" + std::to_string(i.param.head_dim);
    });

// kv_cache.h defines fp8 storage as e4m3(x / scale). With a scale that is not a power of two,
// x * (1 / scale) can differ from x / scale in the last bit and land on the other side of an
// e4m3 rounding midpoint; these values sit right at such midpoints.
TEST(CacheWrite, Fp8StoresXDividedByScale) {
  const float scale = 0.1f;
  std::vector<float> xs;
  for (int c = 0; c < 0x7E; ++c) {
    const float mid = static_cast<float>((fp8_value(c) + fp8_value(c + 1)) / 2);
    float x = mid * scale;
    for (int k = 0; k < 4; ++k, x = std::nextafter(x, 1.0f)) xs.push_back(x);
    x = mid * scale;
    for (int k = 0; k < 4; ++k) xs.push_back(x = std::nextafter(x, 0.0f));
  }
  KvCacheConfig c = good_config();
  c.num_blocks = static_cast<int64_t>(xs.size()), c.block_size = 1, c.num_kv_heads = 1;
  c.head_dim = 64, c.dtype = DType::kFP8E4M3, c.k_scale = scale, c.v_scale = scale;
  HostTensor kc(c.dtype, {c.elements_per_tensor()}), vc = kc;
  const tripath::KvCacheView view{c, kc.view(), vc.view()};
  const int64_t n = static_cast<int64_t>(xs.size());
  HostTensor k(DType::kF32, {n, 1, 64});
  std::vector<int64_t> slots(xs.size());
  for (int64_t t = 0; t < n; ++t) {
    slots[t] = t;
    for (int d = 0; d < 64; ++d) k.set(t * 64 + d, xs[t]);
  }
  tripath::reference::write_kv_cache(view, k.view(), k.view(), slots.data(), n);
  int64_t wrong = 0;
  for (int64_t t = 0; t < n; ++t) {
    const float want = ref_round(DType::kFP8E4M3, xs[t] / scale);
    if (kc.get(t * 64) != want) {
      if (wrong++ < 3) {
        ADD_FAILURE() << "x = " << xs[t] << ": stored " << kc.get(t * 64) << ", e4m3(x / scale) is "
                      << want;
      }
    }
  }
  EXPECT_EQ(wrong, 0) << "of " << n << " values";
}

// The MLA latent writer follows the same definition: e4m3(x / scale), at the same midpoints.
TEST(MlaCacheWrite, Fp8StoresXDividedByScale) {
  const float scale = 0.3f;
  std::vector<float> xs;
  for (int c = 0; c < 0x7E; ++c) {
    const float mid = static_cast<float>((fp8_value(c) + fp8_value(c + 1)) / 2);
    float x = mid * scale;
    for (int k = 0; k < 4; ++k, x = std::nextafter(x, 1.0f)) xs.push_back(x), xs.push_back(-x);
    x = mid * scale;
    for (int k = 0; k < 4; ++k) x = std::nextafter(x, 0.0f), xs.push_back(x), xs.push_back(-x);
  }
  const int64_t n = static_cast<int64_t>(xs.size());
  int64_t differ = 0;  // the inputs tell x / scale and x * (1 / scale) apart
  for (float x : xs)
    differ += ref_round(DType::kFP8E4M3, x / scale) != ref_round(DType::kFP8E4M3, x * (1 / scale));
  ASSERT_GT(differ, 0);
  tripath::MlaCacheConfig c;
  c.num_blocks = n, c.block_size = 1, c.dtype = DType::kFP8E4M3, c.scale = scale;
  HostTensor cache(c.dtype, c.shape());
  cache.fill_nan();
  HostTensor lat(DType::kF32, {n, 576});
  std::vector<int64_t> slots(xs.size());
  for (int64_t t = 0; t < n; ++t) {
    slots[t] = t;
    for (int e = 0; e < 576; ++e) lat.set(t * 576 + e, xs[t]);
  }
  tripath::reference::write_mla_cache(tripath::MlaCacheView{c, cache.view()}, lat.view(),
                                      slots.data(), n);
  int64_t wrong = 0;
  for (int64_t t = 0; t < n; ++t) {
    const float want = ref_round(DType::kFP8E4M3, xs[t] / scale);
    for (int e = 0; e < 576; e += 575) {
      if (cache.get(t * 576 + e) != want && wrong++ < 3) {
        ADD_FAILURE() << "x = " << xs[t] << ": stored " << cache.get(t * 576 + e)
                      << ", e4m3(x / scale) is " << want;
      }
    }
  }
  EXPECT_EQ(wrong, 0) << "of " << n << " values";
}

TEST(CacheWrite, RejectsSlotsOutOfRange) {
  KvCacheConfig c = good_config();
  c.num_blocks = 2, c.block_size = 4, c.head_dim = 64;
  c.dtype = DType::kF32;
  HostTensor kc(DType::kF32, {c.elements_per_tensor()}), vc = kc;
  const tripath::KvCacheView view{c, kc.view(), vc.view()};
  HostTensor k(DType::kF32, {2, 2, 64}), v = k;
  const std::vector<int64_t> bad = {0, 8};  // 2 blocks x 4 slots: 8 is one past the end
  EXPECT_TRIPATH_ERROR(tripath::reference::write_kv_cache(view, k.view(), v.view(), bad.data(), 2),
                       "slot_mapping");
  const std::vector<int64_t> neg = {-2, 0};
  EXPECT_TRIPATH_ERROR(tripath::reference::write_kv_cache(view, k.view(), v.view(), neg.data(), 2),
                       "slot_mapping");
  HostTensor k_bad(DType::kF32, {2, 1, 64});
  const std::vector<int64_t> ok = {0, 1};
  EXPECT_TRIPATH_ERROR(
      tripath::reference::write_kv_cache(view, k_bad.view(), v.view(), ok.data(), 2), "'k'");
}

TEST(MlaCacheWrite, LandsAtTheSlotRowAndSkipsMinusOne) {
  for (DType t : {DType::kF32, DType::kBF16, DType::kFP8E4M3}) {
    tripath::MlaCacheConfig c;
    c.num_blocks = 3, c.block_size = 4, c.dtype = t;
    if (t == DType::kFP8E4M3) c.scale = 0.0625f;
    HostTensor cache(t, c.shape());
    cache.fill_nan();
    const tripath::MlaCacheView view{c, cache.view()};
    std::mt19937_64 rng(29);
    const std::vector<int64_t> slots = {5, -1, 11, 0};
    HostTensor lat(DType::kF32, {4, 576});
    const std::vector<float> x = random_floats(rng, 4 * 576);
    for (int64_t i = 0; i < 4 * 576; ++i) lat.set(i, x[i]);
    tripath::reference::write_mla_cache(view, lat.view(), slots.data(), 4);
    std::set<int64_t> rows;
    for (int tok = 0; tok < 4; ++tok) {
      if (slots[tok] < 0) continue;
      rows.insert(slots[tok]);
      for (int e = 0; e < 576; ++e)
        ASSERT_EQ(cache.get(slots[tok] * 576 + e), ref_round(t, x[tok * 576 + e] / c.scale))
            << tripath::dtype_name(t) << " token " << tok << " e " << e;
    }
    for (int64_t r = 0; r < 12; ++r)
      if (!rows.count(r)) {
        ASSERT_TRUE(std::isnan(cache.get(r * 576))) << r;
      }
  }
}

}  // namespace
