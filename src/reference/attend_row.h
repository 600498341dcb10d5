// The arithmetic core of the CPU reference: one query row against a contiguous range of keys,
// and the log-sum-exp merge of partial states. Internal to the reference backend.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "tripath/kv_cache.h"

namespace tripath::reference::detail {

inline constexpr float kNegInf = -INFINITY;

// Softmax attention of q (dqk floats) to keys [lo, hi) of K (row j at K + j * k_stride) with
// values V (row j at V + j * v_stride): out[dv] = sum_j p_j V_j. Scores are scale * q.k, then
// softcap * tanh(s / softcap) if softcap > 0. Returns the natural-log LSE of the scores; with no
// keys out is 0 and the LSE -inf. `scores` is scratch space.
float attend_row(const float* q, const float* K, int64_t k_stride, const float* V,
                 int64_t v_stride, int64_t lo, int64_t hi, int dqk, int dv, float scale,
                 float softcap, float* out, std::vector<float>& scores);

// Merges `parts` partial states (outs [parts, dv], lses [parts]) over disjoint key sets into
// out [dv] and returns the merged LSE (shared/DESIGN.md section 5). out may alias no input.
float merge_parts(const float* outs, const float* lses, int parts, int dv, float* out);

// Dequantized K (is_v false) or V rows of kv head `head` for keys [begin, end) of the request
// whose block-table row is `block_row`: dst [end - begin, head_dim] floats.
void gather_kv(const KvCacheView& cache, bool is_v, const int32_t* block_row, int head,
               int64_t begin, int64_t end, float* dst);
// Dequantized latent rows [begin, end) x 576 of one request.
void gather_latent(const MlaCacheView& cache, const int32_t* block_row, int64_t begin,
                   int64_t end, float* dst);

}  // namespace tripath::reference::detail
