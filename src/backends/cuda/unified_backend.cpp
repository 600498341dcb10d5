// The unified backend: every query token of the step in one launch of the unified kernel, in any
// request order. For decode-only steps it switches to split-KV: the planner's split partition,
// 16-row tiles when a request's packed rows fit (one token x the GQA group), and the merge
// kernel as the reduce (which also applies sinks).
#include <algorithm>
#include <cmath>

#include "cuda_backend.h"
#include "cuda_entry.h"
#include "cuda_util.h"
#include "merge/merge_states.h"
#include "unified/launch.h"

namespace tripath {
namespace {

class UnifiedBackend final : public CudaAttentionBackend {
 public:
  const char* name() const override { return "unified"; }
  bool needs_ordered_batch() const override { return false; }

 protected:
  void prepare_work(const StepPlan& plan, const AttentionParams& params,
                    DeviceArena& arena) override {
    const int group = params.num_q_heads / params.num_kv_heads;
    std::vector<kernels::UnifiedWorkItem> items;
    split_ = plan.num_tokens > 0 && plan.extend.num_requests() == 0 &&
             plan.prefill.num_requests() == 0;
    max_splits_ = 0;
    std::vector<int32_t> token_parts;
    if (split_) {
      tile_ = plan.max_query_len * group <= 16 ? kernels::kRows16 : kernels::kRows64;
      const int rows_per_item = tile_ == kernels::kRows16 ? 16 : 64;
      token_parts.assign(static_cast<size_t>(plan.num_tokens), 0);
      for (int32_t d = 0; d < plan.decode.num_requests(); ++d) {
        const int32_t i = plan.decode.begin + d;
        const int32_t first = plan.decode_cu_splits[d], count = plan.decode_cu_splits[d + 1] - first;
        max_splits_ = std::max(max_splits_, count);
        for (int32_t t = 0; t < plan.query_lens[i]; ++t) token_parts[plan.cu_seqlens_q[i] + t] = count;
        const int rows = plan.query_lens[i] * group;
        for (int g = 0; g < params.num_kv_heads; ++g)
          for (int rb = 0; rb < rows; rb += rows_per_item)
            for (int32_t s = 0; s < count; ++s) {
              const int32_t start = plan.split_kv_start[first + s];
              items.push_back({i, g, g * group, rb, start, start + plan.split_kv_len[first + s], s, 0});
            }
      }
    } else {
      tile_ = kernels::kRows64;
      for (int32_t i = 0; i < plan.num_requests; ++i) {
        const int rows = plan.query_lens[i] * group;
        for (int g = 0; g < params.num_kv_heads; ++g)
          for (int rb = 0; rb < rows; rb += 64)
            items.push_back({i, g, g * group, rb, 0, plan.seq_len(i), -1, 0});
      }
      // Longest key ranges first: the tail of the launch is short blocks, not one long one.
      auto keys = [&](const kernels::UnifiedWorkItem& it) {
        const int last_token = std::min(plan.query_lens[it.request] - 1, (it.row_begin + 63) / group);
        return plan.context_lens[it.request] + last_token;
      };
      std::stable_sort(items.begin(), items.end(),
                       [&](const auto& a, const auto& b) { return keys(a) > keys(b); });
    }
    num_items_ = static_cast<int32_t>(items.size());
    items_offset_ = arena.add(items);
    token_parts_offset_ = arena.add(token_parts);
    if (split_) {
      const size_t rows = static_cast<size_t>(max_splits_) * plan.num_tokens * params.num_q_heads;
      lse_offset_ = rows * params.head_dim * sizeof(float);
      workspace_.ensure(lse_offset_ + rows * sizeof(float));
    }
  }

  void launch(const StepPlan& plan, const AttentionParams& params, const AttentionInputs& in,
              cudaStream_t stream) override {
    if (num_items_ == 0) return;
    kernels::UnifiedParams p = unified_params(plan, params, in);
    p.partial_out = split_ ? workspace_.as<float>() : nullptr;
    p.partial_lse = split_ ? workspace_.as<float>(lse_offset_) : nullptr;
    p.items = arena().at<kernels::UnifiedWorkItem>(items_offset_);
    p.num_items = num_items_;
    TRIPATH_CUDA_CHECK(
        kernels::launch_unified(params.head_dim, in.q.dtype, in.cache.config.dtype, p, tile_,
                                stream));
    if (split_) {
      kernels::MergeParams m{};
      m.part_out = p.partial_out;
      m.part_lse = p.partial_lse;
      m.out = in.out.data;
      m.lse = p.lse;
      m.sinks = p.sinks;
      m.token_parts = arena().at<int32_t>(token_parts_offset_);
      m.num_parts = max_splits_;
      m.heads = params.num_q_heads;
      m.dim = params.head_dim;
      m.part_stride = plan.num_tokens * params.num_q_heads;
      m.row_begin = 0;
      m.row_end = m.part_stride;
      TRIPATH_CUDA_CHECK(kernels::launch_merge_states(m, in.out.dtype, stream));
    }
  }

 private:
  bool split_ = false;
  kernels::UnifiedTile tile_ = kernels::kRows64;
  int32_t num_items_ = 0, max_splits_ = 0;
  size_t items_offset_ = 0, token_parts_offset_ = 0, lse_offset_ = 0;
  DeviceBuffer workspace_;
};

}  // namespace

std::unique_ptr<AttentionBackend> make_unified_backend() {
  return std::make_unique<UnifiedBackend>();
}

}  // namespace tripath
