// Reference MLA (DeepSeek-V3/R1 multi-head latent attention).
//
// Absorbed (decode): every head's 576-wide query attends to the shared latent rows; values are
// the first 512 dims of the same rows. Non-absorbed (prefill/extend): the latent rows are
// decompressed through kv_b_proj into per-head k_nope and v (128 each), k = [k_nope | k_pe],
// and the 192/128 attention runs causally. With chunk_tokens > 0 the context is decompressed a
// chunk at a time (bounded workspace) and the partial states are merged by log-sum-exp.
#include <algorithm>
#include <vector>

#include "attend_row.h"
#include "tripath/error.h"
#include "tripath/reference.h"

namespace tripath::reference {
namespace {

constexpr int kKvCols = kMlaNopeDim + kMlaVDim;  // 256 kv_b_proj columns per head

void check_request_range(const StepPlan& plan, int32_t begin, int32_t end) {
  TRIPATH_CHECK_ARG(begin >= 0 && begin <= end && end <= plan.num_requests, "request range",
                    "[" + std::to_string(begin) + ", " + std::to_string(end) + ")",
                    "a range within [0, " + std::to_string(plan.num_requests) + "]");
}

void check_out(const TensorView& t, const char* name, int64_t tokens, int64_t heads,
               int64_t dim) {
  check_tensor(t, name, {tokens, heads, dim}, Device::kCPU);
  check_dtype(t, name, {DType::kF32, DType::kF16, DType::kBF16});
}

// Decompresses latent rows [begin, end) of request i: k [n, H, 192] (k_pe broadcast to every
// head) and v [n, H, 128].
void decompress(const StepPlan& plan, int32_t i, const MlaCacheView& cache, const float* w,
                int heads, int64_t begin, int64_t end, std::vector<float>& k,
                std::vector<float>& v) {
  const int64_t n = end - begin;
  std::vector<float> latent(static_cast<size_t>(n * kMlaEntryDim));
  detail::gather_latent(cache, plan.block_row(i), begin, end, latent.data());
  k.assign(static_cast<size_t>(n * heads * kMlaQkDim), 0.0f);
  v.assign(static_cast<size_t>(n * heads * kMlaVDim), 0.0f);
  const int64_t ldw = static_cast<int64_t>(heads) * kKvCols;
#pragma omp parallel for schedule(static)
  for (int64_t j = 0; j < n; ++j) {
    const float* c = latent.data() + j * kMlaEntryDim;
    std::vector<float> row(static_cast<size_t>(ldw), 0.0f);
    for (int r = 0; r < kMlaLatentDim; ++r) {  // row = c @ W, streaming W row by row
      const float cr = c[r];
      const float* wr = w + r * ldw;
      for (int64_t col = 0; col < ldw; ++col) row[col] += cr * wr[col];
    }
    for (int h = 0; h < heads; ++h) {
      float* kh = k.data() + (j * heads + h) * kMlaQkDim;
      std::copy(row.begin() + h * kKvCols, row.begin() + h * kKvCols + kMlaNopeDim, kh);
      std::copy(c + kMlaLatentDim, c + kMlaEntryDim, kh + kMlaNopeDim);
      std::copy(row.begin() + h * kKvCols + kMlaNopeDim, row.begin() + (h + 1) * kKvCols,
                v.data() + (j * heads + h) * kMlaVDim);
    }
  }
}

}  // namespace

void mla_absorbed(const StepPlan& plan, int32_t request_begin, int32_t request_end,
                  const MlaParams& params, const MlaCacheView& cache, const TensorView& q,
                  const TensorView& out, const TensorView& lse) {
  params.validate();
  cache.validate(Device::kCPU);
  check_request_range(plan, request_begin, request_end);
  const int64_t t0 = plan.cu_seqlens_q[request_begin];
  const int64_t tokens = plan.cu_seqlens_q[request_end] - t0;
  const int heads = params.num_heads;
  check_out(q, "q_absorbed", tokens, heads, kMlaEntryDim);
  check_out(out, "out_absorbed", tokens, heads, kMlaLatentDim);
  if (lse.defined()) {
    check_tensor(lse, "lse_absorbed", {tokens, heads}, Device::kCPU);
    check_dtype(lse, "lse_absorbed", {DType::kF32});
  }
  const float scale = params.effective_scale();
  for (int32_t i = request_begin; i < request_end; ++i) {
    const int64_t seq = plan.seq_len(i), ctx = plan.context_lens[i];
    if (plan.query_lens[i] == 0) continue;
    std::vector<float> latent(static_cast<size_t>(seq * kMlaEntryDim));
    detail::gather_latent(cache, plan.block_row(i), 0, seq, latent.data());
    const int64_t rows = static_cast<int64_t>(plan.query_lens[i]) * heads;
#pragma omp parallel
    {
      std::vector<float> qrow(kMlaEntryDim), o(kMlaLatentDim), scores;
#pragma omp for schedule(dynamic)
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t t = r / heads;
        const int64_t token = plan.cu_seqlens_q[i] + t - t0;
        const int64_t base = token * heads + r % heads;
        for (int e = 0; e < kMlaEntryDim; ++e)
          qrow[e] = load_float(q.data, q.dtype, base * kMlaEntryDim + e);
        const float l = detail::attend_row(qrow.data(), latent.data(), kMlaEntryDim,
                                           latent.data(), kMlaEntryDim, 0, ctx + t + 1,
                                           kMlaEntryDim, kMlaLatentDim, scale, 0.0f, o.data(),
                                           scores);
        for (int e = 0; e < kMlaLatentDim; ++e)
          store_float(out.data, out.dtype, base * kMlaLatentDim + e, o[e]);
        if (lse.defined()) lse.ptr<float>()[base] = l;
      }
    }
  }
}

