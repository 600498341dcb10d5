#include <cmath>
#include <string>

#include "tripath/backend.h"
#include "tripath/error.h"

namespace tripath {

float AttentionParams::effective_scale() const {
  return scale != 0.0f ? scale : 1.0f / std::sqrt(static_cast<float>(head_dim));
}

void AttentionParams::validate(const KvCacheConfig& cache) const {
  TRIPATH_CHECK_ARG(is_supported_head_dim(head_dim), "head_dim", head_dim,
                    "one of " + supported_head_dims_text());
  TRIPATH_CHECK_ARG(num_kv_heads >= 1, "num_kv_heads", num_kv_heads, "at least 1");
  TRIPATH_CHECK_ARG(num_q_heads >= 1 && num_q_heads % num_kv_heads == 0, "num_q_heads",
                    num_q_heads,
                    "a positive multiple of num_kv_heads (" + std::to_string(num_kv_heads) + ")");
  TRIPATH_CHECK_ARG(cache.head_dim == head_dim, "cache.head_dim", cache.head_dim,
                    "head_dim " + std::to_string(head_dim));
  TRIPATH_CHECK_ARG(cache.num_kv_heads == num_kv_heads, "cache.num_kv_heads", cache.num_kv_heads,
                    "num_kv_heads " + std::to_string(num_kv_heads));
  TRIPATH_CHECK_ARG(std::isfinite(scale) && scale >= 0.0f, "scale", scale,
                    "a finite positive softmax scale, or 0 for 1/sqrt(head_dim)");
  TRIPATH_CHECK_ARG(window_left >= -1, "window_left", window_left,
                    "-1 (no window) or a non-negative left window");
  TRIPATH_CHECK_ARG(std::isfinite(softcap) && softcap >= 0.0f, "softcap", softcap,
                    "0 (off) or a positive cap");
}

float MlaParams::effective_scale() const {
  return scale != 0.0f ? scale : 1.0f / std::sqrt(static_cast<float>(kMlaQkDim));
}

void MlaParams::validate() const {
  TRIPATH_CHECK_ARG(num_heads >= 1 && num_heads <= 128, "num_heads", num_heads,
                    "an MLA head count in [1, 128]");
  TRIPATH_CHECK_ARG(std::isfinite(scale) && scale >= 0.0f, "scale", scale,
                    "a finite positive softmax scale, or 0 for 1/sqrt(192)");
}

void check_ordered(const StepPlan& plan, const char* backend_name) {
  if (plan.is_ordered) return;
  throw Error(std::string("tripath: backend '") + backend_name +
              "' needs the batch ordered [decode | extend | prefill]; lay the requests out in "
              "plan.order (ordered_input / reorder_token_rows) and plan the ordered step");
}

namespace {

void check_plan_matches_cache(const StepPlan& plan, int block_size, int64_t num_blocks) {
  TRIPATH_CHECK_ARG(plan.block_size == block_size, "plan.block_size", plan.block_size,
                    "the cache's block_size " + std::to_string(block_size) +
                        " (the plan was built for another cache)");
  TRIPATH_CHECK_ARG(plan.num_cache_blocks <= num_blocks, "plan.num_cache_blocks",
                    plan.num_cache_blocks,
                    "at most the cache's " + std::to_string(num_blocks) + " blocks");
}

void check_float_dtype(const TensorView& t, const char* name) {
  check_dtype(t, name, {DType::kF32, DType::kF16, DType::kBF16});
}

}  // namespace

void validate_attention_call(const StepPlan& plan, const AttentionParams& params,
                             const AttentionInputs& in, Device device) {
  in.cache.validate(device);
  params.validate(in.cache.config);
  check_plan_matches_cache(plan, in.cache.config.block_size, in.cache.config.num_blocks);
  const int64_t n = plan.num_tokens;
  check_tensor(in.q, "q", {n, params.num_q_heads, params.head_dim}, device);
  check_float_dtype(in.q, "q");
  check_tensor(in.out, "out", {n, params.num_q_heads, params.head_dim}, device);
  check_float_dtype(in.out, "out");
  TRIPATH_CHECK_ARG(in.k.defined() == in.v.defined(), in.k.defined() ? "v" : "k", "not given",
                    "k and v given together (cache write) or neither");
  if (in.k.defined()) {
    check_tensor(in.k, "k", {n, params.num_kv_heads, params.head_dim}, device);
    check_tensor(in.v, "v", {n, params.num_kv_heads, params.head_dim}, device);
    check_float_dtype(in.k, "k");
    check_float_dtype(in.v, "v");
  }
  if (in.lse.defined()) {
    check_tensor(in.lse, "lse", {n, params.num_q_heads}, device);
    check_dtype(in.lse, "lse", {DType::kF32});
  }
  TRIPATH_CHECK_ARG(params.has_sinks == in.sinks.defined(), "sinks",
                    in.sinks.defined() ? "given" : "not given",
                    params.has_sinks ? "a [num_q_heads] f32 tensor (params.has_sinks is set)"
                                     : "no sinks tensor unless params.has_sinks is set");
  if (in.sinks.defined()) {
    check_tensor(in.sinks, "sinks", {params.num_q_heads}, device);
    check_dtype(in.sinks, "sinks", {DType::kF32});
  }
}

void validate_mla_call(const StepPlan& plan, const MlaParams& params, const MlaInputs& in,
                       Device device) {
  params.validate();
  in.cache.validate(device);
  check_plan_matches_cache(plan, in.cache.config.block_size, in.cache.config.num_blocks);
  const int64_t h = params.num_heads;
  const int64_t nd = plan.decode.num_tokens();
  const int64_t np = plan.num_tokens - nd;
  if (in.latent.defined()) {
    check_tensor(in.latent, "latent", {plan.num_tokens, kMlaEntryDim}, device);
    check_float_dtype(in.latent, "latent");
  }
  if (nd > 0 || in.q_absorbed.defined()) {
    check_tensor(in.q_absorbed, "q_absorbed", {nd, h, kMlaEntryDim}, device);
    check_float_dtype(in.q_absorbed, "q_absorbed");
    check_tensor(in.out_absorbed, "out_absorbed", {nd, h, kMlaLatentDim}, device);
    check_float_dtype(in.out_absorbed, "out_absorbed");
    if (in.lse_absorbed.defined()) {
      check_tensor(in.lse_absorbed, "lse_absorbed", {nd, h}, device);
      check_dtype(in.lse_absorbed, "lse_absorbed", {DType::kF32});
    }
  }
  if (np > 0 || in.q.defined()) {
    check_tensor(in.q, "q", {np, h, kMlaQkDim}, device);
    check_float_dtype(in.q, "q");
    check_tensor(in.kv_b_proj, "kv_b_proj", {kMlaLatentDim, h * (kMlaNopeDim + kMlaVDim)},
                 device);
    check_float_dtype(in.kv_b_proj, "kv_b_proj");
    check_tensor(in.out, "out", {np, h, kMlaVDim}, device);
    check_float_dtype(in.out, "out");
    if (in.lse.defined()) {
      check_tensor(in.lse, "lse", {np, h}, device);
      check_dtype(in.lse, "lse", {DType::kF32});
    }
  }
}

}  // namespace tripath
