// The legacy two-path backend (shared/DESIGN.md section 4), kept as a baseline to measure
// against: extend and prefill by a prefix-prefill kernel (the unified kernel's 64-row tiles with
// one query head per block, no GQA packing, so each query head re-reads its KV), decode by the
// classic CUDA-core paged kernel (256-key partitions + merge) when the step fits its fast path,
// else by the generic single-pass kernel. The fast-path choice is made from the actual step at
// run time, never from a capture-time maximum.
#include <algorithm>

#include "cuda_backend.h"
#include "cuda_entry.h"
#include "cuda_util.h"
#include "merge/merge_states.h"
#include "paged_decode/paged_decode.h"
#include "unified/launch.h"

namespace tripath {
namespace {

class TwoPathBackend final : public CudaAttentionBackend {
 public:
  const char* name() const override { return "two_path"; }
  bool needs_ordered_batch() const override { return true; }

 protected:
  void prepare_work(const StepPlan& plan, const AttentionParams& params,
                    DeviceArena& arena) override {
    const int group = params.num_q_heads / params.num_kv_heads;
    std::vector<kernels::UnifiedWorkItem> items;
    for (int32_t i = plan.extend.begin; i < plan.prefill.end; ++i)
      for (int h = 0; h < params.num_q_heads; ++h)
        for (int rb = 0; rb < plan.query_lens[i]; rb += 64)
          items.push_back({i, h / group, h, rb, 0, plan.seq_len(i), -1, 0});
    std::stable_sort(items.begin(), items.end(), [&](const auto& a, const auto& b) {
      return plan.context_lens[a.request] + a.row_begin > plan.context_lens[b.request] + b.row_begin;
    });
    num_items_ = static_cast<int32_t>(items.size());
    items_offset_ = arena.add(items);

    max_decode_seq_ = 0;
    for (int32_t i = plan.decode.begin; i < plan.decode.end; ++i)
      max_decode_seq_ = std::max(max_decode_seq_, plan.seq_len(i));
    max_partitions_ = (max_decode_seq_ + kernels::kDecodePartitionKeys - 1) /
                      kernels::kDecodePartitionKeys;
    std::vector<int32_t> token_parts(static_cast<size_t>(plan.num_tokens), 0);
    for (int32_t i = plan.decode.begin; i < plan.decode.end; ++i)
      for (int32_t t = 0; t < plan.query_lens[i]; ++t)
        token_parts[plan.cu_seqlens_q[i] + t] =
            (plan.seq_len(i) + kernels::kDecodePartitionKeys - 1) / kernels::kDecodePartitionKeys;
    token_parts_offset_ = arena.add(token_parts);
    const size_t rows = static_cast<size_t>(max_partitions_) * plan.num_tokens * params.num_q_heads;
    lse_offset_ = rows * params.head_dim * sizeof(float);
    if (plan.decode.num_tokens() > 0) workspace_.ensure(lse_offset_ + rows * sizeof(float));
  }

  void launch(const StepPlan& plan, const AttentionParams& params, const AttentionInputs& in,
              cudaStream_t stream) override {
    const KvCacheConfig& c = in.cache.config;
    const bool fp8 = c.dtype == DType::kFP8E4M3;
    const float score_scale = params.effective_scale() * (fp8 ? c.k_scale : 1.0f);
    const float v_scale = fp8 ? c.v_scale : 1.0f;
    const int group = params.num_q_heads / params.num_kv_heads;
    const int32_t* block_table = arena().at<int32_t>(offsets().block_table);
    const int32_t* cu_seqlens_q = arena().at<int32_t>(offsets().cu_seqlens_q);
    const int32_t* context_lens = arena().at<int32_t>(offsets().context_lens);
    float* lse = in.lse.defined() ? in.lse.ptr<float>() : nullptr;
    const float* sinks = in.sinks.defined() ? in.sinks.ptr<float>() : nullptr;

    if (num_items_ > 0) {  // extend + prefill: the prefix-prefill kernel
      kernels::UnifiedParams p = unified_params(plan, params, in);
      p.items = arena().at<kernels::UnifiedWorkItem>(items_offset_);
      p.num_items = num_items_;
      p.rows_per_token = 1;  // no GQA packing: one query head per block, as the legacy kernel
      TRIPATH_CUDA_CHECK(kernels::launch_unified(params.head_dim, in.q.dtype, c.dtype, p,
                                                 kernels::kRows64, stream));
    }
    if (plan.decode.num_tokens() == 0) return;

    kernels::PagedDecodeParams d{};
    d.q = in.q.data;
    d.out = in.out.data;
    d.lse = lse;
    d.k_cache = in.cache.k.data;
    d.v_cache = in.cache.v.data;
    d.partial_out = workspace_.as<float>();
    d.partial_lse = workspace_.as<float>(lse_offset_);
    d.sinks = sinks;
    d.block_table = block_table;
    d.cu_seqlens_q = cu_seqlens_q;
    d.context_lens = context_lens;
    d.request_begin = plan.decode.begin;
    d.request_end = plan.decode.end;
    d.max_partitions = max_partitions_;
    d.num_tokens = static_cast<int32_t>(plan.num_tokens);
    d.num_q_heads = params.num_q_heads;
    d.num_kv_heads = params.num_kv_heads;
    d.head_dim = params.head_dim;
    d.max_blocks_per_request = plan.max_blocks_per_request;
    d.block_size = c.block_size;
    d.layout = static_cast<int32_t>(c.layout);
    d.window_left = params.window_left;
    d.scale = score_scale;
    d.softcap = params.softcap;
    d.v_scale = v_scale;
    // Decided from this step's longest decode context and this layer's features.
    if (kernels::paged_decode_fast_path_supported(params.head_dim, c.block_size, group,
                                                  max_decode_seq_, params.window_left,
                                                  params.has_sinks)) {
      TRIPATH_CUDA_CHECK(kernels::launch_paged_decode_fast(d, in.q.dtype, c.dtype, stream));
      kernels::MergeParams m{};
      m.part_out = d.partial_out;
      m.part_lse = d.partial_lse;
      m.out = in.out.data;
      m.lse = lse;
      m.token_parts = arena().at<int32_t>(token_parts_offset_);
      m.num_parts = max_partitions_;
      m.heads = params.num_q_heads;
      m.dim = params.head_dim;
      m.part_stride = plan.num_tokens * params.num_q_heads;
      m.row_begin = plan.decode.token_begin * params.num_q_heads;
      m.row_end = plan.decode.token_end * params.num_q_heads;
      TRIPATH_CUDA_CHECK(kernels::launch_merge_states(m, in.out.dtype, stream));
    } else {
      TRIPATH_CUDA_CHECK(kernels::launch_paged_decode_generic(d, in.q.dtype, c.dtype, stream));
    }
  }

 private:
  int32_t num_items_ = 0, max_decode_seq_ = 0, max_partitions_ = 0;
  size_t items_offset_ = 0, token_parts_offset_ = 0, lse_offset_ = 0;
  DeviceBuffer workspace_;
};

}  // namespace

std::unique_ptr<AttentionBackend> make_two_path_backend() {
  return std::make_unique<TwoPathBackend>();
}

}  // namespace tripath
