#include "attend_row.h"

#include <algorithm>
#include <cmath>

#include "tripath/dtype.h"

namespace tripath::reference::detail {
namespace {

// Eight independent partial sums let the compiler vectorize without reassociating freely.
float dot(const float* a, const float* b, int n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) acc[l] += a[i + l] * b[i + l];
  float s = 0.0f;
  for (; i < n; ++i) s += a[i] * b[i];
  return s + ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

}  // namespace

float attend_row(const float* q, const float* K, int64_t k_stride, const float* V,
                 int64_t v_stride, int64_t lo, int64_t hi, int dqk, int dv, float scale,
                 float softcap, float* out, std::vector<float>& scores) {
  std::fill(out, out + dv, 0.0f);
  if (hi <= lo) return kNegInf;
  const int64_t n = hi - lo;
  scores.resize(static_cast<size_t>(n));
  float max_score = kNegInf;
  for (int64_t j = 0; j < n; ++j) {
    float s = scale * dot(q, K + (lo + j) * k_stride, dqk);
    if (softcap > 0.0f) s = softcap * std::tanh(s / softcap);
    scores[j] = s;
    max_score = std::max(max_score, s);
  }
  float sum = 0.0f;
  for (int64_t j = 0; j < n; ++j) {
    const float p = std::exp(scores[j] - max_score);
    sum += p;
    const float* v = V + (lo + j) * v_stride;
    for (int d = 0; d < dv; ++d) out[d] += p * v[d];
  }
  const float inv = 1.0f / sum;
  for (int d = 0; d < dv; ++d) out[d] *= inv;
  return max_score + std::log(sum);
}

float merge_parts(const float* outs, const float* lses, int parts, int dv, float* out) {
  float m = kNegInf;
  for (int p = 0; p < parts; ++p) m = std::max(m, lses[p]);
  std::fill(out, out + dv, 0.0f);
  if (m == kNegInf) return kNegInf;  // every part empty: 0 and -inf, never NaN
  // A NaN lse is not hidden: its weight exp(NaN) poisons the output, as it should.
  float total = 0.0f;
  for (int p = 0; p < parts; ++p) {
    if (lses[p] == kNegInf) continue;
    const float w = std::exp(lses[p] - m);
    total += w;
    for (int d = 0; d < dv; ++d) out[d] += w * outs[static_cast<int64_t>(p) * dv + d];
  }
  const float inv = 1.0f / total;
  for (int d = 0; d < dv; ++d) out[d] *= inv;
  return m + std::log(total);
}

void gather_kv(const KvCacheView& cache, bool is_v, const int32_t* block_row, int head,
               int64_t begin, int64_t end, float* dst) {
  const KvCacheConfig& c = cache.config;
  const void* base = is_v ? cache.v.data : cache.k.data;
  const float scale = c.dtype == DType::kFP8E4M3 ? (is_v ? c.v_scale : c.k_scale) : 1.0f;
  for (int64_t j = begin; j < end; ++j) {
    const int64_t block = block_row[j / c.block_size];
    const int slot = static_cast<int>(j % c.block_size);
    float* row = dst + (j - begin) * c.head_dim;
    for (int d = 0; d < c.head_dim; ++d)
      row[d] = scale * load_float(base, c.dtype, kv_cache_offset(c, block, slot, head, d));
  }
}

void gather_latent(const MlaCacheView& cache, const int32_t* block_row, int64_t begin,
                   int64_t end, float* dst) {
  const MlaCacheConfig& c = cache.config;
  const float scale = c.dtype == DType::kFP8E4M3 ? c.scale : 1.0f;
  for (int64_t j = begin; j < end; ++j) {
    const int64_t row = static_cast<int64_t>(block_row[j / c.block_size]) * c.block_size +
                        j % c.block_size;
    float* d = dst + (j - begin) * kMlaEntryDim;
    for (int e = 0; e < kMlaEntryDim; ++e)
      d[e] = scale * load_float(cache.latent.data, c.dtype, row * kMlaEntryDim + e);
  }
}

}  // namespace tripath::reference::detail
