// MLA reference: absorbed (q [576] on the latent cache, out [512]) and non-absorbed (latent
// decompressed through kv_b_proj, q/k 192, v 128) against naive float64 attention; absorbed and
// non-absorbed agree through W_UK / W_UV on random weights; chunked decompression equals whole;
// the reference MLA backend composes both; bad inputs name the argument.
#include <string>
#include <vector>

#include "paged_step.h"

namespace {

using namespace tptest;
using tripath::kMlaEntryDim;
using tripath::kMlaLatentDim;
using tripath::kMlaQkDim;
using tripath::kMlaVDim;

constexpr int kCols = 256;  // kv_b_proj columns per head: 128 W_UK then 128 W_UV

struct MlaSpec {
  std::vector<int32_t> query_lens = {1, 6, 1, 9, 0, 1};
  std::vector<int32_t> context_lens = {40, 37, 0, 0, 12, 3};
  int block_size = 16;
  int heads = 16;
  DType cache_dtype = DType::kF32;
  uint64_t seed = 1;
};

struct MlaTensors {
  HostTensor q_abs, out_abs, lse_abs, q, out, lse, latent;
};

class MlaStep {
 public:
  explicit MlaStep(const MlaSpec& s) : s_(s), rng_(s.seed) {
    const size_t n = s.query_lens.size();
    std::vector<int32_t> seqs(n);
    for (size_t r = 0; r < n; ++r) seqs[r] = s.query_lens[r] + s.context_lens[r];
    table_ = make_block_table(seqs, s.block_size, rng_);
    cfg_.num_blocks = table_.num_blocks;
    cfg_.block_size = s.block_size;
    cfg_.dtype = s.cache_dtype;
    if (s.cache_dtype == DType::kFP8E4M3) cfg_.scale = 0.03125f;
    cache_ = HostTensor(s.cache_dtype, cfg_.shape());
    cache_.fill_nan();
    const int64_t H = s.heads;
    w_ = random_floats(rng_, size_t(kMlaLatentDim) * H * kCols, -0.08f, 0.08f);
    w_tensor_ = HostTensor(DType::kF32, {kMlaLatentDim, H * kCols});
    for (size_t i = 0; i < w_.size(); ++i) w_tensor_.set(i, w_[i]);
    lat_.resize(n), lat_deq_.resize(n), q_nope_.resize(n), q_pe_.resize(n);
    for (size_t r = 0; r < n; ++r) {
      lat_[r] = random_floats(rng_, size_t(seqs[r]) * kMlaEntryDim);
      lat_deq_[r].resize(lat_[r].size());
      for (size_t i = 0; i < lat_[r].size(); ++i)
        lat_deq_[r][i] = s.cache_dtype == DType::kFP8E4M3
                             ? ref_round(DType::kFP8E4M3, lat_[r][i] / cfg_.scale) * cfg_.scale
                             : ref_round(s.cache_dtype, lat_[r][i]);
      q_nope_[r] = random_floats(rng_, size_t(s.query_lens[r]) * H * 128);
      q_pe_[r] = random_floats(rng_, size_t(s.query_lens[r]) * H * 64);
    }
    input_.query_lens = s.query_lens;
    input_.context_lens = s.context_lens;
    input_.block_table = table_.table.data();
    input_.block_table_stride = table_.stride;
    input_.num_cache_blocks = table_.num_blocks;
    input_.block_size = s.block_size;
    input_.extend_chunk_budget = 7;
    // Contexts through the cache writer.
    int64_t ctx = 0;
    for (size_t r = 0; r < n; ++r) ctx += s.context_lens[r];
    HostTensor lat(DType::kF32, {ctx, kMlaEntryDim});
    std::vector<int64_t> slots;
    for (size_t r = 0; r < n; ++r)
      for (int32_t p = 0; p < s.context_lens[r]; ++p) {
        for (int e = 0; e < kMlaEntryDim; ++e)
          lat.set(int64_t(slots.size()) * kMlaEntryDim + e, lat_[r][size_t(p) * kMlaEntryDim + e]);
        slots.push_back(slot_of(table_, r, p, s.block_size));
      }
    tripath::reference::write_mla_cache(cache(), lat.view(), slots.data(), ctx);
  }

  tripath::MlaCacheView cache() { return tripath::MlaCacheView{cfg_, cache_.view()}; }
  tripath::MlaParams params() const {
    tripath::MlaParams p;
    p.num_heads = s_.heads;
    return p;
  }
  const tripath::StepInput& input() const { return input_; }
  tripath::TensorView w() { return w_tensor_.view(); }
  const std::vector<float>& w_values() const { return w_; }

