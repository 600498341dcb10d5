// Test steps over adversarial paged caches (see test_util.h), with a naive float64 answer:
//  - MhaStep: random per-request Q/K/V for an MHA/GQA layer, caches poisoned with NaN, every
//    context written through write_kv_cache at the slots of its positions;
//  - MlaStep: the same for the MLA latent cache, with random q (absorbed and non-absorbed) and a
//    random kv_b_proj.
// Token tensors are laid out in the plan's batch layout (position i holds original request
// req[i]): the input order for input_layout(), [decode | extend | prefill] for ordered_layout().
#pragma once

#include <numeric>
#include <string>
#include <vector>

#include "test_util.h"

namespace tptest {

// A plan and, for each of its request positions, the original (input) request index.
struct Layout {
  tripath::StepPlan plan;
  std::vector<int32_t> req;
};

struct MhaSpec {
  std::vector<int32_t> query_lens, context_lens;  // input order
  int block_size = 16;
  int num_q_heads = 4, num_kv_heads = 2, head_dim = 64;
  DType cache_dtype = DType::kF32;
  KvLayout layout = KvLayout::kNHD;
  DType q_dtype = DType::kF32;
  DType out_dtype = DType::kF32;
  int window_left = -1;
  float softcap = 0.0f;
  bool sinks = false;
  float scale = 0.0f;
  int decode_threshold = 1;
  int64_t chunk_budget = 32768;
  int work_units = 1;
  int min_split_tokens = 256;
  uint64_t seed = 1;
};

struct MhaCall {
  HostTensor q, k, v, out, lse, sinks;
  tripath::AttentionInputs in;
  MhaCall() = default;
  MhaCall(const MhaCall&) = delete;
  MhaCall& operator=(const MhaCall&) = delete;
  MhaCall(MhaCall&&) = default;  // vector moves keep their buffers, so the views stay valid
};

class MhaStep {
 public:
  explicit MhaStep(const MhaSpec& spec) : spec_(spec), rng_(spec.seed) {
    const size_t n = spec.query_lens.size();
    std::vector<int32_t> seqs(n);
    for (size_t r = 0; r < n; ++r) seqs[r] = spec.query_lens[r] + spec.context_lens[r];
    table_ = make_block_table(seqs, spec.block_size, rng_);

    cfg_.num_blocks = table_.num_blocks;
    cfg_.block_size = spec.block_size;
    cfg_.num_kv_heads = spec.num_kv_heads;
    cfg_.head_dim = spec.head_dim;
    cfg_.dtype = spec.cache_dtype;
    cfg_.layout = spec.layout;
    if (spec.cache_dtype == DType::kFP8E4M3) {
      cfg_.k_scale = 0.0625f;   // powers of two: x / scale is exact, so the test's rounding and
      cfg_.v_scale = 0.03125f;  // the library's see the same value
    }
    const int64_t elems = cfg_.num_blocks * cfg_.block_size * cfg_.num_kv_heads * cfg_.head_dim;
    k_cache_ = HostTensor(spec.cache_dtype, {elems});
    v_cache_ = HostTensor(spec.cache_dtype, {elems});
    k_cache_.fill_nan();
    v_cache_.fill_nan();

    const int64_t kv_row = static_cast<int64_t>(spec.num_kv_heads) * spec.head_dim;
    const int64_t q_row = static_cast<int64_t>(spec.num_q_heads) * spec.head_dim;
    k_all_.resize(n), v_all_.resize(n), k_deq_.resize(n), v_deq_.resize(n), q_all_.resize(n);
    for (size_t r = 0; r < n; ++r) {
      k_all_[r] = random_floats(rng_, seqs[r] * kv_row);
      v_all_[r] = random_floats(rng_, seqs[r] * kv_row);
      q_all_[r] = random_floats(rng_, spec.query_lens[r] * q_row);
      for (float& x : q_all_[r]) x = ref_round(spec.q_dtype, x);
      k_deq_[r] = dequantized(k_all_[r], cfg_.k_scale);
      v_deq_[r] = dequantized(v_all_[r], cfg_.v_scale);
    }
    sinks_ = random_floats(rng_, spec.num_q_heads, -1.0f, 2.0f);

    input_.query_lens = spec.query_lens;
    input_.context_lens = spec.context_lens;
    input_.block_table = table_.table.data();
    input_.block_table_stride = table_.stride;
    input_.num_cache_blocks = table_.num_blocks;
    input_.block_size = spec.block_size;
    input_.decode_threshold = spec.decode_threshold;
    input_.extend_chunk_budget = spec.chunk_budget;
    input_.num_work_units = spec.work_units;
    input_.num_kv_heads = spec.num_kv_heads;
    input_.min_split_tokens = spec.min_split_tokens;

    // Pre-fill every context through the cache writer, at the slots of the context positions.
    int64_t ctx_tokens = 0;
    for (size_t r = 0; r < n; ++r) ctx_tokens += spec.context_lens[r];
    HostTensor k(DType::kF32, {ctx_tokens, spec.num_kv_heads, spec.head_dim});
    HostTensor v(DType::kF32, {ctx_tokens, spec.num_kv_heads, spec.head_dim});
    std::vector<int64_t> slots;
    for (size_t r = 0; r < n; ++r) {
      for (int32_t p = 0; p < spec.context_lens[r]; ++p) {
        const int64_t t = static_cast<int64_t>(slots.size());
        slots.push_back(slot_of(table_, r, p, spec.block_size));
        for (int64_t e = 0; e < kv_row; ++e) {
          k.set(t * kv_row + e, k_all_[r][p * kv_row + e]);
          v.set(t * kv_row + e, v_all_[r][p * kv_row + e]);
        }
      }
    }
    tripath::reference::write_kv_cache(cache(), k.view(), v.view(), slots.data(), ctx_tokens);
  }

