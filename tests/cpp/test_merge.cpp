// merge_states: merging the naive attention of disjoint key sets equals the attention of their
// union; empty parts (lse -inf) weigh nothing even when their output holds garbage; all parts
// empty gives 0 and -inf with no NaN; large LSEs do not overflow.
#include <limits>
#include <string>
#include <vector>

#include "test_util.h"

namespace {

using namespace tptest;

const float kNegInfF = -std::numeric_limits<float>::infinity();

struct MergeCase {
  int parts;
  int dim;
  double empty_fraction;  // chance that a part gets no keys
  uint64_t seed;
};
std::ostream& operator<<(std::ostream& os, const MergeCase& c) {
  return os << c.parts << " parts, dim " << c.dim << ", empty " << c.empty_fraction;
}

class MergeStates : public ::testing::TestWithParam<MergeCase> {};

TEST_P(MergeStates, MergeOfPartsEqualsAttentionOfUnion) {
  const MergeCase c = GetParam();
  const int rows = 12, nkeys = 97;
  std::mt19937_64 rng(c.seed);
  HostTensor outs(DType::kF32, {c.parts, rows, c.dim}), lses(DType::kF32, {c.parts, rows});
  HostTensor out(DType::kF32, {rows, c.dim}), lse(DType::kF32, {rows});
  out.fill_nan();
  lse.fill_nan();
  std::vector<double> want_out, want_lse;
  for (int r = 0; r < rows; ++r) {
    const std::vector<float> q = random_floats(rng, c.dim, -2, 2);
    const std::vector<float> K = random_floats(rng, size_t(nkeys) * c.dim, -1, 1);
    const std::vector<float> V = random_floats(rng, size_t(nkeys) * c.dim, -1, 1);
    // Keys dealt to parts at random; some parts stay empty.
    std::vector<std::vector<int64_t>> part_keys(c.parts);
    std::vector<bool> empty(c.parts);
    for (int p = 0; p < c.parts; ++p)
      empty[p] = std::uniform_real_distribution<double>(0, 1)(rng) < c.empty_fraction;
    std::vector<int64_t> all;
    for (int64_t j = 0; j < nkeys; ++j) {
      const int p = rand_int(rng, 0, c.parts - 1);
      if (empty[p]) continue;
      part_keys[p].push_back(j);
      all.push_back(j);
    }
    const double scale = 1.0 / std::sqrt(double(c.dim));
    for (int p = 0; p < c.parts; ++p) {
      const RowResult pr = naive_row(q.data(), K.data(), c.dim, V.data(), c.dim, part_keys[p],
                                     c.dim, c.dim, scale, 0, false, 0);
      for (int d = 0; d < c.dim; ++d)  // an empty part's output is garbage: it must not count
        outs.set((int64_t(p) * rows + r) * c.dim + d,
                 part_keys[p].empty() ? (d % 2 ? std::numeric_limits<float>::quiet_NaN() : 1e30f)
                                      : static_cast<float>(pr.out[d]));
      lses.set(int64_t(p) * rows + r, static_cast<float>(pr.lse));
    }
    const RowResult u = naive_row(q.data(), K.data(), c.dim, V.data(), c.dim, all, c.dim, c.dim,
                                  scale, 0, false, 0);
    want_out.insert(want_out.end(), u.out.begin(), u.out.end());
    want_lse.push_back(u.lse);
  }
  tripath::reference::merge_states(outs.view(), lses.view(), out.view(), lse.view());
  const std::vector<double> got_all = to_doubles(out);
  for (int r = 0; r < rows; ++r) {
    const std::vector<double> got(got_all.begin() + r * c.dim, got_all.begin() + (r + 1) * c.dim);
    const std::vector<double> want(want_out.begin() + r * c.dim,
                                   want_out.begin() + (r + 1) * c.dim);
    if (std::isinf(want_lse[r])) {
      for (double x : got) EXPECT_EQ(x, 0.0) << "row " << r << " has no keys: output must be 0";
    } else {
      EXPECT_TRUE(rel_l2_close(got, want, 1e-5)) << "row " << r;
    }
  }
  EXPECT_TRUE(lse_close(to_doubles(lse), want_lse, 1e-5));
}

INSTANTIATE_TEST_SUITE_P(Parts, MergeStates,
                         ::testing::Values(MergeCase{1, 64, 0.0, 1}, MergeCase{2, 64, 0.0, 2},
                                           MergeCase{3, 128, 0.0, 3}, MergeCase{7, 64, 0.0, 4},
                                           MergeCase{4, 80, 0.4, 5}, MergeCase{16, 64, 0.5, 6},
                                           MergeCase{3, 256, 0.9, 7}),
                         [](const ::testing::TestParamInfo<MergeCase>& i) {
                           return "P" + std::to_string(i.param.parts) + "_D" +
                                  std::to_string(i.param.dim) + "_Empty" +
                                  std::to_string(int(i.param.empty_fraction * 100)) + "pct";
                         });

TEST(MergeStatesEdge, AllPartsEmptyGiveZeroAndMinusInf) {
  HostTensor outs(DType::kF32, {3, 4, 64}), lses(DType::kF32, {3, 4});
  outs.fill_nan();
  lses.fill(kNegInfF);
  HostTensor out(DType::kF32, {4, 64}), lse(DType::kF32, {4});
  out.fill_nan();
  lse.fill_nan();
  tripath::reference::merge_states(outs.view(), lses.view(), out.view(), lse.view());
  for (int64_t i = 0; i < out.numel(); ++i) ASSERT_EQ(out.get(i), 0.0) << i;
  for (int64_t i = 0; i < 4; ++i) ASSERT_EQ(lse.get(i), -kInf) << i;
}

TEST(MergeStatesEdge, LargeLseDoesNotOverflow) {
  HostTensor outs(DType::kF32, {2, 1, 64}), lses(DType::kF32, {2, 1});
  for (int d = 0; d < 64; ++d) outs.set(d, 1.0f), outs.set(64 + d, -1.0f);
  lses.set(0, 1000.0f);
  lses.set(1, 999.0f);
  HostTensor out(DType::kF32, {1, 64}), lse(DType::kF32, {1});
  tripath::reference::merge_states(outs.view(), lses.view(), out.view(), lse.view());
  const double w = std::exp(1.0);
  for (int d = 0; d < 64; ++d) EXPECT_NEAR(out.get(d), (w - 1) / (w + 1), 1e-6);
  EXPECT_NEAR(lse.get(0), 1000.0 + std::log1p(std::exp(-1.0)), 1e-4);
  // Very negative but finite LSEs still count.
  lses.set(0, -1000.0f);
  lses.set(1, -1000.0f);
  tripath::reference::merge_states(outs.view(), lses.view(), out.view(), lse.view());
  for (int d = 0; d < 64; ++d) EXPECT_NEAR(out.get(d), 0.0, 1e-6);
  EXPECT_NEAR(lse.get(0), -1000.0 + std::log(2.0), 1e-4);
}

TEST(MergeStatesEdge, SinglePartIsIdentityAndLseIsOptional) {
  std::mt19937_64 rng(53);
  HostTensor outs(DType::kF32, {1, 5, 64}), lses(DType::kF32, {1, 5});
  const std::vector<float> x = random_floats(rng, 5 * 64), l = random_floats(rng, 5, -3, 3);
  for (int i = 0; i < 5 * 64; ++i) outs.set(i, x[i]);
  for (int i = 0; i < 5; ++i) lses.set(i, l[i]);
  HostTensor out(DType::kF32, {5, 64}), lse(DType::kF32, {5});
  tripath::reference::merge_states(outs.view(), lses.view(), out.view(), lse.view());
  for (int i = 0; i < 5 * 64; ++i) ASSERT_FLOAT_EQ(out.get(i), x[i]);
  for (int i = 0; i < 5; ++i) ASSERT_FLOAT_EQ(lse.get(i), l[i]);
  HostTensor out2(DType::kF32, {5, 64});
  tripath::reference::merge_states(outs.view(), lses.view(), out2.view(), tripath::TensorView());
  EXPECT_EQ(out2.bytes, out.bytes);
}

TEST(MergeStatesEdge, BadShapesAndDtypesNameTheArgument) {
  HostTensor outs(DType::kF32, {2, 3, 64}), lses(DType::kF32, {2, 3});
  HostTensor out(DType::kF32, {3, 64}), lse(DType::kF32, {3});
  HostTensor lses_bad(DType::kF32, {2, 4}), out_bad(DType::kF32, {3, 32}),
      lse_bad(DType::kF32, {4});
  HostTensor outs_bf16(DType::kBF16, {2, 3, 64});
  auto merge_states = [](const tripath::TensorView& a, const tripath::TensorView& b,
                         const tripath::TensorView& c, const tripath::TensorView& d) {
    tripath::reference::merge_states(a, b, c, d);
  };
  EXPECT_TRIPATH_ERROR(merge_states(outs.view(), lses_bad.view(), out.view(), lse.view()),
                       "'lses'");
  EXPECT_TRIPATH_ERROR(merge_states(outs.view(), lses.view(), out_bad.view(), lse.view()), "'out'");
  EXPECT_TRIPATH_ERROR(merge_states(outs.view(), lses.view(), out.view(), lse_bad.view()), "'lse'");
  EXPECT_TRIPATH_ERROR(merge_states(outs_bf16.view(), lses.view(), out.view(), lse.view()),
                       "'outs'");
  EXPECT_TRIPATH_ERROR(
      merge_states(outs.view(tripath::Device::kCUDA), lses.view(), out.view(), lse.view()),
      "'outs'");
}

}  // namespace
