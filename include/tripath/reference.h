// The exact CPU implementation of everything tripath computes: the oracle for every test and the
// backend where there is no GPU. Independent of kernel code; float32 accumulation; OpenMP
// threads. Tensors must be CPU views.
#pragma once

#include <cstdint>

#include "tripath/attention.h"
#include "tripath/step_plan.h"

namespace tripath::reference {

// Writes new K/V rows into the cache at slot_mapping (block * block_size + offset); -1 skipped.
void write_kv_cache(const KvCacheView& cache, const TensorView& k, const TensorView& v,
                    const int64_t* slot_mapping, int64_t num_tokens);
void write_mla_cache(const MlaCacheView& cache, const TensorView& latent,
                     const int64_t* slot_mapping, int64_t num_tokens);

// Attention for every query token of the step, read straight from the paged cache, in any
// request order: the direct definition.
void attention_direct(const StepPlan& plan, const AttentionParams& params,
                      const AttentionInputs& in);

// The same result composed from the three paths on an ordered plan: decode through the plan's
// split-KV partition, extend as the causal self-part plus the plan's context chunks, prefill
// causal, every part merged by log-sum-exp (merge_states) with the sink as one more part.
void attention_three_path(const StepPlan& plan, const AttentionParams& params,
                          const AttentionInputs& in);

// Merges partial states over disjoint key sets (shared/DESIGN.md section 5):
// outs [num_parts, rows, dim] f32, lses [num_parts, rows] f32 -> out [rows, dim], lse [rows].
// Parts with lse -inf weigh nothing; all parts empty gives 0 and -inf, never NaN.
void merge_states(const TensorView& outs, const TensorView& lses, const TensorView& out,
                  const TensorView& lse);

// MLA absorbed attention for the tokens [token_begin, token_end) of the plan's ordered batch:
// q [tokens, heads, 576] over the latent cache, out [tokens, heads, 512].
void mla_absorbed(const StepPlan& plan, int32_t request_begin, int32_t request_end,
                  const MlaParams& params, const MlaCacheView& cache, const TensorView& q,
                  const TensorView& out, const TensorView& lse);
// MLA non-absorbed attention (q/k 192, v 128) for requests [request_begin, request_end) of the
// ordered plan, keys decompressed from the latent cache through kv_b_proj. chunk_tokens > 0
// decompresses the context in chunks of at most that many tokens and merges them (bounded
// workspace); 0 decompresses each request whole.
void mla_non_absorbed(const StepPlan& plan, int32_t request_begin, int32_t request_end,
                      const MlaParams& params, const MlaCacheView& cache, const TensorView& q,
                      const TensorView& kv_b_proj, const TensorView& out, const TensorView& lse,
                      int64_t chunk_tokens);

}  // namespace tripath::reference
