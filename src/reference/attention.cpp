// Reference MHA/GQA attention over a whole step, read from the paged cache.
//
// Work items are (request, KV head, tile of query tokens), run on OpenMP threads. Each item
// dequantizes the keys its tokens can see into float rows once, then for every (token, query
// head of the GQA group) attends to a list of key ranges, one partial state per range, and
// merges the parts plus the sink with merge_parts. The direct definition uses one range per
// token; the three-path composition uses the plan's splits (decode), self-part plus context
// chunks (extend) or one causal range (prefill). Both share every line of arithmetic but the
// ranges, so their agreement tests the decomposition, not two different implementations.
#include <algorithm>
#include <vector>

#include "attend_row.h"
#include "tripath/backend.h"
#include "tripath/error.h"
#include "tripath/reference.h"

namespace tripath::reference {
namespace {

constexpr int kTokenTile = 32;

struct KeyRange {
  int64_t begin, end;
};

enum class Mode { kDirect, kThreePath };

// Key ranges (parts) for the query at absolute position pos of ordered request i, already
// limited to the visible keys [lo, hi).
void key_ranges(const StepPlan& plan, Mode mode, int32_t i, int64_t lo, int64_t hi,
                std::vector<KeyRange>& parts) {
  parts.clear();
  auto add = [&](int64_t b, int64_t e) {
    parts.push_back({std::max(b, lo), std::max(std::max(b, lo), std::min(e, hi))});
  };
  if (mode == Mode::kDirect || (i >= plan.prefill.begin && i < plan.prefill.end)) {
    add(lo, hi);
  } else if (i < plan.decode.end) {
    const int32_t d = i - plan.decode.begin;
    for (int32_t s = plan.decode_cu_splits[d]; s < plan.decode_cu_splits[d + 1]; ++s)
      add(plan.split_kv_start[s], plan.split_kv_start[s] + plan.split_kv_len[s]);
  } else {
    const int32_t e = i - plan.extend.begin;
    const int32_t ne = plan.extend.num_requests();
    for (int32_t c = 0; c < plan.num_chunks; ++c) {
      const int64_t start = plan.chunk_kv_start[c * ne + e];
      add(start, start + plan.chunk_kv_len[c * ne + e]);
    }
    add(plan.context_lens[i], hi);  // the causal self-part over the new tokens
  }
}

struct Item {
  int32_t request;
  int32_t kv_head;
  int32_t token_begin;  // within the request
  int32_t token_end;
};

void run_attention(const StepPlan& plan, const AttentionParams& params, const AttentionInputs& in,
                   Mode mode) {
  validate_attention_call(plan, params, in, Device::kCPU);
  if (mode == Mode::kThreePath) check_ordered(plan, "reference (three-path composition)");
  const int hq = params.num_q_heads, hkv = params.num_kv_heads, group = hq / hkv;
  const int dim = params.head_dim;
  const float scale = params.effective_scale();
  const float* sinks = in.sinks.defined() ? in.sinks.ptr<float>() : nullptr;

  std::vector<Item> items;
  for (int32_t i = 0; i < plan.num_requests; ++i)
    for (int32_t g = 0; g < hkv; ++g)
      for (int32_t t = 0; t < plan.query_lens[i]; t += kTokenTile)
        items.push_back({i, g, t, std::min(plan.query_lens[i], t + kTokenTile)});

#pragma omp parallel
  {
    std::vector<float> keys, values, q(dim), scores, part_out, part_lse;
    std::vector<KeyRange> parts;
#pragma omp for schedule(dynamic)
    for (int64_t w = 0; w < static_cast<int64_t>(items.size()); ++w) {
      const Item it = items[w];
      const int64_t ctx = plan.context_lens[it.request];
      auto visible = [&](int64_t pos, int64_t& lo, int64_t& hi) {
        hi = pos + 1;
        lo = params.window_left >= 0 ? std::max<int64_t>(0, pos - params.window_left) : 0;
      };
      int64_t first_lo, unused, last_hi;
      visible(ctx + it.token_begin, first_lo, unused);
      visible(ctx + it.token_end - 1, unused, last_hi);
      // Keys [first_lo, last_hi) cover every token of the tile (lo and hi grow with pos).
      const int64_t nkeys = last_hi - first_lo;
      keys.resize(static_cast<size_t>(nkeys * dim));
      values.resize(static_cast<size_t>(nkeys * dim));
      const int32_t* row = plan.block_row(it.request);
      detail::gather_kv(in.cache, false, row, it.kv_head, first_lo, last_hi, keys.data());
      detail::gather_kv(in.cache, true, row, it.kv_head, first_lo, last_hi, values.data());

      for (int32_t t = it.token_begin; t < it.token_end; ++t) {
        int64_t lo, hi;
        visible(ctx + t, lo, hi);
        key_ranges(plan, mode, it.request, lo, hi, parts);
        const int np = static_cast<int>(parts.size());
        const int64_t token = plan.cu_seqlens_q[it.request] + t;
        for (int hh = 0; hh < group; ++hh) {
          const int h = it.kv_head * group + hh;
          const int64_t qrow = (token * hq + h) * dim;
          for (int d = 0; d < dim; ++d) q[d] = load_float(in.q.data, in.q.dtype, qrow + d);
          part_out.assign(static_cast<size_t>((np + 1) * dim), 0.0f);
          part_lse.assign(static_cast<size_t>(np + 1), detail::kNegInf);
          for (int p = 0; p < np; ++p) {
            // keys/values hold positions [first_lo, last_hi): index them from first_lo.
            part_lse[p] = detail::attend_row(q.data(), keys.data(), dim, values.data(), dim,
                                             parts[p].begin - first_lo, parts[p].end - first_lo,
                                             dim, dim, scale, params.softcap,
                                             part_out.data() + p * dim, scores);
          }
          // The sink is one more part: no value (output 0) and LSE = its logit.
          if (sinks != nullptr) part_lse[np] = sinks[h];
          float merged[256];  // head_dim <= 256: validate_attention_call checked it
          const float lse = detail::merge_parts(part_out.data(), part_lse.data(), np + 1, dim,
                                                merged);
          for (int d = 0; d < dim; ++d) store_float(in.out.data, in.out.dtype, qrow + d, merged[d]);
          if (in.lse.defined()) in.lse.ptr<float>()[token * hq + h] = lse;
        }
      }
    }
  }
}

}  // namespace

void attention_direct(const StepPlan& plan, const AttentionParams& params,
                      const AttentionInputs& in) {
  run_attention(plan, params, in, Mode::kDirect);
}

void attention_three_path(const StepPlan& plan, const AttentionParams& params,
                          const AttentionInputs& in) {
  run_attention(plan, params, in, Mode::kThreePath);
}

}  // namespace tripath::reference