  Layout ordered_layout() const {
    const tripath::StepPlan first = tripath::plan_step(input_);
    std::vector<int32_t> storage;
    return Layout{tripath::plan_step(tripath::ordered_input(input_, first, storage)), first.order};
  }

  // Tensors for requests [rb, re) of the layout; outputs poisoned.
  MlaTensors tensors(const Layout& l, int32_t rb, int32_t re) const {
    const tripath::StepPlan& p = l.plan;
    const int64_t t0 = p.cu_seqlens_q[rb], n = p.cu_seqlens_q[re] - t0, H = s_.heads;
    MlaTensors t;
    t.q_abs = HostTensor(DType::kF32, {n, H, kMlaEntryDim});
    t.q = HostTensor(DType::kF32, {n, H, kMlaQkDim});
    t.out_abs = HostTensor(DType::kF32, {n, H, kMlaLatentDim});
    t.out = HostTensor(DType::kF32, {n, H, kMlaVDim});
    t.lse_abs = HostTensor(DType::kF32, {n, H});
    t.lse = HostTensor(DType::kF32, {n, H});
    t.latent = HostTensor(DType::kF32, {n, kMlaEntryDim});
    for (HostTensor* x : {&t.out_abs, &t.out, &t.lse_abs, &t.lse}) x->fill_nan();
    for (int32_t i = rb; i < re; ++i) {
      const int32_t r = l.req[i];
      for (int32_t j = 0; j < p.query_lens[i]; ++j) {
        const int64_t tok = p.cu_seqlens_q[i] + j - t0;
        const int64_t pos = s_.context_lens[r] + j;
        for (int e = 0; e < kMlaEntryDim; ++e)
          t.latent.set(tok * kMlaEntryDim + e, lat_[r][pos * kMlaEntryDim + e]);
        for (int64_t h = 0; h < H; ++h) {
          const float* qn = q_nope_[r].data() + (j * H + h) * 128;
          const float* qp = q_pe_[r].data() + (j * H + h) * 64;
          for (int c = 0; c < kMlaLatentDim; ++c) {  // W_UK_h @ q_nope_h
            double acc = 0;
            for (int k = 0; k < 128; ++k)
              acc += double(w_[(size_t(c) * H + h) * kCols + k]) * qn[k];
            t.q_abs.set((tok * H + h) * kMlaEntryDim + c, static_cast<float>(acc));
          }
          for (int k = 0; k < 64; ++k) t.q_abs.set((tok * H + h) * kMlaEntryDim + 512 + k, qp[k]);
          for (int k = 0; k < 128; ++k) t.q.set((tok * H + h) * kMlaQkDim + k, qn[k]);
          for (int k = 0; k < 64; ++k) t.q.set((tok * H + h) * kMlaQkDim + 128 + k, qp[k]);
        }
      }
    }
    return t;
  }

  void write_new(const Layout& l) {
    MlaTensors t = tensors(l, 0, l.plan.num_requests);
    tripath::reference::write_mla_cache(cache(), t.latent.view(), l.plan.slot_mapping.data(),
                                        l.plan.num_tokens);
  }

  // Naive absorbed attention of requests [rb, re) with the (float) q_abs of `t`.
  void naive_absorbed(const Layout& l, int32_t rb, int32_t re, const MlaTensors& t,
                      std::vector<double>& out, std::vector<double>& lse) const {
    const tripath::StepPlan& p = l.plan;
    const int64_t t0 = p.cu_seqlens_q[rb], H = s_.heads;
    const std::vector<float> q = to_floats(t.q_abs);
    out.assign(size_t(p.cu_seqlens_q[re] - t0) * H * kMlaLatentDim, 0);
    lse.assign(size_t(p.cu_seqlens_q[re] - t0) * H, 0);
    for (int32_t i = rb; i < re; ++i) {
      const int32_t r = l.req[i];
      for (int32_t j = 0; j < p.query_lens[i]; ++j) {
        const int64_t tok = p.cu_seqlens_q[i] + j - t0;
        const std::vector<int64_t> keys = visible_keys(s_.context_lens[r] + j, -1);
        for (int64_t h = 0; h < H; ++h) {
          const RowResult rr =
              naive_row(q.data() + (tok * H + h) * kMlaEntryDim, lat_deq_[r].data(), kMlaEntryDim,
                        lat_deq_[r].data(), kMlaEntryDim, keys, kMlaEntryDim, kMlaLatentDim,
                        1.0 / std::sqrt(192.0), 0, false, 0);
          std::copy(rr.out.begin(), rr.out.end(), out.begin() + (tok * H + h) * kMlaLatentDim);
          lse[tok * H + h] = rr.lse;
        }
      }
    }
  }

