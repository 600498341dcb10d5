// The CPU reference (attention_direct and attention_three_path) against the naive float64
// attention of test_util.h, for every feature: head dims, GQA ratios, block sizes, sliding
// window, soft-cap, sinks, LSE, cache dtypes and layouts, q/out dtypes, zero-length, length-1
// and odd-length requests, mixed steps given in random order. Caches are NaN-poisoned outside
// the written slots, block tables shuffled over an oversized pool.
#include <string>
#include <vector>

#include "paged_step.h"

namespace {

using namespace tptest;

struct RefCase {
  std::string name;
  MhaSpec spec;
};

std::ostream& operator<<(std::ostream& os, const RefCase& c) { return os << c.name; }

// A mixed step given in random (not [decode | extend | prefill]) order.
MhaSpec mixed(int hq, int hkv, int d) {
  MhaSpec s;
  s.query_lens = {7, 1, 12, 0, 1, 5, 3};
  s.context_lens = {0, 45, 17, 9, 0, 33, 0};
  s.num_q_heads = hq;
  s.num_kv_heads = hkv;
  s.head_dim = d;
  return s;
}

double out_tolerance(DType t) {
  switch (t) {
    case DType::kF32:
      return 1e-5;  // float32 accumulation
    case DType::kF16:
      return 1e-3;  // one f16 rounding of the output (2^-11 relative)
    case DType::kBF16:
      return 4e-3;  // one bf16 rounding of the output (2^-8 relative)
    default:
      return 0;
  }
}

class ReferenceVsNaive : public ::testing::TestWithParam<RefCase> {};

TEST_P(ReferenceVsNaive, DirectAndThreePathMatch) {
  const MhaSpec& spec = GetParam().spec;
  MhaStep step(spec);
  const Layout l = step.ordered_layout();
  ASSERT_TRUE(l.plan.is_ordered);
  std::vector<double> want_out, want_lse;
  step.naive(l, want_out, want_lse);
  const double tol = out_tolerance(spec.out_dtype);

  MhaCall direct = step.call(l, /*with_kv=*/true);
  step.write_new_tokens(l, direct);
  tripath::reference::attention_direct(l.plan, step.params(), direct.in);
  EXPECT_TRUE(rel_l2_close(to_doubles(direct.out), want_out, tol)) << "attention_direct";
  EXPECT_TRUE(lse_close(to_doubles(direct.lse), want_lse, 1e-5)) << "attention_direct lse";

  MhaCall three = step.call(l, true);
  tripath::reference::attention_three_path(l.plan, step.params(), three.in);
  EXPECT_TRUE(rel_l2_close(to_doubles(three.out), want_out, tol)) << "attention_three_path";
  EXPECT_TRUE(lse_close(to_doubles(three.lse), want_lse, 1e-5)) << "attention_three_path lse";
}

std::vector<RefCase> ref_cases() {
  std::vector<RefCase> v;
  auto add = [&](std::string name, MhaSpec s) {
    s.seed = 1000 + v.size();
    v.push_back({std::move(name), std::move(s)});
  };
  for (int d : {64, 80, 96, 128, 192, 256}) add("HeadDim" + std::to_string(d), mixed(4, 2, d));
  // GQA ratios 1, 4, 8, 16 and odd ones (3, 5); MQA.
  add("Gqa1", mixed(2, 2, 64));
  add("Gqa4", mixed(8, 2, 64));
  add("Gqa8", mixed(8, 1, 64));
  add("Gqa16", mixed(16, 1, 128));
  add("Gqa3", mixed(6, 2, 64));
  add("Gqa5", mixed(5, 1, 80));
  for (int bs : {1, 16, 64, 256}) {
    MhaSpec s = mixed(4, 1, 64);
    s.block_size = bs;
    s.context_lens = {0, 130, 17, 64, 0, 63, 0};
    add("BlockSize" + std::to_string(bs), s);
  }
  for (int w : {0, 1, 5, 40}) {
    MhaSpec s = mixed(4, 2, 64);
    s.context_lens = {0, 80, 50, 9, 0, 120, 0};
    s.query_lens = {30, 1, 12, 0, 1, 20, 3};
    s.window_left = w;
    add("Window" + std::to_string(w), s);
  }
  {
    MhaSpec s = mixed(4, 2, 128);
    s.softcap = 5.0f;
    s.scale = 1.0f;  // large scores, so the cap matters
    add("SoftCap5Scale1", s);
    s.softcap = 30.0f;
    s.scale = 0.0f;
    add("SoftCap30", s);
  }
  {
    MhaSpec s = mixed(4, 2, 64);
    s.sinks = true;
    add("Sinks", s);
    s.window_left = 8;  // gpt-oss: sinks + sliding window
    s.context_lens = {0, 60, 30, 9, 0, 33, 0};
    add("SinksWindow8", s);
    s.softcap = 10.0f;
    s.scale = 0.5f;
    s.head_dim = 256;
    add("SinksWindowSoftCapD256", s);
  }
  // Cache dtypes x layouts, across head dims (tiled: 16-byte chunks per row differ).
  struct CL {
    DType t;
    KvLayout l;
    int d;
  };
  for (CL c : {CL{DType::kFP8E4M3, KvLayout::kNHD, 256}, CL{DType::kFP8E4M3, KvLayout::kHND, 64},
               CL{DType::kFP8E4M3, KvLayout::kTiled, 80},
               CL{DType::kFP8E4M3, KvLayout::kTiled, 128}, CL{DType::kBF16, KvLayout::kNHD, 64},
               CL{DType::kBF16, KvLayout::kHND, 128}, CL{DType::kBF16, KvLayout::kTiled, 96},
               CL{DType::kF16, KvLayout::kNHD, 256}, CL{DType::kF16, KvLayout::kHND, 80},
               CL{DType::kF16, KvLayout::kTiled, 192}, CL{DType::kF32, KvLayout::kHND, 64},
               CL{DType::kF32, KvLayout::kTiled, 80}, CL{DType::kF32, KvLayout::kTiled, 256}}) {
    MhaSpec s = mixed(4, 2, c.d);
    s.cache_dtype = c.t;
    s.layout = c.l;
    add(std::string("Cache_") + tripath::dtype_name(c.t) + "_" + tripath::layout_name(c.l) + "_D" +
            std::to_string(c.d),
        s);
  }
  {
    MhaSpec s = mixed(4, 2, 64);
    s.q_dtype = s.out_dtype = DType::kBF16;
    add("QOutBf16", s);
    s.q_dtype = DType::kF16;
    s.out_dtype = DType::kF32;
    add("QF16OutF32", s);
    s.q_dtype = DType::kF32;
    s.out_dtype = DType::kF16;
    add("OutF16", s);
  }
  {
    MhaSpec s = mixed(4, 2, 64);
    s.query_lens = {0, 1, 0, 1, 2, 0, 1};
    s.context_lens = {0, 0, 5, 1, 0, 0, 1};
    add("ZeroAndOneLength", s);
    s.query_lens = {1};
    s.context_lens = {0};
    add("SingleTokenOnly", s);
  }
  {
    MhaSpec s = mixed(2, 1, 64);
    s.query_lens = {113, 1, 1025, 1, 113};
    s.context_lens = {1013, 1025, 0, 113, 0};
    add("OddLengths", s);
    s.chunk_budget = 100;
    s.min_split_tokens = 16;
    s.work_units = 8;
    s.block_size = 64;
    add("OddLengthsSmallBudget", s);
  }
  {
    MhaSpec s = mixed(4, 2, 64);
    s.decode_threshold = 4;
    s.query_lens = {3, 4, 5, 1, 6, 2};
    s.context_lens = {20, 0, 10, 7, 0, 31};
    add("DecodeThreshold4", s);
  }
  for (uint64_t seed : {1, 2, 3}) {
    std::mt19937_64 rng(seed);
    MhaSpec s;
    const int n = rand_int(rng, 8, 14);
    for (int r = 0; r < n; ++r) {
      const int kind = rand_int(rng, 0, 2);
      s.query_lens.push_back(kind == 0 ? rand_int(rng, 0, 1) : rand_int(rng, 2, 40));
      s.context_lens.push_back(kind == 2 ? 0 : rand_int(rng, 0, 200));
    }
    s.num_q_heads = 8, s.num_kv_heads = 2, s.head_dim = 96;
    s.block_size = seed == 1 ? 1 : 16;
    s.cache_dtype = seed == 2 ? DType::kBF16 : DType::kF32;
    s.layout = seed == 3 ? KvLayout::kTiled : KvLayout::kNHD;
    s.chunk_budget = 37;
    s.min_split_tokens = 8;
    s.work_units = 13;
    add("RandomMixed" + std::to_string(seed), s);
  }
  return v;
}

INSTANTIATE_TEST_SUITE_P(Features, ReferenceVsNaive, ::testing::ValuesIn(ref_cases()),
                         [](const ::testing::TestParamInfo<RefCase>& i) { return i.param.name; });

// Running the same call twice gives bitwise identical results (threads do not change sums).
TEST(ReferenceAttention, RepeatedRunsBitwiseIdentical) {
  MhaSpec s = mixed(8, 2, 128);
  s.chunk_budget = 9;
  s.min_split_tokens = 16;
  s.work_units = 8;
  MhaStep step(s);
  const Layout l = step.ordered_layout();
  MhaCall a = step.call(l, true), b = step.call(l, true);
  step.write_new_tokens(l, a);
  tripath::reference::attention_three_path(l.plan, step.params(), a.in);
  tripath::reference::attention_three_path(l.plan, step.params(), b.in);
  EXPECT_EQ(a.out.bytes, b.out.bytes);
  EXPECT_EQ(a.lse.bytes, b.lse.bytes);
}

// The LSE output is optional: leaving it out changes nothing else.
TEST(ReferenceAttention, LseIsOptional) {
  MhaStep step(mixed(4, 2, 64));
  const Layout l = step.ordered_layout();
  MhaCall with = step.call(l, true), without = step.call(l, true, /*with_lse=*/false);
  step.write_new_tokens(l, with);
  tripath::reference::attention_direct(l.plan, step.params(), with.in);
  tripath::reference::attention_direct(l.plan, step.params(), without.in);
  EXPECT_EQ(with.out.bytes, without.out.bytes);
}

// The scale parameter is honored (0 means 1/sqrt(head_dim)).
TEST(ReferenceAttention, ExplicitScaleEqualsDefault) {
  MhaSpec s = mixed(4, 2, 64);
  MhaStep step(s);
  const Layout l = step.ordered_layout();
  MhaCall a = step.call(l, true), b = step.call(l, true), c = step.call(l, true);
  step.write_new_tokens(l, a);
  tripath::AttentionParams p = step.params();
  tripath::reference::attention_direct(l.plan, p, a.in);
  p.scale = 0.125f;  // 1/sqrt(64)
  tripath::reference::attention_direct(l.plan, p, b.in);
  EXPECT_EQ(a.out.bytes, b.out.bytes);
  EXPECT_FLOAT_EQ(p.effective_scale(), 0.125f);
  p.scale = 0.5f;
  tripath::reference::attention_direct(l.plan, p, c.in);
  EXPECT_NE(a.out.bytes, c.out.bytes);
}

}  // namespace
