// Every bad argument of an attention call throws tripath::Error naming the argument, through
// each entry point: attention_direct, attention_three_path and the reference backend's run().
#include <limits>
#include <string>
#include <vector>

#include "paged_step.h"

namespace {

using namespace tptest;

// What a case may change: the call's inputs, params and plan; `keep` owns replacement tensors.
struct Ctx {
  MhaCall& call;
  tripath::AttentionParams& params;
  tripath::StepPlan& plan;
  std::vector<HostTensor>& keep;
  tripath::TensorView add(DType t, std::vector<int64_t> shape) {
    keep.emplace_back(t, std::move(shape));
    return keep.back().view();
  }
};

struct ErrorCase {
  std::string name;
  void (*mutate)(Ctx&);
  std::string mentions;
};

enum class Entry { kDirect, kThreePath, kBackend };
std::ostream& operator<<(std::ostream& os, const ErrorCase& c) { return os << c.name; }
std::ostream& operator<<(std::ostream& os, Entry e) {
  return os << (e == Entry::kDirect ? "direct" : e == Entry::kThreePath ? "three_path" : "backend");
}

class AttentionErrors : public ::testing::TestWithParam<std::tuple<ErrorCase, Entry>> {};

MhaSpec small_spec() {
  MhaSpec s;
  s.query_lens = {1, 6, 4};
  s.context_lens = {20, 9, 0};
  s.num_q_heads = 4, s.num_kv_heads = 2, s.head_dim = 64;
  s.sinks = false;
  return s;
}

TEST_P(AttentionErrors, ThrowsNamingTheArgument) {
  const auto& [c, entry] = GetParam();
  MhaStep step(small_spec());
  Layout l = step.ordered_layout();
  MhaCall call = step.call(l, true);
  tripath::AttentionParams params = step.params();
  std::vector<HostTensor> keep;
  keep.reserve(8);  // views into `keep` must not move
  Ctx ctx{call, params, l.plan, keep};
  c.mutate(ctx);
  switch (entry) {
    case Entry::kDirect:
      EXPECT_TRIPATH_ERROR(tripath::reference::attention_direct(l.plan, params, call.in),
                           c.mentions);
      break;
    case Entry::kThreePath:
      EXPECT_TRIPATH_ERROR(tripath::reference::attention_three_path(l.plan, params, call.in),
                           c.mentions);
      break;
    case Entry::kBackend:
      EXPECT_TRIPATH_ERROR(
          tripath::create_attention_backend("reference")->run(l.plan, params, call.in), c.mentions);
      break;
  }
}

const std::vector<ErrorCase>& error_cases() {
  static const std::vector<ErrorCase> cases = {
      {"QTooFewTokens",
       [](Ctx& x) {
         x.call.in.q = x.add(DType::kF32, {10, 4, 64});
       },
       "'q'"},
      {"QWrongHeads",
       [](Ctx& x) {
         x.call.in.q = x.add(DType::kF32, {11, 2, 64});
       },
       "'q'"},
      {"QWrongRank",
       [](Ctx& x) {
         x.call.in.q = x.add(DType::kF32, {11, 256});
       },
       "'q'"},
      {"QMissing", [](Ctx& x) { x.call.in.q = tripath::TensorView(); }, "'q'"},
      {"QFp8",
       [](Ctx& x) {
         x.call.in.q = x.add(DType::kFP8E4M3, {11, 4, 64});
       },
       "'q'"},
      {"QInt32",
       [](Ctx& x) {
         x.call.in.q = x.add(DType::kI32, {11, 4, 64});
       },
       "'q'"},
      {"QOnCuda", [](Ctx& x) { x.call.in.q.device = tripath::Device::kCUDA; }, "'q'"},
      {"QStrided", [](Ctx& x) { x.call.in.q.strides[0] = 4 * 64 * 2; }, "'q'"},
      {"OutWrongShape",
       [](Ctx& x) {
         x.call.in.out = x.add(DType::kF32, {11, 4, 128});
       },
       "'out'"},
      {"OutMissing", [](Ctx& x) { x.call.in.out = tripath::TensorView(); }, "'out'"},
      {"OutFp8",
       [](Ctx& x) {
         x.call.in.out = x.add(DType::kFP8E4M3, {11, 4, 64});
       },
       "'out'"},
      {"OutOnCuda", [](Ctx& x) { x.call.in.out.device = tripath::Device::kCUDA; }, "'out'"},
      {"LseWrongShape",
       [](Ctx& x) {
         x.call.in.lse = x.add(DType::kF32, {11, 2});
       },
       "'lse'"},
      {"LseBf16",
       [](Ctx& x) {
         x.call.in.lse = x.add(DType::kBF16, {11, 4});
       },
       "'lse'"},
      {"KWithoutV", [](Ctx& x) { x.call.in.v = tripath::TensorView(); }, "'v'"},
      {"VWithoutK", [](Ctx& x) { x.call.in.k = tripath::TensorView(); }, "'k'"},
      {"KWrongHeads",
       [](Ctx& x) {
         x.call.in.k = x.add(DType::kF32, {11, 4, 64});
       },
       "'k'"},
      {"VWrongDim",
       [](Ctx& x) {
         x.call.in.v = x.add(DType::kF32, {11, 2, 80});
       },
       "'v'"},
      {"CacheOnCuda", [](Ctx& x) { x.call.in.cache.k.device = tripath::Device::kCUDA; }, "k_cache"},
      {"CacheTooSmall",
       [](Ctx& x) {
         x.call.in.cache.v = x.add(x.call.in.cache.config.dtype, {2, 16, 2, 64});
       },
       "v_cache"},
      {"HeadDim100", [](Ctx& x) { x.params.head_dim = 100; }, "head_dim"},
      {"HeadDim100Value", [](Ctx& x) { x.params.head_dim = 100; }, "100"},
      {"CacheHeadDimMismatch", [](Ctx& x) { x.params.head_dim = 128; }, "head_dim"},
      {"GqaNotDivisible", [](Ctx& x) { x.params.num_q_heads = 3; }, "num_q_heads"},
      {"ZeroQHeads", [](Ctx& x) { x.params.num_q_heads = 0; }, "num_q_heads"},
      {"KvHeadsMismatchCache", [](Ctx& x) { x.params.num_kv_heads = 1; }, "num_kv_heads"},
      {"ZeroKvHeads", [](Ctx& x) { x.params.num_kv_heads = 0; }, "num_kv_heads"},
      {"WindowBelowMinusOne", [](Ctx& x) { x.params.window_left = -2; }, "window_left"},
      {"NegativeSoftcap", [](Ctx& x) { x.params.softcap = -1.0f; }, "softcap"},
      {"NaNScale", [](Ctx& x) { x.params.scale = std::numeric_limits<float>::quiet_NaN(); },
       "scale"},
      {"SinksFlagWithoutTensor", [](Ctx& x) { x.params.has_sinks = true; }, "sinks"},
      {"SinksTensorWithoutFlag", [](Ctx& x) { x.call.in.sinks = x.add(DType::kF32, {4}); },
       "sinks"},
      {"SinksWrongShape",
       [](Ctx& x) {
         x.params.has_sinks = true;
         x.call.in.sinks = x.add(DType::kF32, {2});
       },
       "sinks"},
      {"PlanForAnotherBlockSize", [](Ctx& x) { x.plan.block_size = 32; }, "block_size"},
      {"PlanForALargerPool",
       [](Ctx& x) { x.plan.num_cache_blocks = x.call.in.cache.config.num_blocks + 1; },
       "num_cache_blocks"},
  };
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Arguments, AttentionErrors,
                         ::testing::Combine(::testing::ValuesIn(error_cases()),
                                            ::testing::Values(Entry::kDirect, Entry::kThreePath,
                                                              Entry::kBackend)),
                         [](const ::testing::TestParamInfo<std::tuple<ErrorCase, Entry>>& i) {
                           const Entry e = std::get<1>(i.param);
                           return std::get<0>(i.param).name + (e == Entry::kDirect ? "_Direct"
                                                               : e == Entry::kThreePath
                                                                   ? "_ThreePath"
                                                                   : "_Backend");
                         });

// An error leaves the outputs untouched: validation happens before any write.
TEST(AttentionErrorsNoSideEffects, FailedCallWritesNothing) {
  MhaStep step(small_spec());
  const Layout l = step.ordered_layout();
  MhaCall call = step.call(l, true);
  const std::vector<uint8_t> k_before(
      static_cast<uint8_t*>(call.in.cache.k.data),
      static_cast<uint8_t*>(call.in.cache.k.data) + step.config().bytes_per_tensor());
  HostTensor bad_lse(DType::kF32, {11, 3});
  call.in.lse = bad_lse.view();
  EXPECT_THROW(tripath::create_attention_backend("reference")->run(l.plan, step.params(), call.in),
               tripath::Error);
  for (int64_t i = 0; i < call.out.numel(); ++i) ASSERT_TRUE(std::isnan(call.out.get(i))) << i;
  EXPECT_EQ(std::memcmp(k_before.data(), call.in.cache.k.data, k_before.size()), 0)
      << "the cache was written before the call was refused";
}

}  // namespace