  // Naive non-absorbed attention: k = [latent @ W_UK_h | k_pe], v = latent @ W_UV_h.
  void naive_non_absorbed(const Layout& l, int32_t rb, int32_t re, const MlaTensors& t,
                          std::vector<double>& out, std::vector<double>& lse) const {
    const tripath::StepPlan& p = l.plan;
    const int64_t t0 = p.cu_seqlens_q[rb], H = s_.heads;
    const std::vector<float> q = to_floats(t.q);
    out.assign(size_t(p.cu_seqlens_q[re] - t0) * H * kMlaVDim, 0);
    lse.assign(size_t(p.cu_seqlens_q[re] - t0) * H, 0);
    for (int32_t i = rb; i < re; ++i) {
      const int32_t r = l.req[i];
      if (p.query_lens[i] == 0) continue;
      const int64_t seq = p.seq_len(i);
      std::vector<float> k(size_t(seq) * H * kMlaQkDim), v(size_t(seq) * H * kMlaVDim);
      std::vector<double> row(size_t(H) * kCols);
      for (int64_t j = 0; j < seq; ++j) {
        const float* c = lat_deq_[r].data() + j * kMlaEntryDim;
        std::fill(row.begin(), row.end(), 0.0);
        for (int a = 0; a < kMlaLatentDim; ++a)
          for (int64_t col = 0; col < H * kCols; ++col)
            row[col] += double(c[a]) * w_[a * H * kCols + col];
        for (int64_t h = 0; h < H; ++h) {
          for (int e = 0; e < 128; ++e) {
            k[(j * H + h) * kMlaQkDim + e] = static_cast<float>(row[h * kCols + e]);
            v[(j * H + h) * kMlaVDim + e] = static_cast<float>(row[h * kCols + 128 + e]);
          }
          for (int e = 0; e < 64; ++e) k[(j * H + h) * kMlaQkDim + 128 + e] = c[512 + e];
        }
      }
      for (int32_t j = 0; j < p.query_lens[i]; ++j) {
        const int64_t tok = p.cu_seqlens_q[i] + j - t0;
        const std::vector<int64_t> keys = visible_keys(s_.context_lens[r] + j, -1);
        for (int64_t h = 0; h < H; ++h) {
          const RowResult rr =
              naive_row(q.data() + (tok * H + h) * kMlaQkDim, k.data() + h * kMlaQkDim,
                        H * kMlaQkDim, v.data() + h * kMlaVDim, H * kMlaVDim, keys, kMlaQkDim,
                        kMlaVDim, 1.0 / std::sqrt(192.0), 0, false, 0);
          std::copy(rr.out.begin(), rr.out.end(), out.begin() + (tok * H + h) * kMlaVDim);
          lse[tok * H + h] = rr.lse;
        }
      }
    }
  }

 private:
  static std::vector<float> to_floats(const HostTensor& t) {
    std::vector<float> v(size_t(t.numel()));
    for (int64_t i = 0; i < t.numel(); ++i) v[i] = static_cast<float>(t.get(i));
    return v;
  }