  const MhaSpec& spec() const { return spec_; }
  const tripath::StepInput& input() const { return input_; }
  const tripath::KvCacheConfig& config() const { return cfg_; }
  tripath::KvCacheView cache() {
    tripath::KvCacheView c;
    c.config = cfg_;
    c.k = k_cache_.view();
    c.v = v_cache_.view();
    return c;
  }
  tripath::AttentionParams params() const {
    tripath::AttentionParams p;
    p.num_q_heads = spec_.num_q_heads;
    p.num_kv_heads = spec_.num_kv_heads;
    p.head_dim = spec_.head_dim;
    p.scale = spec_.scale;
    p.window_left = spec_.window_left;
    p.softcap = spec_.softcap;
    p.has_sinks = spec_.sinks;
    return p;
  }

  // The plan of the step as the caller gave it: its layout is the input order (position i
  // holds input request i), whether or not the plan is_ordered.
  Layout input_layout() const {
    Layout l{tripath::plan_step(input_), {}};
    l.req.resize(static_cast<size_t>(l.plan.num_requests));
    std::iota(l.req.begin(), l.req.end(), 0);
    return l;
  }
  // The step laid out [decode | extend | prefill] and planned again: is_ordered.
  Layout ordered_layout() const {
    const tripath::StepPlan first = tripath::plan_step(input_);
    std::vector<int32_t> storage;
    const tripath::StepInput in = tripath::ordered_input(input_, first, storage);
    return Layout{tripath::plan_step(in), first.order};
  }

