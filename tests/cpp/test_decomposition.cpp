// The three-path composition (decode through split-KV, extend as self-part plus context chunks,
// prefill causal, merged by LSE) equals the direct definition on random mixed ordered steps,
// with tiny extend budgets and many decode splits; an unordered plan is refused.
#include <string>
#include <vector>

#include "paged_step.h"

namespace {

using namespace tptest;

struct DecompCase {
  std::string name;
  uint64_t seed;
  int64_t budget;
  int work_units;
  int min_split;
  int block_size;
  int window_left;
  bool sinks;
  DType cache_dtype;
};
std::ostream& operator<<(std::ostream& os, const DecompCase& c) { return os << c.name; }

MhaSpec random_spec(const DecompCase& c) {
  std::mt19937_64 rng(c.seed);
  MhaSpec s;
  const int n = rand_int(rng, 6, 12);
  for (int r = 0; r < n; ++r) {
    switch (rand_int(rng, 0, 3)) {
      case 0:
        s.query_lens.push_back(rand_int(rng, 0, 1));
        s.context_lens.push_back(rand_int(rng, 0, 400));
        break;
      case 1:
        s.query_lens.push_back(rand_int(rng, 2, 30));
        s.context_lens.push_back(rand_int(rng, 1, 300));
        break;
      case 2:
        s.query_lens.push_back(rand_int(rng, 2, 40));
        s.context_lens.push_back(0);
        break;
      default:
        s.query_lens.push_back(1);
        s.context_lens.push_back(rand_int(rng, 0, 3));
        break;
    }
  }
  // Always at least one long decode and one extend, at random positions.
  for (auto [q, ctx] : {std::pair{1, 350}, {9, 150}}) {
    const int at = rand_int(rng, 0, static_cast<int>(s.query_lens.size()));
    s.query_lens.insert(s.query_lens.begin() + at, q);
    s.context_lens.insert(s.context_lens.begin() + at, ctx);
  }
  s.num_q_heads = 4, s.num_kv_heads = 2, s.head_dim = 64;
  s.block_size = c.block_size;
  s.chunk_budget = c.budget;
  s.work_units = c.work_units;
  s.min_split_tokens = c.min_split;
  s.window_left = c.window_left;
  s.sinks = c.sinks;
  s.cache_dtype = c.cache_dtype;
  s.seed = c.seed * 7919;
  return s;
}

// Per (token, head) row: ||a - b|| / ||b|| <= tol; LSE within tol * max(1, |lse|); no NaN.
::testing::AssertionResult rows_close(const HostTensor& a, const HostTensor& b, int64_t dim,
                                      double tol) {
  const int64_t rows = a.numel() / dim;
  for (int64_t r = 0; r < rows; ++r) {
    double num = 0, den = 0;
    for (int64_t d = 0; d < dim; ++d) {
      const double x = a.get(r * dim + d), y = b.get(r * dim + d);
      if (std::isnan(x) || std::isnan(y))
        return ::testing::AssertionFailure() << "NaN in row " << r;
      num += (x - y) * (x - y);
      den += y * y;
    }
    if (std::sqrt(num) > tol * std::max(std::sqrt(den), 1e-30))
      return ::testing::AssertionFailure()
             << "row " << r << ": relative error " << std::sqrt(num / den) << " > " << tol;
  }
  return ::testing::AssertionSuccess();
}

class Decomposition : public ::testing::TestWithParam<DecompCase> {};

TEST_P(Decomposition, ThreePathEqualsDirect) {
  MhaStep step(random_spec(GetParam()));
  const Layout l = step.ordered_layout();
  const tripath::StepPlan& p = l.plan;
  // The step really exercises the decomposition.
  ASSERT_GT(p.decode.num_requests(), 0);
  ASSERT_GT(p.extend.num_requests(), 0);
  if (GetParam().budget <= 64) {
    ASSERT_GT(p.num_chunks, 1);
  }
  if (GetParam().min_split <= 16 && GetParam().work_units >= 32) {
    ASSERT_GT(p.num_splits(), p.decode.num_requests());
  }

  MhaCall direct = step.call(l, true), three = step.call(l, true);
  step.write_new_tokens(l, direct);
  tripath::reference::attention_direct(p, step.params(), direct.in);
  tripath::reference::attention_three_path(p, step.params(), three.in);
  EXPECT_TRUE(rows_close(three.out, direct.out, 64, 1e-5));
  EXPECT_TRUE(lse_close(to_doubles(three.lse), to_doubles(direct.lse), 1e-5));
  // And both equal the float64 definition.
  std::vector<double> want_out, want_lse;
  step.naive(l, want_out, want_lse);
  EXPECT_TRUE(rel_l2_close(to_doubles(three.out), want_out, 1e-5));
}

std::vector<DecompCase> decomp_cases() {
  std::vector<DecompCase> v;
  uint64_t seed = 1;
  for (int64_t budget : {7, 64, 1000}) {
    for (auto [units, min_split] : {std::pair{1, 256}, {32, 16}, {132, 1}}) {
      v.push_back({"Budget" + std::to_string(budget) + "_Units" + std::to_string(units) +
                       "_MinSplit" + std::to_string(min_split),
                   seed++, budget, units, min_split, 16, -1, false, DType::kF32});
    }
  }
  // Windows make many chunks and splits empty (-inf parts); sinks are one more part.
  v.push_back({"Window3Budget7", seed++, 7, 132, 1, 16, 3, false, DType::kF32});
  v.push_back({"Window20SinksBudget5", seed++, 5, 64, 4, 4, 20, true, DType::kF32});
  v.push_back({"SinksBlock1Budget3", seed++, 3, 64, 1, 1, -1, true, DType::kF32});
  v.push_back({"Fp8Block64Budget11", seed++, 11, 64, 1, 64, -1, false, DType::kFP8E4M3});
  v.push_back({"Bf16Budget1", seed++, 1, 16, 16, 16, -1, false, DType::kBF16});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Schedules, Decomposition, ::testing::ValuesIn(decomp_cases()),
                         [](const ::testing::TestParamInfo<DecompCase>& i) {
                           return i.param.name;
                         });

// One split per request and many splits per request agree.
TEST(DecompositionSplits, OneSplitAndManySplitsAgree) {
  MhaSpec s;
  s.query_lens = {1, 1, 1, 2};
  s.context_lens = {900, 33, 257, 0};
  s.num_q_heads = 8, s.num_kv_heads = 1, s.head_dim = 128;
  s.min_split_tokens = 100000;  // one split
  MhaStep one(s);
  s.min_split_tokens = 16, s.work_units = 132;
  MhaStep many(s);  // same seed: same data and block table
  const Layout l1 = one.ordered_layout(), ln = many.ordered_layout();
  ASSERT_EQ(l1.plan.num_splits(), 3);
  ASSERT_GT(ln.plan.num_splits(), 20);
  MhaCall a = one.call(l1, true), b = many.call(ln, true);
  one.write_new_tokens(l1, a);
  many.write_new_tokens(ln, b);
  tripath::reference::attention_three_path(l1.plan, one.params(), a.in);
  tripath::reference::attention_three_path(ln.plan, many.params(), b.in);
  EXPECT_TRUE(rows_close(b.out, a.out, 128, 1e-5));
  EXPECT_TRUE(lse_close(to_doubles(b.lse), to_doubles(a.lse), 1e-5));
}

TEST(DecompositionOrder, UnorderedPlanIsRefused) {
  MhaSpec s;
  s.query_lens = {5, 1, 3};  // prefill before decode: not ordered
  s.context_lens = {0, 10, 4};
  MhaStep step(s);
  const Layout l = step.input_layout();
  ASSERT_FALSE(l.plan.is_ordered);
  MhaCall c = step.call(l, false);
  EXPECT_TRIPATH_ERROR(tripath::reference::attention_three_path(l.plan, step.params(), c.in),
                       "order");
}

}  // namespace