  MlaSpec s_;
  std::mt19937_64 rng_;
  PagedTable table_;
  tripath::MlaCacheConfig cfg_;
  HostTensor cache_, w_tensor_;
  std::vector<float> w_;
  tripath::StepInput input_;
  std::vector<std::vector<float>> lat_, lat_deq_, q_nope_, q_pe_;
};

struct MlaCase {
  std::string name;
  MlaSpec spec;
  bool non_absorbed;  // also check the non-absorbed form (the naive decompression is costly)
};
std::ostream& operator<<(std::ostream& os, const MlaCase& c) { return os << c.name; }

class MlaVsNaive : public ::testing::TestWithParam<MlaCase> {};

TEST_P(MlaVsNaive, AbsorbedAndNonAbsorbed) {
  MlaStep step(GetParam().spec);
  const Layout l = step.ordered_layout();
  step.write_new(l);
  const int32_t n = l.plan.num_requests;
  MlaTensors t = step.tensors(l, 0, n);
  std::vector<double> want_out, want_lse;
  tripath::reference::mla_absorbed(l.plan, 0, n, step.params(), step.cache(), t.q_abs.view(),
                                   t.out_abs.view(), t.lse_abs.view());
  step.naive_absorbed(l, 0, n, t, want_out, want_lse);
  EXPECT_TRUE(rel_l2_close(to_doubles(t.out_abs), want_out, 1e-5)) << "absorbed";
  EXPECT_TRUE(lse_close(to_doubles(t.lse_abs), want_lse, 1e-5)) << "absorbed lse";
  if (!GetParam().non_absorbed) return;

  step.naive_non_absorbed(l, 0, n, t, want_out, want_lse);
  for (int64_t chunk : {0, 5, 1}) {
    MlaTensors u = step.tensors(l, 0, n);
    tripath::reference::mla_non_absorbed(l.plan, 0, n, step.params(), step.cache(), u.q.view(),
                                         step.w(), u.out.view(), u.lse.view(), chunk);
    EXPECT_TRUE(rel_l2_close(to_doubles(u.out), want_out, 1e-5)) << "chunk_tokens " << chunk;
    EXPECT_TRUE(lse_close(to_doubles(u.lse), want_lse, 1e-5)) << "chunk_tokens " << chunk;
  }
}

std::vector<MlaCase> mla_cases() {
  std::vector<MlaCase> v;
  for (DType t : {DType::kF32, DType::kBF16, DType::kFP8E4M3}) {
    MlaSpec s;
    s.cache_dtype = t;
    s.seed = 100 + v.size();
    v.push_back({std::string("Cache_") + tripath::dtype_name(t), s, true});
  }
  for (int bs : {1, 64}) {
    MlaSpec s;
    s.block_size = bs;
    s.seed = 100 + v.size();
    v.push_back({"BlockSize" + std::to_string(bs), s, true});
  }
  {
    MlaSpec s;  // many heads, longer decode contexts: absorbed only
    s.heads = 128;
    s.query_lens = {1, 1, 2, 1};
    s.context_lens = {300, 113, 0, 0};
    s.seed = 100 + v.size();
    v.push_back({"Heads128Absorbed", s, false});
    s.heads = 64;
    s.cache_dtype = DType::kFP8E4M3;
    s.seed = 100 + v.size();
    v.push_back({"Heads64Fp8Absorbed", s, false});
  }
  return v;
}

INSTANTIATE_TEST_SUITE_P(Cases, MlaVsNaive, ::testing::ValuesIn(mla_cases()),
                         [](const ::testing::TestParamInfo<MlaCase>& i) { return i.param.name; });

// out_non_absorbed[h] == W_UV_h^T @ out_absorbed[h] when q_absorbed = [W_UK_h @ q_nope | q_pe].
TEST(Mla, AbsorbedEqualsNonAbsorbedThroughWeights) {
  MlaSpec s;
  s.query_lens = {1, 4, 1, 6};
  s.context_lens = {50, 21, 7, 0};
  MlaStep step(s);
  const Layout l = step.ordered_layout();
  step.write_new(l);
  const int32_t n = l.plan.num_requests;
  MlaTensors t = step.tensors(l, 0, n);
  tripath::reference::mla_absorbed(l.plan, 0, n, step.params(), step.cache(), t.q_abs.view(),
                                   t.out_abs.view(), t.lse_abs.view());
  tripath::reference::mla_non_absorbed(l.plan, 0, n, step.params(), step.cache(), t.q.view(),
                                       step.w(), t.out.view(), t.lse.view(), 0);
  const int64_t H = s.heads, tokens = l.plan.num_tokens;
  std::vector<double> projected(size_t(tokens) * H * kMlaVDim, 0.0);
  for (int64_t tok = 0; tok < tokens; ++tok)
    for (int64_t h = 0; h < H; ++h)
      for (int e = 0; e < kMlaVDim; ++e) {
        double acc = 0;
        for (int c = 0; c < kMlaLatentDim; ++c)
          acc += step.w_values()[(size_t(c) * H + h) * kCols + 128 + e] *
                 t.out_abs.get((tok * H + h) * kMlaLatentDim + c);
        projected[(tok * H + h) * kMlaVDim + e] = acc;
      }
  EXPECT_TRUE(rel_l2_close(to_doubles(t.out), projected, 1e-4));
  EXPECT_TRUE(lse_close(to_doubles(t.lse), to_doubles(t.lse_abs), 1e-4));
}

// The reference MLA backend: latent write, absorbed decode, non-absorbed extend/prefill.
TEST(Mla, ReferenceBackendComposesBothForms) {
  MlaSpec s;
  MlaStep step(s);
  const Layout l = step.ordered_layout();
  const tripath::StepPlan& p = l.plan;
  ASSERT_GT(p.decode.num_tokens(), 0);
  ASSERT_GT(p.num_tokens, p.decode.num_tokens());
  MlaTensors dec = step.tensors(l, p.decode.begin, p.decode.end);
  MlaTensors rest = step.tensors(l, p.extend.begin, p.prefill.end);
  MlaTensors all = step.tensors(l, 0, p.num_requests);
  tripath::MlaInputs in;
  in.latent = all.latent.view();
  in.cache = step.cache();
  in.q_absorbed = dec.q_abs.view();
  in.out_absorbed = dec.out_abs.view();
  in.lse_absorbed = dec.lse_abs.view();
  in.q = rest.q.view();
  in.kv_b_proj = step.w();
  in.out = rest.out.view();
  in.lse = rest.lse.view();
  auto backend = tripath::create_mla_backend("reference");
  ASSERT_NE(backend, nullptr);
  EXPECT_STREQ(backend->name(), "reference");
  backend->run(p, step.params(), in);  // writes the new tokens' latent rows first

  std::vector<double> want_out, want_lse;
  step.naive_absorbed(l, p.decode.begin, p.decode.end, dec, want_out, want_lse);
  EXPECT_TRUE(rel_l2_close(to_doubles(dec.out_abs), want_out, 1e-5));
  EXPECT_TRUE(lse_close(to_doubles(dec.lse_abs), want_lse, 1e-5));
  step.naive_non_absorbed(l, p.extend.begin, p.prefill.end, rest, want_out, want_lse);
  EXPECT_TRUE(rel_l2_close(to_doubles(rest.out), want_out, 1e-5));
  EXPECT_TRUE(lse_close(to_doubles(rest.lse), want_lse, 1e-5));
}

TEST(Mla, ReferenceBackendRefusesUnorderedPlan) {
  MlaStep step(MlaSpec{});
  const tripath::StepPlan p = tripath::plan_step(step.input());
  ASSERT_FALSE(p.is_ordered);
  tripath::MlaInputs in;
  in.cache = step.cache();
  EXPECT_TRIPATH_ERROR(tripath::create_mla_backend("reference")->run(p, step.params(), in),
                       "order");
}

TEST(Mla, ParamsAndBadInputs) {
  tripath::MlaParams p;
  p.num_heads = 16;
  EXPECT_FLOAT_EQ(p.effective_scale(), 1.0f / std::sqrt(192.0f));
  p.scale = 0.1f;
  EXPECT_FLOAT_EQ(p.effective_scale(), 0.1f);
  p.num_heads = 0;
  EXPECT_TRIPATH_ERROR(p.validate(), "num_heads");
  p.num_heads = 129;
  EXPECT_TRIPATH_ERROR(p.validate(), "num_heads");

  MlaStep step(MlaSpec{});
  const Layout l = step.ordered_layout();
  const int32_t n = l.plan.num_requests;
  MlaTensors t = step.tensors(l, 0, n);
  MlaTensors part = step.tensors(l, 0, 1);  // too few tokens for the whole range
  using tripath::reference::mla_absorbed;
  using tripath::reference::mla_non_absorbed;
  EXPECT_TRIPATH_ERROR(mla_absorbed(l.plan, 0, n, step.params(), step.cache(), part.q_abs.view(),
                                    t.out_abs.view(), t.lse_abs.view()),
                       "q_absorbed");
  EXPECT_TRIPATH_ERROR(mla_absorbed(l.plan, 0, n, step.params(), step.cache(), t.q_abs.view(),
                                    part.out_abs.view(), t.lse_abs.view()),
                       "out_absorbed");
  EXPECT_TRIPATH_ERROR(mla_absorbed(l.plan, 0, n + 1, step.params(), step.cache(), t.q_abs.view(),
                                    t.out_abs.view(), t.lse_abs.view()),
                       "request");
  HostTensor w_bad(DType::kF32, {512, 16 * 192});
  EXPECT_TRIPATH_ERROR(mla_non_absorbed(l.plan, 0, n, step.params(), step.cache(), t.q.view(),
                                        w_bad.view(), t.out.view(), t.lse.view(), 0),
                       "kv_b_proj");
  EXPECT_TRIPATH_ERROR(mla_non_absorbed(l.plan, 0, n, step.params(), step.cache(), t.q.view(),
                                        step.w(), t.out.view(), t.lse.view(), -1),
                       "chunk_tokens");
  EXPECT_TRIPATH_ERROR(mla_non_absorbed(l.plan, 0, n, step.params(), step.cache(), t.q_abs.view(),
                                        step.w(), t.out.view(), t.lse.view(), 0),
                       "'q'");
  HostTensor lse_bf16(DType::kBF16, {l.plan.num_tokens, 16});
  EXPECT_TRIPATH_ERROR(mla_non_absorbed(l.plan, 0, n, step.params(), step.cache(), t.q.view(),
                                        step.w(), t.out.view(), lse_bf16.view(), 0),
                       "'lse'");
}

}  // namespace