  // q (and the new tokens' k/v when with_kv) in the layout's token order; out and lse poisoned.
  MhaCall call(const Layout& l, bool with_kv, bool with_lse = true) {
    const tripath::StepPlan& p = l.plan;
    const int64_t n = p.num_tokens, hq = spec_.num_q_heads, hkv = spec_.num_kv_heads;
    const int64_t d = spec_.head_dim;
    MhaCall c;
    c.q = HostTensor(spec_.q_dtype, {n, hq, d});
    c.out = HostTensor(spec_.out_dtype, {n, hq, d});
    c.out.fill_nan();
    c.k = HostTensor(DType::kF32, {n, hkv, d});
    c.v = HostTensor(DType::kF32, {n, hkv, d});
    for (int32_t i = 0; i < p.num_requests; ++i) {
      const int32_t r = l.req[i];
      for (int32_t t = 0; t < p.query_lens[i]; ++t) {
        const int64_t tok = p.cu_seqlens_q[i] + t;
        for (int64_t e = 0; e < hq * d; ++e) c.q.set(tok * hq * d + e, q_all_[r][t * hq * d + e]);
        const int64_t pos = spec_.context_lens[r] + t;
        for (int64_t e = 0; e < hkv * d; ++e) {
          c.k.set(tok * hkv * d + e, k_all_[r][pos * hkv * d + e]);
          c.v.set(tok * hkv * d + e, v_all_[r][pos * hkv * d + e]);
        }
      }
    }
    c.in.q = c.q.view();
    c.in.out = c.out.view();
    c.in.cache = cache();
    if (with_kv) {
      c.in.k = c.k.view();
      c.in.v = c.v.view();
    }
    if (with_lse) {
      c.lse = HostTensor(DType::kF32, {n, hq});
      c.lse.fill_nan();
      c.in.lse = c.lse.view();
    }
    if (spec_.sinks) {
      c.sinks = HostTensor(DType::kF32, {hq});
      for (int64_t h = 0; h < hq; ++h) c.sinks.set(h, sinks_[h]);
      c.in.sinks = c.sinks.view();
    }
    return c;
  }

  // Writes the call's new-token K/V at the plan's slot mapping (what run() does first).
  void write_new_tokens(const Layout& l, MhaCall& c) {
    tripath::reference::write_kv_cache(cache(), c.k.view(), c.v.view(), l.plan.slot_mapping.data(),
                                       l.plan.num_tokens);
  }

  // The float64 answer in the layout's token order: out [n, hq, d], lse [n, hq].
  void naive(const Layout& l, std::vector<double>& out, std::vector<double>& lse) const {
    const tripath::StepPlan& p = l.plan;
    const int hq = spec_.num_q_heads, hkv = spec_.num_kv_heads, d = spec_.head_dim;
    const double scale = spec_.scale != 0.0f ? spec_.scale : 1.0 / std::sqrt(double(d));
    out.assign(static_cast<size_t>(p.num_tokens * hq * d), 0.0);
    lse.assign(static_cast<size_t>(p.num_tokens * hq), 0.0);
    for (int32_t i = 0; i < p.num_requests; ++i) {
      const int32_t r = l.req[i];
      for (int32_t t = 0; t < spec_.query_lens[r]; ++t) {
        const int64_t tok = p.cu_seqlens_q[i] + t;
        const std::vector<int64_t> keys =
            visible_keys(spec_.context_lens[r] + t, spec_.window_left);
        for (int h = 0; h < hq; ++h) {
          const int g = h / (hq / hkv);
          const RowResult rr =
              naive_row(q_all_[r].data() + (int64_t(t) * hq + h) * d, k_deq_[r].data() + g * d,
                        int64_t(hkv) * d, v_deq_[r].data() + g * d, int64_t(hkv) * d, keys, d, d,
                        scale, spec_.softcap, spec_.sinks, sinks_[h]);
          std::copy(rr.out.begin(), rr.out.end(), out.begin() + (tok * hq + h) * d);
          lse[tok * hq + h] = rr.lse;
        }
      }
    }
  }

 private:
  std::vector<float> dequantized(const std::vector<float>& x, float scale) const {
    std::vector<float> y(x.size());
    const bool fp8 = spec_.cache_dtype == DType::kFP8E4M3;
    for (size_t i = 0; i < x.size(); ++i)
      y[i] = fp8 ? ref_round(DType::kFP8E4M3, x[i] / scale) * scale
                 : ref_round(spec_.cache_dtype, x[i]);
    return y;
  }

  MhaSpec spec_;
  std::mt19937_64 rng_;
  PagedTable table_;
  tripath::KvCacheConfig cfg_;
  HostTensor k_cache_, v_cache_;
  tripath::StepInput input_;
  std::vector<std::vector<float>> k_all_, v_all_, k_deq_, v_deq_, q_all_;
  std::vector<float> sinks_;
};

}  // namespace tptest