void mla_non_absorbed(const StepPlan& plan, int32_t request_begin, int32_t request_end,
                      const MlaParams& params, const MlaCacheView& cache, const TensorView& q,
                      const TensorView& kv_b_proj, const TensorView& out, const TensorView& lse,
                      int64_t chunk_tokens) {
  params.validate();
  cache.validate(Device::kCPU);
  check_request_range(plan, request_begin, request_end);
  TRIPATH_CHECK_ARG(chunk_tokens >= 0, "chunk_tokens", chunk_tokens,
                    "0 (whole context) or a positive chunk length");
  const int64_t t0 = plan.cu_seqlens_q[request_begin];
  const int64_t tokens = plan.cu_seqlens_q[request_end] - t0;
  const int heads = params.num_heads;
  check_out(q, "q", tokens, heads, kMlaQkDim);
  check_out(out, "out", tokens, heads, kMlaVDim);
  check_tensor(kv_b_proj, "kv_b_proj", {kMlaLatentDim, static_cast<int64_t>(heads) * kKvCols},
               Device::kCPU);
  check_dtype(kv_b_proj, "kv_b_proj", {DType::kF32, DType::kF16, DType::kBF16});
  if (lse.defined()) {
    check_tensor(lse, "lse", {tokens, heads}, Device::kCPU);
    check_dtype(lse, "lse", {DType::kF32});
  }
  std::vector<float> w(static_cast<size_t>(kv_b_proj.numel()));
  for (size_t e = 0; e < w.size(); ++e) w[e] = load_float(kv_b_proj.data, kv_b_proj.dtype, e);
  const float scale = params.effective_scale();

  std::vector<float> k, v;
  for (int32_t i = request_begin; i < request_end; ++i) {
    const int64_t qn = plan.query_lens[i], ctx = plan.context_lens[i], seq = ctx + qn;
    if (qn == 0) continue;
    const int64_t rows = qn * heads;
    // Running merged state of every (token, head) row: out [rows, 128] and lse [rows].
    std::vector<float> acc(static_cast<size_t>(rows * kMlaVDim), 0.0f);
    std::vector<float> acc_lse(static_cast<size_t>(rows), detail::kNegInf);
    // Parts: the context in chunks (or whole), then the new tokens' own causal part.
    std::vector<std::pair<int64_t, int64_t>> parts;
    if (chunk_tokens == 0) {
      parts.push_back({0, seq});
    } else {
      for (int64_t b = 0; b < ctx; b += chunk_tokens)
        parts.push_back({b, std::min(ctx, b + chunk_tokens)});
      parts.push_back({ctx, seq});
    }
    for (auto [kb, ke] : parts) {
      decompress(plan, i, cache, w.data(), heads, kb, ke, k, v);
#pragma omp parallel
      {
        std::vector<float> qrow(kMlaQkDim), states(2 * kMlaVDim), lses(2), scores;
#pragma omp for schedule(dynamic)
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t t = r / heads, h = r % heads;
          const int64_t base = (plan.cu_seqlens_q[i] + t - t0) * heads + h;
          for (int e = 0; e < kMlaQkDim; ++e)
            qrow[e] = load_float(q.data, q.dtype, base * kMlaQkDim + e);
          const int64_t hi = std::min(ke, ctx + t + 1);  // causal limit within this part
          std::copy_n(acc.data() + r * kMlaVDim, kMlaVDim, states.data());
          lses[0] = acc_lse[r];
          // k and v hold keys [kb, ke): index them from kb.
          lses[1] = detail::attend_row(
              qrow.data(), k.data() + h * kMlaQkDim, static_cast<int64_t>(heads) * kMlaQkDim,
              v.data() + h * kMlaVDim, static_cast<int64_t>(heads) * kMlaVDim, 0,
              std::max<int64_t>(0, hi - kb), kMlaQkDim, kMlaVDim, scale, 0.0f,
              states.data() + kMlaVDim, scores);
          acc_lse[r] = detail::merge_parts(states.data(), lses.data(), 2, kMlaVDim,
                                           acc.data() + r * kMlaVDim);
        }
      }
    }
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t t = r / heads, h = r % heads;
      const int64_t base = (plan.cu_seqlens_q[i] + t - t0) * heads + h;
      for (int e = 0; e < kMlaVDim; ++e)
        store_float(out.data, out.dtype, base * kMlaVDim + e, acc[r * kMlaVDim + e]);
      if (lse.defined()) lse.ptr<float>()[base] = acc_lse[r];
    }
  }
}

}  // namespace tripath::reference
