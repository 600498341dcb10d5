#include "bench_verify.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

#include "tripath/reference.h"

namespace tripath::cli {

namespace {

Buffer copy_of(const Buffer& b) {
  std::vector<int64_t> shape(b.view.shape, b.view.shape + b.view.ndim);
  Buffer c(b.view.dtype, shape);
  std::memcpy(c.storage.data(), b.storage.data(), b.storage.size());
  return c;
}

// Largest relative rounding error of a value stored in `t` (unit roundoff).
double unit_roundoff(DType t) {
  switch (t) {
    case DType::kBF16:
      return std::ldexp(1.0, -8);
    case DType::kF16:
      return std::ldexp(1.0, -11);
    case DType::kFP8E4M3:
      return std::ldexp(1.0, -4);
    default:  // f32 (integer types never hold attention outputs)
      return 0.0;
  }
}

// Compares `rows` rows of `row_len` elements of `got` (any dtype) with the f32 reference `want`.
// `what` names the tensor in the detail message.
void compare_rows(const TensorView& got, const TensorView& want, int64_t rows, int64_t row_len,
                  int64_t heads, const char* what, double tolerance, VerifyResult& result) {
  const double u = unit_roundoff(got.dtype);
  double worst = 0.0;
  int64_t worst_row = -1;
  for (int64_t r = 0; r < rows; ++r) {
    double excess = 0.0, scale = 0.0;
    bool bad_special = false;
    for (int64_t i = 0; i < row_len; ++i) {
      const int64_t index = r * row_len + i;
      const double g = load_float(got.data, got.dtype, index);
      const double w = load_float(want.data, want.dtype, index);
      if (!std::isfinite(g) || !std::isfinite(w)) {
        bad_special = bad_special || !((std::isnan(g) && std::isnan(w)) || g == w);
        continue;
      }
      // Storing the output in a narrow dtype costs up to u |w| by itself; only the rest counts.
      excess = std::max(excess, std::fabs(g - w) - u * std::fabs(w));
      scale = std::max(scale, std::fabs(w));
    }
    const double row_error =
        bad_special ? INFINITY : (excess <= 0.0 ? 0.0 : excess / std::max(scale, 1e-30));
    if (row_error > tolerance) ++result.bad_rows;
    if (row_error > worst || worst_row < 0) {
      worst = row_error;
      worst_row = r;
    }
  }
  result.max_error = std::max(result.max_error, worst);
  if (worst > tolerance) {
    result.ok = false;
    std::ostringstream s;
    s << what << " token " << worst_row / heads << " head " << worst_row % heads
      << ": relative error " << worst << " > " << tolerance << " (" << result.bad_rows
      << " rows over)";
    if (!result.detail.empty()) result.detail += "; ";
    result.detail += s.str();
  }
}

}  // namespace

CacheSnapshot snapshot_cache(const MhaStep& s) {
  return CacheSnapshot{{s.cache_k.storage, s.cache_v.storage}};
}

CacheSnapshot snapshot_cache(const MlaStep& s) { return CacheSnapshot{{s.cache.storage}}; }

void restore_cache(MhaStep& s, const CacheSnapshot& snapshot) {
  std::memcpy(s.cache_k.storage.data(), snapshot.tensors[0].data(), snapshot.tensors[0].size());
  std::memcpy(s.cache_v.storage.data(), snapshot.tensors[1].data(), snapshot.tensors[1].size());
}

void restore_cache(MlaStep& s, const CacheSnapshot& snapshot) {
  std::memcpy(s.cache.storage.data(), snapshot.tensors[0].data(), snapshot.tensors[0].size());
}

ReferenceOutput reference_output(const MhaStep& s) {
  const StepPlan& plan = s.step.plan;
  Buffer cache_k = copy_of(s.cache_k);
  Buffer cache_v = copy_of(s.cache_v);
  KvCacheView cache = s.inputs.cache;
  cache.k = cache_k.view;
  cache.v = cache_v.view;
  reference::write_kv_cache(cache, s.k.view, s.v.view, plan.slot_mapping.data(), plan.num_tokens);
  ReferenceOutput ref;
  ref.out = Buffer(DType::kF32, {plan.num_tokens, s.params.num_q_heads, s.params.head_dim});
  AttentionInputs in = s.inputs;
  in.k = TensorView();
  in.v = TensorView();
  in.cache = cache;
  in.out = ref.out.view;
  reference::attention_direct(plan, s.params, in);
  return ref;
}

ReferenceOutput reference_output(const MlaStep& s) {
  const StepPlan& plan = s.step.plan;
  Buffer latent = copy_of(s.cache);
  MlaCacheView cache = s.inputs.cache;
  cache.latent = latent.view;
  reference::write_mla_cache(cache, s.latent.view, plan.slot_mapping.data(), plan.num_tokens);
  ReferenceOutput ref;
  const int h = s.params.num_heads;
  const int64_t decode_tokens = plan.decode.num_tokens();
  const int64_t other_tokens = plan.num_tokens - decode_tokens;
  if (decode_tokens > 0) {
    ref.out_absorbed = Buffer(DType::kF32, {decode_tokens, h, kMlaLatentDim});
    reference::mla_absorbed(plan, plan.decode.begin, plan.decode.end, s.params, cache,
                            s.q_absorbed.view, ref.out_absorbed.view, TensorView());
  }
  if (other_tokens > 0) {
    ref.out = Buffer(DType::kF32, {other_tokens, h, kMlaVDim});
    reference::mla_non_absorbed(plan, plan.extend.begin, plan.prefill.end, s.params, cache,
                                s.q.view, s.kv_b_proj.view, ref.out.view, TensorView(), 0);
  }
  return ref;
}

VerifyResult compare_outputs(const MhaStep& s, const ReferenceOutput& ref, double tolerance) {
  VerifyResult result;
  result.limit = tolerance;
  compare_rows(s.out.view, ref.out.view, s.step.plan.num_tokens * s.params.num_q_heads,
               s.params.head_dim, s.params.num_q_heads, "out", tolerance, result);
  return result;
}

VerifyResult compare_outputs(const MlaStep& s, const ReferenceOutput& ref, double tolerance) {
  VerifyResult result;
  result.limit = tolerance;
  const int h = s.params.num_heads;
  const StepPlan& plan = s.step.plan;
  const int64_t decode_tokens = plan.decode.num_tokens();
  const int64_t other_tokens = plan.num_tokens - decode_tokens;
  if (decode_tokens > 0) {
    compare_rows(s.out_absorbed.view, ref.out_absorbed.view, decode_tokens * h, kMlaLatentDim, h,
                 "out_absorbed", tolerance, result);
  }
  if (other_tokens > 0) {
    compare_rows(s.out.view, ref.out.view, other_tokens * h, kMlaVDim, h, "out", tolerance, result);
  }
  return result;
}

}  // namespace tripath::cli
