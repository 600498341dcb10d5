#include "cuda_backend.h"

#include <string>

#include "cache_write/cache_write.h"
#include "cuda_entry.h"
#include "cuda_util.h"
#include "merge/merge_states.h"
#include "tripath/error.h"
#include "tripath/kv_cache.h"
#include "unified/launch.h"

namespace tripath {

std::string cuda_specializations_text() { return kernels::unified_built_text(); }

namespace {

// New K/V rows of tokens [first, num_tokens) -> cache slots on the device (validated by the
// caller).
void launch_cache_write(const KvCacheView& cache, const TensorView& k, const TensorView& v,
                        const int64_t* slot_mapping, int64_t first, int64_t num_tokens,
                        cudaStream_t stream) {
  const KvCacheConfig& c = cache.config;
  const bool fp8 = c.dtype == DType::kFP8E4M3;
  const int64_t row_bytes =
      int64_t(c.num_kv_heads) * c.head_dim * static_cast<int64_t>(dtype_size(k.dtype));
  kernels::CacheWriteParams w{};
  w.k = static_cast<const char*>(k.data) + first * row_bytes;
  w.v = static_cast<const char*>(v.data) + first * row_bytes;
  w.k_cache = cache.k.data;
  w.v_cache = cache.v.data;
  w.slot_mapping = slot_mapping + first;
  w.num_tokens = num_tokens - first;
  w.num_kv_heads = c.num_kv_heads;
  w.head_dim = c.head_dim;
  w.block_size = c.block_size;
  w.layout = static_cast<int32_t>(c.layout);
  w.k_scale = fp8 ? c.k_scale : 1.0f;
  w.v_scale = fp8 ? c.v_scale : 1.0f;
  TRIPATH_CUDA_CHECK(kernels::launch_cache_write(w, k.dtype, c.dtype, stream));
}

}  // namespace

void validate_cuda_attention_call(const StepPlan& plan, const AttentionParams& params,
                                  const AttentionInputs& in, const char* backend) {
  validate_attention_call(plan, params, in, Device::kCUDA);
  check_dtype(in.q, "q", {DType::kBF16, DType::kF16});
  const DType t = in.q.dtype;
  const std::string same = std::string("dtype ") + dtype_name(t) + " (as q)";
  TRIPATH_CHECK_ARG(in.out.dtype == t, "out", dtype_name(in.out.dtype), same);
  if (in.k.defined()) {
    TRIPATH_CHECK_ARG(in.k.dtype == t, "k", dtype_name(in.k.dtype), same);
    TRIPATH_CHECK_ARG(in.v.dtype == t, "v", dtype_name(in.v.dtype), same);
  }
  const DType kv = in.cache.config.dtype;
  TRIPATH_CHECK_ARG(kv == t || kv == DType::kFP8E4M3, "cache.dtype", dtype_name(kv),
                    std::string(dtype_name(t)) + " (as q) or fp8_e4m3");
  TRIPATH_CHECK_ARG(kernels::unified_built(params.head_dim, t, kv), "head_dim",
                    std::to_string(params.head_dim) + " with q " + dtype_name(t) + " and cache " +
                        dtype_name(kv),
                    std::string("a specialization compiled into this build for backend ") +
                        backend + ": " + kernels::unified_built_text() +
                        " (configure TRIPATH_HEAD_DIMS / TRIPATH_DTYPES / TRIPATH_KV_FP8)");
}

void CudaAttentionBackend::prepare(const StepPlan& plan, const AttentionParams& params,
                                   void* stream) {
  TRIPATH_CHECK_ARG(params.num_kv_heads >= 1 && params.num_q_heads % params.num_kv_heads == 0,
                    "num_q_heads", params.num_q_heads, "a multiple of num_kv_heads");
  arena_.clear();
  offsets_ = add_common_plan_arrays(plan, arena_);
  prepare_work(plan, params, arena_);
  arena_.upload(static_cast<cudaStream_t>(stream));
  prepared_serial_ = plan.serial;
  prepared_q_heads_ = params.num_q_heads;
  prepared_kv_heads_ = params.num_kv_heads;
  prepared_head_dim_ = params.head_dim;
}

void CudaAttentionBackend::run(const StepPlan& plan, const AttentionParams& params,
                               const AttentionInputs& in) {
  validate_cuda_attention_call(plan, params, in, name());
  if (needs_ordered_batch()) check_ordered(plan, name());
  TRIPATH_CHECK_ARG(prepared_serial_ == plan.serial, "plan",
                    "a plan this backend has not prepared",
                    std::string("prepare(plan, params, stream) called for this plan before run "
                                "(backend ") + name() + ")");
  TRIPATH_CHECK_ARG(prepared_q_heads_ == params.num_q_heads &&
                        prepared_kv_heads_ == params.num_kv_heads &&
                        prepared_head_dim_ == params.head_dim,
                    "params", "other heads or head dim than prepare() was given",
                    "the geometry the plan was prepared for");
  const cudaStream_t stream = static_cast<cudaStream_t>(in.stream);
  if (in.k.defined()) {
    const int64_t fused = fused_write_tokens(plan, params, in);
    if (fused < plan.num_tokens) {
      launch_cache_write(in.cache, in.k, in.v, arena_.at<int64_t>(offsets_.slot_mapping), fused,
                         plan.num_tokens, stream);
    }
  }
  launch(plan, params, in, stream);
}

kernels::UnifiedParams CudaAttentionBackend::unified_params(const StepPlan& plan,
                                                            const AttentionParams& params,
                                                            const AttentionInputs& in) const {
  const KvCacheConfig& c = in.cache.config;
  const bool fp8 = c.dtype == DType::kFP8E4M3;
  kernels::UnifiedParams p{};
  p.q = in.q.data;
  p.out = in.out.data;
  p.lse = in.lse.defined() ? in.lse.ptr<float>() : nullptr;
  p.k_cache = in.cache.k.data;
  p.v_cache = in.cache.v.data;
  p.sinks = in.sinks.defined() ? in.sinks.ptr<float>() : nullptr;
  p.block_table = arena_.at<int32_t>(offsets_.block_table);
  p.cu_seqlens_q = arena_.at<int32_t>(offsets_.cu_seqlens_q);
  p.context_lens = arena_.at<int32_t>(offsets_.context_lens);
  p.num_tokens = static_cast<int32_t>(plan.num_tokens);
  p.num_q_heads = params.num_q_heads;
  p.num_kv_heads = params.num_kv_heads;
  p.rows_per_token = params.num_q_heads / params.num_kv_heads;
  p.max_blocks_per_request = plan.max_blocks_per_request;
  p.block_size = c.block_size;
  p.log2_block_size = log2_of(c.block_size);
  p.layout = static_cast<int32_t>(c.layout);
  p.window_left = params.window_left;
  p.score_scale = params.effective_scale() * (fp8 ? c.k_scale : 1.0f);
  p.scale_log2 = p.score_scale * 1.4426950408889634f;
  p.softcap = params.softcap;
  p.v_scale = fp8 ? c.v_scale : 1.0f;
  return p;
}

void cuda_write_kv_cache(const KvCacheView& cache, const TensorView& k, const TensorView& v,
                         const TensorView& slot_mapping, void* stream) {
  cache.validate(Device::kCUDA);
  const KvCacheConfig& c = cache.config;
  const int64_t n = slot_mapping.numel();
  check_tensor(k, "k", {n, c.num_kv_heads, c.head_dim}, Device::kCUDA);
  check_tensor(v, "v", {n, c.num_kv_heads, c.head_dim}, Device::kCUDA);
  check_dtype(k, "k", {DType::kBF16, DType::kF16});
  TRIPATH_CHECK_ARG(v.dtype == k.dtype, "v", dtype_name(v.dtype), "the dtype of k");
  TRIPATH_CHECK_ARG(c.dtype == k.dtype || c.dtype == DType::kFP8E4M3, "cache.dtype",
                    dtype_name(c.dtype), std::string(dtype_name(k.dtype)) + " or fp8_e4m3");
  launch_cache_write(cache, k, v, static_cast<const int64_t*>(slot_mapping.data), 0, n,
                     static_cast<cudaStream_t>(stream));
}

void cuda_merge_states(const TensorView& outs, const TensorView& lses, const TensorView& out,
                       const TensorView& lse, void* stream) {
  TRIPATH_CHECK_ARG(outs.ndim == 3, "outs", outs.shape_text(), "shape [num_parts, rows, dim]");
  const int64_t parts = outs.shape[0], rows = outs.shape[1], dim = outs.shape[2];
  check_tensor(outs, "outs", {parts, rows, dim}, Device::kCUDA);
  check_tensor(lses, "lses", {parts, rows}, Device::kCUDA);
  check_tensor(out, "out", {rows, dim}, Device::kCUDA);
  check_dtype(outs, "outs", {DType::kF32});
  check_dtype(lses, "lses", {DType::kF32});
  check_dtype(out, "out", {DType::kF32, DType::kBF16, DType::kF16});
  if (lse.defined()) {
    check_tensor(lse, "lse", {rows}, Device::kCUDA);
    check_dtype(lse, "lse", {DType::kF32});
  }
  kernels::MergeParams m{};
  m.part_out = outs.ptr<float>();
  m.part_lse = lses.ptr<float>();
  m.out = out.data;
  m.lse = lse.defined() ? lse.ptr<float>() : nullptr;
  m.num_parts = static_cast<int32_t>(parts);
  m.heads = 1;
  m.dim = static_cast<int32_t>(dim);
  m.part_stride = rows;
  m.row_begin = 0;
  m.row_end = rows;
  TRIPATH_CUDA_CHECK(
      kernels::launch_merge_states(m, out.dtype, static_cast<cudaStream_t>(stream)));
}

}  // namespace tripath
