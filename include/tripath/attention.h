// What one attention layer call takes: the user-facing arguments of MHA/GQA/MQA and of MLA.
// Semantics (shared/DESIGN.md): query token i of request r sits at position context_len + i and
// sees keys 0..context_len + i (bottom-right causal), further limited by a left window; scores are
// scale * q.k, then cap * tanh(s / cap) when a soft-cap is set; a per-head sink adds exp(sink) to
// the softmax denominator only. LSE is natural-log and includes the sink; a row with no keys
// gives output 0 and LSE -inf (or the sink).
#pragma once

#include <cstdint>

#include "tripath/kv_cache.h"
#include "tripath/tensor.h"

namespace tripath {

struct AttentionParams {
  int num_q_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  float scale = 0.0f;      // softmax scale; 0 means 1/sqrt(head_dim)
  int window_left = -1;    // keys k with pos - k <= window_left; -1: no window
  float softcap = 0.0f;    // 0: off
  bool has_sinks = false;  // AttentionInputs::sinks given

  float effective_scale() const;
  // Checks heads, head dim (against kSupportedHeadDims) and the cache config they must match.
  void validate(const KvCacheConfig& cache) const;
};

struct AttentionInputs {
  TensorView q;      // [num_tokens, num_q_heads, head_dim], f32 / f16 / bf16
  TensorView k;      // [num_tokens, num_kv_heads, head_dim] new keys; not given: no cache write
  TensorView v;      // [num_tokens, num_kv_heads, head_dim]
  KvCacheView cache;
  TensorView out;    // [num_tokens, num_q_heads, head_dim], f32 / f16 / bf16
  TensorView lse;    // optional [num_tokens, num_q_heads] f32
  TensorView sinks;  // optional [num_q_heads] f32 (when params.has_sinks)
  void* stream = nullptr;  // cudaStream_t for CUDA backends (null: the default stream)
};

struct MlaParams {
  int num_heads = 0;    // 1..128 (DeepSeek-R1: 128; its 8-way shard: 16)
  float scale = 0.0f;   // 0 means 1/sqrt(192); pass 1/sqrt(192) * mscale for DeepSeek
  float effective_scale() const;
  void validate() const;
};

// One MLA layer call over an ordered step: decode tokens (the first decode.num_tokens() tokens)
// use the absorbed form on the latent cache; extend and prefill tokens use the non-absorbed
// form with keys/values decompressed through kv_b_proj.
struct MlaInputs {
  TensorView latent;        // [num_tokens, 576] new tokens' cache rows; not given: no write
  MlaCacheView cache;
  TensorView q_absorbed;    // [decode tokens, num_heads, 576] (q_nope @ W_UK | q_pe)
  TensorView out_absorbed;  // [decode tokens, num_heads, 512] (caller applies W_UV)
  TensorView lse_absorbed;  // optional [decode tokens, num_heads] f32
  TensorView q;             // [extend + prefill tokens, num_heads, 192] (q_nope | q_pe)
  TensorView kv_b_proj;     // [512, num_heads * 256]: per head 128 k_nope columns then 128 v
  TensorView out;           // [extend + prefill tokens, num_heads, 128]
  TensorView lse;           // optional [extend + prefill tokens, num_heads] f32
  void* stream = nullptr;   // cudaStream_t for CUDA backends
};

}  // namespace tripath
