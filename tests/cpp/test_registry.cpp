// Backend registry and selection (names, availability, "auto", environment variables, errors
// that list valid names), the reference backend behind the AttentionBackend interface, and the
// device-dispatching public entry points.
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "paged_step.h"
#include "scoped_env.h"

namespace {

using namespace tptest;

bool have_cuda_gpu() {
  const tripath::BuildInfo info = tripath::build_info();
  return info.with_cuda && info.gpu_found;
}

using tripath::test_support::ScopedEnv;

TEST(Registry, ListsEveryBackendName) {
  std::set<std::string> mha, mla;
  for (const tripath::BackendInfo& b : tripath::list_backends()) {
    (b.is_mla ? mla : mha).insert(b.name);
    EXPECT_EQ(b.available, b.reason.empty()) << b.name << ": " << b.reason;
  }
  EXPECT_EQ(mha, (std::set<std::string>{"three_path", "unified", "two_path", "reference"}));
  EXPECT_EQ(mla, (std::set<std::string>{"mla", "mla_baseline", "reference"}));
}

TEST(Registry, ReferenceIsAlwaysAvailable) {
  int seen = 0;
  for (const tripath::BackendInfo& b : tripath::list_backends()) {
    if (b.name != "reference") continue;
    ++seen;
    EXPECT_TRUE(b.available) << (b.is_mla ? "MLA" : "MHA");
  }
  EXPECT_EQ(seen, 2);  // once for MHA, once for MLA
  EXPECT_EQ(tripath::resolve_backend("reference", false), "reference");
  EXPECT_EQ(tripath::resolve_backend("reference", true), "reference");
}

TEST(Registry, CudaBackendsUnavailableWithoutCudaSayWhy) {
  if (tripath::build_info().with_cuda) GTEST_SKIP() << "built with CUDA";
  for (const tripath::BackendInfo& b : tripath::list_backends()) {
    if (b.name == "reference") continue;
    EXPECT_FALSE(b.available) << b.name;
    EXPECT_NE(b.reason.find("CUDA"), std::string::npos) << b.name << ": " << b.reason;
  }
  EXPECT_TRIPATH_ERROR(tripath::resolve_backend("three_path", false), "not built with CUDA");
  EXPECT_TRIPATH_ERROR(tripath::resolve_backend("mla", true), "CUDA");
  EXPECT_TRIPATH_ERROR(tripath::create_attention_backend("unified"), "CUDA");
  EXPECT_TRIPATH_ERROR(tripath::create_mla_backend("mla_baseline"), "CUDA");
}

TEST(Registry, AutoWithoutGpuIsReference) {
  if (have_cuda_gpu()) GTEST_SKIP() << "a CUDA GPU is present";
  EXPECT_EQ(tripath::resolve_backend("auto", false), "reference");
  EXPECT_EQ(tripath::resolve_backend("auto", true), "reference");
  EXPECT_STREQ(tripath::create_attention_backend("auto")->name(), "reference");
  EXPECT_STREQ(tripath::create_mla_backend("auto")->name(), "reference");
}

TEST(Registry, UnknownNamesListTheValidOnes) {
  for (const char* valid : {"three_path", "unified", "two_path", "reference", "auto"})
    EXPECT_TRIPATH_ERROR(tripath::resolve_backend("flash9", false), valid);
  EXPECT_TRIPATH_ERROR(tripath::resolve_backend("flash9", false), "flash9");
  for (const char* valid : {"mla_baseline", "reference", "auto"})
    EXPECT_TRIPATH_ERROR(tripath::resolve_backend("flashmla", true), valid);
  // Names of the other family are not valid here.
  EXPECT_THROW(tripath::resolve_backend("mla", false), tripath::Error);
  EXPECT_THROW(tripath::resolve_backend("three_path", true), tripath::Error);
  EXPECT_THROW(tripath::resolve_backend("", false), tripath::Error);
  EXPECT_THROW(tripath::resolve_backend("Reference", false), tripath::Error);
  EXPECT_TRIPATH_ERROR(tripath::create_attention_backend("nope"), "reference");
  EXPECT_TRIPATH_ERROR(tripath::create_mla_backend("nope"), "mla_baseline");
}

TEST(Registry, EnvironmentVariablesAreHonored) {
  {
    ScopedEnv a("TRIPATH_BACKEND", nullptr), b("TRIPATH_MLA_BACKEND", nullptr);
    EXPECT_EQ(tripath::backend_from_env(false), tripath::resolve_backend("auto", false));
    EXPECT_EQ(tripath::backend_from_env(true), tripath::resolve_backend("auto", true));
  }
  {
    ScopedEnv a("TRIPATH_BACKEND", "reference"), b("TRIPATH_MLA_BACKEND", "reference");
    EXPECT_EQ(tripath::backend_from_env(false), "reference");
    EXPECT_EQ(tripath::backend_from_env(true), "reference");
  }
  {
    ScopedEnv a("TRIPATH_BACKEND", "bogus_backend"), b("TRIPATH_MLA_BACKEND", "mla_bogus");
    EXPECT_TRIPATH_ERROR(tripath::backend_from_env(false), "bogus_backend");
    EXPECT_TRIPATH_ERROR(tripath::backend_from_env(true), "mla_bogus");
    EXPECT_TRIPATH_ERROR(tripath::backend_from_env(false), "reference");  // lists valid names
  }
  if (!tripath::build_info().with_cuda) {
    ScopedEnv a("TRIPATH_BACKEND", "three_path");
    EXPECT_TRIPATH_ERROR(tripath::backend_from_env(false), "CUDA");
  }
}

TEST(Registry, BuildInfo) {
  const tripath::BuildInfo info = tripath::build_info();
  EXPECT_FALSE(info.version.empty());
  EXPECT_GE(info.num_threads, 1);
  if (!info.gpu_found) {
    EXPECT_TRUE(info.gpu_name.empty());
    EXPECT_EQ(info.gpu_sm_count, 0);
  }
#ifndef TRIPATH_WITH_CUDA
  EXPECT_FALSE(info.with_cuda);
  EXPECT_FALSE(info.gpu_found);
#endif
}

// ---------------------------------------------------------------------------------------------
// The reference backend through the interface

MhaSpec backend_spec() {
  MhaSpec s;
  s.query_lens = {9, 1, 0, 14, 1, 4};
  s.context_lens = {0, 70, 3, 25, 0, 41};
  s.num_q_heads = 8, s.num_kv_heads = 2, s.head_dim = 128;
  s.chunk_budget = 10;
  s.min_split_tokens = 16;
  s.work_units = 16;
  s.sinks = true;
  s.seed = 77;
  return s;
}

TEST(ReferenceBackend, RunWritesCacheThenEqualsThreePath) {
  MhaStep a(backend_spec()), b(backend_spec());  // same seed: same data and tables
  const Layout la = a.ordered_layout(), lb = b.ordered_layout();
  auto backend = tripath::create_attention_backend("reference");
  EXPECT_STREQ(backend->name(), "reference");
  EXPECT_FALSE(backend->needs_ordered_batch());
  EXPECT_NO_THROW(backend->check_supported(a.params(), a.config()));

  MhaCall ca = a.call(la, /*with_kv=*/true);
  backend->prepare(la.plan, a.params(), nullptr);
  backend->run(la.plan, a.params(), ca.in);

  MhaCall cb = b.call(lb, true);
  b.write_new_tokens(lb, cb);
  tripath::reference::attention_three_path(lb.plan, b.params(), cb.in);
  EXPECT_EQ(ca.out.bytes, cb.out.bytes);
  EXPECT_EQ(ca.lse.bytes, cb.lse.bytes);
  // The cache now holds the same bytes: run() wrote the new tokens at the slot mapping.
  tripath::KvCacheView va = a.cache(), vb = b.cache();
  EXPECT_EQ(std::memcmp(va.k.data, vb.k.data, a.config().bytes_per_tensor()), 0);
  EXPECT_EQ(std::memcmp(va.v.data, vb.v.data, a.config().bytes_per_tensor()), 0);

  std::vector<double> want_out, want_lse;
  a.naive(la, want_out, want_lse);
  EXPECT_TRUE(rel_l2_close(to_doubles(ca.out), want_out, 1e-5));
  EXPECT_TRUE(lse_close(to_doubles(ca.lse), want_lse, 1e-5));
}

TEST(ReferenceBackend, WithoutKvTheCacheIsNotWritten) {
  MhaStep a(backend_spec());
  const Layout l = a.ordered_layout();
  MhaCall c = a.call(l, /*with_kv=*/false);
  tripath::create_attention_backend("reference")->run(l.plan, a.params(), c.in);
  // New tokens' slots still hold the NaN poison, so every output row sees NaN keys.
  int64_t nan = 0;
  for (int64_t i = 0; i < c.out.numel(); ++i) nan += std::isnan(c.out.get(i));
  EXPECT_GT(nan, 0);
}

// Rows of `t` ([num_tokens, ...]) moved from the plan's caller-order layout to its ordered one.
HostTensor reordered_rows(const tripath::StepPlan& plan, const HostTensor& t) {
  EXPECT_EQ(t.shape[0], plan.num_tokens);
  HostTensor r(t.dtype, t.shape);
  const int64_t row_bytes = static_cast<int64_t>(elem_size(t.dtype)) * (t.numel() / t.shape[0]);
  tripath::reorder_token_rows(plan, t.bytes.data(), r.bytes.data(), row_bytes);
  return r;
}

// An unordered plan (the input was not [decode | extend | prefill]): the reference accepts it
// (needs_ordered_batch() is false) and runs the direct definition in the order given: token rows
// follow the plan's layout, the caller's order (request r's rows at cu_seqlens_q[r]).
TEST(ReferenceBackend, UnorderedPlanRunsTheDirectDefinition) {
  MhaStep a(backend_spec()), b(backend_spec());
  const Layout unordered = a.input_layout();
  ASSERT_FALSE(unordered.plan.is_ordered);
  for (int32_t r = 0; r < unordered.plan.num_requests; ++r) {
    ASSERT_EQ(unordered.req[r], r);
    ASSERT_EQ(unordered.plan.query_lens[r], a.spec().query_lens[r]);
  }
  MhaCall c = a.call(unordered, /*with_kv=*/true);
  tripath::create_attention_backend("reference")->run(unordered.plan, a.params(), c.in);
  std::vector<double> want_out, want_lse;
  a.naive(unordered, want_out, want_lse);
  EXPECT_TRUE(rel_l2_close(to_doubles(c.out), want_out, 1e-5));
  EXPECT_TRUE(lse_close(to_doubles(c.lse), want_lse, 1e-5));
  // The same step run through its ordered plan writes the same cache and agrees, row for row
  // once the unordered rows are moved to the ordered layout.
  const Layout ordered = b.ordered_layout();
  MhaCall d = b.call(ordered, true);
  tripath::create_attention_backend("reference")->run(ordered.plan, b.params(), d.in);
  EXPECT_EQ(std::memcmp(a.cache().k.data, b.cache().k.data, a.config().bytes_per_tensor()), 0);
  EXPECT_EQ(std::memcmp(a.cache().v.data, b.cache().v.data, a.config().bytes_per_tensor()), 0);
  EXPECT_TRUE(
      rel_l2_close(to_doubles(d.out), to_doubles(reordered_rows(unordered.plan, c.out)), 1e-5));
  EXPECT_TRUE(
      lse_close(to_doubles(d.lse), to_doubles(reordered_rows(unordered.plan, c.lse)), 1e-5));
}

// An unordered step through the reference backend equals the same step ordered, once its rows
// are permuted by reorder_token_rows: q/k/v go in permuted the same way, the caches end up
// bitwise equal, out/lse equal the ordered run's (three-path: to rounding) and the direct
// definition's on the ordered plan (bitwise: the same rows, the same sums).
TEST(ReferenceBackend, UnorderedRunEqualsOrderedRunReordered) {
  std::vector<MhaSpec> specs;
  specs.push_back(backend_spec());
  {
    MhaSpec s = backend_spec();
    s.cache_dtype = DType::kFP8E4M3;
    s.layout = KvLayout::kTiled;
    s.window_left = 12;
    s.seed = 78;
    specs.push_back(s);
  }
  {
    MhaSpec s = backend_spec();
    s.query_lens = {0, 30, 1, 2, 17, 1, 0, 5, 1};
    s.context_lens = {4, 0, 0, 40, 9, 120, 0, 0, 33};
    s.decode_threshold = 2;
    s.q_dtype = s.out_dtype = DType::kBF16;
    s.cache_dtype = DType::kF16;
    s.layout = KvLayout::kHND;
    s.block_size = 4;
    s.seed = 79;
    specs.push_back(s);
  }
  for (size_t k = 0; k < specs.size(); ++k) {
    SCOPED_TRACE("spec " + std::to_string(k));
    MhaStep a(specs[k]), b(specs[k]), e(specs[k]);  // same seed: same data, tables and caches
    const Layout unordered = a.input_layout(), ordered = b.ordered_layout();
    ASSERT_FALSE(unordered.plan.is_ordered);
    ASSERT_TRUE(ordered.plan.is_ordered);
    const tripath::StepPlan& up = unordered.plan;

    MhaCall cu = a.call(unordered, /*with_kv=*/true), co = b.call(ordered, true);
    // The ordered call's inputs are the unordered call's rows, reordered.
    EXPECT_EQ(reordered_rows(up, cu.q).bytes, co.q.bytes);
    EXPECT_EQ(reordered_rows(up, cu.k).bytes, co.k.bytes);
    EXPECT_EQ(reordered_rows(up, cu.v).bytes, co.v.bytes);
    std::vector<int64_t> slots(up.slot_mapping.size());
    tripath::reorder_token_rows(up, up.slot_mapping.data(), slots.data(), sizeof(int64_t));
    EXPECT_EQ(slots, ordered.plan.slot_mapping);

    auto backend = tripath::create_attention_backend("reference");
    backend->run(up, a.params(), cu.in);
    backend->run(ordered.plan, b.params(), co.in);
    EXPECT_EQ(std::memcmp(a.cache().k.data, b.cache().k.data, a.config().bytes_per_tensor()), 0);
    EXPECT_EQ(std::memcmp(a.cache().v.data, b.cache().v.data, a.config().bytes_per_tensor()), 0);
    const HostTensor out = reordered_rows(up, cu.out), lse = reordered_rows(up, cu.lse);
    const double tol = specs[k].out_dtype == DType::kBF16 ? 4e-3 : 1e-5;
    EXPECT_TRUE(rel_l2_close(to_doubles(out), to_doubles(co.out), tol));
    EXPECT_TRUE(lse_close(to_doubles(lse), to_doubles(co.lse), 1e-5));
    std::vector<double> want_out, want_lse;
    b.naive(ordered, want_out, want_lse);
    EXPECT_TRUE(rel_l2_close(to_doubles(out), want_out, tol));
    EXPECT_TRUE(lse_close(to_doubles(lse), want_lse, 1e-5));

    MhaCall ce = e.call(ordered, true);
    e.write_new_tokens(ordered, ce);
    tripath::reference::attention_direct(ordered.plan, e.params(), ce.in);
    EXPECT_EQ(out.bytes, ce.out.bytes);
    EXPECT_EQ(lse.bytes, ce.lse.bytes);
  }
}

TEST(ReferenceBackend, CheckSupportedRefusesWithReasons) {
  auto backend = tripath::create_attention_backend("reference");
  tripath::KvCacheConfig cache;
  cache.num_blocks = 4, cache.num_kv_heads = 2, cache.head_dim = 128;
  tripath::AttentionParams p;
  p.num_q_heads = 8, p.num_kv_heads = 2, p.head_dim = 128;
  EXPECT_NO_THROW(backend->check_supported(p, cache));
  p.head_dim = 100;
  EXPECT_TRIPATH_ERROR(backend->check_supported(p, cache), "head_dim");
  p.head_dim = 128;
  p.num_q_heads = 7;
  EXPECT_TRIPATH_ERROR(backend->check_supported(p, cache), "num_q_heads");
}

TEST(CheckOrdered, NamesTheBackend) {
  MhaStep a(backend_spec());
  const tripath::StepPlan plan = tripath::plan_step(a.input());
  ASSERT_FALSE(plan.is_ordered);
  EXPECT_TRIPATH_ERROR(tripath::check_ordered(plan, "three_path"), "three_path");
  EXPECT_NO_THROW(tripath::check_ordered(a.ordered_layout().plan, "three_path"));
}

// ---------------------------------------------------------------------------------------------
// Device-dispatching public entry points on CPU tensors

TEST(PublicEntry, WriteKvCacheTakesAnI64SlotTensor) {
  MhaStep a(backend_spec()), b(backend_spec());
  const Layout la = a.ordered_layout(), lb = b.ordered_layout();
  MhaCall ca = a.call(la, true), cb = b.call(lb, true);
  std::vector<int64_t> slots = la.plan.slot_mapping;
  const tripath::TensorView slot_view =
      make_view(slots.data(), DType::kI64, {static_cast<int64_t>(slots.size())});
  tripath::write_kv_cache(a.cache(), ca.k.view(), ca.v.view(), slot_view);
  b.write_new_tokens(lb, cb);
  EXPECT_EQ(std::memcmp(a.cache().k.data, b.cache().k.data, a.config().bytes_per_tensor()), 0);
  EXPECT_EQ(std::memcmp(a.cache().v.data, b.cache().v.data, a.config().bytes_per_tensor()), 0);
  std::vector<int32_t> slots32(slots.begin(), slots.end());
  const tripath::TensorView bad =
      make_view(slots32.data(), DType::kI32, {static_cast<int64_t>(slots32.size())});
  EXPECT_TRIPATH_ERROR(tripath::write_kv_cache(a.cache(), ca.k.view(), ca.v.view(), bad),
                       "slot_mapping");
}

TEST(PublicEntry, MergeStatesOnCpuIsTheReference) {
  std::mt19937_64 rng(5);
  HostTensor outs(DType::kF32, {3, 4, 64}), lses(DType::kF32, {3, 4});
  const std::vector<float> x = random_floats(rng, 3 * 4 * 64), l = random_floats(rng, 12, -5, 5);
  for (int i = 0; i < 3 * 4 * 64; ++i) outs.set(i, x[i]);
  for (int i = 0; i < 12; ++i) lses.set(i, l[i]);
  HostTensor o1(DType::kF32, {4, 64}), l1(DType::kF32, {4}), o2 = o1, l2 = l1;
  tripath::merge_states(outs.view(), lses.view(), o1.view(), l1.view());
  tripath::reference::merge_states(outs.view(), lses.view(), o2.view(), l2.view());
  EXPECT_EQ(o1.bytes, o2.bytes);
  EXPECT_EQ(l1.bytes, l2.bytes);
  if (!tripath::build_info().with_cuda) {
    EXPECT_TRIPATH_ERROR(
        tripath::merge_states(outs.view(tripath::Device::kCUDA), lses.view(), o1.view(), l1.view()),
        "CUDA");
  }
}

// The kernel-variant variables every report records: all four listed with their backend and
// default, and the value taken from the environment now.
TEST(Registry, VariantVariablesListedWithTheirValues) {
  ScopedEnv overlap("TRIPATH_FLASH_OVERLAP", "3");
  ScopedEnv tma("TRIPATH_FLASH_TMA", nullptr);
  const std::vector<tripath::VariantVariable> vars = tripath::variant_variables();
  std::vector<std::string> names;
  std::vector<int> defaults;
  for (const tripath::VariantVariable& v : vars) {
    names.push_back(v.name);
    defaults.push_back(v.default_value);
    EXPECT_FALSE(v.backend.empty()) << v.name;
    EXPECT_FALSE(v.meaning.empty()) << v.name;
    EXPECT_LE(v.default_value, v.max_value) << v.name;
    if (v.name == "TRIPATH_FLASH_OVERLAP") {
      EXPECT_EQ(v.value, "3");
    }
    if (v.name == "TRIPATH_FLASH_TMA") {
      EXPECT_EQ(v.value, "");
    }
  }
  EXPECT_EQ(names, (std::vector<std::string>{"TRIPATH_FLASH_TMA", "TRIPATH_FLASH_OVERLAP",
                                             "TRIPATH_EXTEND_GATHER", "TRIPATH_FUSE_COMPUTE",
                                             "TRIPATH_DECODE_CLUSTER",
                                             "TRIPATH_DECODE_SEGMENTS", "TRIPATH_DECODE_WRITE",
                                             "TRIPATH_DECODE_BULK", "TRIPATH_PDL",
                                             "TRIPATH_MLA_WGMMA"}));
  // The measured-faster kernels are the defaults: TMA loads issued by every producer warp,
  // 128-key flash tiles with FA3's consumer order and ping-pong, and the wgmma MLA decode
  // kernel; prefill and extend in one launch (one pass per extend row where its context fits
  // one round); a small decode batch's row sets split in two halves merged inside 2-CTA
  // clusters; the planner's decode segments where it made them; the decode kernel writing its
  // tokens' cache rows; a tiled cache's decode stages by bulk copies; programmatic dependent
  // launches off (measured no faster).
  EXPECT_EQ(defaults, (std::vector<int>{2, 13, 0, 2, 1, 1, 1, 1, 0, 4}));
}

// read_variant, the parser the GPU backends use at creation: unset / empty -> the default, a
// digit up to the variable's maximum, anything else an error naming the variable and the
// accepted values.
TEST(Registry, ReadVariantParsesAndRejects) {
  {
    ScopedEnv unset("TRIPATH_FLASH_OVERLAP", nullptr);
    EXPECT_EQ(tripath::read_variant("TRIPATH_FLASH_OVERLAP"), 13);
  }
  {
    ScopedEnv empty("TRIPATH_FLASH_OVERLAP", "");
    EXPECT_EQ(tripath::read_variant("TRIPATH_FLASH_OVERLAP"), 13);
  }
  struct Default {
    const char* name;
    int value;
  };
  for (const Default d : {Default{"TRIPATH_FLASH_TMA", 2}, Default{"TRIPATH_MLA_WGMMA", 4}}) {
    {
      ScopedEnv unset(d.name, nullptr);
      EXPECT_EQ(tripath::read_variant(d.name), d.value) << d.name;
    }
    {
      ScopedEnv empty(d.name, "");
      EXPECT_EQ(tripath::read_variant(d.name), d.value) << d.name;
    }
    ScopedEnv off(d.name, "0");
    EXPECT_EQ(tripath::read_variant(d.name), 0) << d.name;
  }
  {
    // TRIPATH_PDL: off unless asked for (not yet measured).
    ScopedEnv unset("TRIPATH_PDL", nullptr);
    EXPECT_EQ(tripath::read_variant("TRIPATH_PDL"), 0);
    ScopedEnv on("TRIPATH_PDL", "1");
    EXPECT_EQ(tripath::read_variant("TRIPATH_PDL"), 1);
  }
  for (int good = 0; good <= 14; ++good) {
    ScopedEnv env("TRIPATH_FLASH_OVERLAP", std::to_string(good).c_str());
    EXPECT_EQ(tripath::read_variant("TRIPATH_FLASH_OVERLAP"), good);
  }
  struct Bad {
    const char* name;
    const char* value;
    const char* expected;
  };
  const char* kOverlapValues = "unset, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13 or 14";
  for (const Bad& b :
       {Bad{"TRIPATH_FLASH_OVERLAP", "15", kOverlapValues},
        Bad{"TRIPATH_FLASH_OVERLAP", "99", kOverlapValues},
        Bad{"TRIPATH_FLASH_OVERLAP", "05", kOverlapValues},
        Bad{"TRIPATH_FLASH_OVERLAP", "-1", kOverlapValues},
        Bad{"TRIPATH_FLASH_OVERLAP", "4x", kOverlapValues},
        Bad{"TRIPATH_MLA_WGMMA", "yes", "unset, 0, 1, 2, 3 or 4"},
        Bad{"TRIPATH_MLA_WGMMA", "5", "unset, 0, 1, 2, 3 or 4"},
        Bad{"TRIPATH_FLASH_TMA", "3", "unset, 0, 1 or 2"}, Bad{"TRIPATH_PDL", "2", "unset, 0 or 1"},
        Bad{"TRIPATH_PDL", "on", "unset, 0 or 1"},
        Bad{"TRIPATH_DECODE_BULK", "3", "unset, 0, 1 or 2"}}) {
    ScopedEnv env(b.name, b.value);
    try {
      tripath::read_variant(b.name);
      ADD_FAILURE() << b.name << "=" << b.value << " was accepted";
    } catch (const tripath::Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(b.name), std::string::npos) << what;
      EXPECT_NE(what.find(b.expected), std::string::npos) << what;
    }
  }
  EXPECT_THROW(tripath::read_variant("TRIPATH_NOT_A_VARIANT"), tripath::Error);
}

}  // namespace
